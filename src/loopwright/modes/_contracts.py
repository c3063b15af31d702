"""What the loops and their choke points agree on: the plug-in points a run sees (the
Journal a durable run writes through, the Bridge an async run calls through), the small
records the choke points hand back, and the internal signals that end a run."""

from __future__ import annotations

from typing import Any, Protocol

from loopwright.policy import Completion, ModelRequest, Policy
from loopwright.safety import ApprovalRequest, Decision
from loopwright.trace import Step, Trace, Usage
from loopwright.wire.tools import ToolRegistry, ToolResult


class StopRun(Exception):
    """Internal: the run must end now (denied, paused, unknown side-effect outcome).
    The step explaining why is already recorded."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Journal(Protocol):
    """Where a durable run writes every model call, tool call and step before using it,
    and where a resumed run finds them again (see loopwright.durable.store)."""

    def recorded_completion(self, n: int) -> tuple[Completion, Usage] | None: ...
    def record_completion(self, n: int, request: ModelRequest, completion: Completion, usage: Usage) -> None: ...
    def recorded_tool(self, key: str) -> tuple[str, ToolResult | None] | None: ...
    def record_tool_start(self, key: str, name: str, args: dict[str, Any]) -> None: ...
    def attempt(self, key: str) -> int: ...
    def record_tool_result(self, key: str, result: ToolResult) -> None: ...
    def recorded_decision(self, key: str) -> Decision | None: ...
    def record_decision(self, request: ApprovalRequest, decision: Decision) -> None: ...
    def record_pending(self, request: ApprovalRequest) -> None: ...
    def record_step(self, step: Step) -> None: ...
    def record_end(self, trace: Trace) -> None: ...


class Bridge(Protocol):
    """Where a run driven from an event loop sends its calls (modes/asyncrun.py)."""

    def complete(self, policy: Policy, request: ModelRequest, timeout: float | None) -> Completion: ...
    def execute(self, registry: ToolRegistry, name: str, args: dict[str, Any], timeout: float | None) -> ToolResult: ...
    async def aexecute(self, registry: ToolRegistry, name: str, args: dict[str, Any], timeout: float | None) -> ToolResult: ...


class Executed:
    """What the execution choke point did with one proposed call. (A plain slots class,
    not a frozen dataclass: one is built per tool call and never leaves the loop.)"""

    __slots__ = ("kind", "meta", "result")

    def __init__(self, result: ToolResult, kind: str = "action", meta: dict[str, Any] | None = None) -> None:
        self.result = result
        self.kind = kind  # or "denied"
        self.meta = meta


class ModelCall:
    """One answered model call: its text, the Completion (None when a plain policy
    returned a str), what it cost, and how long it took. Internal, one per call."""

    __slots__ = ("completion", "seconds", "text", "usage")

    def __init__(self, text: str, completion: Completion | None, usage: Usage, seconds: float) -> None:
        self.text = text
        self.completion = completion
        self.usage = usage
        self.seconds = seconds

    @property
    def retries(self) -> Any:
        """Transient errors the backend retried for this call (its `meta["retries"]`)."""
        return None if self.completion is None else self.completion.meta.get("retries")


class PolicyFailed(Exception):
    """Internal: the policy raised or timed out; `message` is what the trace records."""

    def __init__(self, message: str, reason: str = "error") -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
