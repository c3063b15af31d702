"""The front door: `run`, `iter_run`, `arun`, `aiter_run`, `iter_events`, `aiter_events`, the
per-mode `run_*` / `iter_*`, and `run_spec` / `arun_spec` for a run described by a RunSpec already.

Each takes typed keywords (the limits, same names in every mode; Reflexion's and
Tree-of-Thoughts' own settings; the run options), makes the RunSpec a run starts from,
and starts it through `start`, the one private entry (resume and fork use it too, with
the journal they continue). Limits: max_steps, token_budget, timeout_s, max_tokens,
max_replans, on_parse_error, on_repeat, max_nudges, dialect, on_tool_error. Options: tools
(the names this run may use), approver, on_deny, prompts, memory, context_tokens,
output_type, store (a durable journal), run_id, journal_meta (JSON saved with a journaled
run's config under "meta"), tracer, cost_budget_usd, prices, tool_search (K tools a step, "auto" or
"off": see modes/toolsearch.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from loopwright.events import EventSink
from loopwright.guards import OnParseError, OnRepeat
from loopwright.modes import plan_execute, react, reflexion, rewoo, tot
from loopwright.modes.adriver import AsyncRun
from loopwright.modes.context import RunContext, open_context
from loopwright.modes.driver import Run
from loopwright.modes.machine import Journal, StepGen
from loopwright.modes.spec import (
    Dialect,
    Evaluator,
    OnDeny,
    OnToolError,
    PriceSpec,
    RunSpec,
    RunStore,
    Search,
    ToolSearchOption,
)
from loopwright.modes.watch import AsyncEvents, Events
from loopwright.policy import Policy
from loopwright.prompts import PromptSet
from loopwright.safety import Approver
from loopwright.tools.toolset import Scope, Tools, as_registry
from loopwright.trace import Trace

if TYPE_CHECKING:
    from loopwright.memory.embedders import Embedder
    from loopwright.memory.tiered import Memory

MODES: Final[dict[str, tuple[Callable[[RunSpec], None], Callable[[RunContext, RunSpec], StepGen]]]] = {
    "react": (react.check, react.machine),
    "rewoo": (rewoo.check, rewoo.machine),
    "plan_execute": (plan_execute.check, plan_execute.machine),
    "reflexion": (reflexion.check, reflexion.machine),
    "tot": (tot.check, tot.machine),
}
"""Each mode's settings check and its machine."""


def start(spec: RunSpec, policy: Policy, registry: Tools, *, journal: Journal | None = None,
          rerun_unfinished: bool = False, sinks: Sequence[EventSink] = (), agent: str | None = None) -> Run:
    """Start the run `spec` describes: its settings checked, its context opened (and
    journaled with a store), its machine made. `journal`: the one resume or fork continue;
    `sinks`: where its events go (`agent` tags them: a child run's agent name).
    `registry`: a ToolRegistry, or a list of Tools and functions made into one."""
    registry = as_registry(registry)
    check, machine = MODES[spec.mode]
    check(spec)
    ctx = open_context(spec, policy, registry, journal, rerun_unfinished, sinks, agent)
    return Run(ctx, machine(ctx, spec))


def run_spec(spec: RunSpec, policy: Policy, registry: Tools) -> Trace:
    """Run what a RunSpec describes to the end and return its Trace: `lw.run` with its
    keywords given as one value, e.g. a spec kept, sent elsewhere or varied with
    `spec.replace(...)`. With `spec.store` the run is journaled, as `lw.run` does."""
    return start(spec, policy, registry).run()


async def arun_spec(spec: RunSpec, policy: Policy, registry: Tools) -> Trace:
    """`run_spec` on the running event loop (as `lw.arun`)."""
    return await AsyncRun(start(spec, policy, registry)).run()


def _spec(task: str, mode: str, given: dict[str, Any]) -> RunSpec:
    """The spec from a front door's keywords (its `locals()`, read first thing): its
    parameters but the policy and registry are the spec's own fields (test_layout holds
    every front door to that), and a keyword left at None is the spec's default already."""
    del given["policy"], given["registry"]
    given = {name: value for name, value in given.items() if value is not None}  # few: cheap to pass
    given["task"], given["mode"] = task, mode
    return RunSpec(**given)


