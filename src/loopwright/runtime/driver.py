"""The sync driver: runs a mode's step machine on the caller's thread.

It serves each request the machine yields: the model is called here (on a daemon thread
held to the run's wall clock when it has one), a tool call goes through the gate to the
registry, ReWOO's started calls run on a thread pool of this run, and a change to the run
(Stop, Record, UseTools) is applied to its context. Each Step the machine yields is
recorded and handed to whoever iterates the Run. Ctrl-C marks the
trace "interrupted" and raises RunInterrupted, a KeyboardInterrupt that carries it.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import time
import traceback
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from loopwright.errors import RunInterrupted, StoreError
from loopwright.modes.machine import (
    WRITES,
    CallDone,
    CallTool,
    CheckClock,
    Embed,
    Evaluate,
    Executed,
    ModelCall,
    PolicyFailed,
    Recall,
    Remember,
    StartTool,
    StepGen,
    StopRun,
    Summarize,
)
from loopwright.offload import Timeout, call_in_thread, capture, start_in_thread
from loopwright.policy import ModelRequest, policy_reply, stream_reply
from loopwright.runtime.calls import bind_call, unbind_call
from loopwright.runtime.context import RunContext
from loopwright.runtime.gate import Admitted
from loopwright.runtime.guardrails import StreamCheck, drive
from loopwright.runtime.observers import store_failed
from loopwright.tools.registry import ToolResult
from loopwright.trace import Step, Trace


def watched_text(ctx: RunContext, request: ModelRequest,
                 serve: Callable[[Any], Any]) -> tuple[Callable[[str], None], StreamCheck | None]:
    """Where a watched run's model text goes: out as it comes, or through the output
    guardrails' StreamCheck (served by `serve`) when the run has some."""
    events, guards = ctx.events, ctx.guards
    assert events is not None
    release = partial(events.delta, ctx.next_index)
    if guards is None or not guards.outputs:
        return release, None
    whole = request.purpose == "solve" or request.dialect == "native"
    stream = guards.stream(ctx.next_index, release, whole, serve)
    return stream.feed, stream


def end_watched(ctx: RunContext, stream: StreamCheck | None, text: str) -> None:
    """The call's text is all out: StopRun when its StreamCheck blocked a sentence."""
    if stream is not None:
        stream.close()
        assert ctx.guards is not None
        ctx.guards.end_stream(stream, text)


def call_model(ctx: RunContext, request: ModelRequest) -> ModelCall:
    """One model call. Raises PolicyFailed when the policy raises or outlives the run."""
    start = time.perf_counter()
    recorded = ctx.begin_model(start)
    events = ctx.events  # someone watches: the policy streams, its deltas go out as they come
    racing = ctx.guards is not None and ctx.guards.race is not None  # a raced input check: hold the text
    out, stream = watched_text(ctx, request, drive) if events is not None else (None, None)
    if recorded is not None:
        if racing:
            settle_race(ctx)
        if out is not None:
            out(recorded.text)
            end_watched(ctx, stream, recorded.text)
        return recorded
    held: list[str] = []
    if out is None:
        answer: Callable[..., Any] = policy_reply
    else:
        answer = partial(stream_reply, emit=held.append if racing else out)
    try:
        chain = ctx.in_turn  # lw.models.Fallback: each model with its retries
        if chain is not None:
            reply = chain(request, partial(_attempts, ctx, answer))
        else:
            reply = _attempts(ctx, answer, ctx.policy, request)
    except Exception as exc:  # the choke point: any policy failure ends the run cleanly
        raise ctx.model_failed(request, exc, start) from exc
    done = ctx.model_done(request, reply, start)
    if racing:
        settle_race(ctx)
        if out is not None:
            for text in held:
                out(text)
    if out is not None:
        end_watched(ctx, stream, done.text)
    return done


