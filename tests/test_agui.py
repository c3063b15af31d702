"""loopwright.ui.agui: our run events as AG-UI events, field by field, with no server (the
stream over HTTP is tests/test_ui.py)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ag_ui.core import BaseEvent
from ag_ui.core.version import PROTOCOL_VERSION

import loopwright as lw
from conftest import make_registry
from helpers.agui import EVENT, check_order
from loopwright.events import (
    ApprovalRequested,
    Event,
    ModelDelta,
    RunFinished,
    RunStarted,
    StepEvent,
    ToolFinished,
    ToolStarted,
)
from loopwright.safety import ApprovalRequest, Decision
from loopwright.trace import Step, Trace, Usage
from loopwright.ui import AGUIMapper
from loopwright.ui.agui import APPROVAL_DECIDED, APPROVAL_REQUESTED


def wire(events: list[BaseEvent]) -> list[dict[str, Any]]:
    """The events as a client reads them (camelCase JSON), each checked as a valid AG-UI event."""
    out = [json.loads(e.model_dump_json(by_alias=True, exclude_none=True)) for e in events]
    for e in out:
        EVENT.validate_python(e)
    return out


def mapped(mapper: AGUIMapper, ours: list[Event]) -> list[dict[str, Any]]:
    return wire([e for ev in ours for e in mapper.map(ev)])


def strip(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k != "timestamp"}


def test_a_react_run_maps_to_framed_steps_messages_and_calls_field_by_field() -> None:
    trace = Trace(task="add", mode="react", run_id="r", final_answer="5", stopped_reason="final",
                  usage=Usage(prompt_tokens=30, completion_tokens=12))
    act = Step(index=1, kind="action", raw="Act", tool="add", args={"x": 2}, observation="5", step_id="1")
    ours: list[Event] = [
        RunStarted("r", None, "add", "react"),
        ModelDelta("r", None, 1, "Ac"), ModelDelta("r", None, 1, "t"),
        ToolStarted("r", None, 1, "add", {"x": 2}, "1"), ToolFinished("r", None, 1, "add", "1", 0.1, False),
        StepEvent("r", None, act),
        ModelDelta("r", None, 2, "Final"),
        RunFinished("r", None, trace),
    ]
    mapper = AGUIMapper("th")
    assert mapper.finished is False
    out = [strip(e) for e in mapped(mapper, ours)]
    check_order(out)
    assert out[0]["type"] == "RUN_STARTED" and out[0]["threadId"] == "th" and out[0]["runId"] == "r"
    assert out[0]["protocolVersion"] == PROTOCOL_VERSION
    assert out[0]["metadata"] == {"task": "add", "mode": "react", "run_id": "r"}
    assert out[1:] == [
        {"type": "STEP_STARTED", "stepName": "r:step 1"},
        {"type": "TEXT_MESSAGE_START", "messageId": "r:1:1", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "r:1:1", "delta": "Ac"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "r:1:1", "delta": "t"},
        {"type": "TEXT_MESSAGE_END", "messageId": "r:1:1"},
        {"type": "TOOL_CALL_START", "toolCallId": "r:1", "toolCallName": "add"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "r:1", "delta": '{"x": 2}'},
        {"type": "TOOL_CALL_END", "toolCallId": "r:1"},
        {"type": "TOOL_CALL_RESULT", "messageId": "r:1:result", "toolCallId": "r:1", "content": "5",
         "role": "tool"},
        {"type": "CUSTOM", "name": "step", "value": act.to_dict() | {"prompt": None}},
        {"type": "STEP_FINISHED", "stepName": "r:step 1"},
        {"type": "STEP_STARTED", "stepName": "r:step 2"},
        {"type": "TEXT_MESSAGE_START", "messageId": "r:2:2", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "r:2:2", "delta": "Final"},
        {"type": "TEXT_MESSAGE_END", "messageId": "r:2:2"},
        {"type": "STEP_FINISHED", "stepName": "r:step 2"},
        {"type": "RUN_FINISHED", "threadId": "th", "runId": "r",
         "result": {"answer": "5", "stopped_reason": "final", "llm_calls": trace.llm_calls,
                    "tool_calls": trace.tool_calls},
         "usage": [{"inputTokens": 30, "outputTokens": 12, "totalTokens": 42}]},
    ]


def test_a_run_that_stopped_on_an_error_ends_with_run_error_and_the_last_steps_error() -> None:
    failed = Step(index=2, kind="error", raw="", error="the policy raised: boom")
    trace = Trace(task="t", mode="react", run_id="r", stopped_reason="error",
                  steps=[Step(index=1, kind="action", raw="x", error="earlier"), failed],
                  usage=Usage(prompt_tokens=5, completion_tokens=1))
    [end] = wire(AGUIMapper("th").run_finished(trace))
    assert strip(end) == {"type": "RUN_ERROR", "message": "the policy raised: boom", "code": "error",
                          "usage": [{"inputTokens": 5, "outputTokens": 1, "totalTokens": 6}]}
    bare = Trace(task="t", mode="react", run_id="r", stopped_reason="error")
    assert wire(AGUIMapper("th").run_finished(bare))[0]["message"] == "the run stopped on an error"
    unnamed = Trace(task="t", mode="react", run_id=None, stopped_reason="final")
    assert wire(AGUIMapper("th").run_finished(unnamed))[0]["runId"] == ""


def test_a_run_that_raised_closes_what_is_open_and_ends_with_the_exception() -> None:
    mapper = AGUIMapper("th")
    mapped(mapper, [RunStarted("r", None, "t", "react"), ModelDelta("r", None, 1, "Tho")])
    out = [strip(e) for e in wire(mapper.fail(ValueError("bad option x")))]
    assert out == [{"type": "TEXT_MESSAGE_END", "messageId": "r:1:1"}, {"type": "STEP_FINISHED", "stepName": "r:step 1"},
                   {"type": "RUN_ERROR", "message": "ValueError: bad option x", "code": "ValueError"}]
    assert mapper.finished


def test_finish_closes_an_open_step_and_message_first() -> None:
    mapper = AGUIMapper("th")
    mapped(mapper, [RunStarted("r", None, "t", "react"), ModelDelta("r", None, 3, "cut off")])
    trace = Trace(task="t", mode="react", run_id="r", stopped_reason="max_steps")
    out = [e["type"] for e in wire(mapper.run_finished(trace))]
    assert out == ["TEXT_MESSAGE_END", "STEP_FINISHED", "RUN_FINISHED"] and mapper.finished


def test_an_approval_asked_mid_message_ends_the_message_and_the_text_goes_on_in_a_new_one() -> None:
    mapper = AGUIMapper("th")
    request = ApprovalRequest("delete", {"name": "a", "at": datetime(2026, 1, 2)}, "k1", 1, "destructive",
                              "Delete a file.", "r")
    out = mapped(mapper, [RunStarted("r", None, "t", "react"), ModelDelta("r", None, 1, "Thought: "),
                          ApprovalRequested("r", "boss", request), ModelDelta("r", None, 1, "deleting")])
    assert [e["type"] for e in out] == ["RUN_STARTED", "STEP_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
                                        "TEXT_MESSAGE_END", "CUSTOM", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"]
    asked = out[5]
    assert asked["name"] == APPROVAL_REQUESTED == "approval_requested"
    assert asked["value"] == {**request.to_dict(), "agent": "boss"}
    assert asked["value"]["args"] == {"name": "a", "at": "2026-01-02 00:00:00"}
    assert out[2]["messageId"] != out[6]["messageId"]


def test_an_approval_of_a_run_not_seen_yet_is_just_the_custom_event() -> None:
    request = ApprovalRequest("delete", {"name": "a"}, "k1", 1, run_id=None)
    out = wire(AGUIMapper("th").approval_requested(request))
    assert [strip(e) for e in out] == [{"type": "CUSTOM", "name": "approval_requested",
                                        "value": {**request.to_dict(), "agent": None}}]


def test_a_decision_is_a_custom_event_with_the_key_and_the_answer() -> None:
    [decided] = wire(AGUIMapper.approval_decided("k1", Decision(False, "not today")))
    assert strip(decided) == {"type": "CUSTOM", "name": APPROVAL_DECIDED,
                              "value": {"key": "k1", "approved": False, "reason": "not today"}}
    assert APPROVAL_DECIDED == "approval_decided"


def test_a_recorded_step_closes_the_call_started_under_its_key_not_another_of_the_same_tool() -> None:
    mapper = AGUIMapper("th")
    ours: list[Event] = [RunStarted("r", None, "t", "rewoo"),
                         ToolStarted("r", None, 1, "add", {"x": 1}, "E1"),
                         ToolStarted("r", None, 1, "add", {"x": 2}, "E2")]
    mapped(mapper, ours)
    second = Step(index=1, kind="evidence", raw="", tool="add", args={"x": 2}, observation="2", step_id="E2")
    first = Step(index=2, kind="evidence", raw="", tool="add", args={"x": 1}, observation="1", step_id="E1")
    results = [e for e in mapped(mapper, [StepEvent("r", None, second), StepEvent("r", None, first)])
               if e["type"] == "TOOL_CALL_RESULT"]
    assert [(e["toolCallId"], e["content"]) for e in results] == [("r:E2", "2"), ("r:E1", "1")]


def test_a_step_closes_the_call_keyed_by_its_index_else_the_oldest_call_of_its_tool() -> None:
    mapper = AGUIMapper("th")
    mapped(mapper, [RunStarted("r", None, "t", "react"), ToolStarted("r", None, 4, "search", {"q": "a"}, "c1"),
                    ToolStarted("r", None, 4, "add", {"x": 1}, "c2"), ToolStarted("r", None, 4, "search", {"q": "b"}, "4"),
                    ToolStarted("r", None, 4, "search", {"q": "c"}, "c3")])
    closed = []
    for _ in range(3):
        step = Step(index=4, kind="action", raw="", tool="search", args={"q": "?"}, observation="A")
        closed += [e["toolCallId"] for e in mapped(mapper, [StepEvent("r", None, step)])
                   if e["type"] == "TOOL_CALL_RESULT"]
    assert closed == ["r:4", "r:c1", "r:c3"]


def test_a_denied_step_shows_its_call_with_the_error_as_the_result() -> None:
    denied = Step(index=1, kind="denied", raw="x", tool="delete", args=None, error="denied: not now")
    out = [strip(e) for e in mapped(AGUIMapper("th"), [RunStarted("r", None, "t", "react"),
                                                        StepEvent("r", None, denied)])]
    assert out[1:6] == [
        {"type": "STEP_STARTED", "stepName": "r:step 1"},
        {"type": "TOOL_CALL_START", "toolCallId": "r:1:delete", "toolCallName": "delete"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "r:1:delete", "delta": "{}"},
        {"type": "TOOL_CALL_END", "toolCallId": "r:1:delete"},
        {"type": "TOOL_CALL_RESULT", "messageId": "r:1:delete:result", "toolCallId": "r:1:delete",
         "content": "denied: not now", "role": "tool"},
    ]


def test_a_tool_step_with_neither_observation_nor_error_has_an_empty_result() -> None:
    bare = Step(index=1, kind="action", raw="x", tool="add", args={"x": 1})
    out = mapped(AGUIMapper("th"), [RunStarted("r", None, "t", "react"), StepEvent("r", None, bare)])
    [result] = [e for e in out if e["type"] == "TOOL_CALL_RESULT"]
    assert result["content"] == ""


def test_a_run_that_ends_while_a_child_is_mid_step_closes_both_frames() -> None:
    ours: list[Event] = [RunStarted("r", None, "t", "react"), ModelDelta("r", None, 1, "Thought: ask"),
                         RunStarted("c", "helper", "sub", "react"), ModelDelta("c", "helper", 1, "Thought: hm")]
    trace = Trace(task="t", mode="react", run_id="r", stopped_reason="max_steps")
    for end in (lambda m: m.run_finished(trace), lambda m: m.fail(RuntimeError("journal gone"))):
        mapper = AGUIMapper("th")
        mapped(mapper, ours)
        closing = [(e["type"], e.get("subagentRunId")) for e in wire(end(mapper))]
        assert closing[:-1] == [("TEXT_MESSAGE_END", None), ("STEP_FINISHED", None),
                                ("TEXT_MESSAGE_END", "c"), ("STEP_FINISHED", "c")]


def test_a_step_without_a_tool_has_no_call_and_its_text_is_not_repeated() -> None:
    final = Step(index=1, kind="final", raw="Final Answer: 5")
    out = [e["type"] for e in mapped(AGUIMapper("th"), [RunStarted("r", None, "t", "react"),
                                                        ModelDelta("r", None, 1, "Final Answer: 5"),
                                                        StepEvent("r", None, final)])]
    assert out == ["RUN_STARTED", "STEP_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
                   "CUSTOM", "STEP_FINISHED"]


def test_tool_arguments_json_cannot_hold_are_sent_as_text() -> None:
    out = mapped(AGUIMapper("th"), [RunStarted("r", None, "t", "react"),
                                    ToolStarted("r", None, 1, "remind", {"at": datetime(2026, 1, 2)}, "1")])
    [args] = [e for e in out if e["type"] == "TOOL_CALL_ARGS"]
    assert json.loads(args["delta"]) == {"at": "2026-01-02 00:00:00"}


def test_a_child_run_is_tagged_and_its_subagent_frame_names_task_mode_and_answer() -> None:
    mapper = AGUIMapper("th")
    child = Trace(task="sub", mode="rewoo", run_id="c", final_answer="42", stopped_reason="final")
    step = Step(index=1, kind="action", raw="", tool="add", args={"x": 1}, observation="2")
    out = [strip(e) for e in mapped(mapper, [RunStarted("r", None, "t", "react"), RunStarted("c", "helper", "sub", "rewoo"),
                                             ToolStarted("c", "helper", 1, "add", {"x": 1}, "1"),
                                             StepEvent("c", "helper", step), RunFinished("c", "helper", child)])]
    tag = {"subagentRunId": "c", "metadata": {"agent": "helper"}}
    assert out[1] == {"type": "SUBAGENT_STARTED", "subagentRunId": "c", "name": "helper",
                      "metadata": {"task": "sub", "mode": "rewoo"}}
    assert out[2] == {"type": "STEP_STARTED", "stepName": "c:step 1", **tag}
    assert out[3] == {"type": "TOOL_CALL_START", "toolCallId": "c:1", "toolCallName": "add", **tag}
    assert all(e.items() >= tag.items() for e in out[2:-1])
    assert out[-1] == {"type": "SUBAGENT_FINISHED", "subagentRunId": "c",
                       "result": {"answer": "42", "stopped_reason": "final"}}
    assert not mapper.finished


def test_a_real_run_through_the_mapper_is_a_valid_stream() -> None:
    script = lw.ScriptedPolicy([('Thought: add\nAction: add\nAction Input: {"x": 2, "y": 3}',),
                                ("Thought: done\nFinal Answer: 5",)])
    mapper = AGUIMapper("th")
    out = mapped(mapper, list(lw.iter_events("q", script, make_registry())))
    check_order(out)
    assert out[-1]["type"] == "RUN_FINISHED" and out[-1]["result"]["answer"] == "5"
    assert [e["type"] for e in out].count("TOOL_CALL_RESULT") == 1