def iter_run(
    task: str, policy: Policy, registry: Tools, mode: str = "react", *,
    max_steps: int | None = None, token_budget: int | None = None, timeout_s: float | None = None,
    max_tokens: int | None = None, max_replans: int | None = None, on_parse_error: OnParseError | None = None,
    on_repeat: OnRepeat | None = None, max_nudges: int | None = None, dialect: Dialect | None = None,
    on_tool_error: OnToolError | None = None, max_reflections: int | None = None,
    attempt_steps: int | None = None, evaluator: Evaluator | bool | None = None, search: Search | None = None,
    branching: int | None = None, breadth: int | None = None, depth: int | None = None,
    max_nodes: int | None = None, threshold: float | None = None, allow_side_effects: bool | None = None,
    tools: Scope | None = None, approver: Approver | None = None, on_deny: OnDeny = "observe",
    prompts: PromptSet | None = None, memory: Memory | None = None, context_tokens: int | None = None,
    output_type: Any = None, store: RunStore | None = None, run_id: str | None = None,
    journal_meta: Mapping[str, Any] | None = None, tracer: Any = None, cost_budget_usd: float | None = None,
    prices: PriceSpec | None = None,
    tool_search: ToolSearchOption | None = None, tool_embedder: Embedder | None = None,
) -> Run:
    """Start a run in the given mode; iterate it for its Steps, read `.trace` any time."""
    return start(_spec(task, mode, locals()), policy, registry)

def run(
    task: str, policy: Policy, registry: Tools, mode: str = "react", *,
    max_steps: int | None = None, token_budget: int | None = None, timeout_s: float | None = None,
    max_tokens: int | None = None, max_replans: int | None = None, on_parse_error: OnParseError | None = None,
    on_repeat: OnRepeat | None = None, max_nudges: int | None = None, dialect: Dialect | None = None,
    on_tool_error: OnToolError | None = None, max_reflections: int | None = None,
    attempt_steps: int | None = None, evaluator: Evaluator | bool | None = None, search: Search | None = None,
    branching: int | None = None, breadth: int | None = None, depth: int | None = None,
    max_nodes: int | None = None, threshold: float | None = None, allow_side_effects: bool | None = None,
    tools: Scope | None = None, approver: Approver | None = None, on_deny: OnDeny = "observe",
    prompts: PromptSet | None = None, memory: Memory | None = None, context_tokens: int | None = None,
    output_type: Any = None, store: RunStore | None = None, run_id: str | None = None,
    journal_meta: Mapping[str, Any] | None = None, tracer: Any = None, cost_budget_usd: float | None = None,
    prices: PriceSpec | None = None,
    tool_search: ToolSearchOption | None = None, tool_embedder: Embedder | None = None,
) -> Trace:
    """Run a task to the end in one of the modes (MODES) and return its Trace. A run always
    terminates and returns a (possibly partial) trace."""
    return start(_spec(task, mode, locals()), policy, registry).run()

def aiter_run(
    task: str, policy: Policy, registry: Tools, mode: str = "react", *,
    max_steps: int | None = None, token_budget: int | None = None, timeout_s: float | None = None,
    max_tokens: int | None = None, max_replans: int | None = None, on_parse_error: OnParseError | None = None,
    on_repeat: OnRepeat | None = None, max_nudges: int | None = None, dialect: Dialect | None = None,
    on_tool_error: OnToolError | None = None, max_reflections: int | None = None,
    attempt_steps: int | None = None, evaluator: Evaluator | bool | None = None, search: Search | None = None,
    branching: int | None = None, breadth: int | None = None, depth: int | None = None,
    max_nodes: int | None = None, threshold: float | None = None, allow_side_effects: bool | None = None,
    tools: Scope | None = None, approver: Approver | None = None, on_deny: OnDeny = "observe",
    prompts: PromptSet | None = None, memory: Memory | None = None, context_tokens: int | None = None,
    output_type: Any = None, store: RunStore | None = None, run_id: str | None = None,
    journal_meta: Mapping[str, Any] | None = None, tracer: Any = None, cost_budget_usd: float | None = None,
    prices: PriceSpec | None = None,
    tool_search: ToolSearchOption | None = None, tool_embedder: Embedder | None = None,
) -> AsyncRun:
    """Start a run to drive from an event loop: `async for step in aiter_run(...)`, or
    `await aiter_run(...).run()`. Same arguments as `run`."""
    return AsyncRun(start(_spec(task, mode, locals()), policy, registry))

