"""The async driver: runs a mode's step machine on the caller's event loop.

`await arun(...)` and `async for step in aiter_run(...)` drive the same machines as
`run`, with no worker thread: an async policy (`acomplete`, an `async def`) and an async
tool are awaited here; a sync policy or tool runs off the loop (`loopwright.offload`),
so nothing blocks the loop. ReWOO's started calls are tasks on this loop.

Cancelling the awaiting task cancels the call in flight (a sync call in its thread is
abandoned, as a tool timeout abandons it) and the run ends the way every run ends:
partial trace, the calls cut off in `trace.meta["in_flight"]`, journal closed as
"interrupted" (resumable). The CancelledError then propagates, as asyncio expects; the
partial trace is on the AsyncRun and in the journal.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from loopwright.modes.machine import (
    WRITES,
    CallDone,
    CallTool,
    CheckClock,
    Executed,
    ModelCall,
    PolicyFailed,
    StartTool,
    StopRun,
    Summarize,
)
from loopwright.offload import Timeout, acall_in_thread, guard
from loopwright.policy import (
    ModelRequest,
    acall_policy,
    astream_reply,
    is_async_policy,
    policy_reply,
    stream_reply,
)
from loopwright.runtime.calls import bind_call, unbind_call
from loopwright.runtime.context import RunContext
from loopwright.runtime.driver import USER_CODE, Run, end_watched, user_call, watched_text
from loopwright.runtime.gate import Admitted
from loopwright.runtime.guardrails import adrive, drive
from loopwright.tools.registry import ToolResult
from loopwright.trace import Step, Trace

if TYPE_CHECKING:  # imported where used: a sync run never loads asyncio (see loopwright.offload)
    import asyncio


async def acall_model(ctx: RunContext, request: ModelRequest) -> ModelCall:
    """`driver.call_model`, awaited."""
    start = time.perf_counter()
    recorded = ctx.begin_model(start)
    events = ctx.events  # someone watches: the policy streams, its deltas go out as they come
    racing = ctx.guards is not None and ctx.guards.race is not None  # a raced input check: hold the text
    # (a StreamCheck's checks are served on the thread the text arrives on: sync, as it comes)
    out, stream = watched_text(ctx, request, drive) if events is not None else (None, None)
    if recorded is not None:
        if racing:
            await asettle_race(ctx)
        if out is not None:
            out(recorded.text)
            end_watched(ctx, stream, recorded.text)
        return recorded
    held: list[str] = []
    emit = None if out is None else held.append if racing else out
    try:
        chain = ctx.ain_turn  # lw.models.Fallback: each model with its retries
        if chain is not None:
            reply = await chain(request, partial(_aattempts, ctx, emit))
        else:
            reply = await _aattempts(ctx, emit, ctx.policy, request)
    except Exception as exc:  # the choke point: any policy failure ends the run cleanly
        raise ctx.model_failed(request, exc, start) from exc
    done = ctx.model_done(request, reply, start)
    if racing:
        await asettle_race(ctx)
        if out is not None:
            for text in held:
                out(text)
    if out is not None:
        end_watched(ctx, stream, done.text)
    return done


async def _aattempts(ctx: RunContext, emit: Callable[[str], None] | None, policy: Any,
                     request: ModelRequest) -> Any:
    """`driver._attempts`, awaited: an async policy on this loop, a sync one on a thread."""
    import asyncio

    attempt = 1
    while True:
        limit, own = ctx.attempt_limit()
        try:
            with ctx.retrying():
                if emit is not None:
                    if is_async_policy(policy):
                        ok, reply = await guard(astream_reply(policy, request, emit), limit)
                    else:  # a sync stream is read on a thread; the sink hears it from there
                        ok, reply = await acall_in_thread(partial(stream_reply, policy, request, emit), limit,
                                                          "policy")
                elif is_async_policy(policy):
                    ok, reply = await guard(acall_policy(policy, request), limit)
                else:
                    ok, reply = await acall_in_thread(partial(policy_reply, policy, request), limit, "policy")
            if not ok:
                raise ctx.attempt_timed_out(reply, own)
            return reply
        except Exception as exc:
            delay = ctx.retry_model(exc, attempt, policy)
            if delay is None:
                raise
        await asyncio.sleep(delay)
        attempt += 1


async def abegin_guards(ctx: RunContext) -> None:
    """`driver.begin_guards`, the raced input guardrails a task on this loop."""
    import asyncio

    guards = ctx.guards
    assert guards is not None
    guards.started = True
    if guards.raced:
        guards.race = asyncio.ensure_future(adrive(guards.input_checks(True)))
    if guards.inputs:
        guards.apply_input(await adrive(guards.input_checks(False)), False)


async def asettle_race(ctx: RunContext) -> None:
    """`driver.settle_race`, awaited."""
    guards = ctx.guards
    assert guards is not None and guards.race is not None
    race, guards.race = guards.race, None
    guards.apply_input(await race, True)


async def asettle_output(ctx: RunContext) -> None:
    """`driver.settle_output`, awaited."""
    guards = ctx.guards
    assert guards is not None
    if guards.race is not None:
        await asettle_race(ctx)
    if guards.outputs:
        await adrive(guards.output_check())


async def asummarize(ctx: RunContext, request: Summarize) -> ModelCall | Exception:
    """`driver.summarize`, awaited: an async summarizer on this loop, a sync one on a
    thread, so the loop is never blocked."""
    pending, start = request.pending, time.perf_counter()
    n, recorded = ctx.begin_summary()
    if recorded is None:
        remaining = ctx.deadline.remaining() if ctx.timed else None
        summarizer, summary_request = pending.summarizer, pending.request
        if is_async_policy(summarizer):
            ok, reply = await guard(acall_policy(summarizer, summary_request), remaining)
        else:
            ok, reply = await acall_in_thread(partial(policy_reply, summarizer, summary_request), remaining,
                                              "summarizer")
        if not ok:
            return ctx.summary_timed_out(start) if isinstance(reply, Timeout) else reply
        recorded = ctx.summary_done(n, summary_request, reply, start)
    pending.apply(recorded.text)
    return recorded


class AsyncRun:
    """A run driven from an event loop. `await run.run()` drives it to the end and
    returns the trace; `async for step in run` yields each Step as it happens; `.trace`
    is the live (partial) trace, also after the awaiting task was cancelled."""

    def __init__(self, run: Run) -> None:
        self._run = run
        self._ctx = run.context
        self._ctx.asynchronous = True
        self._tasks: set[asyncio.Task[CallDone]] = set()
        self._locks: dict[str, asyncio.Lock] = {}
        self._next: Any = None  # what the machine asked for after a held step (see Run.hold)

    @property
    def trace(self) -> Trace:
        return self._run.trace

    async def _advance(self) -> Step | None:
        """Serve the machine's requests until it yields its next Step (recorded here);
        None when the machine returned."""
        machine, ctx = self._run.machine, self._ctx
        value: Any = None
        thrown: BaseException | None = None
        guards = ctx.guards
        if guards is not None and not guards.started:
            await abegin_guards(ctx)
        hold = guards is not None and bool(guards.outputs)
        following, self._next = self._next, None
        while True:
            if following is not None:
                item, following = following, None
            else:
                try:  # (a StopIteration must not leave a coroutine)
                    item = machine.send(value) if thrown is None else machine.throw(thrown)
                except StopIteration:
                    return None
            thrown = None
            if guards is not None and guards.race is not None and type(item) is not ModelRequest:
                await asettle_race(ctx)  # nothing the model said leaves, and no tool runs, before it allows
            try:
                if type(item) is Step:
                    if not hold:
                        return ctx.record(item)
                    try:
                        self._next = self._run.hold(item)
                    except StopIteration:  # the run's last step: it waits for the output verdict
                        return None
                    return item
                if type(item) is ModelRequest:
                    value = await acall_model(ctx, item)
                elif type(item) is CallTool:
                    value = await self._execute(item)
                elif type(item) is StartTool:
                    import asyncio

                    self._tasks.add(asyncio.ensure_future(self._started_call(item.call)))
                    value = None
                elif isinstance(item, WRITES):
                    ctx.apply(item)
                    value = None
                elif isinstance(item, USER_CODE):  # on a thread: user code never blocks the loop
                    value = (await acall_in_thread(user_call(ctx, item), None, type(item).__name__))[1]
                elif type(item) is Summarize:
                    value = await asummarize(ctx, item)
                elif type(item) is CheckClock:
                    value = ctx.timed and ctx.expired()
                else:  # NextDone
                    import asyncio

                    done, _ = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
                    task = done.pop()
                    self._tasks.discard(task)
                    value = task.result()  # a StopRun from the gate is raised here, and thrown in
            except (PolicyFailed, StopRun) as exc:  # thrown into the machine
                thrown = exc

    async def _execute(self, call: CallTool) -> Executed:
        """`driver.execute`, awaited: the tool guardrails, then the gate."""
        guards = self._ctx.guards
        if guards is None or not (guards.args or guards.results):
            return await self._gated(call)
        checked = await adrive(guards.args_check(call)) if guards.args else call
        if isinstance(checked, Executed):  # a revise: not run, the model reads the feedback
            return checked
        executed = await self._gated(checked)
        return await adrive(guards.result_check(checked, executed)) if guards.results else executed

    async def _gated(self, call: CallTool) -> Executed:
        ledger = self._ctx.gate.gated_ledger(call)
        if ledger is None:
            return await self._through_gate(call, None)
        import asyncio

        # an identical gated side effect in flight settles before this one is asked about
        async with self._locks.setdefault(ledger, asyncio.Lock()):
            return await self._through_gate(call, ledger)

    async def _through_gate(self, call: CallTool, held: str | None) -> Executed:
        """`held`: the ledger lock this task holds already (asyncio locks do not nest)."""
        gate, ctx = self._ctx.gate, self._ctx
        tool = ctx.registry.get(call.name)
        if tool is not None and tool.requires_approval:  # an approver may wait on a person: its own thread
            ok, admitted = await acall_in_thread(partial(gate.admit, call), None, "approval", pooled=False)
            if not ok:
                raise admitted
        else:
            admitted = gate.admit(call)
        if admitted is None:  # nothing to gate, record or deduplicate
            return gate.done(call.key, await self._tool_attempts(call, 1))
        if type(admitted) is not Admitted:
            return admitted  # type: ignore[no-any-return]
        if admitted.ledger is None:
            return gate.finish(admitted, await self._tool_attempts(call, gate.begin(admitted)))
        if admitted.ledger == held:
            return gate.reuse(admitted) or gate.finish(admitted, await self._tool_attempts(call, gate.begin(admitted)))
        import asyncio

        async with self._locks.setdefault(admitted.ledger, asyncio.Lock()):  # the second reuses
            return gate.reuse(admitted) or gate.finish(admitted, await self._tool_attempts(call, gate.begin(admitted)))

    async def _tool_attempts(self, call: CallTool, attempt: int) -> ToolResult:
        """`driver._tool_attempts`, awaited."""
        import asyncio

        ctx = self._ctx
        while True:
            result = await self._run_tool(call, attempt)
            delay = ctx.gate.retry_tool(call, result, attempt) if ctx.retry is not None else None
            if delay is None:
                return result
            await asyncio.sleep(delay)
            attempt += 1

    async def _run_tool(self, call: CallTool, attempt: int) -> ToolResult:
        ctx = self._ctx
        token = bind_call(ctx, call.key, attempt, call.name)  # for lw.current_call()
        ctx.in_flight[call.key] = (call.name, call.args, time.perf_counter())
        events = ctx.events
        if events is not None:
            step = ctx.next_index
            events.tool_started(step, call.name, call.args, call.key)
        timeout = ctx.attempt_limit()[0] if ctx.timed or ctx.retry is not None else None
        try:
            result = await ctx.registry.aexecute(call.name, call.args, timeout_s=timeout)
        finally:
            unbind_call(token)
        ctx.in_flight.pop(call.key, None)  # kept when the run was cancelled: the trace says so
        if events is not None:
            events.tool_finished(step, call.key, result)
        return result

    async def _started_call(self, call: CallTool) -> CallDone:
        return CallDone(call.key, await self._execute(call))

    async def _step(self) -> Step | None:
        """The next Step, or None when the run has ended."""
        import asyncio

        run = self._run
        if run.finished:
            return None
        try:
            step = await self._advance()
        except asyncio.CancelledError:
            self._interrupt()
            raise
        except BaseException as exc:
            run.end(exc)
            return None
        if step is None:
            return await self._finish()
        return step

    async def _finish(self) -> Step | None:
        """`Run.finish`, awaited: the guardrails still owed a verdict, then the close; the
        step the machine ended on, when it waited for the verdict and was allowed."""
        import asyncio

        run = self._run
        if self._ctx.guards is not None:
            try:
                await asettle_output(self._ctx)
            except asyncio.CancelledError:
                self._interrupt()
                raise
            except BaseException as exc:
                run.release(send=False)
                run.end(exc)
                return None
        step = run.release()
        run.close()
        return step

    def _interrupt(self) -> None:
        """End the run as "interrupted": the started calls are cancelled, what was cut off
        goes in the trace, the journal is closed (the run can be resumed)."""
        for task in self._tasks:
            task.cancel()
        self._run.interrupt()

    async def run(self) -> Trace:
        """Drive the run to its end and return the trace."""
        while await self._step() is not None:
            pass
        return self.trace

    def __aiter__(self) -> AsyncRun:
        return self

    async def __anext__(self) -> Step:
        step = await self._step()
        if step is None:
            raise StopAsyncIteration
        return step

    async def aclose(self) -> Trace:
        """Stop iterating: a run not yet ended ends as "interrupted"."""
        if not self._run.finished:
            self._interrupt()
        return self.trace


__all__ = ["AsyncRun", "abegin_guards", "acall_model", "asettle_output", "asettle_race", "asummarize"]
