"""loopwright.ui: the app on a real uvicorn at 127.0.0.1, read with a real HTTP client; the
AG-UI stream validated with ag-ui-protocol's own models and ordering rules; approvals
answered by POST both ways and left to time out; the event mapping under any split of the
model's text into deltas."""

from __future__ import annotations

import ast
import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopwright as lw
from helpers.agui import (
    EVENT,
    answer,
    check_order,
    custom,
    read_stream,
    serving,
    start_run,
    texts,
    watch,
)
from loopwright.events import (
    ModelDelta,
    RunFinished,
    RunStarted,
    StepEvent,
    ToolFinished,
    ToolStarted,
)
from loopwright.safety import approval_key
from loopwright.trace import Step, Trace
from loopwright.ui import AGUIMapper, app

SRC = Path(lw.__file__).parent

ADD = 'Thought: add them\nAction: add\nAction Input: {"x": 2, "y": 3}'
FINAL = "Thought: I know it\nFinal Answer: 5"


def _gated(ran: list[str]) -> lw.ToolRegistry:
    @lw.tool(side_effects="destructive", requires_approval=True)
    def delete(name: str) -> str:
        """Delete a file."""
        ran.append(name)
        return f"deleted {name}"

    return lw.ToolRegistry([delete])


DELETE = 'Thought: delete it\nAction: delete\nAction Input: {"name": "notes.txt"}'


