"""Events as they happen: lw.iter_events / lw.aiter_events, the sinks a run pushes to, and
policies that stream."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import loopwright as lw
from conftest import act, final, make_registry
from helpers.durable import comparable
from loopwright.events import Emitter
from loopwright.runtime.front import start

PLAN = '[{"id": "E1", "tool": "add", "args": {"x": 2, "y": 3}}, {"id": "E2", "tool": "multiply", "args": {"x": 4, "y": 5}}]'


def deltas_of(events: list[lw.Event], step: int) -> str:
    return "".join(e.text for e in events if isinstance(e, lw.ModelDelta) and e.step == step)


def streaming_script() -> lw.ScriptedPolicy:
    return lw.ScriptedPolicy([
        ("Thought: add them\nAct", 'ion: add\nAction Input: {"x": 2', ', "y": 3}'),
        ("Thought: done\nFinal", " Answer: 5"),
    ])


def test_iter_events_yields_each_kind_in_the_order_it_happened() -> None:
    events = list(lw.iter_events("what is 2 + 3?", streaming_script(), make_registry()))
    assert [e.kind for e in events] == [
        "run_started", "model_delta", "model_delta", "model_delta", "tool_started", "tool_finished", "step",
        "model_delta", "model_delta", "step", "run_finished",
    ]
    started, tool_started, tool_finished = events[0], events[4], events[5]
    assert isinstance(started, lw.RunStarted) and started.task == "what is 2 + 3?" and started.mode == "react"
    assert isinstance(tool_started, lw.ToolStarted)
    assert (tool_started.tool, tool_started.args, tool_started.call_key, tool_started.step) == ("add", {"x": 2, "y": 3}, "1", 1)
    assert isinstance(tool_finished, lw.ToolFinished) and tool_finished.error is False and tool_finished.seconds >= 0
    end = events[-1]
    assert isinstance(end, lw.RunFinished) and end.trace.final_answer == "5"
    assert [e.step for e in events if isinstance(e, lw.StepEvent)] == end.trace.steps
    assert {e.run_id for e in events} == {started.run_id} and {e.agent for e in events} == {None}


def test_a_watched_run_records_the_same_trace_as_an_unwatched_one() -> None:
    watched = lw.iter_events("q", streaming_script(), make_registry())
    for _ in watched:
        pass
    plain = lw.run("q", streaming_script(), make_registry())
    assert comparable(watched.trace) == comparable(plain)


@settings(max_examples=60, deadline=None)
@given(text=st.text(min_size=1, max_size=80), cuts=st.lists(st.integers(0, 80), max_size=8))
def test_any_split_of_a_text_into_deltas_rejoins_to_the_steps_raw_text(text: str, cuts: list[int]) -> None:
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    parts = tuple(text[a:b] for a, b in zip(bounds, bounds[1:], strict=False))
    events = list(lw.iter_events("q", lw.ScriptedPolicy([parts]), make_registry(), max_steps=1))
    trace = events[-1].trace  # type: ignore[union-attr]
    assert trace.steps[0].raw == text
    assert deltas_of(events, 1) == text
    assert [e.text for e in events if isinstance(e, lw.ModelDelta)] == [p for p in parts if p]


def test_every_step_with_model_text_is_its_deltas_joined_in_rewoo_and_plan_execute() -> None:
    for mode, script in (("rewoo", [(PLAN[:30], PLAN[30:]), ("Final ", "Answer: 25")]),
                         ("plan_execute", [(PLAN[:10], PLAN[10:])])):
        events = list(lw.iter_events("q", lw.ScriptedPolicy(script), make_registry(), mode=mode))
        trace = events[-1].trace  # type: ignore[union-attr]
        with_text = [s for s in trace.steps if s.raw]
        assert with_text, mode
        for s in with_text:
            assert deltas_of(events, s.index) == s.raw, (mode, s.kind)


def test_rewoo_parallel_workers_report_their_tool_calls_by_call_key() -> None:
    events = list(lw.iter_events("q", lw.ScriptedPolicy([PLAN, "Final Answer: 25"]), make_registry(), mode="rewoo"))
    started = {e.call_key: e.tool for e in events if isinstance(e, lw.ToolStarted)}
    finished = {e.call_key for e in events if isinstance(e, lw.ToolFinished)}
    assert started == {"E1": "add", "E2": "multiply"} and finished == {"E1", "E2"}


def test_a_plain_function_policy_yields_one_delta_per_call() -> None:
    replies = iter([act("add", '{"x": 1, "y": 1}'), final("2")])

    def policy(prompt: str) -> str:
        return next(replies)

    events = list(lw.iter_events("q", policy, make_registry()))
    deltas = [e for e in events if isinstance(e, lw.ModelDelta)]
    assert [(d.step, d.text) for d in deltas] == [(1, act("add", '{"x": 1, "y": 1}')), (2, final("2"))]


class CompleteOnly:
    def complete(self, request: lw.ModelRequest) -> lw.Completion:
        return lw.Completion(final("ok"), lw.Usage(prompt_tokens=7, completion_tokens=3))


def test_a_policy_with_only_complete_gives_one_delta_and_keeps_its_usage() -> None:
    events = list(lw.iter_events("q", CompleteOnly(), make_registry()))
    assert [e.text for e in events if isinstance(e, lw.ModelDelta)] == [final("ok")]
    assert events[-1].trace.usage.completion_tokens == 3  # type: ignore[union-attr]


class Streams:
    """A model whose stream ends with a Completion carrying usage and meta."""

    def __init__(self, parts: list[str], end_text: str = "") -> None:
        self.parts, self.end_text = parts, end_text
        self.streamed = 0

    def complete(self, request: lw.ModelRequest) -> lw.Completion:
        return lw.Completion("".join(self.parts), lw.Usage(prompt_tokens=1, completion_tokens=len(self.parts)))

    def stream(self, request: lw.ModelRequest) -> Iterator[str | lw.Completion]:
        self.streamed += 1
        yield from self.parts
        yield lw.Completion(self.end_text, lw.Usage(prompt_tokens=1, completion_tokens=len(self.parts)),
                            meta={"model": "streams"})


def test_a_streams_final_completion_gives_usage_and_meta_and_may_carry_the_whole_text() -> None:
    parts = ["Thought: ok\n", "Final Answer: ", "yes"]
    for end_text in ("", "".join(parts)):
        events = list(lw.iter_events("q", Streams(parts, end_text), make_registry()))
        trace = events[-1].trace  # type: ignore[union-attr]
        assert trace.usage.completion_tokens == 3 and trace.final_answer == "yes"
        assert deltas_of(events, 1) == trace.steps[0].raw


def test_a_final_completion_that_continues_the_deltas_sends_the_rest_as_a_delta() -> None:
    events = list(lw.iter_events("q", Streams(["Thought: ok\n"], "Thought: ok\nFinal Answer: yes"), make_registry()))
    assert [e.text for e in events if isinstance(e, lw.ModelDelta)] == ["Thought: ok\n", "Final Answer: yes"]
    assert events[-1].trace.final_answer == "yes"  # type: ignore[union-attr]


def test_a_final_completion_that_contradicts_the_deltas_is_a_policy_error() -> None:
    events = list(lw.iter_events("q", Streams(["Thought: a\n"], "something else"), make_registry()))
    trace = events[-1].trace  # type: ignore[union-attr]
    assert trace.stopped_reason == "error" and "does not continue its deltas" in (trace.steps[0].error or "")


def test_a_run_nobody_watches_never_streams_and_builds_no_emitter() -> None:
    model = Streams(["Thought: ok\n", "Final Answer: yes"])
    run = lw.iter_run("q", model, make_registry())
    assert run.context.events is None
    assert run.run().final_answer == "yes" and model.streamed == 0
    assert lw.run("q", model, make_registry()).final_answer == "yes" and model.streamed == 0


def test_a_policy_held_to_the_wall_clock_streams_from_its_thread() -> None:
    threads: set[str] = set()

    def sink(event: lw.Event) -> None:
        threads.add(threading.current_thread().name)
        seen.append(event)

    seen: list[lw.Event] = []
    trace = start(lw.RunSpec("q", timeout_s=30), streaming_script(), make_registry(), sinks=[sink]).run()
    assert trace.final_answer == "5"
    assert any(name.startswith("loopwright-policy") for name in threads)  # deltas came from the policy's thread
    assert deltas_of(seen, 1) == trace.steps[0].raw


def test_a_failing_tool_finishes_with_error_true() -> None:
    script = lw.ScriptedPolicy([act("divide", '{"x": 1, "y": 0}'), final("none")])
    events = list(lw.iter_events("q", script, make_registry()))
    finished = [e for e in events if isinstance(e, lw.ToolFinished)]
    assert [(f.tool, f.error) for f in finished] == [("divide", True)]


def test_an_approval_asked_is_an_event_before_the_tool_runs() -> None:
    @lw.tool(requires_approval=True, side_effects="write")
    def send(text: str) -> str:
        """Send a message."""
        return "sent"

    script = lw.ScriptedPolicy([act("send", '{"text": "hi"}'), final("sent")])
    events = list(lw.iter_events("q", script, lw.ToolRegistry([send]), approver=lambda request: True))
    kinds = [e.kind for e in events]
    assert kinds.index("approval_requested") < kinds.index("tool_started")
    asked = next(e for e in events if isinstance(e, lw.ApprovalRequested))
    assert asked.request.tool == "send" and asked.request.args == {"text": "hi"}


def test_every_event_is_json_safe() -> None:
    events = list(lw.iter_events("q", streaming_script(), make_registry()))
    for event in events:
        d = event.to_dict()
        assert d["kind"] == event.kind
        json.dumps(d)


def test_a_child_emitter_tags_its_events_with_the_agents_name_on_the_parents_sinks() -> None:
    seen: list[lw.Event] = []
    parent = Emitter("parent-1", [seen.append])
    child = parent.child("parent-1/3", "researcher")
    child.delta(1, "hello")
    assert seen == [lw.ModelDelta("parent-1/3", "researcher", 1, "hello")]


class Slow:
    """Streams one delta, then waits long between the next ones."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    def complete(self, request: lw.ModelRequest) -> str:
        return final("late")

    def stream(self, request: lw.ModelRequest) -> Iterator[str]:
        yield "Thought: "
        for _ in range(200):
            self.gate.wait(0.05)
            yield "."