async def arun(
    task: str, policy: Policy, registry: Tools, mode: str = "react", *,
    max_steps: int | None = None, token_budget: int | None = None, timeout_s: float | None = None,
    max_tokens: int | None = None, max_replans: int | None = None, on_parse_error: OnParseError | None = None,
    on_repeat: OnRepeat | None = None, max_nudges: int | None = None, dialect: Dialect | None = None,
    on_tool_error: OnToolError | None = None, max_reflections: int | None = None,
    attempt_steps: int | None = None, evaluator: Evaluator | bool | None = None, search: Search | None = None,
    branching: int | None = None, breadth: int | None = None, depth: int | None = None,
    max_nodes: int | None = None, threshold: float | None = None, allow_side_effects: bool | None = None,
    tools: Scope | None = None, approver: Approver | None = None, on_deny: OnDeny = "observe",
    prompts: PromptSet | None = None, memory: Memory | None = None, context_tokens: int | None = None,
    output_type: Any = None, store: RunStore | None = None, run_id: str | None = None,
    journal_meta: Mapping[str, Any] | None = None, tracer: Any = None, cost_budget_usd: float | None = None,
    prices: PriceSpec | None = None,
    tool_search: ToolSearchOption | None = None, tool_embedder: Embedder | None = None,
) -> Trace:
    """`run`, awaited on this event loop: async policies and tools are awaited here, sync
    ones run in threads, so the loop is never blocked. Same arguments and trace as `run`;
    cancelling the awaiting task ends the run "interrupted" (see modes/adriver.py)."""
    return await AsyncRun(start(_spec(task, mode, locals()), policy, registry)).run()

def iter_events(
    task: str, policy: Policy, registry: Tools, mode: str = "react", *,
    max_steps: int | None = None, token_budget: int | None = None, timeout_s: float | None = None,
    max_tokens: int | None = None, max_replans: int | None = None, on_parse_error: OnParseError | None = None,
    on_repeat: OnRepeat | None = None, max_nudges: int | None = None, dialect: Dialect | None = None,
    on_tool_error: OnToolError | None = None, max_reflections: int | None = None,
    attempt_steps: int | None = None, evaluator: Evaluator | bool | None = None, search: Search | None = None,
    branching: int | None = None, breadth: int | None = None, depth: int | None = None,
    max_nodes: int | None = None, threshold: float | None = None, allow_side_effects: bool | None = None,
    tools: Scope | None = None, approver: Approver | None = None, on_deny: OnDeny = "observe",
    prompts: PromptSet | None = None, memory: Memory | None = None, context_tokens: int | None = None,
    output_type: Any = None, store: RunStore | None = None, run_id: str | None = None,
    journal_meta: Mapping[str, Any] | None = None, tracer: Any = None, cost_budget_usd: float | None = None,
    prices: PriceSpec | None = None,
    tool_search: ToolSearchOption | None = None, tool_embedder: Embedder | None = None,
) -> Events:
    """Start a run and watch it: iterate the result for its events as they happen
    (run_started, model_delta, tool_started, tool_finished, step, approval_requested,
    run_finished; see loopwright.events). The policy streams its text when it can. The
    run goes on a thread of its own; `.close()` ends it "interrupted". Same arguments as `run`."""
    spec = _spec(task, mode, locals())
    return Events(partial(_watched, spec, policy, registry))

def aiter_events(
    task: str, policy: Policy, registry: Tools, mode: str = "react", *,
    max_steps: int | None = None, token_budget: int | None = None, timeout_s: float | None = None,
    max_tokens: int | None = None, max_replans: int | None = None, on_parse_error: OnParseError | None = None,
    on_repeat: OnRepeat | None = None, max_nudges: int | None = None, dialect: Dialect | None = None,
    on_tool_error: OnToolError | None = None, max_reflections: int | None = None,
    attempt_steps: int | None = None, evaluator: Evaluator | bool | None = None, search: Search | None = None,
    branching: int | None = None, breadth: int | None = None, depth: int | None = None,
    max_nodes: int | None = None, threshold: float | None = None, allow_side_effects: bool | None = None,
    tools: Scope | None = None, approver: Approver | None = None, on_deny: OnDeny = "observe",
    prompts: PromptSet | None = None, memory: Memory | None = None, context_tokens: int | None = None,
    output_type: Any = None, store: RunStore | None = None, run_id: str | None = None,
    journal_meta: Mapping[str, Any] | None = None, tracer: Any = None, cost_budget_usd: float | None = None,
    prices: PriceSpec | None = None,
    tool_search: ToolSearchOption | None = None, tool_embedder: Embedder | None = None,
) -> AsyncEvents:
    """`iter_events` on an event loop: `async for ev in aiter_events(...)`; the run is a task
    on this loop, `await .aclose()` cancels it. Same arguments as `run`."""
    spec = _spec(task, mode, locals())
    return AsyncEvents(partial(_watched, spec, policy, registry))


