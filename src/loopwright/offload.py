"""Running a blocking call off the caller's thread, held to a deadline: the one place
loopwright starts a thread to wait on a call.

A sync policy or tool that must not block (an event loop is waiting) or that must be
held to a wall clock runs in a daemon thread, which is abandoned at the deadline (Python
cannot kill a thread). `call_in_thread` waits for it from sync code, `acall_in_thread`
from a coroutine; both return an Outcome, (True, value) or (False, exception), and never
raise what the call raised; BaseExceptions (KeyboardInterrupt, SystemExit) propagate.
`guard` holds a coroutine to a deadline the same way, and `run_until_complete` runs one
from sync code (on a helper thread when this one already runs an event loop).
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

# asyncio (with ssl, about a fifth of `import loopwright`) is imported inside the functions
# that use it: a sync run never loads it, and in an async one it is loaded already.

__all__ = ["Outcome", "Timeout", "acall_in_thread", "call_in_thread", "capture", "guard", "run_until_complete",
           "start_in_thread"]

Outcome = tuple[bool, Any]  # (True, value) or (False, exception)
T = TypeVar("T")


class Timeout(Exception):
    """Marks a deadline we enforced (a call's own TimeoutError stays its own)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.seconds = seconds


def capture(call: Callable[[], Any]) -> Outcome:
    """The call's outcome; an Exception is returned, not raised."""
    try:
        return True, call()
    except Exception as exc:
        return False, exc


def start_in_thread(call: Callable[[], Any], label: str) -> concurrent.futures.Future[Outcome]:
    """Start `call` on a daemon thread that carries the caller's context (so
    `loopwright.current_call()` works inside a tool); a future cancelled before the
    thread starts never runs the call."""
    future: concurrent.futures.Future[Outcome] = concurrent.futures.Future()

    def target() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(capture(call))
        except BaseException as exc:  # KeyboardInterrupt, SystemExit: the waiter re-raises it
            future.set_exception(exc)

    threading.Thread(target=contextvars.copy_context().run, args=(target,), name=f"loopwright-{label}",
                     daemon=True).start()
    return future


def call_in_thread(call: Callable[[], Any], timeout: float | None, label: str) -> Outcome:
    """Run `call` on a daemon thread and wait at most `timeout` seconds for it."""
    future = start_in_thread(call, label)
    try:
        return future.result(None if timeout is None else max(timeout, 0.0))
    except concurrent.futures.TimeoutError:
        return False, Timeout(timeout if timeout is not None else 0.0)


_POOL: concurrent.futures.ThreadPoolExecutor | None = None


def _pooled(call: Callable[[], Any]) -> concurrent.futures.Future[Outcome]:
    """`call` on a thread of a shared pool, with the caller's context: for a call with no
    deadline (nothing to abandon), a thread is reused instead of started per call."""
    global _POOL
    if _POOL is None:
        _POOL = concurrent.futures.ThreadPoolExecutor(32, thread_name_prefix="loopwright-pool")
    return _POOL.submit(contextvars.copy_context().run, capture, call)


async def acall_in_thread(call: Callable[[], Any], timeout: float | None, label: str, *,
                          pooled: bool = True) -> Outcome:
    """`call_in_thread` awaited: the event loop goes on while the call runs. Cancelling
    the awaiting task abandons the call (a call not yet started never runs). A call with
    no deadline runs on a shared pool's thread, unless `pooled` is False (a call that may
    wait on a person, which must not starve the pool); one with a deadline on its own
    daemon thread, which can be abandoned without holding up the pool."""
    import asyncio

    if timeout is None:
        return await asyncio.wrap_future(_pooled(call) if pooled else start_in_thread(call, label))
    waiting = asyncio.wrap_future(start_in_thread(call, label))
    try:
        return await asyncio.wait_for(waiting, max(timeout, 0.0))
    except TimeoutError:  # the thread captures the call's own exceptions, so this one is ours
        return False, Timeout(timeout)


async def guard(awaitable: Awaitable[Any], timeout: float | None) -> Outcome:
    """Await a coroutine and capture its outcome, with an optional deadline."""
    import asyncio

    async def captured() -> Outcome:
        try:
            return True, await awaitable
        except Exception as exc:
            return False, exc

    if timeout is None:
        return await captured()
    try:
        return await asyncio.wait_for(captured(), max(timeout, 0.0))
    except TimeoutError:  # captured() swallows the call's own, so this one is ours
        return False, Timeout(timeout)


async def _wait(awaitable: Awaitable[T]) -> T:
    return await awaitable


def _run(awaitable: Awaitable[T]) -> T:
    import asyncio

    # A private loop; a given loop_factory keeps asyncio's current-loop setting untouched.
    coro: Coroutine[Any, Any, T] = awaitable if asyncio.iscoroutine(awaitable) else _wait(awaitable)
    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        return runner.run(coro)


def run_until_complete(coro: Awaitable[T]) -> T:
    """Run a coroutine to its end from sync code: here on a private event loop, or on a
    helper thread's when this thread already runs one (sync code called from a notebook)."""
    if not loop_running():
        return _run(coro)
    ok, value = call_in_thread(lambda: _run(coro), None, "loop")
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def loop_running() -> bool:
    """Whether this thread runs an event loop (none can before asyncio is imported)."""
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and asyncio._get_running_loop() is not None