def test_closing_iter_events_ends_the_run_interrupted() -> None:
    events = lw.iter_events("q", Slow(), make_registry())
    assert next(events).kind == "run_started"
    assert next(events).kind == "model_delta"
    events.close()
    started = time.perf_counter()
    rest = list(events)
    assert time.perf_counter() - started < 2.0
    assert events.trace.stopped_reason == "interrupted"
    assert rest[-1].kind == "run_finished"


def test_closing_iter_events_before_it_starts_ends_the_run_interrupted() -> None:
    events = lw.iter_events("q", Slow(), make_registry())
    assert events.close().stopped_reason == "interrupted"
    assert list(events) == []


class AsyncStreams:
    async def acomplete(self, request: lw.ModelRequest) -> str:
        return final("async")

    async def astream(self, request: lw.ModelRequest) -> AsyncIterator[str]:
        for part in ("Thought: ok\n", "Final Answer: ", "async"):
            await asyncio.sleep(0)
            yield part


def test_aiter_events_streams_an_async_policy_on_the_loop_and_a_sync_one_from_a_thread() -> None:
    async def collect(policy: Any) -> list[lw.Event]:
        return [e async for e in lw.aiter_events("q", policy, make_registry())]

    for policy, parts in ((AsyncStreams(), 3), (streaming_script(), 5)):
        events = asyncio.run(collect(policy))
        assert events[0].kind == "run_started" and events[-1].kind == "run_finished"
        trace = events[-1].trace  # type: ignore[union-attr]
        assert len([e for e in events if isinstance(e, lw.ModelDelta)]) == parts
        for s in trace.steps:
            assert deltas_of(events, s.index) == s.raw