def _watched(spec: RunSpec, policy: Policy, registry: Tools, sinks: Sequence[EventSink]) -> Run:
    return start(spec, policy, registry, sinks=sinks)


def iter_react(
    task: str, policy: Policy, registry: Tools, *,
    max_steps: int | None = None, token_budget: int | None = None, timeout_s: float | None = None,
    max_tokens: int | None = None, max_replans: int | None = None, on_parse_error: OnParseError | None = None,
    on_repeat: OnRepeat | None = None, max_nudges: int | None = None, dialect: Dialect | None = None,
    on_tool_error: OnToolError | None = None, tools: Scope | None = None,
    approver: Approver | None = None, on_deny: OnDeny = "observe", prompts: PromptSet | None = None,
    memory: Memory | None = None, context_tokens: int | None = None, output_type: Any = None,
    store: RunStore | None = None, run_id: str | None = None, journal_meta: Mapping[str, Any] | None = None,
    tracer: Any = None, cost_budget_usd: float | None = None, prices: PriceSpec | None = None,
    tool_search: ToolSearchOption | None = None, tool_embedder: Embedder | None = None,
) -> Run:
    """Start a ReAct run; iterate the result to get each Step as it happens."""
    return start(_spec(task, "react", locals()), policy, registry)


def run_react(
    task: str, policy: Policy, registry: Tools, *,
    max_steps: int | None = None, token_budget: int | None = None, timeout_s: float | None = None,
    max_tokens: int | None = None, max_replans: int | None = None, on_parse_error: OnParseError | None = None,
    on_repeat: OnRepeat | None = None, max_nudges: int | None = None, dialect: Dialect | None = None,
    on_tool_error: OnToolError | None = None, tools: Scope | None = None,
    approver: Approver | None = None, on_deny: OnDeny = "observe", prompts: PromptSet | None = None,
    memory: Memory | None = None, context_tokens: int | None = None, output_type: Any = None,
    store: RunStore | None = None, run_id: str | None = None, journal_meta: Mapping[str, Any] | None = None,
    tracer: Any = None, cost_budget_usd: float | None = None, prices: PriceSpec | None = None,
    tool_search: ToolSearchOption | None = None, tool_embedder: Embedder | None = None,
) -> Trace:
    """Run ReAct to the end and return its Trace."""
    return start(_spec(task, "react", locals()), policy, registry).run()

def iter_rewoo(
    task: str, policy: Policy, registry: Tools, *,
    max_steps: int | None = None, token_budget: int | None = None, timeout_s: float | None = None,
    max_tokens: int | None = None, max_replans: int | None = None, on_parse_error: OnParseError | None = None,
    on_repeat: OnRepeat | None = None, max_nudges: int | None = None, dialect: Dialect | None = None,
    on_tool_error: OnToolError | None = None, tools: Scope | None = None,
    approver: Approver | None = None, on_deny: OnDeny = "observe", prompts: PromptSet | None = None,
    memory: Memory | None = None, context_tokens: int | None = None, output_type: Any = None,
    store: RunStore | None = None, run_id: str | None = None, journal_meta: Mapping[str, Any] | None = None,
    tracer: Any = None, cost_budget_usd: float | None = None, prices: PriceSpec | None = None,
    tool_search: ToolSearchOption | None = None, tool_embedder: Embedder | None = None,
) -> Run:
    """Start a ReWOO run; iterate the result to get each Step as it happens."""
    return start(_spec(task, "rewoo", locals()), policy, registry)


