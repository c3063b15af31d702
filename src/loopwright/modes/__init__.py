"""The loops behind one facade: `run(task, policy, registry, mode=...)`. ReAct, ReWOO,
plan-execute-replan, Reflexion and Tree-of-Thoughts as pure step machines (machine.py),
the two drivers that run them (driver.py on a thread, adriver.py on an event loop), and
what the drivers share: the run context, the tool gate and the observers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loopwright.modes.adriver import AsyncRun
from loopwright.modes.driver import Run
from loopwright.modes.plan_execute import iter_plan_execute, run_plan_execute
from loopwright.modes.react import iter_react, run_react
from loopwright.modes.reflexion import iter_reflexion, run_reflexion
from loopwright.modes.rewoo import iter_rewoo, run_rewoo
from loopwright.modes.tot import iter_tot, run_tot
from loopwright.policy import Policy
from loopwright.trace import Trace
from loopwright.wire.tools import ToolRegistry

MODES: dict[str, Callable[..., Run]] = {
    "react": iter_react,
    "rewoo": iter_rewoo,
    "plan_execute": iter_plan_execute,
    "reflexion": iter_reflexion,
    "tot": iter_tot,
}


def iter_run(task: str, policy: Policy, registry: ToolRegistry, mode: str = "react", **limits: Any) -> Run:
    """Start a run in the given mode; iterate it for its Steps, read `.trace` any time."""
    try:
        start = MODES[mode]
    except KeyError:
        raise ValueError(f"mode must be one of {sorted(MODES)}, got {mode!r}") from None
    return start(task, policy, registry, **limits)


def run(task: str, policy: Policy, registry: ToolRegistry, mode: str = "react", **limits: Any) -> Trace:
    """Run a task to the end in one of the modes (MODES) and return its Trace.

    limits (same names in every mode): max_steps, token_budget, timeout_s, max_replans,
    on_parse_error, on_repeat; also dialect (ReAct), tools (the names this run may use),
    prompts, max_tokens. A run always terminates and returns a (possibly partial) trace.
    """
    return iter_run(task, policy, registry, mode, **limits).run()


def aiter_run(task: str, policy: Policy, registry: ToolRegistry, mode: str = "react", **limits: Any) -> AsyncRun:
    """Start a run to drive from an event loop: `async for step in aiter_run(...)`, or
    `await aiter_run(...).run()`. Same arguments as `run`."""
    return AsyncRun(iter_run(task, policy, registry, mode, **limits))


async def arun(task: str, policy: Policy, registry: ToolRegistry, mode: str = "react", **limits: Any) -> Trace:
    """`run`, awaited: async policies and tools are awaited on this loop, sync ones run
    in threads, so the event loop is never blocked. Same arguments and trace as `run`;
    cancelling the awaiting task ends the run "interrupted" (see modes/asyncrun.py)."""
    return await aiter_run(task, policy, registry, mode, **limits).run()

__all__ = [
    "MODES",
    "AsyncRun",
    "Run",
    "aiter_run",
    "arun",
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
    "run_tot",
]
