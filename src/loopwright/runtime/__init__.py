"""The run plumbing: what starts, drives and records a run of a mode's machine. The front
door (front.py: run, arun, iter_events, ...) makes a RunSpec (spec.py) and opens the run's
context (context.py); the two drivers (driver.py: Run, on a thread; adriver.py: AsyncRun,
on an event loop) serve the machine's requests through the tool gate (gate.py) and tell
the observers (observers.py); watch.py turns a run into events. agents.py (lw.Agent),
session.py (memory across tasks) and calls.py (lw.current_call) build on them."""

from __future__ import annotations

from loopwright.runtime.adriver import AsyncRun
from loopwright.runtime.driver import Run
from loopwright.runtime.front import (
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
from loopwright.runtime.spec import MODES, RunSpec, register_mode
from loopwright.runtime.watch import AsyncEvents, Events

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
    "register_mode",
    "run_tot",
]