def run_rewoo(
    task: str, policy: Policy, registry: Tools, *,
    max_steps: int | None = None, token_budget: int | None = None, timeout_s: float | None = None,
    max_tokens: int | None = None, max_replans: int | None = None, on_parse_error: OnParseError | None = None,
    on_repeat: OnRepeat | None = None, max_nudges: int | None = None, dialect: Dialect | None = None,
    on_tool_error: OnToolError | None = None, tools: Scope | None = None,
    approver: Approver | None = None, on_deny: OnDeny = "observe", prompts: PromptSet | None = None,
    memory: Memory | None = None, context_tokens: int | None = None, output_type: Any = None,
    store: RunStore | None = None, run_id: str | None = None, journal_meta: Mapping[str, Any] | None = None,
    tracer: Any = None, cost_budget_usd: float | None = None, prices: PriceSpec | None = None,
    tool_search: ToolSearchOption | None = None, tool_embedder: Embedder | None = None,
) -> Trace:
    """Run ReWOO to the end and return its Trace."""
    return start(_spec(task, "rewoo", locals()), policy, registry).run()

def iter_plan_execute(
    task: str, policy: Policy, registry: Tools, *,
    max_steps: int | None = None, token_budget: int | None = None, timeout_s: float | None = None,
    max_tokens: int | None = None, max_replans: int | None = None, on_parse_error: OnParseError | None = None,
    on_repeat: OnRepeat | None = None, max_nudges: int | None = None, dialect: Dialect | None = None,
    on_tool_error: OnToolError | None = None, tools: Scope | None = None,
    approver: Approver | None = None, on_deny: OnDeny = "observe", prompts: PromptSet | None = None,
    memory: Memory | None = None, context_tokens: int | None = None, output_type: Any = None,
    store: RunStore | None = None, run_id: str | None = None, journal_meta: Mapping[str, Any] | None = None,
    tracer: Any = None, cost_budget_usd: float | None = None, prices: PriceSpec | None = None,
    tool_search: ToolSearchOption | None = None, tool_embedder: Embedder | None = None,
) -> Run:
    """Start a plan-execute-replan run; iterate the result to get each Step as it happens."""
    return start(_spec(task, "plan_execute", locals()), policy, registry)


def run_plan_execute(
    task: str, policy: Policy, registry: Tools, *,
    max_steps: int | None = None, token_budget: int | None = None, timeout_s: float | None = None,
    max_tokens: int | None = None, max_replans: int | None = None, on_parse_error: OnParseError | None = None,
    on_repeat: OnRepeat | None = None, max_nudges: int | None = None, dialect: Dialect | None = None,
    on_tool_error: OnToolError | None = None, tools: Scope | None = None,
    approver: Approver | None = None, on_deny: OnDeny = "observe", prompts: PromptSet | None = None,
    memory: Memory | None = None, context_tokens: int | None = None, output_type: Any = None,
    store: RunStore | None = None, run_id: str | None = None, journal_meta: Mapping[str, Any] | None = None,
    tracer: Any = None, cost_budget_usd: float | None = None, prices: PriceSpec | None = None,
    tool_search: ToolSearchOption | None = None, tool_embedder: Embedder | None = None,
) -> Trace:
    """Run plan-execute-replan to the end and return its Trace."""
    return start(_spec(task, "plan_execute", locals()), policy, registry).run()

def iter_reflexion(
    task: str, policy: Policy, registry: Tools, *,
    max_steps: int | None = None, token_budget: int | None = None, timeout_s: float | None = None,
    max_tokens: int | None = None, max_replans: int | None = None, on_parse_error: OnParseError | None = None,
    on_repeat: OnRepeat | None = None, max_nudges: int | None = None, dialect: Dialect | None = None,
    on_tool_error: OnToolError | None = None, max_reflections: int | None = None,
    attempt_steps: int | None = None, evaluator: Evaluator | bool | None = None,
    tools: Scope | None = None, approver: Approver | None = None, on_deny: OnDeny = "observe",
    prompts: PromptSet | None = None, memory: Memory | None = None, context_tokens: int | None = None,
    output_type: Any = None, store: RunStore | None = None, run_id: str | None = None,
    journal_meta: Mapping[str, Any] | None = None, tracer: Any = None, cost_budget_usd: float | None = None,
    prices: PriceSpec | None = None,
    tool_search: ToolSearchOption | None = None, tool_embedder: Embedder | None = None,
) -> Run:
    """Start a Reflexion run; iterate the result to get each Step as it happens."""
    return start(_spec(task, "reflexion", locals()), policy, registry)


