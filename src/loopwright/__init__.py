"""loopwright: a bounded, debuggable agent runtime.

An agent is a state machine driven by an untrusted oracle (the model); loopwright is
the machine: the loops, their guards, the parse boundary, the typed tool wire, memory
and the record of every step.
"""

from __future__ import annotations

import importlib
from typing import Any

from loopwright import _moved
from loopwright.calls import CallInfo, current_call
from loopwright.durable.fork import fork
from loopwright.durable.postgres import PostgresStore
from loopwright.durable.resume import resume
from loopwright.durable.store import SQLiteStore
from loopwright.errors import (
    LoopwrightError,
    ModelError,
    ModelNotFoundError,
    ParseError,
    ReplayMissError,
    RunInterrupted,
    ScriptExhaustedError,
    StoreError,
    ToolDefinitionError,
    ToolSetChangedError,
)
from loopwright.guards import Limits
from loopwright.modes import (
    Run,
    iter_plan_execute,
    iter_react,
    iter_reflexion,
    iter_rewoo,
    iter_run,
    iter_tot,
    run,
    run_plan_execute,
    run_react,
    run_reflexion,
    run_rewoo,
    run_tot,
)
from loopwright.policy import Completion, Model, ModelRequest, Policy, ScriptedPolicy, ToolCall
from loopwright.prompts import PromptSet
from loopwright.trace import STOP_REASONS, Step, Trace, Usage
from loopwright.wire.parsing import (
    Action,
    FinalAnswer,
    PlanStep,
    parse_plan,
    parse_react_step,
    parse_tool_calls,
    substitute,
)
from loopwright.wire.tools import Tool, ToolError, ToolRegistry, ToolResult, tool

__version__ = "0.1.0"

_moved.install(globals())  # old module paths (loopwright.tools, loopwright.cli, ...) keep working

_LAZY = {"models", "memory", "mcp", "otel", "pricing"}


def __getattr__(name: str) -> Any:
    # Submodules with heavy optional dependencies load on first use, not on import.
    if name in _LAZY:
        return importlib.import_module(f"loopwright.{name}")
    if name == "Session":  # imports memory (numpy)
        from loopwright.session import Session

        return Session
    raise AttributeError(f"module 'loopwright' has no attribute {name!r}")


__all__ = [
    "STOP_REASONS",
    "Action",
    "CallInfo",
    "Completion",
    "FinalAnswer",
    "Limits",
    "LoopwrightError",
    "Model",
    "ModelError",
    "ModelNotFoundError",
    "ModelRequest",
    "ParseError",
    "PlanStep",
    "Policy",
    "PostgresStore",
    "PromptSet",
    "ReplayMissError",
    "Run",
    "RunInterrupted",
    "SQLiteStore",
    "Session",
    "ScriptExhaustedError",
    "ScriptedPolicy",
    "Step",
    "StoreError",
    "Tool",
    "ToolCall",
    "ToolDefinitionError",
    "ToolSetChangedError",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "Trace",
    "Usage",
    "current_call",
    "fork",
    "iter_plan_execute",
    "iter_react",
    "iter_reflexion",
    "iter_rewoo",
    "iter_run",
    "iter_tot",
    "parse_plan",
    "parse_react_step",
    "parse_tool_calls",
    "resume",
    "run",
    "run_plan_execute",
    "run_react",
    "run_reflexion",
    "run_rewoo",
    "run_tot",
    "substitute",
    "tool",
]
