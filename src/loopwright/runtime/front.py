"""The front door: `run`, `iter_run`, `arun`, `aiter_run`, `iter_events`, `aiter_events`, the
per-mode `run_*` / `iter_*`, and `run_spec` / `arun_spec` for a run described by a RunSpec already.

Each takes the run's options as keywords (`**options: Unpack[RunOptions]`: RunSpec's fields,
flat like `max_steps=8` or grouped as `limits=lw.Limits(...)` and `settings=lw.ToTSettings(...)`),
makes the RunSpec a run starts from, and starts it through `start`, the one private entry
(resume and fork use it too, with the journal they continue). The per-mode functions are
`run`/`iter_run` with the mode filled in.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Unpack

from loopwright.events import EventSink
from loopwright.modes.machine import Journal, StepGen
from loopwright.policy import Policy
from loopwright.runtime.adriver import AsyncRun
from loopwright.runtime.context import ContextView, RunContext, open_context
from loopwright.runtime.driver import Run
from loopwright.runtime.spec import MODES, Mode, RunOptions, RunSpec
from loopwright.runtime.watch import AsyncEvents, Events
from loopwright.tools.toolset import Tools, as_registry
from loopwright.trace import Trace


def start(spec: RunSpec, policy: Policy, registry: Tools, *, journal: Journal | None = None,
          rerun_unfinished: bool = False, sinks: Sequence[EventSink] = (), agent: str | None = None) -> Run:
    """Start the run `spec` describes: its settings checked, its context opened (and
    journaled with a store), its machine made. `journal`: the one resume or fork continue;
    `sinks`: where its events go (`agent` tags them: a child run's agent name).
    `registry`: a ToolRegistry, or a list of Tools and functions made into one."""
    registry = as_registry(registry)
    mode = MODES[spec.mode]
    mode.check(spec)
    ctx = open_context(spec, policy, registry, journal, rerun_unfinished, sinks, agent)
    if ctx.guards is not None and ctx.guards.inputs:  # a machine reads the task when made: after they judge it
        return Run(ctx, _made_later(mode, ctx, spec))
    return Run(ctx, mode.machine(ContextView(ctx), spec))


def _made_later(mode: Mode, ctx: RunContext, spec: RunSpec) -> StepGen:
    """The mode's machine, made when it is first driven: after the input guardrails, which
    the driver checks first, have judged (and perhaps replaced) the task."""
    yield from mode.machine(ContextView(ctx), spec)


def run_spec(spec: RunSpec, policy: Policy, registry: Tools) -> Trace:
    """Run what a RunSpec describes to the end and return its Trace: `lw.run` with its
    keywords given as one value, e.g. a spec kept, sent elsewhere or varied with
    `spec.replace(...)`. With `spec.store` the run is journaled, as `lw.run` does."""
    return start(spec, policy, registry).run()


async def arun_spec(spec: RunSpec, policy: Policy, registry: Tools) -> Trace:
    """`run_spec` on the running event loop (as `lw.arun`)."""
    return await AsyncRun(start(spec, policy, registry)).run()


def iter_run(task: str, policy: Policy, registry: Tools, mode: str = "react", **options: Unpack[RunOptions]) -> Run:
    """Start a run in the given mode; iterate it for its Steps, read `.trace` any time."""
    return start(RunSpec(task, mode, **options), policy, registry)


def run(task: str, policy: Policy, registry: Tools, mode: str = "react", **options: Unpack[RunOptions]) -> Trace:
    """Run a task to the end in one of the modes (MODES) and return its Trace. A run always
    terminates and returns a (possibly partial) trace."""
    return start(RunSpec(task, mode, **options), policy, registry).run()


def aiter_run(task: str, policy: Policy, registry: Tools, mode: str = "react",
              **options: Unpack[RunOptions]) -> AsyncRun:
    """Start a run to drive from an event loop: `async for step in aiter_run(...)`, or
    `await aiter_run(...).run()`. Same arguments as `run`."""
    return AsyncRun(start(RunSpec(task, mode, **options), policy, registry))


async def arun(task: str, policy: Policy, registry: Tools, mode: str = "react",
               **options: Unpack[RunOptions]) -> Trace:
    """`run`, awaited on this event loop: async policies and tools are awaited here, sync
    ones run in threads, so the loop is never blocked. Same arguments and trace as `run`;
    cancelling the awaiting task ends the run "interrupted" (see runtime/adriver.py)."""
    return await AsyncRun(start(RunSpec(task, mode, **options), policy, registry)).run()


def iter_events(task: str, policy: Policy, registry: Tools, mode: str = "react",
                **options: Unpack[RunOptions]) -> Events:
    """Start a run and watch it: iterate the result for its events as they happen
    (run_started, model_delta, tool_started, tool_finished, step, approval_requested,
    run_finished; see loopwright.events). The policy streams its text when it can. The
    run goes on a thread of its own; `.close()` ends it "interrupted". Same arguments as `run`."""
    return Events(partial(_watched, RunSpec(task, mode, **options), policy, registry))


def aiter_events(task: str, policy: Policy, registry: Tools, mode: str = "react",
                 **options: Unpack[RunOptions]) -> AsyncEvents:
    """`iter_events` on an event loop: `async for ev in aiter_events(...)`; the run is a task
    on this loop, `await .aclose()` cancels it. Same arguments as `run`."""
    return AsyncEvents(partial(_watched, RunSpec(task, mode, **options), policy, registry))


def _watched(spec: RunSpec, policy: Policy, registry: Tools, sinks: Sequence[EventSink]) -> Run:
    return start(spec, policy, registry, sinks=sinks)


def run_react(task: str, policy: Policy, registry: Tools, **options: Unpack[RunOptions]) -> Trace:
    """Run ReAct to the end and return its Trace."""
    return run(task, policy, registry, "react", **options)


def iter_react(task: str, policy: Policy, registry: Tools, **options: Unpack[RunOptions]) -> Run:
    """Start a ReAct run; iterate the result to get each Step as it happens."""
    return iter_run(task, policy, registry, "react", **options)


def run_rewoo(task: str, policy: Policy, registry: Tools, **options: Unpack[RunOptions]) -> Trace:
    """Run ReWOO to the end and return its Trace."""
    return run(task, policy, registry, "rewoo", **options)


def iter_rewoo(task: str, policy: Policy, registry: Tools, **options: Unpack[RunOptions]) -> Run:
    """Start a ReWOO run; iterate the result to get each Step as it happens."""
    return iter_run(task, policy, registry, "rewoo", **options)


def run_plan_execute(task: str, policy: Policy, registry: Tools, **options: Unpack[RunOptions]) -> Trace:
    """Run plan-execute-replan to the end and return its Trace."""
    return run(task, policy, registry, "plan_execute", **options)


def iter_plan_execute(task: str, policy: Policy, registry: Tools, **options: Unpack[RunOptions]) -> Run:
    """Start a plan-execute-replan run; iterate the result to get each Step as it happens."""
    return iter_run(task, policy, registry, "plan_execute", **options)


def run_reflexion(task: str, policy: Policy, registry: Tools, **options: Unpack[RunOptions]) -> Trace:
    """Run Reflexion to the end and return its Trace."""
    return run(task, policy, registry, "reflexion", **options)


def iter_reflexion(task: str, policy: Policy, registry: Tools, **options: Unpack[RunOptions]) -> Run:
    """Start a Reflexion run; iterate the result to get each Step as it happens."""
    return iter_run(task, policy, registry, "reflexion", **options)


def run_tot(task: str, policy: Policy, registry: Tools, **options: Unpack[RunOptions]) -> Trace:
    """Run a Tree-of-Thoughts search to the end and return its Trace."""
    return run(task, policy, registry, "tot", **options)


def iter_tot(task: str, policy: Policy, registry: Tools, **options: Unpack[RunOptions]) -> Run:
    """Start a Tree-of-Thoughts search run; iterate the result to get each Step as it happens."""
    return iter_run(task, policy, registry, "tot", **options)


__all__ = [
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
