"""loopwright: a bounded, debuggable agent runtime.

An agent is a state machine driven by an untrusted oracle (the model); loopwright is
the machine: the loops, their guards, the parse boundary, the typed tool wire, memory
and the record of every step.
"""

from __future__ import annotations

import importlib
from typing import Any

from loopwright.batch import PolicyFactory, arun_many, policy_factory, run_many
from loopwright.durable.fork import fork
from loopwright.durable.postgres import PostgresStore
from loopwright.durable.resume import resume
from loopwright.durable.sqlite import SQLiteStore
from loopwright.errors import (
    ExamplesError,
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
    TransientModelError,
    UntypedParameterWarning,
)
from loopwright.events import (
    ApprovalRequested,
    Event,
    EventSink,
    ModelDelta,
    RunFinished,
    RunStarted,
    StepEvent,
    ToolFinished,
    ToolStarted,
)
from loopwright.guards import Limits
from loopwright.parsing import (
    Action,
    FinalAnswer,
    PlanStep,
    parse_plan,
    parse_react_step,
    parse_tool_calls,
    substitute,
)
from loopwright.policy import Completion, Model, ModelRequest, Policy, ScriptedPolicy, ToolCall
from loopwright.prompting.templates import PromptSet
from loopwright.runtime import (
    AsyncEvents,
    AsyncRun,
    Events,
    Run,
    RunSpec,
    aiter_events,
    aiter_run,
    arun,
    arun_spec,
    iter_events,
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
    run_spec,
    run_tot,
)
from loopwright.runtime.agents import Agent
from loopwright.runtime.calls import CallInfo, current_call
from loopwright.runtime.guardrails import (
    Guardrail,
    Verdict,
    allow,
    block,
    input_guardrail,
    model_guardrail,
    output_guardrail,
    replace,
    revise,
    tool_guardrail,
)
from loopwright.runtime.retry import Retry
from loopwright.runtime.spec import (
    PlanExecuteSettings,
    ReActSettings,
    ReflexionSettings,
    ResumeOptions,
    RunOptions,
    ToTSettings,
)
from loopwright.safety import ApprovalPending, ApprovalRequest, Decision
from loopwright.tools import (
    Tool,
    ToolError,
    ToolExample,
    ToolRegistry,
    ToolResult,
    tool,
)
from loopwright.tools.examples import CallExample, RunExample
from loopwright.trace import STOP_REASONS, Step, Trace, Usage

__version__ = "0.1.0"

_LAZY = {"models", "memory", "mcp", "otel", "pricing", "ui", "a2a"}


def __getattr__(name: str) -> Any:
    # Submodules with heavy optional dependencies load on first use, not on import.
    if name in _LAZY:
        return importlib.import_module(f"loopwright.{name}")
    if name == "A2AAgent":  # needs the a2a extra (a2a-sdk)
        from loopwright.a2a.client import A2AAgent

        return A2AAgent
    if name == "RayExecutor":  # Ray itself is imported only when a batch runs on it
        from loopwright.batch.ray_executor import RayExecutor

        return RayExecutor
    if name in ("evaluate", "EvalReport"):
        from loopwright.batch import evaluation

        return getattr(evaluation, name)
    if name in ("bootstrap_examples", "BootstrapResult"):
        from loopwright.batch import bootstrap

        return getattr(bootstrap, name)
    if name == "Session":  # imports memory (numpy)
        from loopwright.runtime.session import Session

        return Session
    raise AttributeError(f"module 'loopwright' has no attribute {name!r}")


__all__ = [
    "A2AAgent",
    "Guardrail",
    "Retry",
    "TransientModelError",
    "Verdict",
    "allow",
    "block",
    "input_guardrail",
    "model_guardrail",
    "output_guardrail",
    "replace",
    "revise",
    "tool_guardrail",
    "Agent",
    "STOP_REASONS",
    "Action",
    "ApprovalPending",
    "ApprovalRequest",
    "ApprovalRequested",
    "CallInfo",
    "AsyncEvents",
    "AsyncRun",
    "BootstrapResult",
    "Completion",
    "Decision",
    "EvalReport",
    "Event",
    "EventSink",
    "Events",
    "CallExample",
    "ExamplesError",
    "FinalAnswer",
    "Limits",
    "LoopwrightError",
    "Model",
    "ModelDelta",
    "ModelError",
    "ModelNotFoundError",
    "ModelRequest",
    "ParseError",
    "PlanStep",
    "Policy",
    "PostgresStore",
    "PolicyFactory",
    "PromptSet",
    "RayExecutor",
    "ReplayMissError",
    "Run",
    "RunFinished",
    "RunInterrupted",
    "RunStarted",
    "RunSpec",
    "RunOptions",
    "ResumeOptions",
    "ReActSettings",
    "ReflexionSettings",
    "PlanExecuteSettings",
    "ToTSettings",
    "SQLiteStore",
    "Session",
    "ScriptExhaustedError",
    "ScriptedPolicy",
    "Step",
    "StepEvent",
    "StoreError",
    "Tool",
    "ToolCall",
    "ToolDefinitionError",
    "ToolSetChangedError",
    "ToolError",
    "ToolFinished",
    "ToolStarted",
    "RunExample",
    "ToolExample",
    "ToolRegistry",
    "ToolResult",
    "Trace",
    "UntypedParameterWarning",
    "Usage",
    "current_call",
    "fork",
    "aiter_events",
    "aiter_run",
    "arun",
    "arun_spec",
    "arun_many",
    "bootstrap_examples",
    "evaluate",
    "iter_events",
    "iter_plan_execute",
    "iter_react",
    "iter_reflexion",
    "iter_rewoo",
    "iter_run",
    "iter_tot",
    "parse_plan",
    "parse_react_step",
    "parse_tool_calls",
    "policy_factory",
    "resume",
    "run",
    "run_many",
    "run_plan_execute",
    "run_react",
    "run_reflexion",
    "run_rewoo",
    "run_spec",
    "run_tot",
    "substitute",
    "tool",
]
