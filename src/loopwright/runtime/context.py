"""What every mode shares: the run context (the task, limits, deadline and the trace), the
read-only view of it a machine is handed, the bookkeeping of a model call on either side
of the driver's call, and how a run's context is opened from its options (the journal
started, the observers listed)."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from types import FunctionType, MappingProxyType
from typing import Any, Literal

from loopwright import otel
from loopwright.errors import TransientModelError
from loopwright.events import Emitter, EventSink
from loopwright.guards import Deadline, RunLimits
from loopwright.modes.machine import (
    Journal,
    ModelCall,
    PolicyFailed,
    Record,
    Stop,
    StopRun,
    UseTools,
)
from loopwright.modes.toolsearch import context_window
from loopwright.offload import Timeout
from loopwright.outputs import OutputSpec, output_spec
from loopwright.policy import Completion, ModelRequest, Policy, retried_by_run
from loopwright.prompting.templates import DEFAULT_PROMPTS, PromptSet
from loopwright.runtime.calls import ephemeral_run_id
from loopwright.runtime.gate import ToolGate
from loopwright.runtime.guardrails import RunGuards
from loopwright.runtime.observers import CostMeter, JournalObserver, Observer, cost_meter
from loopwright.runtime.retry import Retry, attempt_record, error_text, model_failure
from loopwright.runtime.spec import RunSpec
from loopwright.safety import Approver
from loopwright.tools.registry import ToolRegistry
from loopwright.tools.toolset import tool_set
from loopwright.trace import Step, Trace, Usage


class RunContext:
    """The state of one run that is not the mode's own: limits, deadline, counters, the
    trace, the calls in flight, the tool gate and the observers."""

    __slots__ = ("task", "policy", "registry", "unscoped", "limits", "prompts", "trace", "deadline", "timed",
                 "started", "_schemas", "prompt_only", "journal", "output", "gate", "observers", "cost", "events",
                 "in_flight", "_ephemeral_id", "agent", "parent", "asynchronous", "summaries", "guards", "retry", "attempts",
                 "call_meta", "in_turn", "ain_turn", "__weakref__")  # fmt: skip

    def __init__(
        self,
        task: str,
        mode: str,
        policy: Policy,
        registry: ToolRegistry,
        limits: RunLimits,
        prompts: PromptSet = DEFAULT_PROMPTS,
        *,
        tools: Iterable[str] | None = None,
        approver: Approver | None = None,
        on_deny: Literal["observe", "stop"] = "observe",
        journal: Journal | None = None,
        run_id: str | None = None,
        rerun_unfinished: bool = False,
        output_type: Any = None,
    ) -> None:
        if not isinstance(task, str):
            raise TypeError(f"task must be a str, got {type(task).__name__}")
        if not isinstance(registry, ToolRegistry):
            raise TypeError(f"registry must be a loopwright.ToolRegistry, got {type(registry).__name__}")
        if not (callable(policy) or callable(getattr(policy, "complete", None))
                or callable(getattr(policy, "acomplete", None))):
            raise TypeError(
                f"policy must be a callable str -> str or have complete(request), got {type(policy).__name__}"
            )
        self.task = task
        self.policy = policy
        self.registry = registry if tools is None else registry.subset(tools)
        self.unscoped = registry  # what a `tools=` scope was cut from (tool search indexes it once)
        self.limits = limits
        self.prompts = prompts
        self.trace = Trace(task=task, mode=mode, run_id=run_id)
        self.deadline = Deadline(limits.timeout_s)
        self.timed = limits.timeout_s is not None  # else the drivers ask the deadline nothing
        self.started = time.perf_counter()
        self._schemas: tuple[dict[str, Any], ...] | None = None
        # a plain callable policy gets only the prompt: no tool schemas or known calls to build
        self.prompt_only = journal is None and (
            type(policy) is FunctionType  # a plain function: no attribute to look for
            or (not callable(getattr(policy, "complete", None)) and not callable(getattr(policy, "acomplete", None)))
        )
        self.journal = journal
        self.output = output_spec(output_type)  # a typed final answer, or None
        self.gate = ToolGate(self, journal, approver, on_deny, rerun_unfinished)
        self.observers: list[Observer] = [] if journal is None else [JournalObserver(journal)]
        self.cost: CostMeter | None = None  # set by open_context with prices or a cost budget
        self.events: Emitter | None = None  # set by open_context when someone watches the run
        # calls in flight by key ("model", or a tool call's key): (tool or None, args, start);
        # removed when the call returns, so after Ctrl-C what is left was cut off
        self.in_flight: dict[str, tuple[str | None, dict[str, Any] | None, float]] = {}
        self._ephemeral_id: str | None = None
        self.agent: str | None = None  # the agent's name when an lw.Agent runs this
        self.parent: tuple[RunContext, str] | None = None  # a child agent's run: its parent and call key
        self.asynchronous = False  # driven by the async driver (an agent tool then awaits its child)
        self.summaries = 0  # summarizer calls made for the run's memory (journaled as model calls -1, -2, ...)
        self.guards: RunGuards | None = None  # set by open_context when the run has guardrails
        self.retry: Retry | None = None  # set by open_context: the run's retry= policy
        self.attempts: list[dict[str, Any]] = []  # the current model call's failed attempts (retry.attempt_record)
        self.call_meta: dict[str, Any] = {}  # what the last model call adds to the next step's meta
        # lw.models.Fallback answers through each of its models in turn, with the driver's retrying call
        self.in_turn: Callable[..., Any] | None = _method(policy, "answer_in_turn")
        self.ain_turn: Callable[..., Any] | None = _method(policy, "aanswer_in_turn")

    def call_run_id(self) -> tuple[str, bool]:
        """The run id `lw.current_call()` reports, and whether it is durable."""
        if self.trace.run_id is not None:
            return self.trace.run_id, self.journal is not None
        if self._ephemeral_id is None:
            self._ephemeral_id = ephemeral_run_id()
        return self._ephemeral_id, False

    @property
    def schemas(self) -> tuple[dict[str, Any], ...]:
        """The tools' schemas for this run (built on first use: a plain policy on a text
        dialect never needs them)."""
        if self._schemas is None:
            self._schemas = tuple(self.registry.schemas())
        return self._schemas

    @property
    def context_window(self) -> int | None:
        """The model's context window in tokens, as the policy reports it, or None."""
        return context_window(self.policy)

    def use_registry(self, registry: ToolRegistry) -> None:
        """Run on these tools from now on (tool search narrows and grows the run's set)."""
        self.registry = registry
        self._schemas = None

    # -- the trace -------------------------------------------------------------------

    @property
    def next_index(self) -> int:
        return len(self.trace.steps) + 1

    def record(self, step: Step, emit: bool = True) -> Step:
        """Add a step to the trace and tell the observers; with emit=False the watchers'
        event waits (the driver sends it once the output guardrails allow, or never)."""
        if self.call_meta:  # the model call this step came from: its attempts, the model that answered
            step.meta.update(self.call_meta)
            self.call_meta = {}
        self.trace.steps.append(step)
        for observer in self.observers:
            if emit or observer is not self.events:
                observer.step(step)
        return step

    def stop(self, reason: str | None, answer: str | None = None) -> None:
        self.trace.stopped_reason = reason
        self.trace.final_answer = answer

    def apply(self, request: Stop | Record | UseTools) -> None:
        """Make the change to the run a machine asked for (the only way it changes its run)."""
        if type(request) is Stop:
            self.stop(request.reason, request.answer)
            if request.output is not None:
                self.trace.output = request.output
        elif type(request) is UseTools:
            self.use_registry(request.registry)
        else:
            assert type(request) is Record
            trace = self.trace
            if request.transcript is not None:
                trace.transcript = request.transcript
            if request.scratchpad is not None:
                trace.scratchpad = request.scratchpad
            if request.replans is not None:
                trace.replans = request.replans
            if request.meta:
                trace.meta.update(copy.deepcopy(request.meta))
            if request.outputs:
                for handle, text in request.outputs.items():
                    trace.outputs.setdefault(handle, text)

    def expired(self) -> bool:
        return self.deadline.expired()

    def guard_after_call(self) -> str | None:
        """The stop reason if the token or cost budget or the wall clock is spent, else None."""
        budget = self.limits.token_budget
        if budget is not None and self.trace.usage.total_tokens >= budget:
            return "token_budget"
        if self.cost is not None and self.cost.spent():
            return "cost_budget"
        if self.timed and self.deadline.expired():
            return "timeout"
        return None

    # -- a model call, either side of the driver's call to the policy ----------------

    def begin_model(self, start: float) -> ModelCall | None:
        """Count the call; a resumed run's recorded answer (the call was paid for
        already), else None and the call is in flight since `start`. Raises StopRun when
        child agents spent what was left of a budget (their calls count against this run's)."""
        trace = self.trace
        if trace.children and (spent := self.guard_after_call()) is not None:
            raise StopRun(spent, f"{spent}: the run's child agents spent what was left")
        trace.llm_calls += 1
        if self.attempts:  # the last call's failed attempts went with it
            self.attempts = []
        if self.journal is not None:
            recorded = self.journal.recorded_completion(trace.llm_calls)
            if recorded is not None:
                completion, usage = recorded
                self._call_meta(completion)
                if self.cost is not None:
                    self.cost.answered(completion, usage)
                trace.add_usage(usage)
                return ModelCall(completion.text, completion, usage, 0.0, _retries(completion),
                                 self.guard_after_call())
        self.in_flight["model"] = (None, None, start)
        return None

    def adopt(self, key: str, child_run_id: str, child: Trace, step_meta: Mapping[str, Any] | None = None) -> None:
        """Take in a child agent's run started by tool call `key`: its trace kept in
        `trace.children`, its usage and cost added to this run's, the call's step told
        its id (and `step_meta`, such as a remote agent's task id). Safe from ReWOO's
        worker threads."""
        with self.gate.lock("\x00children"):  # the gate's named lock: ReWOO may run two at once
            trace = self.trace
            trace.children[child_run_id] = child
            trace.add_usage(child.usage)
            self.gate.children[key] = child_run_id
            if step_meta:
                self.gate.step_meta[key] = dict(step_meta)
            cost = child.meta.get("cost_usd")
            if self.cost is not None:
                self.cost.add_child(child.usage, cost if isinstance(cost, int | float) else None)
            elif isinstance(cost, int | float):
                trace.meta["cost_usd"] = trace.meta.get("cost_usd", 0.0) + float(cost)

    def model_done(self, request: ModelRequest, reply: str | Completion, start: float) -> ModelCall:
        """The answer, journaled before it is used and added to the run's usage."""
        self.in_flight.pop("model", None)
        if self.attempts:  # it answered after failed attempts: they are journaled with the answer
            reply = Completion(reply) if isinstance(reply, str) else reply
            reply.meta["attempts"] = self.attempts
        completion: Completion | None
        if isinstance(reply, str):  # a plain policy's answer
            completion, text, usage = None, reply, Usage.estimate(request.prompt, reply)
        else:
            completion, text = reply, reply.text
            usage = reply.usage or Usage.estimate(request.prompt, text)
            self._call_meta(completion)
            if self.cost is not None:
                self.cost.answered(completion, usage)
        if self.observers:
            recorded = completion or Completion(text)
            for observer in self.observers:
                observer.model(self.trace.llm_calls, request, recorded, usage, start)
        self.trace.add_usage(usage)
        seconds = time.perf_counter() - start
        return ModelCall(text, completion, usage, seconds, None if completion is None else _retries(completion),
                         self.guard_after_call())

    # -- a summary the run's memory asked for (modes.machine.Summarize) ---------------

    def begin_summary(self) -> tuple[int, ModelCall | None]:
        """The journal's number for the next summarizer call (-1, -2, ...: kept apart
        from the run's counted model calls, which `llm_calls` and ReAct's one call a step
        count), and its recorded answer when a resumed run has one (its usage counted)."""
        self.summaries += 1
        n = -self.summaries
        if self.journal is not None:
            recorded = self.journal.recorded_completion(n)
            if recorded is not None:
                completion, usage = recorded
                self.trace.add_usage(usage)
                return n, ModelCall(completion.text, completion, usage, 0.0, None, self.guard_after_call())
        return n, None

    def summary_done(self, n: int, request: ModelRequest, reply: str | Completion, start: float) -> ModelCall:
        """The summarizer's answer, journaled and counted in the run's usage; its `stop`
        is the limit the run reached with it."""
        completion = Completion(reply) if isinstance(reply, str) else reply
        usage = completion.usage or Usage.estimate(request.prompt, completion.text)
        if self.journal is not None:
            self.journal.record_completion(n, request, completion, usage)
        self.trace.add_usage(usage)
        return ModelCall(completion.text, completion, usage, time.perf_counter() - start, None, self.guard_after_call())

    def summary_timed_out(self, start: float) -> ModelCall:
        """A summarizer call that outlived the run's clock: no text, and the run stops."""
        return ModelCall("", None, Usage(), time.perf_counter() - start, None, "timeout")

    def model_failed(self, request: ModelRequest, exc: BaseException, start: float) -> PolicyFailed:
        """The choke point for a policy's failure: what the mode is thrown (its failed
        attempts go on the step the mode records for it)."""
        self.in_flight.pop("model", None)
        seconds = time.perf_counter() - start
        if isinstance(exc, Timeout):
            message, reason = f"model call outlived the run's timeout_s={self.limits.timeout_s}", "timeout"
        else:
            message, reason = f"policy raised {type(exc).__name__}: {exc}", "error"
        if self.attempts:
            message += f" (after {len(self.attempts)} attempt{'s' if len(self.attempts) > 1 else ''})"
            self.call_meta["attempts"] = self.attempts
            if self.expired():  # the wait for another attempt would have outlasted the clock
                reason = "timeout"
        fallback = getattr(exc, "fallback", None)  # lw.models.Fallback: no model answered
        if fallback:
            self.call_meta["fallback"] = fallback
        for observer in self.observers:
            observer.model_failed(request.purpose, message, seconds, meta=self.call_meta)
        return PolicyFailed(message, reason, seconds)

    def _call_meta(self, completion: Completion) -> None:
        """What a model call's Completion puts on the step it leads to: its failed attempts,
        and with lw.models.Fallback the model that answered and why the ones before did not."""
        meta = completion.meta
        for key in _STEP_KEYS:
            if key in meta:
                self.call_meta[key] = meta[key]

    # -- retries (retry=lw.Retry(...); see runtime/retry.py) -------------------------

    def attempt_limit(self) -> tuple[float | None, bool]:
        """How long the next attempt of a call may take (None: no limit), and whether that
        is the retry policy's per-attempt limit rather than the run's clock."""
        remaining = self.deadline.remaining() if self.timed else None
        own = None if self.retry is None else self.retry.per_attempt_timeout_s
        if own is not None and (remaining is None or own < remaining):
            return own, True
        return remaining, False

    def attempt_timed_out(self, exc: BaseException, own: bool) -> BaseException:
        """An attempt that outlived its limit: past the per-attempt one it is a transient
        "timeout" (it may be retried); past the run's clock the run's own timeout."""
        if own and isinstance(exc, Timeout) and self.retry is not None:
            return TransientModelError(f"the attempt took longer than per_attempt_timeout_s="
                                       f"{self.retry.per_attempt_timeout_s:g}", "timeout")
        return exc

    def retrying(self) -> AbstractContextManager[None]:
        """Around an attempt: with `retry=`, a backend's own retries are off (one place decides)."""
        return retried_by_run() if self.retry is not None else nullcontext()

    def retry_model(self, exc: BaseException, attempt: int, policy: Any) -> float | None:
        """After failed attempt `attempt` of a model call: the seconds to wait before the
        next one, or None to give up. Each failure is recorded (`attempts`); no wait is
        begun that the run's clock would not outlast."""
        retry, kind = self.retry, model_failure(exc)
        if retry is None or kind is None:
            return None
        delay: float | None = None
        if retry.covers(kind) and attempt < retry.attempts:
            delay = retry.delay(attempt, getattr(exc, "retry_after_s", None))
            if self.timed and delay >= (self.deadline.remaining() or 0.0):
                delay = None
        model = _model_name(policy) if policy is not self.policy else None
        self.attempts.append(attempt_record(attempt, kind, error_text(exc), delay, model))
        return delay


