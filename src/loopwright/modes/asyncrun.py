"""Runs driven from an event loop: `await arun(...)` and `async for step in aiter_run(...)`.

There is no second copy of any loop. The mode's own step generator (the one `run()`
drives) runs in a worker thread, and the two choke points of `RunContext` hand their
calls to a Bridge, which runs them on the caller's event loop with
`asyncio.run_coroutine_threadsafe`: an async policy (`acomplete`, or an `async def`) and
an async tool are awaited there; a sync policy or tool runs in a daemon thread awaited
there. Nothing blocks the event loop, and the worker thread only ever waits on a future.

Cancelling the awaiting task cancels the call in flight (a sync call in its thread is
abandoned, as a tool timeout abandons it), the choke point raises StopRun("interrupted"),
and the run ends the way every run ends: partial trace, journal closed as
"interrupted" (resumable). The CancelledError then propagates, as asyncio expects; the
partial trace is on the AsyncRun (`aiter_run`) and in the journal.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any, TypeVar

from loopwright.modes._core import Run, StopRun
from loopwright.modes._policycall import _PolicyTimeout
from loopwright.policy import Completion, ModelRequest, Policy, as_completion, is_async_policy
from loopwright.trace import Step, Trace
from loopwright.wire.toolrun import Timeout, call_capturing, guard, in_thread
from loopwright.wire.tools import ToolRegistry, ToolResult

T = TypeVar("T")

CANCELLED = "the run was cancelled"


class Bridge:
    """Hands a run's model and tool calls from its worker thread to the caller's event
    loop, and cancels them all at once when the awaiting task is cancelled."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.cancelled = False
        self._lock = threading.Lock()
        self._in_flight: set[concurrent.futures.Future[Any]] = set()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule `coro` on the loop; StopRun if the run is cancelled already."""
        with self._lock:
            if self.cancelled:
                coro.close()
                raise StopRun("interrupted", CANCELLED)
            future = asyncio.run_coroutine_threadsafe(coro, self.loop)
            self._in_flight.add(future)
        return future

    def wait(self, future: concurrent.futures.Future[T]) -> T:
        """Block the worker thread until `future` is done; StopRun when it was cancelled."""
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise StopRun("interrupted", CANCELLED) from None
        finally:
            with self._lock:
                self._in_flight.discard(future)

    def cancel(self) -> None:
        """Cancel every call in flight; every later call ends the run as interrupted."""
        with self._lock:
            self.cancelled = True
            pending = list(self._in_flight)
        for future in pending:
            future.cancel()

    # -- the two choke points ---------------------------------------------------------

    def complete(self, policy: Policy, request: ModelRequest, timeout: float | None) -> Completion:
        """RunContext.call_model's call, on the loop. Raises what the policy raised,
        _PolicyTimeout past `timeout`, StopRun when cancelled."""
        if self.cancelled:
            raise StopRun("interrupted", CANCELLED)
        if timeout is not None and timeout <= 0:
            raise _PolicyTimeout
        ok, value = self.wait(self.submit(guard(acall_policy(policy, request), timeout)))
        if ok:
            return as_completion(value)
        if isinstance(value, Timeout):
            raise _PolicyTimeout
        raise value

    def execute(self, registry: ToolRegistry, name: str, args: dict[str, Any], timeout: float | None) -> ToolResult:
        """RunContext's tool call, on the loop (never raises for tool behaviour)."""
        return self.wait(self.submit(registry.aexecute(name, args, timeout_s=timeout)))

    async def aexecute(self, registry: ToolRegistry, name: str, args: dict[str, Any], timeout: float | None) -> ToolResult:
        """`execute` for a scheduler running on the worker thread's own loop (ReWOO)."""
        future = self.submit(registry.aexecute(name, args, timeout_s=timeout))
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            if future.cancelled():
                raise StopRun("interrupted", CANCELLED) from None
            raise
        finally:
            with self._lock:
                self._in_flight.discard(future)


async def acall_policy(policy: Policy, request: ModelRequest) -> Any:
    """One call of the policy, on the loop: `acomplete` or an async callable is awaited;
    a sync one runs in a daemon thread (abandoned if the call is cancelled)."""
    acomplete = getattr(policy, "acomplete", None)
    if callable(acomplete):
        out = await acomplete(request)
    else:
        complete = getattr(policy, "complete", None)
        call: Callable[[], Any] = (
            partial(complete, request) if callable(complete) else partial(policy, request.prompt)  # type: ignore[arg-type,misc,operator]
        )
        if is_async_policy(policy):
            out = await call()
        else:
            ok, out = await in_thread(partial(call_capturing, call), None, "policy")
            if not ok:
                raise out
    if asyncio.iscoroutine(out) or isinstance(out, asyncio.Future):  # a callable that returned one
        out = await out
    return out


class AsyncRun:
    """A run driven from an event loop. `await run.run()` drives it to the end and
    returns the trace; `async for step in run` yields each Step as it happens; `.trace`
    is the live (partial) trace, also after the awaiting task was cancelled."""

    def __init__(self, run: Run) -> None:
        self._run = run
        self._bridge: Bridge | None = None
        self._done = False

    @property
    def trace(self) -> Trace:
        return self._run.trace

    def _attach(self) -> Bridge:
        if self._bridge is None:
            self._bridge = Bridge(asyncio.get_running_loop())
            ctx = self._run._ctx  # before the first step: every call goes through the bridge
            ctx.bridge, ctx.plain_policy = self._bridge, False
        return self._bridge

    async def _in_worker(self, job: Callable[[], T]) -> T:
        """Run `job` (a slice of the step generator) in a worker thread; on cancellation,
        cancel the run's calls, wait for the worker to close the run, and re-raise."""
        bridge = self._attach()
        loop = bridge.loop
        done: asyncio.Future[T] = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if not done.done():
                if ok:
                    done.set_result(value)
                else:
                    done.set_exception(value)

        def target() -> None:
            try:
                outcome: tuple[bool, Any] = (True, job())
            except BaseException as exc:  # handed to the loop below
                outcome = (False, exc)
            try:
                loop.call_soon_threadsafe(settle, *outcome)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass

        threading.Thread(target=target, name="loopwright-run", daemon=True).start()
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            bridge.cancel()
            try:  # the worker stops at its next choke point, where nothing blocks
                await done
            except BaseException:
                pass
            self._close()
            raise

    def _close(self) -> None:
        """After a cancellation: make sure the run is ended and its journal closed."""
        self._done = True
        run = self._run
        if not run._finished:
            if run.trace.stopped_reason is None:
                run._ctx.stop("interrupted")
            run._finish()

    async def run(self) -> Trace:
        """Drive the run to its end and return the trace."""
        if self._done:
            return self.trace
        trace = await self._in_worker(self._run.run)
        self._done = True
        return trace

    def __aiter__(self) -> AsyncRun:
        return self

    async def __anext__(self) -> Step:
        if self._done:
            raise StopAsyncIteration
        step: Step | None = await self._in_worker(partial(next, self._run, None))
        if step is None:
            self._done = True
            raise StopAsyncIteration
        return step

    async def aclose(self) -> Trace:
        """Stop iterating: a run not yet ended ends as "interrupted"."""
        if not self._done:
            self._attach().cancel()
            await self._in_worker(self._run.run)
            self._done = True
        return self.trace


__all__ = ["AsyncRun", "Bridge", "acall_policy"]