def test_a_run_streams_as_valid_agui_events_in_order(registry: lw.ToolRegistry) -> None:
    chunks = (ADD[:9], ADD[9:20], ADD[20:41], ADD[41:])  # the model streams step 1 in four deltas
    policy = lw.ScriptedPolicy([chunks, FINAL])
    with serving(app(policy, registry, max_steps=4)) as base:
        run_id = start_run(base, "What is 2 + 3?")
        events = watch(base, run_id)
    check_order(events)
    types = [e["type"] for e in events]
    assert events[0]["runId"] == run_id and events[0]["protocolVersion"]
    # step 1: the model's text, then the call, its args, its result; step 2: the answer
    step1 = types[types.index("STEP_STARTED"):types.index("STEP_FINISHED") + 1]
    assert step1 == ["STEP_STARTED", "TEXT_MESSAGE_START", *["TEXT_MESSAGE_CONTENT"] * 4, "TEXT_MESSAGE_END",
                     "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT", "CUSTOM",
                     "STEP_FINISHED"]
    assert [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"][:4] == list(chunks)
    assert types.count("STEP_STARTED") == 2
    steps = custom(events, "step")
    assert [s["kind"] for s in steps] == ["action", "final"]
    assert list(texts(events).values()) == [ADD, FINAL]  # the deltas re-join to each step's raw text
    call = next(e for e in events if e["type"] == "TOOL_CALL_START")
    args = next(e for e in events if e["type"] == "TOOL_CALL_ARGS")
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert call["toolCallName"] == "add" and args["delta"] == '{"x": 2, "y": 3}'
    assert result["toolCallId"] == call["toolCallId"] and result["content"] == "5"
    done = events[-1]
    assert done["type"] == "RUN_FINISHED" and done["runId"] == run_id
    assert done["result"] == {"answer": "5", "stopped_reason": "final", "llm_calls": 2, "tool_calls": 1}
    assert done["usage"][0]["inputTokens"] > 0


def test_a_late_watcher_gets_the_whole_run_from_its_start(registry: lw.ToolRegistry) -> None:
    with serving(app(lw.ScriptedPolicy([ADD, FINAL]), registry, max_steps=4)) as base:
        run_id = start_run(base, "What is 2 + 3?")
        first = watch(base, run_id)
        again = watch(base, run_id)  # the run is over: its frames are kept
        resumed = watch(base, run_id, last_event_id=4)  # an EventSource reconnecting after frame 4
        raw = httpx2.get(f"{base}/runs/{run_id}/events").text
    assert again == first and first[-1]["type"] == "RUN_FINISHED"
    assert resumed == first[5:]
    assert raw.startswith("id: 0\ndata: ") and f"id: {len(first) - 1}\ndata: " in raw


def test_approval_by_post_runs_the_call() -> None:
    ran: list[str] = []
    policy = lw.ScriptedPolicy([DELETE, "Thought: done\nFinal Answer: deleted"])
    with serving(app(policy, _gated(ran), max_steps=4, approval_timeout_s=30)) as base:
        run_id = start_run(base, "Delete notes.txt")
        replies: list[httpx2.Response] = []

        def on_event(e: dict[str, Any]) -> None:
            if e["type"] == "CUSTOM" and e["name"] == "approval_requested":
                assert ran == []  # the tool waits for the answer
                replies.append(answer(base, run_id, e["value"]["key"], True))

        events = watch(base, run_id, on_event)
    check_order(events)
    [asked] = custom(events, "approval_requested")
    assert asked["tool"] == "delete" and asked["args"] == {"name": "notes.txt"}
    assert [r.status_code for r in replies] == [200]
    assert custom(events, "approval_decided") == [{"key": asked["key"], "approved": True, "reason": "approved"}]
    assert ran == ["notes.txt"]
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["content"] == "deleted notes.txt"
    assert events[-1]["result"]["stopped_reason"] == "final"


def test_denial_by_post_keeps_the_call_from_running_and_the_model_sees_why() -> None:
    ran: list[str] = []
    policy = lw.ScriptedPolicy([DELETE, "Thought: not allowed\nFinal Answer: kept"])
    with serving(app(policy, _gated(ran), max_steps=4)) as base:
        run_id = start_run(base, "Delete notes.txt")

        def on_event(e: dict[str, Any]) -> None:
            if e["type"] == "CUSTOM" and e["name"] == "approval_requested":
                assert answer(base, run_id, e["value"]["key"], False, "keep my notes").status_code == 200
                again = answer(base, run_id, e["value"]["key"], True)  # answered already
                assert again.status_code == 409

        events = watch(base, run_id, on_event)
    check_order(events)
    assert ran == []
    [decided] = custom(events, "approval_decided")
    assert decided["approved"] is False and decided["reason"] == "keep my notes"
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert "keep my notes" in result["content"]
    assert "keep my notes" in policy.prompts[1]  # the model saw the denial


def test_the_same_call_asked_again_is_asked_again() -> None:
    ran: list[str] = []
    policy = lw.ScriptedPolicy([DELETE, DELETE, "Thought: done\nFinal Answer: deleted"])
    with serving(app(policy, _gated(ran), max_steps=4)) as base:
        run_id = start_run(base, "Delete notes.txt")
        answers = iter([False, True])

        def on_event(e: dict[str, Any]) -> None:
            if e["type"] == "CUSTOM" and e["name"] == "approval_requested":
                assert answer(base, run_id, e["value"]["key"], next(answers)).status_code == 200

        events = watch(base, run_id, on_event)
    check_order(events)
    asked = custom(events, "approval_requested")
    assert len(asked) == 2 and asked[0]["args"] == asked[1]["args"]  # one call, two questions,
    assert asked[0]["key"] != asked[1]["key"]  # each with a key of its own
    assert [d["approved"] for d in custom(events, "approval_decided")] == [False, True]
    assert ran == ["notes.txt"]


def test_an_unanswered_approval_is_denied_after_the_timeout() -> None:
    ran: list[str] = []
    policy = lw.ScriptedPolicy([DELETE, "Thought: no answer\nFinal Answer: kept"])
    with serving(app(policy, _gated(ran), max_steps=4, approval_timeout_s=0.3)) as base:
        events = watch(base, start_run(base, "Delete notes.txt"))
    check_order(events)
    assert ran == []
    [decided] = custom(events, "approval_decided")
    assert decided["approved"] is False and "no answer within 0.3s" in decided["reason"]
    assert events[-1]["result"]["answer"] == "kept"


def test_stopping_the_server_ends_a_run_that_waits_for_approval() -> None:
    ran: list[str] = []
    policy = lw.ScriptedPolicy([DELETE, "Thought: stopped\nFinal Answer: kept"])
    asked = threading.Event()
    seen: list[dict[str, Any]] = []
    served = app(policy, _gated(ran), max_steps=4, approval_timeout_s=60)
    with serving(served) as base:
        run_id = start_run(base, "Delete notes.txt")

        def read() -> None:
            try:
                with httpx2.stream("GET", f"{base}/runs/{run_id}/events", timeout=30) as response:
                    for line in response.iter_lines():
                        if line.startswith("data: "):
                            seen.append(json.loads(line[6:]))
                            if seen[-1].get("name") == "approval_requested":
                                asked.set()
            except httpx2.HTTPError:
                pass  # the server cut the stream as it stopped

        reader = threading.Thread(target=read)
        reader.start()
        assert asked.wait(20)
    reader.join(20)  # the server stopped: the run was cancelled, its approver denied, the stream ended
    assert not reader.is_alive() and ran == []
    live = served.state.runs.runs[run_id]
    assert live.done and live.driver.done() and not live.pending
    assert live.state == "error" and live.error == "RuntimeError: the server stopped the run"


def test_a_failing_policy_ends_the_stream_with_run_error(registry: lw.ToolRegistry) -> None:
    policy = lw.ScriptedPolicy([RuntimeError("the model server is down")])
    with serving(app(policy, registry, max_steps=3)) as base:
        events = watch(base, start_run(base, "What is 2 + 3?"))
    check_order(events)
    assert events[-1]["type"] == "RUN_ERROR" and "the model server is down" in events[-1]["message"]


def test_the_agui_endpoint_takes_a_run_agent_input_and_answers_with_the_stream(registry: lw.ToolRegistry) -> None:
    body = {"threadId": "thread-7", "runId": "run-7", "state": None, "tools": [], "context": [],
            "forwardedProps": None,
            "messages": [{"id": "m1", "role": "user", "content": "What is 2 + 3?"}]}
    with serving(app(lw.ScriptedPolicy([ADD, FINAL]), registry, max_steps=4)) as base:
        with httpx2.stream("POST", f"{base}/agui", json=body, timeout=30) as response:
            events = read_stream(response)
        no_task = httpx2.post(f"{base}/agui", json={**body, "runId": "run-8", "messages": []}, timeout=10)
    check_order(events)
    assert (events[0]["threadId"], events[0]["runId"]) == ("thread-7", "run-7")
    assert events[-1]["result"]["answer"] == "5" and events[-1]["runId"] == "run-7"
    assert events[0]["metadata"]["run_id"] != "run-7"  # the server's own id for the run
    assert no_task.status_code == 422


def test_bad_requests_get_a_status_and_a_reason(registry: lw.ToolRegistry) -> None:
    with serving(app(lw.ScriptedPolicy([FINAL]), registry)) as base:
        no_task = httpx2.post(f"{base}/runs", json={"task": "  "})
        not_json = httpx2.post(f"{base}/runs", content=b"{task", headers={"Content-Type": "application/json"})
        unknown = httpx2.get(f"{base}/runs/nope/events")
        run_id = start_run(base, "say 5")
        watch(base, run_id)
        no_wait = answer(base, run_id, "k", True)
        bad_answer = httpx2.post(f"{base}/runs/{run_id}/approvals/k", json={"approved": "yes"})
        page = httpx2.get(f"{base}/")
    assert no_task.status_code == 422 and "task" in no_task.json()["error"]
    assert not_json.status_code == 400
    assert unknown.status_code == 404 and "nope" in unknown.json()["error"]
    assert no_wait.status_code == 409
    assert bad_answer.status_code == 422  # "yes" is not an approval: only a real bool decides
    assert page.status_code == 200 and 'id="task-form"' in page.text


def test_only_the_most_recent_finished_runs_are_kept(registry: lw.ToolRegistry) -> None:
    with serving(app(lw.ScriptedPolicy([FINAL, FINAL, FINAL]), registry, keep_runs=2)) as base:
        first = start_run(base, "a")
        watch(base, first)
        second = start_run(base, "b")
        watch(base, second)
        third = start_run(base, "c")
        watch(base, third)  # three finished, two kept: the first goes
        gone = httpx2.get(f"{base}/runs/{first}/events")
        kept = watch(base, second)
    assert gone.status_code == 404 and kept[-1]["type"] == "RUN_FINISHED"


def _by_task(prompt: str) -> str:
    """A policy for many runs at once: a task with "quick" in it answers; any other asks
    to delete notes.txt, and answers once it has or was denied."""
    return FINAL if any(word in prompt for word in ("quick", "deleted notes.txt", "DENIED")) else DELETE


def _until(base: str, ready: Any, what: str, limit_s: float = 30.0) -> list[dict[str, Any]]:
    """GET /runs until `ready(runs)` holds; the runs then."""
    deadline = time.monotonic() + limit_s
    while True:
        runs = httpx2.get(f"{base}/runs", timeout=10).json()["runs"]
        if ready(runs):
            return list(runs)
        assert time.monotonic() < deadline, f"never {what}: {runs}"
        time.sleep(0.05)


def test_approval_keys_are_random_per_request_and_the_calls_hash_answers_nothing() -> None:
    ran: list[str] = []
    with serving(app(_by_task, _gated(ran), max_steps=4, approval_timeout_s=30)) as base:
        first, second = start_run(base, "delete one"), start_run(base, "delete two")
        runs = _until(base, lambda runs: all(r["approvals"] for r in runs), "both waiting")
        keys = {r["run_id"]: r["approvals"][0]["key"] for r in runs}
        hashed = approval_key("delete", {"name": "notes.txt"})  # what a page could work out offline
        forged = [answer(base, run, hashed, True).status_code for run in (first, second)]
        crossed = answer(base, first, keys[second], True).status_code  # another run's key
        held = list(ran)
        right = answer(base, first, keys[first], True).status_code
        events = watch(base, first)
    assert keys[first] != keys[second] and hashed not in keys.values()
    assert len(keys[first]) >= 32  # at least 128 random bits, URL-safe
    assert forged == [409, 409] and crossed == 409 and held == []
    assert right == 200 and ran == ["notes.txt"]
    assert custom(events, "approval_requested")[0]["key"] == keys[first]


def test_a_clients_agui_run_id_labels_its_stream_and_reaches_no_other_run(registry: lw.ToolRegistry) -> None:
    body = {"threadId": "t", "runId": "pwn1", "state": None, "tools": [], "context": [], "forwardedProps": None,
            "messages": [{"id": "m1", "role": "user", "content": "What is 2 + 3?"}]}
    with serving(app(lw.ScriptedPolicy([ADD, FINAL, ADD, FINAL]), registry, max_steps=4)) as base:
        streams = []
        for _ in range(2):  # the same runId twice: two runs, neither in the other's way
            with httpx2.stream("POST", f"{base}/agui", json=body, timeout=30) as response:
                streams.append(read_stream(response))
        by_label = httpx2.get(f"{base}/runs/pwn1/events")
        held = {r["run_id"] for r in httpx2.get(f"{base}/runs").json()["runs"]}
    assert [s[0]["runId"] for s in streams] == ["pwn1", "pwn1"]
    assert [s[-1]["result"]["answer"] for s in streams] == ["5", "5"]
    ours = {s[0]["metadata"]["run_id"] for s in streams}
    assert len(ours) == 2 and ours == held and "pwn1" not in held
    assert by_label.status_code == 404


def test_runs_past_the_cap_are_refused_with_429() -> None:
    ran: list[str] = []
    with serving(app(_by_task, _gated(ran), max_steps=4, max_runs=1)) as base:
        waiting = start_run(base, "delete it")
        [run] = _until(base, lambda runs: runs and runs[0]["state"] == "waiting", "waiting")
        refused = httpx2.post(f"{base}/runs", json={"task": "quick"})
        agui = httpx2.post(f"{base}/agui", json={"threadId": "t", "runId": "r", "messages": [
            {"id": "m", "role": "user", "content": "quick"}]})
        answer(base, waiting, run["approvals"][0]["key"], True)
        watch(base, waiting)
        after = httpx2.post(f"{base}/runs", json={"task": "quick"})
    assert refused.status_code == 429 and "1 runs" in refused.json()["error"] and refused.headers["retry-after"] == "5"
    assert refused.headers["cache-control"] == "no-store"
    assert agui.status_code == 429
    assert after.status_code == 201


def test_runs_waiting_for_approval_hold_no_thread_of_the_shared_pool() -> None:
    """As many runs waiting for a person as the shared pool has threads (32), and another
    run still gets its model calls made (a sync policy's calls go to that pool)."""
    ran: list[str] = []
    with serving(app(_by_task, _gated(ran), max_steps=4, max_runs=40, approval_timeout_s=120)) as base:
        for i in range(32):
            start_run(base, f"delete {i}")
        _until(base, lambda runs: sum(r["state"] == "waiting" for r in runs) == 32, "32 runs waiting", 120)
        quick = watch(base, start_run(base, "quick"), read_timeout=60)
    assert quick[-1]["result"]["answer"] == "5" and ran == []


def test_runs_are_forgotten_in_the_order_they_finished() -> None:
    ran: list[str] = []
    with serving(app(_by_task, _gated(ran), max_steps=4, keep_runs=1)) as base:
        slow = start_run(base, "delete notes")
        [run] = _until(base, lambda runs: runs and runs[0]["state"] == "waiting", "waiting")
        quick = start_run(base, "quick")
        watch(base, quick)  # quick finished first; slow still waits: it is kept
        kept_while_waiting = httpx2.get(f"{base}/runs/{slow}").status_code
        answer(base, slow, run["approvals"][0]["key"], True)
        watch(base, slow)  # now slow finished last: quick goes
        slow_events = httpx2.get(f"{base}/runs/{slow}/events")
        quick_events = httpx2.get(f"{base}/runs/{quick}/events")
    assert kept_while_waiting == 200
    assert slow_events.status_code == 200 and quick_events.status_code == 404


def test_kept_runs_are_bounded_in_bytes(registry: lw.ToolRegistry) -> None:
    with serving(app(lw.ScriptedPolicy([FINAL]), registry)) as base:
        probe = start_run(base, "a")
        watch(base, probe)
        size = httpx2.get(f"{base}/runs/{probe}").json()["bytes"]
    with serving(app(lw.ScriptedPolicy([FINAL] * 3), registry, keep_bytes=2 * size + size // 2)) as base:
        ids = []
        for task in "bcd":
            ids.append(start_run(base, task))
            watch(base, ids[-1])
        kept = [httpx2.get(f"{base}/runs/{run_id}").status_code for run_id in ids]
        server = base
    assert size > 0 and kept == [404, 200, 200], server


def test_get_runs_lists_the_runs_and_get_run_describes_one() -> None:
    ran: list[str] = []
    with serving(app(_by_task, _gated(ran), max_steps=4)) as base:
        done = start_run(base, "quick one")
        watch(base, done)
        waiting = start_run(base, "delete notes")
        runs = _until(base, lambda runs: len(runs) == 2 and runs[0]["state"] == "waiting", "waiting")
        one = httpx2.get(f"{base}/runs/{waiting}").json()
        finished = httpx2.get(f"{base}/runs/{done}").json()
        missing = httpx2.get(f"{base}/runs/nope")
        answer(base, waiting, one["approvals"][0]["key"], False, "no")
        watch(base, waiting)
        after = httpx2.get(f"{base}/runs/{waiting}").json()
    assert [r["run_id"] for r in runs] == [waiting, done]  # newest first
    assert one == runs[0] and one["task"] == "delete notes" and one["events"] == f"/runs/{waiting}/events"
    [asked] = one["approvals"]
    assert (asked["tool"], asked["args"], asked["side_effects"], asked["description"]) == (
        "delete", {"name": "notes.txt"}, "destructive", "Delete a file.")
    assert (finished["state"], finished["stopped_reason"], finished["answer"]) == ("finished", "final", "5")
    assert finished["finished_at"] >= finished["started_at"] and not finished["approvals"]
    assert missing.status_code == 404
    assert after["state"] == "finished" and after["approvals"] == [] and ran == []


def test_a_reader_is_sent_a_long_run_in_pieces_not_as_one_copy() -> None:
    from ag_ui.core import TextMessageContentEvent

    from loopwright.ui.server import LiveRun

    async def read() -> tuple[LiveRun, list[bytes]]:
        live = LiveRun("r", "t", "task", AGUIMapper("t"))
        live.publish(TextMessageContentEvent(message_id="m", delta="x" * 1000) for _ in range(3000))
        live.publish([TextMessageContentEvent(message_id="m", delta="y" * 2_000_000)])  # one long event
        live.publish(TextMessageContentEvent(message_id="m", delta="z" * 10) for _ in range(10))
        live.close()
        return live, [piece async for piece in live.watch()]

    live, pieces = asyncio.run(read())
    assert b"".join(pieces) == b"".join(live.frames) and len(pieces) > 40
    assert max(len(piece) for piece in pieces) <= 64 * 1024


def test_app_checks_run_options_when_it_is_made(registry: lw.ToolRegistry) -> None:
    policy = lw.ScriptedPolicy([])
    with pytest.raises(TypeError, match="max_stepz"):
        app(policy, registry, max_stepz=3)
    with pytest.raises(TypeError, match="approver"):
        app(policy, registry, approver=lambda request: True)
    with pytest.raises(ValueError, match="unknown mode 'bogus'"):
        app(policy, registry, "bogus")
    with pytest.raises(ValueError, match="approval_timeout_s"):
        app(policy, registry, approval_timeout_s=0)
    without_page = app(policy, registry, page=False)
    assert not any(getattr(r, "path", "") == "/" for r in without_page.routes)


# -- the mapping, any way the text is split --------------------------------------------


def _splits(text: str) -> st.SearchStrategy[list[str]]:
    cuts = st.lists(st.integers(0, len(text)), max_size=12).map(sorted)
    return cuts.map(lambda cs: [text[a:b] for a, b in zip([0, *cs], [*cs, len(text)], strict=True)])


@settings(max_examples=60, deadline=None)
@given(data=st.data(), raw=st.text(min_size=1, max_size=80))
def test_any_split_of_a_steps_text_rejoins_in_one_valid_message(data: st.DataObject, raw: str) -> None:
    from ag_ui.encoder import EventEncoder

    deltas = data.draw(_splits(raw))
    trace = Trace(task="t", mode="react", run_id="r")
    step = Step(index=1, kind="action", raw=raw, tool="add", args={"x": 1}, observation="2")
    ours = [RunStarted("r", None, "t", "react"), *[ModelDelta("r", None, 1, d) for d in deltas if d],
            ToolStarted("r", None, 1, "add", {"x": 1}, "1"), ToolFinished("r", None, 1, "add", "1", 0.0, False),
            StepEvent("r", None, step), RunFinished("r", None, trace)]
    mapper = AGUIMapper("thread")
    encoder = EventEncoder()
    events = [json.loads(encoder.encode(e)[len("data: "):]) for ev in ours for e in mapper.map(ev)]
    for e in events:
        EVENT.validate_python(e)
    check_order(events)
    assert list(texts(events).values()) == [raw]
    assert sum(e["type"] == "TOOL_CALL_START" for e in events) == 1


def test_a_tool_step_with_no_tool_started_still_shows_its_call_and_result() -> None:
    mapper = AGUIMapper("t")
    denied = Step(index=1, kind="denied", raw="x", tool="delete", args={"name": "a"}, observation="denied: no")
    out = [e.type.value for ev in (RunStarted("r", None, "t", "react"), StepEvent("r", None, denied))
           for e in mapper.map(ev)]
    assert out == ["RUN_STARTED", "STEP_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END",
                   "TOOL_CALL_RESULT", "CUSTOM", "STEP_FINISHED"]


def test_the_runs_approval_requests_map_to_custom_events_unless_the_app_announces_them() -> None:
    from loopwright.events import ApprovalRequested
    from loopwright.safety import ApprovalRequest

    request = ApprovalRequest("delete", {"name": "a"}, "k1", "1", "destructive", "", "r")
    asked = ApprovalRequested("r", None, request)
    [event] = AGUIMapper("t").map(asked)
    assert event.type.value == "CUSTOM" and event.name == "approval_requested" and event.value["key"] == "k1"
    assert AGUIMapper("t", stream_approvals=False).map(asked) == []


def test_a_child_agents_run_is_an_agui_subagent_and_does_not_end_the_run() -> None:
    mapper = AGUIMapper("t")
    child = Trace(task="sub", mode="react", run_id="c", final_answer="42", stopped_reason="final")
    out = [e for ev in (RunStarted("r", None, "t", "react"), RunStarted("c", "helper", "sub", "react"),
                        ModelDelta("c", "helper", 1, "hi"), RunFinished("c", "helper", child))
           for e in mapper.map(ev)]
    assert [e.type.value for e in out] == ["RUN_STARTED", "SUBAGENT_STARTED", "STEP_STARTED", "TEXT_MESSAGE_START",
                                           "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "STEP_FINISHED",
                                           "SUBAGENT_FINISHED"]
    assert out[1].name == "helper" and out[1].subagent_run_id == "c"
    assert all(e.subagent_run_id == "c" and e.metadata == {"agent": "helper"} for e in out[2:7])
    assert out[-1].result == {"answer": "42", "stopped_reason": "final"}
    assert not mapper.finished
    for e in out:
        EVENT.validate_python(json.loads(e.model_dump_json(by_alias=True)))


# -- where it sits ----------------------------------------------------------------------


def test_import_loopwright_loads_none_of_the_ui() -> None:
    code = ("import sys, loopwright\n"
            "print(sorted(m for m in ('loopwright.ui', 'ag_ui', 'starlette', 'uvicorn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_only_interfaces_import_the_ui() -> None:
    wrong = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(("ui/", "interfaces/")):
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            wrong += [f"{rel} imports {n}" for n in names if n == "loopwright.ui" or n.startswith("loopwright.ui.")]
    assert not wrong


# -- what the server answers ------------------------------------------------------------


def test_every_api_answer_is_marked_no_store_and_a_stream_is_not_buffered_by_a_proxy(registry: lw.ToolRegistry) -> None:
    with serving(app(lw.ScriptedPolicy([FINAL]), registry)) as base:
        started = httpx2.post(f"{base}/runs", json={"task": "say 5"})
        run_id = started.json()["run_id"]
        with httpx2.stream("GET", f"{base}/runs/{run_id}/events", timeout=30) as stream:
            read_stream(stream)
        answers = [started, httpx2.get(f"{base}/runs"), httpx2.get(f"{base}/runs/{run_id}"),
                   httpx2.get(f"{base}/runs/nope"), answer(base, run_id, "k", True),
                   httpx2.post(f"{base}/runs", json={"task": ""})]
        page = [httpx2.get(f"{base}{path}") for path in ("/", "/serve.js", "/serve.css")]
    assert [r.status_code for r in answers] == [201, 200, 200, 404, 409, 422]
    assert [r.headers["cache-control"] for r in answers] == ["no-store"] * 6
    assert (stream.headers["cache-control"], stream.headers["x-accel-buffering"]) == ("no-store", "no")
    assert started.json() == {"run_id": run_id, "thread_id": run_id, "events": f"/runs/{run_id}/events"}
    assert [(r.status_code, r.headers["content-type"], r.headers["cache-control"]) for r in page] == [
        (200, "text/html; charset=utf-8", "no-cache"), (200, "text/javascript; charset=utf-8", "no-cache"),
        (200, "text/css; charset=utf-8", "no-cache")]
    assert "function" in page[1].text and "{" in page[2].text


def test_an_approval_answer_echoes_the_decision_and_a_bare_one_gets_a_default_reason() -> None:
    ran: list[str] = []
    policy = lw.ScriptedPolicy([DELETE, DELETE, "Thought: done\nFinal Answer: deleted"])
    with serving(app(policy, _gated(ran), max_steps=4)) as base:
        run_id = start_run(base, "Delete notes.txt")
        replies: list[httpx2.Response] = []
        answers = iter([False, True])

        def on_event(e: dict[str, Any]) -> None:
            if e["type"] == "CUSTOM" and e["name"] == "approval_requested":
                replies.append(answer(base, run_id, e["value"]["key"], next(answers)))

        events = watch(base, run_id, on_event)
    keys = [asked["key"] for asked in custom(events, "approval_requested")]
    assert [r.json() for r in replies] == [{"key": keys[0], "approved": False, "reason": "denied in the web page"},
                                           {"key": keys[1], "approved": True, "reason": "approved"}]
    assert [r.headers["cache-control"] for r in replies] == ["no-store"] * 2
    assert [(d["approved"], d["reason"]) for d in custom(events, "approval_decided")] == [
        (False, "denied in the web page"), (True, "approved")]
    assert ran == ["notes.txt"]


def test_an_approval_takes_only_a_bool_and_an_optional_text_reason() -> None:
    ran: list[str] = []
    with serving(app(_by_task, _gated(ran), max_steps=4, approval_timeout_s=30)) as base:
        run_id = start_run(base, "delete it")
        [run] = _until(base, lambda runs: runs and runs[0]["state"] == "waiting", "waiting")
        url = f"{base}/runs/{run_id}/approvals/{run['approvals'][0]['key']}"
        bad = [httpx2.post(url, json=body) for body in ([True], {}, {"approved": 1}, {"approved": True, "reason": 5})]
        still = httpx2.get(f"{base}/runs/{run_id}").json()
        denied = httpx2.post(url, json={"approved": False, "reason": None})
        events = watch(base, run_id)
    assert [r.status_code for r in bad] == [422] * 4 and all("approved" in r.json()["error"] for r in bad)
    assert still["state"] == "waiting" and len(still["approvals"]) == 1 and ran == []
    assert denied.status_code == 200 and denied.json()["reason"] == "denied in the web page"
    assert events[-1]["result"]["answer"] == "5" and ran == []


def test_a_last_event_id_that_is_not_an_event_number_is_refused(registry: lw.ToolRegistry) -> None:
    with serving(app(lw.ScriptedPolicy([FINAL]), registry)) as base:
        run_id = start_run(base, "say 5")
        whole = watch(base, run_id)
        bad = [httpx2.get(f"{base}/runs/{run_id}/events", headers={"Last-Event-ID": value})
               for value in ("abc", "-1", "1" * 19, "2.0")]
        after_last = watch(base, run_id, last_event_id=len(whole) - 1)
        after_first = watch(base, run_id, last_event_id=0)
    assert [r.status_code for r in bad] == [400] * 4 and "Last-Event-ID" in bad[0].json()["error"]
    assert after_last == [] and after_first == whole[1:]


def test_a_task_must_be_non_empty_text_in_a_json_object(registry: lw.ToolRegistry) -> None:
    with serving(app(lw.ScriptedPolicy([FINAL]), registry)) as base:
        refused = [httpx2.post(f"{base}/runs", json=body) for body in (["say 5"], {"task": 5}, {}, {"task": "\n "})]
        deep = httpx2.post(f"{base}/runs", content=b"[" * 100_000, headers={"Content-Type": "application/json"})
        long_id = "x" * 300
        unknown = [httpx2.get(f"{base}/runs/{long_id}"), httpx2.post(f"{base}/runs/{long_id}/approvals/k",
                                                                      json={"approved": True})]
        listed = httpx2.get(f"{base}/runs").json()
    assert [r.status_code for r in refused] == [422] * 4 and all("task" in r.json()["error"] for r in refused)
    assert deep.status_code == 400 and deep.json() == {"error": "the body is not JSON"}
    assert [r.status_code for r in unknown] == [404, 404]
    assert all(r.json() == {"error": f"no run {'x' * 100!r}"} for r in unknown)  # the id is cut short
    assert listed == {"runs": []}


def test_a_failed_run_is_described_as_an_error_with_its_message(registry: lw.ToolRegistry) -> None:
    with serving(app(lw.ScriptedPolicy([RuntimeError("the model server is down")]), registry, max_steps=3)) as base:
        run_id = start_run(base, "What is 2 + 3?")
        events = watch(base, run_id)
        one = httpx2.get(f"{base}/runs/{run_id}").json()
    assert one["state"] == "error" and "the model server is down" in one["error"]
    assert one["error"] == events[-1]["message"] and one["answer"] is None and one["finished_at"] is not None


def test_the_agui_endpoint_runs_the_last_user_message_that_has_text(registry: lw.ToolRegistry) -> None:
    messages = [{"id": "m1", "role": "user", "content": "an earlier task"},
                {"id": "m2", "role": "assistant", "content": "done"},
                {"id": "m3", "role": "user", "content": "What is 2 + 3?"},
                {"id": "m4", "role": "user", "content": "  "},
                {"id": "m5", "role": "user", "content": [{"type": "text", "text": "parts are not read"}]},
                {"id": "m6", "role": "system", "content": "a system message is not the task"}]
    body = {"threadId": "thread-9", "runId": "run-9", "state": None, "tools": [], "context": [],
            "forwardedProps": None, "messages": messages}
    with serving(app(lw.ScriptedPolicy([FINAL]), registry)) as base:
        with httpx2.stream("POST", f"{base}/agui", json=body, timeout=30) as response:
            events = read_stream(response)
        not_input = httpx2.post(f"{base}/agui", json={"threadId": "t"})
        [run] = httpx2.get(f"{base}/runs").json()["runs"]
    assert events[-1]["result"]["answer"] == "5"
    assert (run["task"], run["thread_id"], run["state"]) == ("What is 2 + 3?", "thread-9", "finished")
    assert not_input.status_code == 422 and "not an AG-UI RunAgentInput" in not_input.json()["error"]


def test_app_refuses_limits_under_one_and_options_it_sets_itself(registry: lw.ToolRegistry) -> None:
    policy = lw.ScriptedPolicy([])
    for name in ("keep_runs", "keep_bytes", "max_runs"):
        with pytest.raises(ValueError, match=f"{name} must be at least 1, got 0"):
            app(policy, registry, **{name: 0})
        assert app(policy, registry, **{name: 1}).state.runs is not None
    with pytest.raises(ValueError, match="approval_timeout_s must be positive, got -1"):
        app(policy, registry, approval_timeout_s=-1)
    for name in ("task", "run_id"):
        with pytest.raises(TypeError, match=f"sets '{name}' itself"):
            app(policy, registry, **{name: "x"})
