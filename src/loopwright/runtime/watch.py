"""Watching a run: its events as an iterator (`lw.iter_events`) or an async iterator
(`lw.aiter_events`).

A run pushes its events to a sink as they happen (loopwright.events); these turn that
push into a pull. `Events` drives the sync driver on one thread of its own and hands its
events over through a queue, so the model's text arrives token by token while the
caller iterates; closing it (or Ctrl-C while it waits) ends the run "interrupted" at its
next event. `AsyncEvents` drives the async driver as a task on the caller's loop (no
thread); closing it cancels that task, which ends the run "interrupted".
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from loopwright.errors import RunInterrupted
from loopwright.events import Event, EventSink, RunFinished
from loopwright.runtime.adriver import AsyncRun
from loopwright.runtime.driver import Run
from loopwright.trace import Trace

if TYPE_CHECKING:  # imported where used: a sync run never loads asyncio
    import asyncio

Begin = Callable[[Sequence[EventSink]], Run]
"""Starts the run to watch, pushing its events to the sinks given."""

_END: Any = object()


class _Unwatched(KeyboardInterrupt):
    """Raised inside a run by its sink once nobody watches: the run ends as after Ctrl-C
    ("interrupted", journal closed, resumable)."""


class _Pipe:
    """The queue between the run's thread and the watcher. It holds no reference to the
    Events object, so an Events dropped unclosed is collected, and that closes it."""

    __slots__ = ("closed", "error", "queue")

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.closed = False
        self.error: BaseException | None = None

    def push(self, event: Event) -> None:
        if self.closed and type(event) is not RunFinished:
            raise _Unwatched("nobody watches this run any more")
        self.queue.put(event)

    def drive(self, run: Run) -> None:
        try:
            run.run()
        except RunInterrupted:
            pass
        except BaseException as exc:  # handed to the watcher, raised from its next()
            self.error = exc
        finally:
            self.queue.put(_END)


class Events(Iterator[Event]):
    """A run's events as they happen: iterate it; `.trace` is the live (partial) trace.
    The run starts on the first `next` and runs on a thread of its own; `close()` ends a
    run still going as "interrupted" (at its next event), as does dropping it."""

    def __init__(self, begin: Begin) -> None:
        self._pipe = _Pipe()
        self._thread: threading.Thread | None = None
        self._run = begin((self._pipe.push,))

    @property
    def trace(self) -> Trace:
        return self._run.trace

    def __iter__(self) -> Events:
        return self

    def __next__(self) -> Event:
        pipe = self._pipe
        if self._thread is None:
            if pipe.closed:
                raise StopIteration
            self._thread = threading.Thread(target=contextvars.copy_context().run, args=(pipe.drive, self._run),
                                            name="loopwright-events", daemon=True)
            self._thread.start()
        try:
            item = pipe.queue.get()
        except KeyboardInterrupt as exc:  # Ctrl-C while waiting: the run ends here
            self.close()
            self._thread.join()
            raise RunInterrupted(self.trace) from exc
        if item is _END:
            pipe.queue.put(_END)  # every later next() ends too
            if pipe.error is not None:
                error, pipe.error = pipe.error, None
                raise error
            raise StopIteration
        return item  # type: ignore[no-any-return]

    def close(self) -> Trace:
        """Stop watching: a run not yet ended ends as "interrupted" (at its next event
        when it is running)."""
        pipe = self._pipe
        if not pipe.closed:
            pipe.closed = True
            if self._thread is None:  # never started: it ends here, on this thread
                try:
                    self._run.end(_Unwatched())
                except RunInterrupted:
                    pass
        return self.trace

    def __del__(self) -> None:
        self._pipe.closed = True


class AsyncEvents(AsyncIterator[Event]):
    """A run's events as they happen, on the caller's event loop: `async for ev in ...`;
    `.trace` is the live trace. The run is a task on this loop, started by the first
    `__anext__`; `aclose()` (or cancelling the iterating task) cancels it, and the run
    ends as "interrupted"."""

    def __init__(self, begin: Begin) -> None:
        self._buffer: deque[Event] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[Trace] | None = None
        self._run = AsyncRun(begin((self._push,)))

    @property
    def trace(self) -> Trace:
        return self._run.trace

    def _push(self, event: Event) -> None:
        """Called on the loop's thread or, for a sync policy or tool run off the loop, on another."""
        self._buffer.append(event)
        loop, wake = self._loop, self._wake
        if loop is None or wake is None:
            return
        if threading.get_ident() == self._loop_thread:
            wake.set()
        elif not loop.is_closed():  # a call abandoned by a cancelled run may outlive the loop
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:  # closed meanwhile: nobody is left to wake
                pass

    def __aiter__(self) -> AsyncEvents:
        return self

    async def __anext__(self) -> Event:
        import asyncio

        if self._task is None:
            self._loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()
            self._wake = asyncio.Event()
            self._task = self._loop.create_task(self._run.run())
            self._task.add_done_callback(lambda _: self._wake.set() if self._wake is not None else None)
        task, wake = self._task, self._wake
        if wake is None:  # (set together with the task)
            raise RuntimeError("AsyncEvents lost its wake-up event")
        while True:
            wake.clear()
            if self._buffer:
                return self._buffer.popleft()
            if task.done():
                if not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
                raise StopAsyncIteration
            try:
                await wake.wait()
            except asyncio.CancelledError:  # the watcher was cancelled: so is the run
                task.cancel()
                raise

    async def aclose(self) -> Trace:
        """Stop watching: a run not yet ended ends as "interrupted"."""
        task = self._task
        if task is None:
            return await self._run.aclose()
        if not task.done():
            task.cancel()
            try:
                await task
            except BaseException:  # the CancelledError we asked for
                pass
        return self.trace


__all__ = ["AsyncEvents", "Begin", "Events"]
