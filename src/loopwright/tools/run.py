"""Running one tool call within a deadline, without blocking an event loop.

A sync tool with no deadline runs inline. Otherwise the call runs off this thread
(`loopwright.offload`, abandoned at the deadline), and a coroutine a tool returns runs on
a private event loop, or is awaited with a deadline by a concurrent caller. Every
function here returns an Outcome, (True, value) or (False, exception), and never raises
what the tool raised; BaseExceptions (KeyboardInterrupt, SystemExit) propagate.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from loopwright.offload import Outcome, Timeout, call_in_thread, guard, loop_running

__all__ = ["Outcome", "Timeout", "call_within", "guard", "run_coroutine", "run_job"]


def run_coroutine(awaitable: Any, timeout: float | None) -> Outcome:
    # A private loop; a given loop_factory keeps asyncio's current-loop setting untouched.
    import asyncio  # loaded here, not on import (see loopwright.offload)

    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        return runner.run(guard(awaitable, timeout))


def call_within(invoke: Callable[[], Any], timeout: float | None) -> Outcome:
    """Call a tool; a coroutine it returns is run to its end within `timeout`."""
    try:
        value = invoke()
    except Exception as exc:
        return False, exc
    if inspect.iscoroutine(value):
        return run_coroutine(value, timeout)
    return True, value


def run_job(job: Callable[[], Outcome], timeout: float | None, label: str) -> Outcome:
    """Run a job inline when that is safe and unbounded; otherwise off this thread,
    abandoned at the deadline. BaseExceptions from the job re-raise here."""
    if timeout is None and not loop_running():
        return job()
    ok, value = call_in_thread(job, timeout, f"tool:{label}")
    return value if ok else (False, value)  # the job's own Outcome, or our Timeout
