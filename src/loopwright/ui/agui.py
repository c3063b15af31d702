"""Our run events as AG-UI protocol events: a pure, stateful translation (no I/O).

AG-UI wants a frame around what we stream: a step is STEP_STARTED ... STEP_FINISHED, the
model's text of a step is one assistant message (TEXT_MESSAGE_START, a CONTENT per delta,
END), a tool call is TOOL_CALL_START, ARGS (the arguments as JSON), END, then a
TOOL_CALL_RESULT. Our events carry the step index on every delta and tool start, and the
recorded Step closes the step, so `AGUIMapper` keeps what is open and closes it in order.
A tool step that ran no tool start (denied, nudged, replayed from a journal) still shows
as a call with its result. Approvals are CUSTOM events named `approval_requested` and
`approval_decided`. A child run (an agent used as a tool) is an AG-UI subagent: SUBAGENT_STARTED
(named for the agent) and SUBAGENT_FINISHED frame it, and its events carry its run id as
`subagentRunId` and the agent in `metadata`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.core.version import PROTOCOL_VERSION

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
from loopwright.trace import Step, Trace

APPROVAL_REQUESTED: Final = "approval_requested"
"""CUSTOM event name: a tool call waits for a person; `value` is the request's to_dict()."""
APPROVAL_DECIDED: Final = "approval_decided"
"""CUSTOM event name: the answer (`value`: key, approved, reason)."""


@dataclass
class _Open:
    """What one run (the top one or a child) has open on the AG-UI stream."""

    step: int | None = None
    step_name: str = ""
    message: str | None = None  # the open text message's id
    calls: dict[str, tuple[str, str]] = field(default_factory=dict)  # call key -> (tool, id), started
    tag: dict[str, Any] = field(default_factory=dict)  # a child run's: subagent_run_id and metadata.agent


