"""loopwright.ui's server in process: the ASGI app called through httpx's ASGI transport
(no socket, no uvicorn), its lifespan entered and left as a server would, one event loop
per test. What a client reads from each endpoint, in exact figures: the links, the
states, the approvals and their answers, the limits, the kept runs, the frames and their
ids. tests/test_ui.py runs the same app on a real uvicorn with a real client; these are
the fast side (milliseconds a test), so each of the server's functions has tests that
reach it without starting a server (mutation testing runs them per mutant)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from contextvars import Context
from typing import Any

import httpx
import pytest
from ag_ui.core import RunErrorEvent, RunFinishedEvent, TextMessageContentEvent

import loopwright as lw
from helpers.agui import EVENT, check_order, custom
from loopwright.runtime import MODES
from loopwright.safety import Decision, approval_key
from loopwright.ui import AGUIMapper, app
from loopwright.ui.server import LiveRun

BASE = "http://127.0.0.1:8000"
ADD = 'Thought: add them\nAction: add\nAction Input: {"x": 2, "y": 3}'
FINAL = "Thought: I know it\nFinal Answer: 5"
DELETE = 'Thought: delete it\nAction: delete\nAction Input: {"name": "notes.txt"}'


def _gated(ran: list[str]) -> lw.ToolRegistry:
    @lw.tool(side_effects="destructive", requires_approval=True)
    def delete(name: str) -> str:
        """Delete a file."""
        ran.append(name)
        return f"deleted {name}"

    return lw.ToolRegistry([delete])


def _by_task(prompt: str) -> str:
    """A task with "quick" in it answers; any other asks to delete notes.txt, and answers
    once it has or was denied."""
    return FINAL if any(word in prompt for word in ("quick", "deleted notes.txt", "DENIED")) else DELETE


class _HeldLoop(asyncio.SelectorEventLoop):
    """An event loop that can stop hearing its other threads: while held, what they send
    it (`call_soon_threadsafe`: an approver's thread telling the run its decision, a
    model call's result) waits; `release` delivers it, and what is never released is lost,
    as when the loop stops first."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[tuple[Callable[..., object], tuple[Any, ...], Context | None]] | None = None

    def call_soon_threadsafe(self, callback: Callable[..., object], *args: Any,  # type: ignore[override]
                             context: Context | None = None) -> asyncio.Handle:
        held = self.held
        if held is not None:
            held.append((callback, args, context))
            return asyncio.Handle(callback, args, self, context)
        return super().call_soon_threadsafe(callback, *args, context=context)

    def hold(self) -> None:
        self.held = []

    def release(self) -> None:
        held, self.held = self.held or [], None
        for callback, args, context in held:
            self.call_soon(callback, *args, context=context)


def _serve(served: Any, scenario: Callable[[httpx.AsyncClient], Awaitable[Any]], *, root_path: str = "",
           loop: asyncio.AbstractEventLoop | None = None) -> Any:
    """Enter the app's lifespan, run `scenario` with a client of it, leave the lifespan (the
    server's shutdown: runs still going are stopped); what `scenario` returned."""
    async def main() -> Any:
        async with served.router.lifespan_context(served):
            transport = httpx.ASGITransport(app=served, root_path=root_path)
            async with httpx.AsyncClient(transport=transport, base_url=BASE, timeout=30) as client:
                return await scenario(client)

    with asyncio.Runner(loop_factory=(lambda: loop) if loop is not None else None) as runner:
        return runner.run(asyncio.wait_for(main(), 10))  # a run that hangs fails the test


def _frames(text: str) -> list[tuple[int, dict[str, Any]]]:
    """An event stream's frames: (its SSE id, its event, checked as an AG-UI event)."""
    out = []
    for frame in text.split("\n\n"):
        if not frame:
            continue
        head, data = frame.split("\n", 1)
        assert head.startswith("id: ") and data.startswith("data: "), frame
        event = json.loads(data[len("data: "):])
        EVENT.validate_python(event)
        out.append((int(head[len("id: "):]), event))
    return out


async def _events(client: httpx.AsyncClient, run_id: str, last: str | None = None) -> list[dict[str, Any]]:
    """The run's whole stream (it ends with the run), after Last-Event-ID `last`."""
    headers = {} if last is None else {"Last-Event-ID": last}
    response = await client.get(f"/runs/{run_id}/events", headers=headers)
    assert response.status_code == 200, response.text
    return [event for _, event in _frames(response.text)]


async def _start(client: httpx.AsyncClient, task: str) -> str:
    response = await client.post("/runs", json={"task": task})
    assert response.status_code == 201, response.text
    return str(response.json()["run_id"])


async def _until(client: httpx.AsyncClient, run_id: str, state: str) -> dict[str, Any]:
    """GET /runs/{run_id} until the run is in `state`; what it answered then."""
    deadline = time.monotonic() + 5
    while True:
        one: dict[str, Any] = (await client.get(f"/runs/{run_id}")).json()
        if one["state"] == state:
            return one
        assert time.monotonic() < deadline, f"never {state}: {one}"
        await asyncio.sleep(0.005)


# -- a run, start to end ---------------------------------------------------------------


def test_a_finished_run_is_described_whole_and_its_frames_are_numbered_from_zero(registry: lw.ToolRegistry) -> None:
    served = app(lw.ScriptedPolicy([ADD, FINAL]), registry, max_steps=4)

    async def scenario(client: httpx.AsyncClient) -> Any:
        before = time.time()
        started = await client.post("/runs", json={"task": "What is 2 + 3?"})
        run_id = started.json()["run_id"]
        stream = await client.get(f"/runs/{run_id}/events")
        one, listed = await client.get(f"/runs/{run_id}"), await client.get("/runs")
        assert one.headers["cache-control"] == listed.headers["cache-control"] == "no-store"
        return before, started, stream, one.json(), listed.json()

    before, started, stream, one, listed = _serve(served, scenario)
    run_id = started.json()["run_id"]
    assert started.status_code == 201 and len(run_id) == 32 and started.headers["cache-control"] == "no-store"
    assert started.json() == {"run_id": run_id, "thread_id": run_id, "events": f"/runs/{run_id}/events"}
    assert stream.headers["content-type"].startswith("text/event-stream")
    assert (stream.headers["cache-control"], stream.headers["x-accel-buffering"]) == ("no-store", "no")
    frames = _frames(stream.text)
    assert [number for number, _ in frames] == list(range(len(frames)))
    events = [event for _, event in frames]
    check_order(events)
    assert events[-1]["result"] == {"answer": "5", "stopped_reason": "final", "llm_calls": 2, "tool_calls": 1}
    assert before <= one["started_at"] <= one["finished_at"] <= time.time()
    assert one == {"run_id": run_id, "thread_id": run_id, "task": "What is 2 + 3?", "state": "finished",
                   "stopped_reason": "final", "answer": "5", "error": None, "started_at": one["started_at"],
                   "finished_at": one["finished_at"], "events": f"/runs/{run_id}/events",
                   "bytes": len(stream.content), "approvals": []}
    assert listed == {"runs": [one]}


def test_a_watcher_that_comes_first_gets_each_frame_as_it_is_published() -> None:
    async def read() -> tuple[list[bytes], list[bytes]]:
        live = LiveRun("r", "t", "task", AGUIMapper("t"))
        got: list[bytes] = []

        async def watcher() -> None:
            got.extend(await _read(live))

        reading = asyncio.create_task(watcher())
        await asyncio.sleep(0)
        for n in range(3):
            live.publish([TextMessageContentEvent(message_id="m", delta=f"d{n}")])
            for _ in range(5):  # the watcher runs, writes, and waits again
                await asyncio.sleep(0)
        live.close()
        await asyncio.wait_for(reading, 5)
        return got, live.frames

    got, frames = asyncio.run(read())
    assert got == frames and len(got) == 3  # one write a frame, as each came, then the end
    assert [frame.split(b"\n", 1)[0] for frame in frames] == [b"id: 0", b"id: 1", b"id: 2"]


async def _read(live: LiveRun, start: int = 0) -> list[bytes]:
    """What a watcher is sent, write by write: never an empty write, never without end."""
    pieces: list[bytes] = []
    async for piece in live.watch(start):
        assert piece and len(pieces) < 1000, (len(piece), len(pieces))
        pieces.append(piece)
    return pieces


def test_a_reader_resuming_after_a_frame_gets_the_frames_after_it_whole() -> None:
    async def read() -> tuple[LiveRun, list[bytes], list[bytes], list[bytes]]:
        live = LiveRun("r", "t", "task", AGUIMapper("t"))
        live.publish([TextMessageContentEvent(message_id="m", delta="x" * 40_000),
                      TextMessageContentEvent(message_id="m", delta="y" * 40_000),
                      TextMessageContentEvent(message_id="m", delta="z")])
        live.close()
        return live, await _read(live, 1), await _read(live, 3), await _read(live)

    live, after_first, after_last, whole = asyncio.run(read())
    assert b"".join(after_first) == live.frames[1] + live.frames[2]
    assert after_first == [live.frames[1] + live.frames[2]]  # under 64 KiB together: one write
    assert after_last == []
    assert b"".join(whole) == b"".join(live.frames) and len(whole) == 2
    assert [len(p) for p in whole] == [64 * 1024, sum(map(len, live.frames)) - 64 * 1024]
    assert live.size == sum(map(len, live.frames))


def test_a_run_knows_its_outcome_from_the_last_event_it_published() -> None:
    async def states() -> list[tuple[str, Any, Any]]:
        out = []
        for event in (RunFinishedEvent(thread_id="t", run_id="r", result={"answer": "5"}),
                      RunFinishedEvent(thread_id="t", run_id="r"),
                      RunErrorEvent(message="boom")):
            live = LiveRun("r", "t", "task", AGUIMapper("t"))
            live.publish([event])
            running = live.state
            live.close()
            out.append((running, live.state, live.describe("/x")))
        return out

    [(r1, s1, d1), (r2, s2, d2), (r3, s3, d3)] = asyncio.run(states())
    assert (r1, r2, r3) == ("running", "running", "running")
    assert (s1, d1["answer"], d1["error"]) == ("finished", "5", None)
    assert (s2, d2["answer"], d2["stopped_reason"]) == ("finished", None, None)  # a result of None is {}
    assert (s3, d3["error"], d3["answer"]) == ("error", "boom", None)
    assert d1["events"] == "/x/runs/r/events"


def test_a_run_described_without_a_root_links_its_events_from_the_root() -> None:
    async def describe() -> dict[str, Any]:
        return LiveRun("r", "t", "task", AGUIMapper("t")).describe()

    assert asyncio.run(describe())["events"] == "/runs/r/events"


def test_a_run_that_cannot_start_ends_as_an_error_naming_why(registry: lw.ToolRegistry) -> None:
    served = app(object(), registry)  # not a policy: the run raises as it starts

    async def scenario(client: httpx.AsyncClient) -> Any:
        run_id = await _start(client, "say 5")
        return await _events(client, run_id), (await client.get(f"/runs/{run_id}")).json()

    events, one = _serve(served, scenario)
    assert [e["type"] for e in events] == ["RUN_ERROR"] and events[0]["message"] == one["error"]
    assert one["state"] == "error" and one["error"].startswith("TypeError: policy must be a callable")
    assert one["finished_at"] is not None and one["answer"] is None and one["approvals"] == []


# -- where the links point -------------------------------------------------------------


def test_links_carry_the_root_path_the_app_is_mounted_under(registry: lw.ToolRegistry) -> None:
    served = app(lw.ScriptedPolicy([FINAL]), registry)

    async def scenario(client: httpx.AsyncClient) -> Any:
        started = (await client.post("/runs", json={"task": "say 5"})).json()
        await client.get(f"/runs/{started['run_id']}/events")
        return started, (await client.get(f"/runs/{started['run_id']}")).json(), (await client.get("/runs")).json()

    started, one, listed = _serve(served, scenario, root_path="/agent")
    link = f"/agent/runs/{started['run_id']}/events"
    assert started["events"] == link and one["events"] == link and listed["runs"][0]["events"] == link


def test_a_server_that_sends_no_root_path_gets_links_from_the_root(registry: lw.ToolRegistry) -> None:
    """ASGI's root_path is optional (default ""): a scope without one is served as at /."""
    served = app(lw.ScriptedPolicy([FINAL]), registry)

    async def call(method: str, path: str, body: bytes = b"") -> tuple[int, Any]:
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
                 "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
                 "headers": [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
                             (b"content-length", str(len(body)).encode())],
                 "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000)}
        sent: list[dict[str, Any]] = []
        received = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict[str, Any]:
            return received.pop(0) if received else {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await served(scope, receive, send)
        body_out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return sent[0]["status"], json.loads(body_out)

    async def scenario(_: httpx.AsyncClient) -> Any:
        status, started = await call("POST", "/runs", b'{"task": "say 5"}')
        await asyncio.wait_for(served.state.runs.runs[started["run_id"]].driver, 10)
        return status, started, (await call("GET", f"/runs/{started['run_id']}"))[1], (await call("GET", "/runs"))[1]

    status, started, one, listed = _serve(served, scenario)
    link = f"/runs/{started['run_id']}/events"
    assert status == 201 and started["events"] == link and one["events"] == link
    assert listed["runs"][0]["events"] == link


# -- approvals -------------------------------------------------------------------------


def test_a_waiting_run_describes_its_approval_and_an_answer_decides_it() -> None:
    ran: list[str] = []
    served = app(_by_task, _gated(ran), max_steps=4, approval_timeout_s=5)

    async def scenario(client: httpx.AsyncClient) -> Any:
        run_id = await _start(client, "delete it")
        waiting = await _until(client, run_id, "waiting")
        listed = (await client.get("/runs")).json()["runs"]
        key = waiting["approvals"][0]["key"]
        wrong = await client.post(f"/runs/{run_id}/approvals/{key[:-1]}", json={"approved": True})
        held = list(ran)
        right = await client.post(f"/runs/{run_id}/approvals/{key}", json={"approved": True, "reason": "go"})
        return run_id, waiting, listed, wrong, held, right, await _events(client, run_id)

    run_id, waiting, listed, wrong, held, right, events = _serve(served, scenario)
    [asked] = waiting["approvals"]
    assert asked == {"tool": "delete", "args": {"name": "notes.txt"}, "key": asked["key"], "step": asked["step"],
                     "side_effects": "destructive", "description": "Delete a file.", "run_id": run_id,
                     "agent": None}
    assert asked["key"] != approval_key("delete", {"name": "notes.txt"}) and len(asked["key"]) >= 32
    assert waiting["finished_at"] is None and waiting["answer"] is None and listed == [waiting]
    assert wrong.status_code == 409 and wrong.json() == {"error": f"run {run_id!r} waits for no approval under that key"}
    assert held == []
    assert right.status_code == 200 and right.json() == {"key": asked["key"], "approved": True, "reason": "go"}
    assert right.headers["cache-control"] == "no-store"
    check_order(events)
    assert custom(events, "approval_requested") == [asked]
    assert custom(events, "approval_decided") == [{"key": asked["key"], "approved": True, "reason": "go"}]
    assert ran == ["notes.txt"] and events[-1]["result"]["answer"] == "5"


def test_a_second_answer_before_the_run_heard_the_first_is_refused() -> None:
    """Approve clicked twice: the second answer comes before the approver's thread told the
    run about the first (its message held back), and is refused, not a server error."""
    ran: list[str] = []
    served = app(_by_task, _gated(ran), max_steps=4, approval_timeout_s=5)
    loop = _HeldLoop()

    async def scenario(client: httpx.AsyncClient) -> Any:
        run_id = await _start(client, "delete it")
        key = (await _until(client, run_id, "waiting"))["approvals"][0]["key"]
        loop.hold()
        url = f"/runs/{run_id}/approvals/{key}"
        first = await client.post(url, json={"approved": False})
        second = await client.post(url, json={"approved": True})
        loop.release()
        return first, second, await _events(client, run_id)

    first, second, events = _serve(served, scenario, loop=loop)
    assert first.status_code == 200 and first.json()["reason"] == "denied in the web page"
    assert second.status_code == 409 and "waits for no approval" in second.json()["error"]
    assert [d["approved"] for d in custom(events, "approval_decided")] == [False] and ran == []


def test_an_answered_approval_is_no_longer_listed_while_the_run_goes_on() -> None:
    ran: list[str] = []
    served = app(lw.ScriptedPolicy([DELETE, DELETE, FINAL]), _gated(ran), max_steps=4, approval_timeout_s=5)

    async def scenario(client: httpx.AsyncClient) -> Any:
        run_id = await _start(client, "delete it")
        first = (await _until(client, run_id, "waiting"))["approvals"]
        await client.post(f"/runs/{run_id}/approvals/{first[0]['key']}", json={"approved": False})
        deadline = time.monotonic() + 5
        while (now := (await client.get(f"/runs/{run_id}")).json())["approvals"] in ([], first):
            assert time.monotonic() < deadline, now
            await asyncio.sleep(0.005)
        bare = await client.post(f"/runs/{run_id}/approvals/{now['approvals'][-1]['key']}", json={"approved": True})
        assert bare.json()["reason"] == "approved"  # a bare approval gets the default reason
        return first, now, await _events(client, run_id)

    first, second, events = _serve(served, scenario)
    assert len(first) == 1 and len(second["approvals"]) == 1  # the second question alone
    assert second["approvals"][0]["key"] != first[0]["key"] and second["state"] == "waiting"
    assert [(d["approved"], d["reason"]) for d in custom(events, "approval_decided")] == [
        (False, "denied in the web page"), (True, "approved")]
    assert ran == ["notes.txt"]


def test_an_approval_answer_must_be_a_bool_with_an_optional_text_reason() -> None:
    ran: list[str] = []
    served = app(_by_task, _gated(ran), max_steps=4, approval_timeout_s=5)

    async def scenario(client: httpx.AsyncClient) -> Any:
        run_id = await _start(client, "delete it")
        key = (await _until(client, run_id, "waiting"))["approvals"][0]["key"]
        url = f"/runs/{run_id}/approvals/{key}"
        bad = [await client.post(url, json=body)
               for body in ([True], {}, {"approved": 1}, {"approved": "true"}, {"approved": True, "reason": 5})]
        not_json = await client.post(url, content=b"{", headers={"Content-Type": "application/json"})
        still = (await client.get(f"/runs/{run_id}")).json()
        denied = await client.post(url, json={"approved": False, "reason": ""})
        return bad, not_json, still, denied, await _events(client, run_id)

    bad, not_json, still, denied, events = _serve(served, scenario)
    assert [r.status_code for r in bad] == [422] * 5
    assert {r.json()["error"] for r in bad} == {'send {"approved": true} or {"approved": false, "reason": "..."}'}
    assert not_json.status_code == 400 and not_json.json() == {"error": "the body is not JSON"}
    assert still["state"] == "waiting" and len(still["approvals"]) == 1
    assert denied.json()["reason"] == "denied in the web page"  # an empty reason gets the default
    assert custom(events, "approval_decided")[0]["reason"] == "denied in the web page" and ran == []


def test_an_unanswered_approval_is_denied_after_the_timeout_and_the_run_goes_on() -> None:
    ran: list[str] = []
    served = app(_by_task, _gated(ran), max_steps=4, approval_timeout_s=0.05)

    async def scenario(client: httpx.AsyncClient) -> Any:
        run_id = await _start(client, "delete it")
        return await _events(client, run_id), (await client.get(f"/runs/{run_id}")).json()

    events, one = _serve(served, scenario)
    check_order(events)
    [decided] = custom(events, "approval_decided")
    assert decided["approved"] is False and decided["reason"] == "no answer within 0.05s"
    assert decided["key"] == custom(events, "approval_requested")[0]["key"]
    assert (one["state"], one["answer"], one["approvals"]) == ("finished", "5", []) and ran == []


def test_a_child_agents_approval_names_the_agent_that_asks() -> None:
    ran: list[str] = []
    cleaner = lw.Agent("cleaner", lw.ScriptedPolicy([DELETE, FINAL]), _gated(ran))
    parent = lw.ScriptedPolicy(['Thought: ask\nAction: cleaner\nAction Input: {"task": "delete notes"}', FINAL])
    served = app(parent, lw.ToolRegistry([cleaner.as_tool()]), max_steps=4, approval_timeout_s=5)

    async def scenario(client: httpx.AsyncClient) -> Any:
        run_id = await _start(client, "clean up")
        waiting = await _until(client, run_id, "waiting")
        key = waiting["approvals"][0]["key"]
        await client.post(f"/runs/{run_id}/approvals/{key}", json={"approved": True})
        return waiting, await _events(client, run_id)

    waiting, events = _serve(served, scenario)
    [asked] = waiting["approvals"]
    assert asked["agent"] == "cleaner" and asked["meta"] == {"agent": "cleaner"} and asked["tool"] == "delete"
    assert custom(events, "approval_requested") == [asked]
    assert ran == ["notes.txt"] and events[-1]["result"]["answer"] == "5"


# -- stopping --------------------------------------------------------------------------


def test_stopping_the_server_stops_every_run_still_going_and_denies_what_it_waits_for() -> None:
    release = threading.Event()

    def slow(prompt: str) -> str:
        if "quick" in prompt:  # a model that answers only when let go
            release.wait(5)
            return FINAL
        return _by_task(prompt)

    ran: list[str] = []
    served = app(slow, _gated(ran), max_steps=4, approval_timeout_s=5)

    async def scenario(client: httpx.AsyncClient) -> Any:
        waiting = await _start(client, "delete it")
        running = await _start(client, "quick")
        await _until(client, waiting, "waiting")
        return waiting, running, (await client.get(f"/runs/{running}")).json()

    try:
        waiting, running, before = _serve(served, scenario)  # leaving it stops the server
    finally:
        release.set()
    server = served.state.runs
    assert before["state"] == "running" and server.going == 0
    for run_id in (waiting, running):
        live = server.runs[run_id]
        assert live.done and live.driver.done() and live.state == "error"
        assert live.error == "RuntimeError: the server stopped the run"
        assert not live.pending and ran == []


def test_a_stopped_run_waits_for_nothing_even_when_its_loop_never_hears_the_denial() -> None:
    """The server stops while a run waits for approval, and the loop hears nothing more
    from the approver's thread (a server's loop stops right after): the run ended, so it
    holds no approval, and is described as an error with none open (commit f96d5c6)."""
    ran: list[str] = []
    served = app(_by_task, _gated(ran), max_steps=4, approval_timeout_s=5)
    loop = _HeldLoop()

    async def scenario(client: httpx.AsyncClient) -> Any:
        run_id = await _start(client, "delete it")
        await _until(client, run_id, "waiting")
        loop.hold()  # the approver's "denied" never reaches the loop
        await served.state.runs.shutdown()
        return (await client.get(f"/runs/{run_id}")).json()

    one = _serve(served, scenario, loop=loop)
    assert (one["state"], one["approvals"]) == ("error", []) and ran == []
    assert one["error"] == "RuntimeError: the server stopped the run"


def test_a_run_stopped_while_it_waits_is_journaled_denied_and_its_stream_ends_at_its_error(
        tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    """The approver's thread hears of the stop after the run ended: the call is journaled
    as denied, so a resume does not run it unasked; nothing is published after the run's
    RUN_ERROR (AG-UI ends a stream there), and the loop logs no error."""
    ran: list[str] = []
    store = lw.SQLiteStore(tmp_path / "runs.db")
    served = app(_by_task, _gated(ran), max_steps=4, approval_timeout_s=5, store=store)

    async def scenario(client: httpx.AsyncClient) -> Any:
        run_id = await _start(client, "delete it")
        await _until(client, run_id, "waiting")
        await served.state.runs.shutdown()
        deadline = time.monotonic() + 5
        while not store.approvals(run_id) or store.approvals(run_id)[0][1] is None:  # journaled by the
            assert time.monotonic() < deadline, store.approvals(run_id)  # thread after it told the loop
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.01)  # the loop runs what the thread sent it
        return run_id, await _events(client, run_id)

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        run_id, events = _serve(served, scenario)
    [(request, decision)] = store.approvals(run_id)
    assert (request.tool, decision) == ("delete", Decision(False, "the run ended before an answer"))
    assert store.load_run(run_id).status == "interrupted" and ran == []
    check_order(events)
    assert events[-1] == {"type": "RUN_ERROR", "message": "RuntimeError: the server stopped the run",
                          "code": "RuntimeError"}
    assert custom(events, "approval_decided") == [] and caplog.records == []


# -- limits ----------------------------------------------------------------------------


def test_runs_past_the_cap_are_refused_until_one_ends() -> None:
    ran: list[str] = []
    served = app(_by_task, _gated(ran), max_steps=4, max_runs=2, approval_timeout_s=5)

    async def scenario(client: httpx.AsyncClient) -> Any:
        first, second = await _start(client, "delete one"), await _start(client, "delete two")
        key = (await _until(client, first, "waiting"))["approvals"][0]["key"]
        refused = await client.post("/runs", json={"task": "quick"})
        agui = await client.post("/agui", json={"threadId": "t", "runId": "r", "messages": [
            {"id": "m", "role": "user", "content": "quick"}]})
        await client.post(f"/runs/{first}/approvals/{key}", json={"approved": False})
        await _events(client, first)
        after = await client.post("/runs", json={"task": "quick"})
        return refused, agui, after, second

    refused, agui, after, second = _serve(served, scenario)
    assert refused.status_code == 429 and agui.status_code == 429
    assert refused.json() == {"error": "2 runs are going, the most this server runs at once"}
    assert (refused.headers["retry-after"], refused.headers["cache-control"]) == ("5", "no-store")
    assert after.status_code == 201 and second not in (after.json()["run_id"],)


def _kept(policy: Any, registry: lw.ToolRegistry, **limits: int) -> list[int]:
    """Five runs one after another, each to its end: GET /runs/{id}'s status for each then."""
    served = app(policy, registry, **limits)

    async def scenario(client: httpx.AsyncClient) -> list[int]:
        ids = []
        for task in "abcde":
            ids.append(await _start(client, task))
            await _events(client, ids[-1])
        return [(await client.get(f"/runs/{run_id}")).status_code for run_id in ids]

    return list(_serve(served, scenario))


def test_kept_runs_are_the_last_finished_within_the_count(registry: lw.ToolRegistry) -> None:
    assert _kept(lw.ScriptedPolicy([FINAL] * 5), registry, keep_runs=2) == [404, 404, 404, 200, 200]
    assert _kept(lw.ScriptedPolicy([FINAL] * 5), registry, keep_runs=1) == [404, 404, 404, 404, 200]


def test_kept_runs_are_the_last_finished_within_the_bytes(registry: lw.ToolRegistry) -> None:
    """Runs that fail as they start (not a policy): each is one RUN_ERROR frame of the same size."""
    async def probe(client: httpx.AsyncClient) -> tuple[int, list[dict[str, Any]]]:
        run_id = await _start(client, "a")
        events = await _events(client, run_id)
        return int((await client.get(f"/runs/{run_id}")).json()["bytes"]), events

    size, events = _serve(app(object(), registry), probe)
    assert [e["type"] for e in events] == ["RUN_ERROR"] and size > 0
    assert _kept(object(), registry, keep_bytes=2 * size) == [404, 404, 404, 200, 200]  # exactly at the limit
    assert _kept(object(), registry, keep_bytes=2 * size - 1) == [404, 404, 404, 404, 200]
    assert _kept(object(), registry, keep_bytes=size - 1) == [404] * 5  # a run bigger than the limit: none


def test_runs_are_forgotten_in_the_order_they_finished_and_a_waiting_run_never() -> None:
    ran: list[str] = []
    served = app(_by_task, _gated(ran), max_steps=4, keep_runs=1, approval_timeout_s=5)

    async def scenario(client: httpx.AsyncClient) -> Any:
        slow = await _start(client, "delete notes")
        key = (await _until(client, slow, "waiting"))["approvals"][0]["key"]
        quick = []
        for task in ("quick a", "quick b"):  # each finishes while slow waits
            quick.append(await _start(client, task))
            await _events(client, quick[-1])
        while_waiting = [(await client.get(f"/runs/{run_id}")).status_code for run_id in (slow, *quick)]
        await client.post(f"/runs/{slow}/approvals/{key}", json={"approved": True})
        await _events(client, slow)  # slow finished last: the quick ones go
        after = [(await client.get(f"/runs/{run_id}")).status_code for run_id in (slow, *quick)]
        return while_waiting, after

    while_waiting, after = _serve(served, scenario)
    assert while_waiting == [200, 404, 200] and after == [200, 404, 404] and ran == ["notes.txt"]


# -- reading a stream ------------------------------------------------------------------


def test_last_event_id_resumes_after_that_frame_and_only_an_event_number_is_taken(registry: lw.ToolRegistry) -> None:
    served = app(lw.ScriptedPolicy([FINAL]), registry)

    async def scenario(client: httpx.AsyncClient) -> Any:
        run_id = await _start(client, "say 5")
        whole = await _events(client, run_id)
        after = [await _events(client, run_id, last) for last in ("0", "2", "9" * 18)]
        bad = [await client.get(f"/runs/{run_id}/events", headers={"Last-Event-ID": value})
               for value in ("", "9" * 19, "-1", "a1", "1 ", "0x1")]
        return whole, after, bad

    whole, after, bad = _serve(served, scenario)
    assert after == [whole[1:], whole[3:], []]
    assert [r.status_code for r in bad] == [400] * 6
    assert {r.json()["error"] for r in bad} == {"Last-Event-ID is not an event id of this stream"}
    assert {r.headers["cache-control"] for r in bad} == {"no-store"}


def test_an_unknown_run_is_404_on_every_path_naming_the_id_cut_short() -> None:
    served = app(lw.ScriptedPolicy([]), lw.ToolRegistry())
    long_id = "z" * 150

    async def scenario(client: httpx.AsyncClient) -> list[httpx.Response]:
        return [await client.get(f"/runs/{long_id}"), await client.get(f"/runs/{long_id}/events"),
                await client.post(f"/runs/{long_id}/approvals/k", json={"approved": True}),
                await client.get("/runs/nope")]

    answers = _serve(served, scenario)
    assert [r.status_code for r in answers] == [404] * 4
    assert [r.json() for r in answers] == [{"error": f"no run {'z' * 100!r}"}] * 3 + [{"error": "no run 'nope'"}]
    assert {r.headers["cache-control"] for r in answers} == {"no-store"}


# -- starting runs ---------------------------------------------------------------------


def test_a_task_must_be_non_empty_text_in_a_json_object() -> None:
    served = app(lw.ScriptedPolicy([]), lw.ToolRegistry())

    async def scenario(client: httpx.AsyncClient) -> Any:
        refused = [await client.post("/runs", json=body)
                   for body in (["say 5"], "say 5", {"task": 5}, {"task": None}, {}, {"task": " \n"})]
        not_json = [await client.post("/runs", content=body, headers={"Content-Type": "application/json"})
                    for body in (b"{task", b"[" * 100_000, b"")]
        return refused, not_json, (await client.get("/runs")).json()

    refused, not_json, listed = _serve(served, scenario)
    assert [r.status_code for r in refused] == [422] * 6
    assert {r.json()["error"] for r in refused} == {'send {"task": "..."} with a non-empty task'}
    assert [(r.status_code, r.json()) for r in not_json] == [(400, {"error": "the body is not JSON"})] * 3
    assert listed == {"runs": []}


def test_the_runs_are_listed_newest_first() -> None:
    ran: list[str] = []
    served = app(_by_task, _gated(ran), max_steps=4, approval_timeout_s=5)

    async def scenario(client: httpx.AsyncClient) -> Any:
        ids = []
        for task in ("quick a", "delete b", "quick c"):
            ids.append(await _start(client, task))
            await asyncio.sleep(0.002)  # distinct start times
        await _until(client, ids[1], "waiting")
        return ids, (await client.get("/runs")).json()["runs"]

    ids, runs = _serve(served, scenario)
    assert [r["run_id"] for r in runs] == ids[::-1]
    assert [r["task"] for r in runs] == ["quick c", "delete b", "quick a"]


def test_the_agui_endpoint_streams_the_run_of_the_last_user_message_with_text(registry: lw.ToolRegistry) -> None:
    messages = [{"id": "m1", "role": "user", "content": "an earlier task"},
                {"id": "m3", "role": "user", "content": "What is 2 + 3?"},
                {"id": "m4", "role": "user", "content": "  "},
                {"id": "m5", "role": "user", "content": [{"type": "text", "text": "parts are not read"}]},
                {"id": "m6", "role": "assistant", "content": "an assistant message is not the task"}]
    body = {"threadId": "thread-9", "runId": "run-9", "state": None, "tools": [], "context": [],
            "forwardedProps": None, "messages": messages}
    served = app(lw.ScriptedPolicy([ADD, FINAL]), registry, max_steps=4)

    async def scenario(client: httpx.AsyncClient) -> Any:
        stream = await client.post("/agui", json=body)
        no_task = await client.post("/agui", json={**body, "messages": messages[2:]})
        not_input = await client.post("/agui", json={"threadId": "t", "messages": [{"role": "x" * 2000}]})
        not_json = await client.post("/agui", content=b"[", headers={"Content-Type": "application/json"})
        return stream, no_task, not_input, not_json, (await client.get("/runs")).json()["runs"]

    stream, no_task, not_input, not_json, [run] = _serve(served, scenario)
    assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
    assert (stream.headers["cache-control"], stream.headers["x-accel-buffering"]) == ("no-store", "no")
    events = [event for _, event in _frames(stream.text)]
    check_order(events)
    assert (events[0]["threadId"], events[0]["runId"]) == ("thread-9", "run-9")
    assert events[-1]["result"]["answer"] == "5" and events[0]["metadata"]["run_id"] == run["run_id"]
    assert (run["task"], run["thread_id"], run["state"]) == ("What is 2 + 3?", "thread-9", "finished")
    assert no_task.status_code == 422 and no_task.json() == {"error": "the input has no user message with text"}
    error = not_input.json()["error"]
    assert not_input.status_code == 422 and error.startswith("not an AG-UI RunAgentInput: ")
    assert len(error) == len("not an AG-UI RunAgentInput: ") + 500  # pydantic's long message, cut
    assert not_json.status_code == 400 and not_json.json() == {"error": "the body is not JSON"}


def test_the_page_and_its_files_are_served_with_their_types_unless_page_is_off() -> None:
    served = app(lw.ScriptedPolicy([]), lw.ToolRegistry())
    bare = app(lw.ScriptedPolicy([]), lw.ToolRegistry(), page=False)

    async def files(client: httpx.AsyncClient) -> list[httpx.Response]:
        return [await client.get(path) for path in ("/", "/serve.js", "/serve.css")]

    page, off = _serve(served, files), _serve(bare, files)
    assert [(r.status_code, r.headers["content-type"], r.headers["cache-control"]) for r in page] == [
        (200, "text/html; charset=utf-8", "no-cache"), (200, "text/javascript; charset=utf-8", "no-cache"),
        (200, "text/css; charset=utf-8", "no-cache")]
    assert 'id="task-form"' in page[0].text and "function" in page[1].text and "{" in page[2].text
    assert [r.status_code for r in off] == [404] * 3


def test_with_a_token_only_the_pages_files_are_open() -> None:
    served = app(lw.ScriptedPolicy([FINAL]), lw.ToolRegistry(), token="s3cret-t0ken")

    async def scenario(client: httpx.AsyncClient) -> list[int]:
        return [(await client.get(path)).status_code for path in ("/", "/serve.js", "/serve.css", "/runs")]

    assert _serve(served, scenario) == [200, 200, 200, 401]
    bare = app(lw.ScriptedPolicy([FINAL]), lw.ToolRegistry(), token="s3cret-t0ken", page=False)
    assert _serve(bare, scenario) == [401] * 4  # with no page, nothing is open


def test_each_path_answers_only_its_own_methods(registry: lw.ToolRegistry) -> None:
    served = app(lw.ScriptedPolicy([FINAL]), registry)

    async def scenario(client: httpx.AsyncClient) -> list[int]:
        run_id = await _start(client, "say 5")
        await _events(client, run_id)
        wrong = [("POST", "/"), ("POST", "/serve.js"), ("PUT", "/runs"), ("POST", f"/runs/{run_id}"),
                 ("POST", f"/runs/{run_id}/events"), ("PUT", f"/runs/{run_id}/approvals/k"), ("PUT", "/agui")]
        return [(await client.request(method, path, json={"task": "x"})).status_code for method, path in wrong]

    assert _serve(served, scenario) == [405] * 7


def test_a_body_at_the_limit_reaches_the_app_and_one_byte_more_does_not() -> None:
    body = b'{"task": "hi"}'
    served = app(lw.ScriptedPolicy([FINAL] * 2), lw.ToolRegistry(), max_body=len(body))

    async def scenario(client: httpx.AsyncClient) -> list[int]:
        headers = {"Content-Type": "application/json"}
        return [(await client.post("/runs", content=data, headers=headers)).status_code for data in (body, body + b" ")]

    assert _serve(served, scenario) == [201, 413]


def test_leaving_the_apps_lifespan_stops_the_runs_still_going() -> None:
    """What a server does as it stops: the lifespan's end; the loop goes on after it."""
    ran: list[str] = []
    served = app(_by_task, _gated(ran), max_steps=4, approval_timeout_s=5)

    async def main() -> tuple[dict[str, Any], bool]:
        transport = httpx.ASGITransport(app=served)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            async with served.router.lifespan_context(served):
                run_id = await _start(client, "delete it")
                await _until(client, run_id, "waiting")
            live = served.state.runs.runs[run_id]
            return (await client.get(f"/runs/{run_id}")).json(), live.driver.done()

    one, stopped = asyncio.run(asyncio.wait_for(main(), 10))
    assert stopped and one["state"] == "error" and one["approvals"] == [] and ran == []
    assert one["error"] == "RuntimeError: the server stopped the run"


def test_the_app_runs_its_mode_with_its_options(registry: lw.ToolRegistry) -> None:
    plan = json.dumps({"plan": [{"id": "E1", "tool": "add", "args": {"x": 2, "y": 3}}]})
    rewoo = app(lw.ScriptedPolicy([plan, "Final Answer: 5"]), registry, "rewoo")
    limited = app(lw.ScriptedPolicy([ADD, ADD, FINAL]), registry, max_steps=1)

    async def run(client: httpx.AsyncClient) -> list[dict[str, Any]]:
        return await _events(client, await _start(client, "What is 2 + 3?"))

    planned, stopped = _serve(rewoo, run), _serve(limited, run)
    assert planned[0]["metadata"]["mode"] == "rewoo" and planned[-1]["result"]["answer"] == "5"
    assert stopped[-1]["result"]["stopped_reason"] == "max_steps" and stopped[-1]["result"]["tool_calls"] == 1


def test_app_takes_an_option_of_its_own_mode_and_names_the_modes_when_the_mode_is_unknown() -> None:
    policy, registry = lw.ScriptedPolicy([]), lw.ToolRegistry()
    assert app(policy, registry, "reflexion", max_reflections=2).state.runs.options == {"max_reflections": 2}
    with pytest.raises(TypeError, match="max_reflections"):
        app(policy, registry, "react", max_reflections=2)
    with pytest.raises(ValueError) as refused:
        app(policy, registry, "bogus")
    assert str(refused.value) == f"unknown mode 'bogus'; the modes are {', '.join(sorted(MODES))}"


@pytest.mark.parametrize("name", ["keep_runs", "keep_bytes", "max_runs"])
def test_a_limit_of_one_is_taken_and_held_to(name: str, registry: lw.ToolRegistry) -> None:
    served = app(lw.ScriptedPolicy([FINAL]), registry, **{name: 1})
    server = served.state.runs
    assert getattr(server, name) == 1
    assert (server.keep_runs, server.keep_bytes, server.max_runs) == (
        1 if name == "keep_runs" else 100, 1 if name == "keep_bytes" else 64 * 1024 * 1024,
        1 if name == "max_runs" else 16)
    assert server.approval_timeout_s == 300.0 and server.mode == "react" and server.going == 0