def run_reflexion(
    task: str, policy: Policy, registry: Tools, *,
    max_steps: int | None = None, token_budget: int | None = None, timeout_s: float | None = None,
    max_tokens: int | None = None, max_replans: int | None = None, on_parse_error: OnParseError | None = None,
    on_repeat: OnRepeat | None = None, max_nudges: int | None = None, dialect: Dialect | None = None,
    on_tool_error: OnToolError | None = None, max_reflections: int | None = None,
    attempt_steps: int | None = None, evaluator: Evaluator | bool | None = None,
    tools: Scope | None = None, approver: Approver | None = None, on_deny: OnDeny = "observe",
    prompts: PromptSet | None = None, memory: Memory | None = None, context_tokens: int | None = None,
    output_type: Any = None, store: RunStore | None = None, run_id: str | None = None,
    journal_meta: Mapping[str, Any] | None = None, tracer: Any = None, cost_budget_usd: float | None = None,
    prices: PriceSpec | None = None,
    tool_search: ToolSearchOption | None = None, tool_embedder: Embedder | None = None,
) -> Trace:
    """Run Reflexion to the end and return its Trace."""
    return start(_spec(task, "reflexion", locals()), policy, registry).run()

def iter_tot(
    task: str, policy: Policy, registry: Tools, *,
    max_steps: int | None = None, token_budget: int | None = None, timeout_s: float | None = None,
    max_tokens: int | None = None, max_replans: int | None = None, on_parse_error: OnParseError | None = None,
    on_repeat: OnRepeat | None = None, max_nudges: int | None = None, dialect: Dialect | None = None,
    on_tool_error: OnToolError | None = None, search: Search | None = None, branching: int | None = None,
    breadth: int | None = None, depth: int | None = None, max_nodes: int | None = None,
    threshold: float | None = None, allow_side_effects: bool | None = None,
    tools: Scope | None = None, approver: Approver | None = None, on_deny: OnDeny = "observe",
    prompts: PromptSet | None = None, memory: Memory | None = None, context_tokens: int | None = None,
    output_type: Any = None, store: RunStore | None = None, run_id: str | None = None,
    journal_meta: Mapping[str, Any] | None = None, tracer: Any = None, cost_budget_usd: float | None = None,
    prices: PriceSpec | None = None,
    tool_search: ToolSearchOption | None = None, tool_embedder: Embedder | None = None,
) -> Run:
    """Start a Tree-of-Thoughts search run; iterate the result to get each Step as it happens."""
    return start(_spec(task, "tot", locals()), policy, registry)


def run_tot(
    task: str, policy: Policy, registry: Tools, *,
    max_steps: int | None = None, token_budget: int | None = None, timeout_s: float | None = None,
    max_tokens: int | None = None, max_replans: int | None = None, on_parse_error: OnParseError | None = None,
    on_repeat: OnRepeat | None = None, max_nudges: int | None = None, dialect: Dialect | None = None,
    on_tool_error: OnToolError | None = None, search: Search | None = None, branching: int | None = None,
    breadth: int | None = None, depth: int | None = None, max_nodes: int | None = None,
    threshold: float | None = None, allow_side_effects: bool | None = None,
    tools: Scope | None = None, approver: Approver | None = None, on_deny: OnDeny = "observe",
    prompts: PromptSet | None = None, memory: Memory | None = None, context_tokens: int | None = None,
    output_type: Any = None, store: RunStore | None = None, run_id: str | None = None,
    journal_meta: Mapping[str, Any] | None = None, tracer: Any = None, cost_budget_usd: float | None = None,
    prices: PriceSpec | None = None,
    tool_search: ToolSearchOption | None = None, tool_embedder: Embedder | None = None,
) -> Trace:
    """Run a Tree-of-Thoughts search to the end and return its Trace."""
    return start(_spec(task, "tot", locals()), policy, registry).run()


__all__ = [
    "MODES",
    "aiter_events",
    "aiter_run",
    "arun",
    "arun_spec",
    "iter_events",
    "iter_plan_execute",
    "iter_react",
    "iter_reflexion",
    "iter_rewoo",
    "iter_run",
    "iter_tot",
    "run",
    "run_plan_execute",
    "run_react",
    "run_reflexion",
    "run_rewoo",
    "run_spec",
    "run_tot",
    "start",
]