def _attempts(ctx: RunContext, answer: Callable[..., Any], policy: Any, request: ModelRequest) -> Any:
    """`answer(policy, request)`, tried again after a transient failure as the run's
    `retry=` allows, each attempt held to the run's clock and `per_attempt_timeout_s`."""
    if ctx.retry is None and not ctx.timed:  # one attempt, with no clock to hold it to
        return answer(policy, request)
    attempt = 1
    while True:
        limit, own = ctx.attempt_limit()
        try:
            with ctx.retrying():
                if limit is None:
                    return answer(policy, request)
                ok, reply = call_in_thread(partial(answer, policy, request), limit, "policy")
            if not ok:
                raise ctx.attempt_timed_out(reply, own)
            return reply
        except Exception as exc:
            delay = ctx.retry_model(exc, attempt, policy)
            if delay is None:
                raise
        time.sleep(delay)
        attempt += 1


def begin_guards(ctx: RunContext) -> None:
    """Before the machine's first request: start the raced input guardrails on a thread,
    check the others (StopRun at a block; a replaced task is the run's task from here)."""
    guards = ctx.guards
    assert guards is not None
    guards.started = True
    if guards.raced:
        guards.race = start_in_thread(partial(drive, guards.input_checks(True)), "guardrail")
    if guards.inputs:
        guards.apply_input(drive(guards.input_checks(False)), False)


def settle_race(ctx: RunContext) -> None:
    """Wait for the raced input guardrails; StopRun when one did not allow."""
    guards = ctx.guards
    assert guards is not None and guards.race is not None
    ok, verdicts = guards.race.result()
    guards.race = None
    if not ok:
        raise verdicts
    guards.apply_input(verdicts, True)


def settle_output(ctx: RunContext) -> None:
    """The machine returned: the raced input check settles (if nothing waited for it), then
    the output guardrails judge the final answer. StopRun at a block."""
    guards = ctx.guards
    assert guards is not None
    if guards.race is not None:
        settle_race(ctx)
    if guards.outputs:
        drive(guards.output_check())


def execute(ctx: RunContext, call: CallTool) -> Executed:
    """One tool call through the tool guardrails and the gate (never raises for tool
    behaviour; StopRun when a guardrail or the gate ends the run)."""
    guards = ctx.guards
    if guards is None or not (guards.args or guards.results):
        return _gated(ctx, call)
    checked = drive(guards.args_check(call)) if guards.args else call
    if isinstance(checked, Executed):  # a revise: not run, the model reads the feedback
        return checked
    executed = _gated(ctx, checked)
    return drive(guards.result_check(checked, executed)) if guards.results else executed


def _gated(ctx: RunContext, call: CallTool) -> Executed:
    ledger = ctx.gate.gated_ledger(call)
    if ledger is None:
        return _through_gate(ctx, call)
    with ctx.gate.lock(ledger):  # an identical gated side effect in flight settles before this one is asked about
        return _through_gate(ctx, call)


def _through_gate(ctx: RunContext, call: CallTool) -> Executed:
    gate = ctx.gate
    admitted = gate.admit(call)
    if admitted is None:  # nothing to gate, record or deduplicate
        return gate.done(call.key, _tool_attempts(ctx, call, 1))
    if type(admitted) is not Admitted:
        return admitted  # type: ignore[return-value]
    if admitted.ledger is None:
        return gate.finish(admitted, _tool_attempts(ctx, call, gate.begin(admitted)))
    with gate.lock(admitted.ledger):  # two identical side effects at once: the second reuses
        return gate.reuse(admitted) or gate.finish(admitted, _tool_attempts(ctx, call, gate.begin(admitted)))


def _tool_attempts(ctx: RunContext, call: CallTool, attempt: int) -> ToolResult:
    """The tool run, and run again after a failure the run's `retry=` covers when the gate
    finds that safe (`ToolGate.retry_tool`; StopRun when the call is left in doubt)."""
    while True:
        result = _run_tool(ctx, call, attempt)
        delay = ctx.gate.retry_tool(call, result, attempt) if ctx.retry is not None else None
        if delay is None:
            return result
        time.sleep(delay)
        attempt += 1


