"""arun / aiter_run: the same loops driven from an event loop."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest

import loopwright as lw
from conftest import act, final, make_registry
from helpers.durable import comparable

PLAN = '[{"id": "E1", "tool": "add", "args": {"x": 2, "y": 3}}, {"id": "E2", "tool": "multiply", "args": {"x": "#E1", "y": 4}}]'
SCRIPTS: dict[str, list[str]] = {
    "react": [act("add", '{"x": 2, "y": 3}'), act("multiply", '{"x": 5, "y": 4}'), final("20")],
    "rewoo": [PLAN, "Final Answer: 20"],
    "plan_execute": ['[{"id": "E1", "tool": "divide", "args": {"x": 1, "y": 0}}]', PLAN],
}


def run_async(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.mark.parametrize("mode", sorted(SCRIPTS))
def test_arun_gives_the_same_trace_as_run_in_every_mode(mode: str) -> None:
    sync = lw.run("what is (2 + 3) * 4?", lw.ScriptedPolicy(SCRIPTS[mode]), make_registry(), mode=mode)
    policy = lw.ScriptedPolicy(SCRIPTS[mode])
    trace = run_async(lw.arun("what is (2 + 3) * 4?", policy, make_registry(), mode=mode))
    policy.assert_consumed()
    assert comparable(trace) == comparable(sync)
    assert trace.stopped_reason == "final"


@pytest.mark.parametrize("mode", sorted(SCRIPTS))
def test_aiter_run_yields_the_steps_of_run_in_order(mode: str) -> None:
    sync = lw.run("q", lw.ScriptedPolicy(SCRIPTS[mode]), make_registry(), mode=mode)

    async def collect() -> tuple[list[lw.Step], lw.Trace]:
        run = lw.aiter_run("q", lw.ScriptedPolicy(SCRIPTS[mode]), make_registry(), mode=mode)
        steps = [step async for step in run]
        return steps, run.trace

    steps, trace = run_async(collect())
    assert [s.kind for s in steps] == [s.kind for s in sync.steps]
    assert steps == trace.steps
    assert trace.stopped_reason == "final"


def test_async_policy_and_async_tool_run_on_the_callers_event_loop() -> None:
    seen: list[str] = []

    @lw.tool
    async def lookup(key: str) -> str:
        """Look a key up."""
        seen.append("tool" if asyncio.get_running_loop() is loop else "other loop")
        await asyncio.sleep(0)
        return key.upper()

    script = iter([act("lookup", '{"key": "abc"}'), final("ABC")])

    async def policy(prompt: str) -> str:
        seen.append("policy" if asyncio.get_running_loop() is loop else "other loop")
        await asyncio.sleep(0)
        return next(script)

    async def main() -> lw.Trace:
        nonlocal loop
        loop = asyncio.get_running_loop()
        return await lw.arun("q", policy, lw.ToolRegistry([lookup]))

    loop: asyncio.AbstractEventLoop | None = None
    trace = run_async(main())
    assert trace.final_answer == "ABC"
    assert trace.steps[0].observation == "ABC"
    assert seen == ["policy", "tool", "policy"]


def test_a_model_with_acomplete_is_awaited_and_its_usage_kept() -> None:
    class AsyncModel:
        def __init__(self) -> None:
            self.requests: list[lw.ModelRequest] = []

        async def acomplete(self, request: lw.ModelRequest) -> lw.Completion:
            self.requests.append(request)
            return lw.Completion(final("7"), lw.Usage(10, 4, 2))

    model = AsyncModel()
    trace = run_async(lw.arun("q", model, make_registry()))
    assert trace.final_answer == "7"
    assert trace.usage == lw.Usage(10, 4, 2)
    assert model.requests[0].stop  # the full request, stop strings included


def test_an_async_policy_also_works_in_a_sync_run() -> None:
    async def policy(prompt: str) -> str:
        await asyncio.sleep(0)
        return final("42")

    assert lw.run("q", policy, make_registry()).final_answer == "42"


def test_a_sync_policy_runs_off_the_event_loop() -> None:
    """The policy blocks until a coroutine on the loop releases it: with the loop
    blocked, it would wait out its 10 s and answer "blocked"."""
    released = threading.Event()

    def policy(prompt: str) -> str:
        return final("free" if released.wait(10) else "blocked")

    async def main() -> lw.Trace:
        task = asyncio.ensure_future(lw.arun("q", policy, make_registry()))
        await asyncio.sleep(0.01)
        released.set()
        return await task

    assert run_async(main()).final_answer == "free"


def test_many_runs_share_one_loop_concurrently() -> None:
    """Ten runs whose policies wait for each other: they finish only if all ten are in
    flight at once."""
    arrived = 0

    async def policy(prompt: str) -> str:
        nonlocal arrived
        arrived += 1
        if arrived == 10:
            everyone.set()
        await asyncio.wait_for(everyone.wait(), 10)
        return final("ok")

    async def main() -> list[lw.Trace]:
        nonlocal everyone
        everyone = asyncio.Event()
        return await asyncio.gather(*(lw.arun(f"q{i}", policy, make_registry()) for i in range(10)))

    everyone: asyncio.Event
    traces = run_async(main())
    assert [t.final_answer for t in traces] == ["ok"] * 10


# -- cancellation and timeouts --------------------------------------------------------


def _blocking_tool(started: threading.Event, release: threading.Event) -> lw.Tool:
    @lw.tool
    def wait_here(x: int) -> int:
        """Block until released."""
        started.set()
        release.wait(30)
        return x

    return wait_here


def test_cancelling_mid_tool_ends_the_run_interrupted_with_a_consistent_journal(tmp_path: Any) -> None:
    started, release = threading.Event(), threading.Event()
    registry = make_registry()
    registry.register(_blocking_tool(started, release))
    store = lw.SQLiteStore(tmp_path / "runs.db")
    policy = lw.ScriptedPolicy([act("add", '{"x": 1, "y": 2}'), act("wait_here", '{"x": 5}')])

    async def main() -> lw.AsyncRun:
        run = lw.aiter_run("q", policy, registry, store=store, run_id="r1")
        task = asyncio.ensure_future(run.run())
        await asyncio.to_thread(started.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return run

    try:
        run = run_async(main())
        assert run.trace.stopped_reason == "interrupted"
        assert [s.kind for s in run.trace.steps] == ["action"]  # the step in flight is not recorded
        assert run.trace.llm_calls == 2 and run.trace.tool_calls == 1
        assert [c["tool"] for c in run.trace.meta["in_flight"]] == ["wait_here"]  # what was cut off
        record = store.load_run("r1")
        assert record.status == "interrupted" and record.resumable
        # the journal is consistent: resuming replays step 1, reruns the idempotent tool
        release.set()
        resumed = lw.resume("r1", lw.ScriptedPolicy([final("5")]), registry, store=store)
        assert resumed.stopped_reason == "final" and resumed.final_answer == "5"
        assert [s.kind for s in resumed.steps] == ["action", "action", "final"]
    finally:
        release.set()
        store.close()


def test_cancelling_mid_model_call_ends_the_run_interrupted() -> None:
    entered = threading.Event()

    async def policy(prompt: str) -> str:
        entered.set()
        await asyncio.Event().wait()  # never answers
        return final("never")

    release = threading.Event()

    def sync_policy(prompt: str) -> str:
        entered.set()
        release.wait(30)
        return final("late")

    async def cancel_during(p: Any) -> lw.AsyncRun:
        entered.clear()
        run = lw.aiter_run("q", p, make_registry())
        task = asyncio.ensure_future(run.run())
        await asyncio.to_thread(entered.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return run

    try:
        for p in (policy, sync_policy):
            run = run_async(cancel_during(p))
            assert run.trace.stopped_reason == "interrupted"
            assert run.trace.llm_calls == 1 and run.trace.steps == []
            assert [c["call"] for c in run.trace.meta["in_flight"]] == ["model"]
            assert run.trace.final_answer is None
    finally:
        release.set()


def test_cancelling_a_rewoo_run_mid_worker_ends_it_interrupted() -> None:
    @lw.tool
    async def hang(x: int) -> int:
        """Never returns."""
        started.set()
        await asyncio.Event().wait()
        return x

    started = threading.Event()
    plan = '[{"id": "E1", "tool": "hang", "args": {"x": 1}}]'

    async def main() -> lw.AsyncRun:
        run = lw.aiter_run("q", lw.ScriptedPolicy([plan, "never"]), lw.ToolRegistry([hang]), mode="rewoo")
        task = asyncio.ensure_future(run.run())
        await asyncio.to_thread(started.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return run

    run = run_async(main())
    assert run.trace.stopped_reason == "interrupted"
    assert [s.kind for s in run.trace.steps] == ["plan"]


def test_asyncio_timeout_around_arun_interrupts_the_run(tmp_path: Any) -> None:
    store = lw.SQLiteStore(tmp_path / "runs.db")

    async def policy(prompt: str) -> str:
        await asyncio.Event().wait()
        return final("never")

    async def main() -> None:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                await lw.arun("q", policy, make_registry(), store=store, run_id="t1")

    try:
        run_async(main())
        assert store.load_run("t1").status == "interrupted"
        assert store.trace("t1").stopped_reason == "interrupted"
    finally:
        store.close()


def test_timeout_s_holds_for_an_async_policy_and_a_blocking_tool() -> None:
    async def hanging(prompt: str) -> str:
        await asyncio.Event().wait()
        return final("never")

    trace = run_async(lw.arun("q", hanging, make_registry(), timeout_s=0.1))
    assert trace.stopped_reason == "timeout"
    assert "timeout_s=0.1" in (trace.steps[0].error or "")

    started, release = threading.Event(), threading.Event()
    registry = make_registry()
    registry.register(_blocking_tool(started, release))
    try:
        trace = run_async(lw.arun("q", lw.ScriptedPolicy([act("wait_here", '{"x": 1}')]), registry,
                                  timeout_s=0.2))
    finally:
        release.set()
    assert trace.stopped_reason == "timeout"
    assert (trace.steps[0].error or "").startswith("timeout after")


def test_aclose_ends_an_unfinished_iteration_as_interrupted() -> None:
    async def main() -> lw.Trace:
        run = lw.aiter_run("q", lw.ScriptedPolicy(SCRIPTS["react"]), make_registry())
        async for step in run:
            assert step.kind == "action"
            break
        return await run.aclose()

    trace = run_async(main())
    assert trace.stopped_reason == "interrupted"
    assert len(trace.steps) == 1


def test_a_policy_that_raises_ends_the_async_run_with_error_like_the_sync_one() -> None:
    async def policy(prompt: str) -> str:
        raise RuntimeError("backend down")

    trace = run_async(lw.arun("q", policy, make_registry()))
    assert trace.stopped_reason == "error"
    assert trace.steps[0].error == "policy raised RuntimeError: backend down"


# -- what a watcher sees under the async driver -------------------------------------------


def _seen(event: lw.Event) -> tuple[Any, ...]:
    """An event without what differs between two runs (run ids, timings)."""
    if isinstance(event, lw.ToolStarted):
        return (event.kind, event.step, event.tool, event.args, event.call_key)
    if isinstance(event, lw.ToolFinished):
        return (event.kind, event.step, event.tool, event.call_key, event.error)
    if isinstance(event, lw.ModelDelta):
        return (event.kind, event.step, event.text)
    if isinstance(event, lw.StepEvent):
        return (event.kind, event.step.index, event.step.tool, event.step.observation)
    return (event.kind,)


class AsyncParts:
    """An async model that streams each reply of `script` in two parts."""

    def __init__(self, script: list[str]) -> None:
        self.script = list(script)

    async def acomplete(self, request: lw.ModelRequest) -> str:
        return self.script.pop(0)

    async def astream(self, request: lw.ModelRequest) -> Any:
        assert threading.current_thread() is threading.main_thread()  # on the caller's loop, not a thread
        assert "Question: q" in request.prompt
        reply = self.script.pop(0)
        for part in (reply[:7], reply[7:]):
            await asyncio.sleep(0)
            yield part


@pytest.mark.parametrize("mode", ["react", "rewoo"])
def test_aiter_events_reports_what_iter_events_reports_field_by_field(mode: str) -> None:
    script = {"react": [act("add", '{"x": 2, "y": 3}'), act("divide", '{"x": 1, "y": 0}'), final("5")],
              "rewoo": [PLAN, "Final Answer: 20"]}[mode]
    streamed = [(s[:7], s[7:]) for s in script]
    sync = [_seen(e) for e in lw.iter_events("q", lw.ScriptedPolicy(streamed), make_registry(), mode=mode)]

    async def collect(policy: Any) -> list[tuple[Any, ...]]:
        return [_seen(e) async for e in lw.aiter_events("q", policy, make_registry(), mode=mode)]

    for policy in (lw.ScriptedPolicy(streamed), AsyncParts(script)):
        assert run_async(collect(policy)) == sync
    assert ("tool_finished", 2, "divide", "2", True) in sync or mode == "rewoo"


def test_a_watched_run_holds_its_wall_clock_for_async_and_sync_streams() -> None:
    release = threading.Event()

    class Hangs:
        async def acomplete(self, request: lw.ModelRequest) -> str:
            return final("never")

        async def astream(self, request: lw.ModelRequest) -> Any:
            yield "Thought: "
            await asyncio.Event().wait()

    threads: list[str] = []

    class Blocks:
        def complete(self, request: lw.ModelRequest) -> str:
            return final("never")

        def stream(self, request: lw.ModelRequest) -> Any:
            threads.append(threading.current_thread().name)
            yield "Thought: "
            release.wait(10)
            yield "late"

    async def collect(policy: Any) -> list[lw.Event]:
        return [e async for e in lw.aiter_events("q", policy, make_registry(), timeout_s=0.3)]

    try:
        for policy in (Hangs(), Blocks()):
            started = time.perf_counter()
            events = run_async(collect(policy))
            assert events[-1].trace.stopped_reason == "timeout"  # type: ignore[union-attr]
            assert time.perf_counter() - started < 5
    finally:
        release.set()
    assert threads == ["loopwright-policy"]


def test_a_blocking_sync_policy_is_held_to_the_wall_clock_on_a_thread_of_its_own() -> None:
    release, threads = threading.Event(), []

    def policy(prompt: str) -> str:
        threads.append(threading.current_thread().name)
        release.wait(10)
        return final("late")

    try:
        trace = run_async(lw.arun("q", policy, make_registry(), timeout_s=0.3))
    finally:
        release.set()
    assert trace.stopped_reason == "timeout" and threads == ["loopwright-policy"]


def test_an_approver_is_asked_off_the_event_loop() -> None:
    asked: list[str] = []

    @lw.tool(requires_approval=True, side_effects="write")
    def send(text: str) -> str:
        """Send a message."""
        return f"sent {text}"

    def approver(request: lw.ApprovalRequest) -> bool:
        try:
            asyncio.get_running_loop()
            asked.append("on the loop")
        except RuntimeError:
            asked.append(threading.current_thread().name)
        return True

    script = lw.ScriptedPolicy([act("send", '{"text": "hi"}'), act("nope", "{}"), final("done")])
    trace = run_async(lw.arun("q", script, lw.ToolRegistry([send]), approver=approver, timeout_s=30))
    assert len(asked) == 1 and asked[0].startswith("loopwright-") and trace.steps[0].observation == "sent hi"
    assert trace.steps[1].error is not None and "nope" in trace.steps[1].error  # an unknown tool: no approval asked
    assert trace.final_answer == "done"


def test_an_async_tool_sees_its_call_under_the_async_driver(tmp_path: Any) -> None:
    seen: list[tuple[str, int, str]] = []

    @lw.tool
    async def probe() -> str:
        """Say which call this is."""
        call = lw.current_call()
        assert call is not None
        seen.append((call.step, call.attempt, call.tool))
        return "ok"

    run_async(lw.arun("q", lw.ScriptedPolicy([act("probe", "{}"), final("ok")]), lw.ToolRegistry([probe])))
    with lw.SQLiteStore(tmp_path / "runs.db") as store:  # journaled: the gate counts the attempt
        run_async(lw.arun("q", lw.ScriptedPolicy([act("probe", "{}"), final("ok")]), lw.ToolRegistry([probe]),
                          store=store, run_id="r"))
    assert seen == [("1", 1, "probe"), ("1", 1, "probe")]


def test_exactly_once_holds_across_concurrent_rewoo_workers_on_the_loop(tmp_path: Any) -> None:
    paid: list[tuple[str, int | None]] = []

    @lw.tool(side_effects="write", idempotency_key="request_id")
    async def send_payment(to: str, cents: int, request_id: str) -> str:
        """Send a payment."""
        call = lw.current_call()
        await asyncio.sleep(0.05)  # the four workers overlap: without the per-key lock each would pay
        paid.append((request_id, call.attempt if call is not None else None))
        return f"sent {cents} to {to}"

    args = {"to": "bob", "cents": 5, "request_id": "same"}
    plan = {"plan": [{"id": f"E{i}", "tool": "send_payment", "args": args} for i in range(1, 5)]}
    with lw.SQLiteStore(tmp_path / "runs.db") as store:
        trace = run_async(lw.arun("t", lw.ScriptedPolicy([json.dumps(plan), "x"]), lw.ToolRegistry([send_payment]),
                                  mode="rewoo", store=store, run_id="pay"))
    assert paid == [("same", 1)] and trace.tool_calls == 1
    assert {s.observation for s in trace.steps if s.kind == "action"} == {"sent 5 to bob"}