class TraceSoFar:
    """A run's trace as its machine reads it (modes.machine.TraceView): read-only."""

    __slots__ = ("_trace",)
    _trace: Trace

    def __init__(self, trace: Trace) -> None:
        object.__setattr__(self, "_trace", trace)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a machine's trace is read-only (it set {name!r}): a machine yields Stop or Record")

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(self._trace.steps)

    @property
    def llm_calls(self) -> int:
        return self._trace.llm_calls

    @property
    def replans(self) -> int:
        return self._trace.replans

    @property
    def stopped_reason(self) -> str | None:
        return self._trace.stopped_reason

    @property
    def final_answer(self) -> str | None:
        return self._trace.final_answer

    @property
    def outputs(self) -> Mapping[str, str]:
        return MappingProxyType(self._trace.outputs)

    @property
    def meta(self) -> Mapping[str, Any]:
        return MappingProxyType(self._trace.meta)


class ContextView:
    """What a machine is handed of its run (modes.machine.RunView): what it reads of the
    RunContext, read-only. A machine changes its run only by the requests it yields."""

    __slots__ = ("_ctx", "trace")
    _ctx: RunContext
    trace: TraceSoFar

    def __init__(self, ctx: RunContext) -> None:
        object.__setattr__(self, "_ctx", ctx)
        object.__setattr__(self, "trace", TraceSoFar(ctx.trace))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a machine's view of its run is read-only (it set {name!r}): a machine yields "
                             "Stop, Record or UseTools")

    @property
    def task(self) -> str:
        return self._ctx.task

    @property
    def prompts(self) -> PromptSet:
        return self._ctx.prompts

    @property
    def registry(self) -> ToolRegistry:
        return self._ctx.registry

    @property
    def unscoped(self) -> ToolRegistry:
        return self._ctx.unscoped

    @property
    def schemas(self) -> tuple[dict[str, Any], ...]:
        return self._ctx.schemas

    @property
    def limits(self) -> RunLimits:
        return self._ctx.limits

    @property
    def output(self) -> OutputSpec | None:
        return self._ctx.output

    @property
    def prompt_only(self) -> bool:
        return self._ctx.prompt_only

    @property
    def context_window(self) -> int | None:
        return self._ctx.context_window

    @property
    def next_index(self) -> int:
        return len(self._ctx.trace.steps) + 1


