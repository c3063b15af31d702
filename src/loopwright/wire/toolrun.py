"""Running one tool call within a deadline, without blocking an event loop.

A sync tool with no deadline runs inline. Otherwise the call runs in a daemon thread that
is abandoned at the deadline (Python cannot kill a thread), and a coroutine runs on a
private event loop, or is awaited with `asyncio.wait_for` by a concurrent scheduler.
Every function here returns an Outcome, (True, value) or (False, exception), and never
raises what the tool raised; BaseExceptions (KeyboardInterrupt, SystemExit) propagate.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import threading
from collections.abc import Callable
from typing import Any

Outcome = tuple[bool, Any]  # (True, value) or (False, exception)


class Timeout(Exception):
    """Marks a deadline we enforced (a tool's own TimeoutError stays its own)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.seconds = seconds


async def guard(awaitable: Any, timeout: float | None) -> Outcome:
    """Await a tool coroutine and capture its outcome, with an optional deadline."""

    async def capture() -> Outcome:
        try:
            return True, await awaitable
        except Exception as exc:
            return False, exc

    if timeout is None:
        return await capture()
    try:
        return await asyncio.wait_for(capture(), max(timeout, 0.0))
    except TimeoutError:  # capture() swallows the tool's own, so this one is ours
        return False, Timeout(timeout)


def run_coroutine(awaitable: Any, timeout: float | None) -> Outcome:
    # A private loop; a given loop_factory keeps asyncio's current-loop setting untouched.
    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        return runner.run(guard(awaitable, timeout))


def call_within(invoke: Callable[[], Any], timeout: float | None) -> Outcome:
    try:
        value = invoke()
    except Exception as exc:
        return False, exc
    if inspect.iscoroutine(value):
        return run_coroutine(value, timeout)
    return True, value


def loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def run_job(job: Callable[[], Outcome], timeout: float | None, label: str) -> Outcome:
    """Run a job inline when that is safe and unbounded; otherwise in a daemon thread that
    is abandoned at the deadline. BaseExceptions from the job re-raise here."""
    if timeout is None and not loop_running():
        return job()
    box: list[tuple[bool | None, Any]] = []
    done = threading.Event()

    def target() -> None:
        try:
            box.append(job())
        except BaseException as exc:
            box.append((None, exc))
        finally:
            done.set()

    # the caller's context goes with the job (loopwright.current_call() inside the tool)
    threading.Thread(target=contextvars.copy_context().run, args=(target,), name=f"loopwright-tool:{label}",
                     daemon=True).start()
    if not done.wait(None if timeout is None else max(timeout, 0.0)):
        return False, Timeout(timeout if timeout is not None else 0.0)
    ok, value = box[0]
    if ok is None:
        raise value
    return ok, value


async def in_thread(job: Callable[[], Outcome], timeout: float | None, label: str) -> Outcome:
    future: concurrent.futures.Future[Outcome] = concurrent.futures.Future()

    def target() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(job())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=contextvars.copy_context().run, args=(target,), name=f"loopwright-tool:{label}",
                     daemon=True).start()
    waiting = asyncio.wrap_future(future)
    if timeout is None:
        return await waiting
    try:
        return await asyncio.wait_for(waiting, max(timeout, 0.0))
    except TimeoutError:  # the job captures the tool's own exceptions, so this one is ours
        return False, Timeout(timeout)


def call_capturing(invoke: Callable[[], Any]) -> Outcome:
    """A sync tool's call in a worker thread; a coroutine it returns is awaited by the caller."""
    try:
        return True, invoke()
    except Exception as exc:
        return False, exc
