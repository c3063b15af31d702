"""Events: what a run does, as it happens, for whoever watches it.

A run pushes typed events to the sinks it was started with (`lw.iter_events` and
`lw.aiter_events` make one; a CLI, a web page or a parent agent can pass its own): the
run started, the model's text as it is produced (`model_delta`), a tool started and
finished, each recorded Step, an approval asked, the run's end with its trace. A run
started with no sink builds no event at all: its context holds no Emitter, and the
drivers check that once per call.

A sink is any callable taking an Event. It may be called from another thread of the run
(a policy held to a wall clock, ReWOO's parallel workers, a tool on a worker thread), so
it must be thread-safe; it should be quick, since the run waits for it. A child run (an
agent called as a tool) pushes to its parent's sinks through `Emitter.child`, each event
tagged with the agent's name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

if TYPE_CHECKING:
    from loopwright.policy import Completion, ModelRequest
    from loopwright.safety import ApprovalRequest
    from loopwright.tools.results import ToolResult
    from loopwright.trace import Step, Trace, Usage

def _args(args: dict[str, Any]) -> Any:
    """Tool arguments made JSON-safe the way the trace makes them (`default=str`)."""
    return json.loads(json.dumps(args, default=str))


@dataclass(frozen=True, slots=True)
class RunStarted:
    """A run began. `run_id` is the journal's id, or a run-local one for an unjournaled run."""

    kind: ClassVar[Literal["run_started"]] = "run_started"
    run_id: str
    agent: str | None
    task: str
    mode: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "run_id": self.run_id, "agent": self.agent, "task": self.task, "mode": self.mode}


@dataclass(frozen=True, slots=True)
class ModelDelta:
    """Text the model just produced for the step numbered `step` (the index the Step
    recording this call gets). The deltas of one call, joined, are that Step's `raw`."""

    kind: ClassVar[Literal["model_delta"]] = "model_delta"
    run_id: str
    agent: str | None
    step: int
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "run_id": self.run_id, "agent": self.agent, "step": self.step, "text": self.text}


@dataclass(frozen=True, slots=True)
class ToolStarted:
    """A tool call began running (a replayed or denied call never runs: no event).
    `step` is the index of the next step to be recorded when it started (in ReAct, the
    step that records it); `call_key` names the call in the run (ReAct "3", ReWOO "E2")
    and matches it with its ToolFinished and, for ReWOO's parallel workers, its Step."""

    kind: ClassVar[Literal["tool_started"]] = "tool_started"
    run_id: str
    agent: str | None
    step: int
    tool: str
    args: dict[str, Any]
    call_key: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "run_id": self.run_id, "agent": self.agent, "step": self.step,
                "tool": self.tool, "args": _args(self.args), "call_key": self.call_key}


@dataclass(frozen=True, slots=True)
class ToolFinished:
    """A tool call ended: how long it ran and whether it failed (its ToolError's
    observation is in the Step that records it)."""

    kind: ClassVar[Literal["tool_finished"]] = "tool_finished"
    run_id: str
    agent: str | None
    step: int
    tool: str
    call_key: str
    seconds: float
    error: bool

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "run_id": self.run_id, "agent": self.agent, "step": self.step,
                "tool": self.tool, "call_key": self.call_key, "seconds": self.seconds, "error": self.error}


@dataclass(frozen=True, slots=True)
class StepEvent:
    """A Step was recorded (what `iter_run` yields)."""

    kind: ClassVar[Literal["step"]] = "step"
    run_id: str
    agent: str | None
    step: Step

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "run_id": self.run_id, "agent": self.agent, "step": self.step.to_dict()}


@dataclass(frozen=True, slots=True)
class RunFinished:
    """The run ended; `trace` is its final trace. Always the run's last event."""

    kind: ClassVar[Literal["run_finished"]] = "run_finished"
    run_id: str
    agent: str | None
    trace: Trace

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "run_id": self.run_id, "agent": self.agent, "trace": self.trace.to_dict()}


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    """The run asks its approver about a gated tool call (a UI can ask a person now);
    a decision already recorded in the journal is not asked again (no event)."""

    kind: ClassVar[Literal["approval_requested"]] = "approval_requested"
    run_id: str
    agent: str | None
    request: ApprovalRequest

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "run_id": self.run_id, "agent": self.agent, "request": self.request.to_dict()}


Event = RunStarted | ModelDelta | ToolStarted | ToolFinished | StepEvent | RunFinished | ApprovalRequested
"""Every event a run pushes; dispatch on `kind` or with isinstance."""


class EventSink(Protocol):
    """Where a run pushes its events: any callable taking an Event (thread-safe, quick)."""

    def __call__(self, event: Event, /) -> None: ...


class Emitter:
    """One run's events: builds each event with the run's id and agent name and pushes
    it to the sinks. It is also the run's last Observer (a Step recorded, the run's end).
    Only a run with sinks has one."""

    __slots__ = ("agent", "run_id", "sinks")

    def __init__(self, run_id: str, sinks: Sequence[EventSink], agent: str | None = None) -> None:
        self.run_id = run_id
        self.agent = agent
        self.sinks = tuple(sinks)

    def emit(self, event: Event) -> None:
        for sink in self.sinks:
            sink(event)

    def child(self, run_id: str, agent: str) -> Emitter:
        """The emitter of a child run: the same sinks, its events tagged with `agent`."""
        return Emitter(run_id, self.sinks, agent)

    def started(self, task: str, mode: str) -> None:
        self.emit(RunStarted(self.run_id, self.agent, task, mode))

    def delta(self, step: int, text: str) -> None:
        if text:
            self.emit(ModelDelta(self.run_id, self.agent, step, text))

    def tool_started(self, step: int, tool: str, args: dict[str, Any], call_key: str) -> None:
        self.emit(ToolStarted(self.run_id, self.agent, step, tool, args, call_key))

    def tool_finished(self, step: int, call_key: str, result: ToolResult) -> None:
        self.emit(ToolFinished(self.run_id, self.agent, step, result.name, call_key, result.duration_s,
                               result.error is not None))

    def approval(self, request: ApprovalRequest) -> None:
        self.emit(ApprovalRequested(self.run_id, self.agent, request))

    # -- the Observer side (runtime/observers.py) ----------------------------------------

    def model(self, n: int, request: ModelRequest, completion: Completion, usage: Usage, start: float) -> None:
        pass  # the text went out as deltas while it was produced

    def model_failed(self, purpose: str, message: str, seconds: float,
                     meta: Mapping[str, Any] | None = None) -> None:
        pass  # the error Step that records it follows

    def tool(self, key: str, result: ToolResult, kind: str) -> None:
        pass  # the driver says when a tool starts and finishes

    def step(self, step: Step) -> None:
        self.emit(StepEvent(self.run_id, self.agent, step))

    def end(self, trace: Trace) -> None:
        self.emit(RunFinished(self.run_id, self.agent, trace))


__all__ = [
    "ApprovalRequested",
    "Emitter",
    "Event",
    "EventSink",
    "ModelDelta",
    "RunFinished",
    "RunStarted",
    "StepEvent",
    "ToolFinished",
    "ToolStarted",
]
