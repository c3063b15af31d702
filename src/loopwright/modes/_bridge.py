"""The seam between a run's choke points and the event loop that drives it (the
implementation is modes/asyncrun.py; _core sees only this Protocol)."""

from __future__ import annotations

from typing import Any, Protocol

from loopwright.policy import Completion, ModelRequest, Policy
from loopwright.wire.tools import ToolRegistry, ToolResult


class RunCancelled(BaseException):
    """The awaiting task was cancelled: the run ends "interrupted". A BaseException, so
    the choke points' `except Exception` does not turn it into an observation."""


class Bridge(Protocol):
    """Where a run driven from an event loop sends its model and tool calls. Each raises
    RunCancelled once the run is cancelled."""

    def complete(self, policy: Policy, request: ModelRequest, timeout: float | None) -> Completion: ...
    def execute(self, registry: ToolRegistry, name: str, args: dict[str, Any], timeout: float | None) -> ToolResult: ...
    async def aexecute(self, registry: ToolRegistry, name: str, args: dict[str, Any], timeout: float | None) -> ToolResult: ...