def _run_tool(ctx: RunContext, call: CallTool, attempt: int) -> ToolResult:
    token = bind_call(ctx, call.key, attempt, call.name)  # for lw.current_call()
    in_flight = ctx.in_flight
    in_flight[call.key] = (call.name, call.args, time.perf_counter())
    events = ctx.events
    if events is not None:
        step = ctx.next_index
        events.tool_started(step, call.name, call.args, call.key)
    timeout = ctx.attempt_limit()[0] if ctx.timed or ctx.retry is not None else None
    try:
        result = ctx.registry.execute(call.name, call.args, timeout_s=timeout)
    finally:
        unbind_call(token)
    in_flight.pop(call.key, None)  # kept when Ctrl-C cut the call: the trace says what was running
    if events is not None:
        events.tool_finished(step, call.key, result)
    return result


USER_CODE = (Evaluate, Embed, Remember, Recall)
"""The requests for the user's code (an evaluator, an embedder, a memory): `user_call`."""


def user_call(ctx: RunContext, request: Evaluate | Embed | Remember | Recall) -> Callable[[], Any]:
    """The call of user code a request asks for; the driver makes it and answers with what
    it returned, or the Exception it raised (the async driver on a thread)."""
    if isinstance(request, Evaluate):
        return partial(request.evaluator, ctx.task, ctx.trace)
    if isinstance(request, Embed):
        return partial(request.embedder.embed, request.texts)
    if isinstance(request, Remember):
        return partial(_remember, request.memory, request.texts, request.metadatas)
    from loopwright.memory.tiered import context_within  # numpy: only when folding

    return partial(context_within, request.memory, request.query, request.tokens, request.render,
                   exclude=request.exclude)


def _remember(memory: Any, texts: list[str], metadatas: list[dict[str, Any]]) -> list[Any]:
    """File texts in a memory: one `add_many` batch (one embedding batch) when it has
    one, else `add` for each. The summaries it would make are not made here: they are
    returned (PendingSummary), for Summarize requests the driver serves as model calls."""
    from loopwright.memory.summary import deferred_summaries

    with deferred_summaries() as pending:
        add_many = getattr(memory, "add_many", None)
        if callable(add_many):
            add_many(texts, metadatas)
        else:
            for text, metadata in zip(texts, metadatas, strict=True):
                memory.add(text, metadata)
    return pending


def summarize(ctx: RunContext, request: Summarize) -> ModelCall | Exception:
    """The summarizer call a Summarize asks for (on a thread held to the run's clock when
    it has one), folded into the memory; or the Exception the summarizer raised."""
    pending, start = request.pending, time.perf_counter()
    n, recorded = ctx.begin_summary()
    if recorded is None:
        call = partial(policy_reply, pending.summarizer, pending.request)
        ok, reply = capture(call) if not ctx.timed else call_in_thread(call, ctx.deadline.remaining(), "summarizer")
        if not ok:
            return ctx.summary_timed_out(start) if isinstance(reply, Timeout) else reply
        recorded = ctx.summary_done(n, pending.request, reply, start)
    pending.apply(recorded.text)
    return recorded