def test_aiter_events_matches_iter_events() -> None:
    async def collect() -> list[lw.Event]:
        return [e async for e in lw.aiter_events("q", streaming_script(), make_registry())]

    sync = [e.kind for e in lw.iter_events("q", streaming_script(), make_registry())]
    assert [e.kind for e in asyncio.run(collect())] == sync


def test_aclose_cancels_the_run_and_ends_it_interrupted() -> None:
    async def main() -> lw.Trace:
        events = lw.aiter_events("q", Slow(), make_registry())
        assert (await events.__anext__()).kind == "run_started"
        assert (await events.__anext__()).kind == "model_delta"
        return await events.aclose()

    started = time.perf_counter()
    assert asyncio.run(main()).stopped_reason == "interrupted"
    assert time.perf_counter() - started < 2.0


def test_a_run_started_for_an_agent_tags_every_event_with_its_name() -> None:
    seen: list[lw.Event] = []
    trace = start(lw.RunSpec("q", run_id=None), streaming_script(), make_registry(), sinks=[seen.append],
                  agent="researcher").run()
    assert trace.final_answer == "5"
    assert {e.agent for e in seen} == {"researcher"}
    assert seen[0].kind == "run_started" and seen[-1].kind == "run_finished"



def test_every_kind_of_event_on_the_wire_names_each_field() -> None:
    @lw.tool(requires_approval=True, side_effects="write")
    def send(text: str) -> str:
        """Send a message."""
        return "sent"

    seen: list[lw.Event] = []
    script = lw.ScriptedPolicy([act("send", '{"text": "hi"}'), final("sent")])
    trace = start(lw.RunSpec("greet", approver=lambda request: True), script, lw.ToolRegistry([send]),
                  sinks=[seen.append], agent="courier").run()
    run = {"run_id": seen[0].run_id, "agent": "courier"}
    wire = {e.kind: e.to_dict() for e in seen}  # the last of each kind
    assert wire["run_started"] == {"kind": "run_started", **run, "task": "greet", "mode": "react"}
    assert wire["model_delta"] == {"kind": "model_delta", **run, "step": 2, "text": final("sent")}
    asked = next(e for e in seen if isinstance(e, lw.ApprovalRequested))
    assert wire["approval_requested"] == {"kind": "approval_requested", **run, "request": asked.request.to_dict()}
    assert wire["approval_requested"]["request"]["args"] == {"text": "hi"}
    assert wire["tool_started"] == {"kind": "tool_started", **run, "step": 1, "tool": "send",
                                    "args": {"text": "hi"}, "call_key": "1"}
    finished = next(e for e in seen if isinstance(e, lw.ToolFinished))
    assert wire["tool_finished"] == {"kind": "tool_finished", **run, "step": 1, "tool": "send", "call_key": "1",
                                     "seconds": finished.seconds, "error": False}
    assert wire["step"] == {"kind": "step", **run, "step": trace.steps[-1].to_dict()}
    assert wire["run_finished"] == {"kind": "run_finished", **run, "trace": trace.to_dict()}


def test_tool_arguments_json_cannot_hold_go_on_the_wire_as_text() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5)
    event = lw.ToolStarted("r1", None, 1, "remind", {"at": when, "to": ["ann"]}, "1")
    assert event.to_dict()["args"] == {"at": str(when), "to": ["ann"]}
    assert event.args == {"at": when, "to": ["ann"]}  # the event itself keeps the values