def open_context(
    spec: RunSpec, policy: Policy, registry: ToolRegistry, journal: Journal | None = None,
    rerun_unfinished: bool = False, sinks: Sequence[EventSink] = (), agent: str | None = None,
) -> RunContext:
    """The context of a run started from `spec`. With a store, the run is journaled first:
    its config (`spec.config()`, plus the tool set: each tool's name and schema
    fingerprint) is saved so `resume` can rebuild it. `journal` is given when resume or
    fork continue a run; rerun_unfinished is resume's. With `sinks`, the run pushes its
    events there (tagged with `agent`, a child run's agent name), starting with RunStarted."""
    limits = spec.run_limits()
    run_id = spec.run_id
    if spec.store is not None and journal is None:
        config = spec.config()
        config["tool_set"] = tool_set(registry if spec.tools is None else registry.subset(spec.tool_scope() or ()))
        run_id, journal = spec.store.start_run(run_id, spec.task, spec.mode, config)
    ctx = RunContext(
        spec.task, spec.mode, policy, registry, limits, spec.prompts or DEFAULT_PROMPTS,
        tools=spec.tool_scope(), approver=spec.approver, on_deny=spec.on_deny, journal=journal, run_id=run_id,
        rerun_unfinished=rerun_unfinished, output_type=spec.output_type,
    )
    if spec.guardrails:
        ctx.guards = RunGuards(ctx, spec.guardrails, journal)
    ctx.retry = spec.retry
    ctx.cost = cost_meter(policy, spec.cost_budget_usd, spec.prices, ctx.trace)
    spans = otel.run_spans(spec.tracer, spec.task, spec.mode, policy, run_id,
                           None if ctx.cost is None else ctx.cost.price)
    if ctx.cost is not None:  # the first observer: a step's cost is on it when the journal and spans see it
        ctx.observers.insert(0, ctx.cost)
    if spans is not None:
        ctx.observers.append(spans)
    if sinks:  # the last observer: a Step's event goes out once the journal holds it
        ctx.events = Emitter(ctx.call_run_id()[0], sinks, agent)
        ctx.observers.append(ctx.events)
        ctx.events.started(spec.task, spec.mode)
    return ctx


_STEP_KEYS = ("attempts", "answered_by", "fallback")


def _method(policy: Any, name: str) -> Callable[..., Any] | None:
    method = getattr(policy, name, None)
    return method if callable(method) else None


def _model_name(policy: Any) -> str:
    name = getattr(policy, "name", None) or getattr(policy, "model", None)
    return name if isinstance(name, str) else type(policy).__name__


def _retries(completion: Completion) -> Any:
    """Transient errors the backend retried for this call (its `meta["retries"]`)."""
    return completion.meta.get("retries") if completion.meta else None


__all__ = ["ContextView", "RunContext", "TraceSoFar", "open_context"]