class Run(Iterator[Step]):
    """A run in progress: iterate it to get each Step as it happens; `.trace` is the
    live (partial) trace. Ctrl-C marks the trace "interrupted" and raises RunInterrupted,
    a KeyboardInterrupt that carries it."""

    def __init__(self, ctx: RunContext, machine: StepGen) -> None:
        self._ctx = ctx
        self._machine = machine
        self._finished = False
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._started: set[concurrent.futures.Future[CallDone]] = set()
        # with output guardrails a step goes out once the machine has said what comes next
        # (`hold`), and the run's last step only after the output verdict (`finish`)
        self._next: Any = None  # what the machine asked for after the step last handed out
        self._held: Step | None = None  # the step the machine ended on, waiting for the verdict

    # -- the lifecycle the async driver, the event watchers and agents use -------------

    @property
    def trace(self) -> Trace:
        return self._ctx.trace

    @property
    def context(self) -> RunContext:
        """The run's state (its limits, gate, observers, events): what another driver of
        the same machine, or an agent starting a child run, works with."""
        return self._ctx

    @property
    def machine(self) -> StepGen:
        """The mode's step machine this run drives (AsyncRun drives it on an event loop)."""
        return self._machine

    @property
    def finished(self) -> bool:
        """Whether the run has ended (its observers told, its machine closed)."""
        return self._finished

    def __iter__(self) -> Run:
        return self

    def __next__(self) -> Step:
        if self._finished:
            raise StopIteration
        try:
            return self._advance()
        except StopIteration:
            last = self.finish()
            if last is not None:
                return last
            raise
        except BaseException as exc:
            self.end(exc)
            raise StopIteration from exc

    def _advance(self, to_end: bool = False) -> Step:
        """Serve the machine's requests until it yields its next Step (recorded here); with
        `to_end`, record each Step and go on until the machine returns (StopIteration)."""
        machine, ctx = self._machine, self._ctx
        guards = ctx.guards
        if guards is not None and not guards.started:
            begin_guards(ctx)
        hold = guards is not None and bool(guards.outputs)
        item, self._next = (machine.send(None), None) if self._next is None else (self._next, None)
        while True:
            if guards is not None and guards.race is not None and type(item) is not ModelRequest:
                settle_race(ctx)  # nothing the model said leaves, and no tool runs, before it allows
            if type(item) is Step:
                step = item
                if hold:
                    item = self.hold(step)  # StopIteration: the run's last step waits for the verdict
                else:
                    ctx.record(step)
                    item = None
                if not to_end:
                    self._next = item
                    return step
                if item is None:
                    item = machine.send(None)
                continue
            try:
                if type(item) is ModelRequest:
                    value: Any = call_model(ctx, item)
                elif type(item) is CallTool:
                    value = execute(ctx, item)
                elif type(item) is StartTool:
                    self._start(item.call)
                    value = None
                elif isinstance(item, WRITES):
                    ctx.apply(item)
                    value = None
                elif isinstance(item, USER_CODE):
                    value = capture(user_call(ctx, item))[1]
                elif type(item) is Summarize:
                    value = summarize(ctx, item)
                elif type(item) is CheckClock:
                    value = ctx.timed and ctx.expired()
                else:  # NextDone
                    value = self._next_done()  # a StopRun from the gate is raised here, and thrown in
            except (PolicyFailed, StopRun) as exc:
                failure: BaseException = exc
            else:
                item = machine.send(value)
                continue
            item = machine.throw(failure)  # thrown in outside the handler: no chained context

    # -- ReWOO's parallel workers: a thread pool of this run ---------------------------

    def _start(self, call: CallTool) -> None:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(32, thread_name_prefix="loopwright-worker")
        self._started.add(self._pool.submit(_started_call, self._ctx, call))

    def _next_done(self) -> CallDone:
        done = next(iter(concurrent.futures.wait(self._started, return_when="FIRST_COMPLETED")[0]))
        self._started.discard(done)
        return done.result()  # a StopRun from the gate is raised here, and thrown in

    # -- the end ---------------------------------------------------------------------

    def hold(self, step: Step) -> Any:
        """Record a step, and send its event once the machine has asked for what comes
        next (returned); when the machine ends instead (StopIteration), the step waits
        for the output verdict (`finish`)."""
        self._ctx.record(step, emit=False)
        self._held = step
        try:
            following = self._machine.send(None)
            while isinstance(following, WRITES):  # its Stop or Record: still the end of the run
                self._ctx.apply(following)
                following = self._machine.send(None)
        except StopIteration:
            raise
        except BaseException:
            self.release()
            raise
        self.release()
        return following

    def release(self, send: bool = True) -> Step | None:
        """Send the held step's event (not when a block withholds it); the step."""
        step, self._held = self._held, None
        ctx = self._ctx
        if step is not None and ctx.events is not None and send:
            ctx.events.step(step if ctx.guards is None else ctx.guards.as_sent(step))
        return step

    def finish(self) -> Step | None:
        """The machine returned: the guardrails still owed a verdict give it (a block ends
        the run "guardrail", the step it ended on never sent), then the run closes. The
        step the machine ended on, when it waited for the verdict and was allowed."""
        if self._ctx.guards is not None:
            try:
                settle_output(self._ctx)
            except BaseException as exc:
                self.release(send=False)
                self.end(exc)
                return None
        step = self.release()
        self.close()
        return step

    def end(self, exc: BaseException) -> None:
        """End the run on what the mode raised: StopRun and defects (any Exception) are
        recorded on the trace; Ctrl-C becomes RunInterrupted; anything else propagates."""
        ctx = self._ctx
        if isinstance(exc, StopRun):
            ctx.stop(exc.reason)
        elif isinstance(exc, KeyboardInterrupt):
            self.interrupt()
            raise RunInterrupted(self.trace) from exc
        elif isinstance(exc, StoreError) and ctx.journal is not None and ctx.journal.failed is not None:
            store_failed(self.trace, exc)  # a journal write failed: stop, and write nothing more
        elif isinstance(exc, Exception):  # a defect in a mode: keep the partial trace, say why
            ctx.record(
                Step(ctx.next_index, "error", error=f"internal error: {type(exc).__name__}: {exc}",
                     meta={"traceback": traceback.format_exc()})
            )
            ctx.stop("error")
        else:
            raise exc
        self.close()

    def interrupt(self) -> None:
        """End the run as "interrupted" (unless it had a stop reason already): the calls
        cut off go in the trace's meta["in_flight"]; the run can be resumed."""
        ctx = self._ctx
        if self.trace.stopped_reason is None:
            ctx.stop("interrupted")
        if ctx.in_flight:
            self.trace.meta["in_flight"] = self.in_flight
            ctx.in_flight.clear()
        self.close()

    @property
    def in_flight(self) -> list[dict[str, Any]]:
        """The calls running now (a snapshot): {"call": "model" | "tool", "tool", "args", "key", "elapsed_s"}."""
        now = time.perf_counter()
        return [{"call": "model" if tool is None else "tool", "tool": tool, "args": args, "key": key,
                 "elapsed_s": round(now - start, 3)} for key, (tool, args, start) in list(self._ctx.in_flight.items())]

    def close(self) -> None:
        """End the run here (once): its duration set, its machine closed, calls still
        running abandoned, its observers told (the journal records the end)."""
        if not self._finished:
            self._finished = True
            ctx = self._ctx
            self.trace.duration_s = time.perf_counter() - ctx.started
            end_machine(ctx, self._machine)
            if self._pool is not None:  # calls still running are abandoned, as at a timeout
                self._pool.shutdown(wait=False, cancel_futures=True)
            for observer in ctx.observers:
                observer.end(self.trace)

    def run(self) -> Trace:
        """Drive the run to its end and return the trace."""
        if not self._finished:
            try:
                self._advance(to_end=True)
            except StopIteration:
                self.finish()
            except BaseException as exc:
                self.end(exc)
        return self.trace


def end_machine(ctx: RunContext, machine: StepGen) -> None:
    """Close a machine the run ended around (interrupted, stopped by the driver): a StopRun
    is thrown in first, so the cleanup it does with `modes.machine.recorded` still writes
    the trace (the Stop, Record and UseTools it yields are applied here)."""
    if inspect.getgeneratorstate(machine) == inspect.GEN_SUSPENDED:
        try:
            item = machine.throw(StopRun("ended", "the run ended outside its machine"))
            while isinstance(item, WRITES):
                ctx.apply(item)
                item = machine.send(None)
        except (StopRun, StopIteration):
            pass
    machine.close()


def _started_call(ctx: RunContext, call: CallTool) -> CallDone:
    return CallDone(call.key, execute(ctx, call))


__all__ = ["USER_CODE", "Run", "begin_guards", "call_model", "end_machine", "execute", "settle_output", "settle_race",
           "summarize", "user_call"]