class AGUIMapper:
    """Translate one run's events, in order, into AG-UI events. `thread_id` is AG-UI's
    conversation id (one per run here unless the client gave one); `run_id` the id
    RUN_STARTED and RUN_FINISHED carry when a client chose its own (our run's id is then in
    RUN_STARTED's metadata, `run_id`). `stream_approvals`: map the run's ApprovalRequested
    events; the app turns it off, since its approver announces each request itself
    (through `approval_requested`, with a key of its own) as it starts to wait."""

    def __init__(self, thread_id: str, *, run_id: str | None = None, stream_approvals: bool = True) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.stream_approvals = stream_approvals
        self._runs: dict[str, _Open] = {}
        self._messages = 0
        self.finished = False

    def map(self, event: Event) -> list[BaseEvent]:
        """The AG-UI events for one of ours (none for events AG-UI has no place for)."""
        run = self._runs.get(event.run_id)
        if run is None:
            tag = {"subagent_run_id": event.run_id, "metadata": {"agent": event.agent}} if event.agent else {}
            run = self._runs[event.run_id] = _Open(tag=tag)
        out: list[BaseEvent] = []
        if isinstance(event, RunStarted):
            if event.agent is None:
                out.append(RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id or event.run_id,
                                           protocol_version=PROTOCOL_VERSION,
                                           metadata={"task": event.task, "mode": event.mode, "run_id": event.run_id}))
            else:  # an agent called as a tool: its events carry its run id as subagentRunId
                out.append(SubagentStartedEvent(subagent_run_id=event.run_id, name=event.agent,
                                                metadata={"task": event.task, "mode": event.mode}))
        elif isinstance(event, ModelDelta):
            out += self._enter(run, event.run_id, event.step)
            if run.message is None:
                self._messages += 1  # a step's text cut by an approval goes on in a new message
                run.message = f"{event.run_id}:{event.step}:{self._messages}"
                out.append(TextMessageStartEvent(message_id=run.message, role="assistant", **run.tag))
            out.append(TextMessageContentEvent(message_id=run.message, delta=event.text, **run.tag))
        elif isinstance(event, ToolStarted):
            out += self._enter(run, event.run_id, event.step)
            out += self._end_message(run)
            call_id = f"{event.run_id}:{event.call_key}"
            run.calls[event.call_key] = (event.tool, call_id)
            out += _call(call_id, event.tool, event.args, run.tag)
        elif isinstance(event, ToolFinished):
            pass  # the result comes with the recorded step
        elif isinstance(event, StepEvent):
            out += self._step(run, event.run_id, event.step)
        elif isinstance(event, ApprovalRequested) and self.stream_approvals:
            out += self.approval_requested(event.request, agent=event.agent)
        elif isinstance(event, RunFinished):
            out += self._close(run)
            if event.agent is None:
                out += self.run_finished(event.trace)
            else:
                trace = event.trace
                out.append(SubagentFinishedEvent(subagent_run_id=event.run_id, result={
                    "answer": trace.final_answer, "stopped_reason": trace.stopped_reason}))
        return out

    def approval_requested(self, request: ApprovalRequest, agent: str | None = None,
                           key: str | None = None) -> list[BaseEvent]:
        """CUSTOM approval_requested (the text message open in the asking run ends first);
        `key`: the key to answer it by, in place of the request's own."""
        run = self._runs.get(request.run_id or "")
        out = [] if run is None else self._end_message(run)
        value = {**request.to_dict(), "agent": agent}
        if key is not None:
            value["key"] = key
        return [*out, CustomEvent(name=APPROVAL_REQUESTED, value=value)]

    @staticmethod
    def approval_decided(key: str, decision: Decision) -> list[BaseEvent]:
        return [CustomEvent(name=APPROVAL_DECIDED, value={"key": key, **decision.to_dict()})]

    def run_finished(self, trace: Trace) -> list[BaseEvent]:
        """Close everything open, then RUN_FINISHED (RUN_ERROR when the run stopped on an
        error: the model or the policy failed)."""
        out: list[BaseEvent] = []
        for run in self._runs.values():
            out += self._close(run)
        self.finished = True
        run_id = self.run_id or trace.run_id or ""
        if trace.stopped_reason == "error":
            why = next((s.error for s in reversed(trace.steps) if s.error), None) or "the run stopped on an error"
            return [*out, RunErrorEvent(message=why, code="error", usage=_usage(trace))]
        result = {"answer": trace.final_answer, "stopped_reason": trace.stopped_reason,
                  "llm_calls": trace.llm_calls, "tool_calls": trace.tool_calls}
        return [*out, RunFinishedEvent(thread_id=self.thread_id, run_id=run_id, result=result,
                                       usage=_usage(trace))]

    def fail(self, exc: BaseException) -> list[BaseEvent]:
        """The run raised instead of returning a trace (a bad option, a broken journal)."""
        out: list[BaseEvent] = []
        for run in self._runs.values():
            out += self._close(run)
        self.finished = True
        return [*out, RunErrorEvent(message=f"{type(exc).__name__}: {exc}", code=type(exc).__name__)]

    # -- keeping the frame -------------------------------------------------------------

    def _enter(self, run: _Open, run_id: str, step: int) -> list[BaseEvent]:
        if run.step == step:
            return []
        out = self._close(run)
        run.step, run.step_name = step, f"{run_id}:step {step}"
        out.append(StepStartedEvent(step_name=run.step_name, **run.tag))
        return out

    def _end_message(self, run: _Open) -> list[BaseEvent]:
        if run.message is None:
            return []
        message, run.message = run.message, None
        return [TextMessageEndEvent(message_id=message, **run.tag)]

    def _close(self, run: _Open) -> list[BaseEvent]:
        out = self._end_message(run)
        if run.step is not None:
            out.append(StepFinishedEvent(step_name=run.step_name, **run.tag))
            run.step = None
        return out

    def _step(self, run: _Open, run_id: str, step: Step) -> list[BaseEvent]:
        out = self._enter(run, run_id, step.index)
        out += self._end_message(run)
        if step.tool is not None:
            call_id = _started_call(run, step)
            if call_id is None:  # no tool ran (denied, nudged, replayed): show the call the step records
                call_id = f"{run_id}:{step.index}:{step.tool}"
                out += _call(call_id, step.tool, step.args or {}, run.tag)
            content = step.observation if step.observation is not None else (step.error or "")
            out.append(ToolCallResultEvent(message_id=f"{call_id}:result", tool_call_id=call_id,
                                           content=content, role="tool", **run.tag))
        out.append(CustomEvent(name="step", value=step.to_dict() | {"prompt": None}, **run.tag))
        out += self._close(run)
        return out


def _started_call(run: _Open, step: Step) -> str | None:
    """The started call this Step records: by its key (ReWOO's "E2", ReAct's step index),
    else the oldest unfinished call of the same tool."""
    keys = [k for k in (step.step_id, str(step.index)) if k in run.calls and run.calls[k][0] == step.tool]
    key = keys[0] if keys else next((k for k, (tool, _) in run.calls.items() if tool == step.tool), None)
    return None if key is None else run.calls.pop(key)[1]


def _call(call_id: str, tool: str, args: Mapping[str, Any], tag: dict[str, Any]) -> list[BaseEvent]:
    return [
        ToolCallStartEvent(tool_call_id=call_id, tool_call_name=tool, **tag),
        ToolCallArgsEvent(tool_call_id=call_id, delta=json.dumps(args, default=str), **tag),
        ToolCallEndEvent(tool_call_id=call_id, **tag),
    ]


def _usage(trace: Trace) -> list[TokenUsage]:
    u = trace.usage
    return [TokenUsage(input_tokens=u.prompt_tokens, output_tokens=u.completion_tokens,
                       total_tokens=u.prompt_tokens + u.completion_tokens)]


__all__ = ["APPROVAL_DECIDED", "APPROVAL_REQUESTED", "AGUIMapper"]
