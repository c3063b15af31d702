"""The loops behind one facade: `run(task, policy, registry, mode=...)`. ReAct, ReWOO,
plan-execute-replan, Reflexion and Tree-of-Thoughts as pure step machines (machine.py),
the two drivers that run them (driver.py on a thread, adriver.py on an event loop), what
the drivers share (the run context, the tool gate, the observers), and the front door
(front.py) that starts a run from a RunSpec (spec.py), and watching a run's events (watch.py)."""

from __future__ import annotations

from loopwright.modes.adriver import AsyncRun
from loopwright.modes.driver import Run
from loopwright.modes.front import (
    MODES,
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
from loopwright.modes.spec import RunSpec
from loopwright.modes.watch import AsyncEvents, Events

__all__ = [
    "MODES",
    "AsyncEvents",
    "AsyncRun",
    "Events",
    "Run",
    "RunSpec",
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
]
