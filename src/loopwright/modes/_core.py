"""What every mode shares: the run context (limits, counters, the trace), the one place a
model is called, the one place a tool is executed, and the Run iterator that drives a
mode's step generator."""

from __future__ import annotations

import asyncio
import threading
import time
import traceback
from collections.abc import Generator, Iterable, Iterator
from typing import Any, Literal

from loopwright import otel, pricing
from loopwright.calls import CURRENT_CALL, bind_call, ephemeral_run_id, unbind_call
from loopwright.errors import RunInterrupted
from loopwright.guards import Deadline, Limits, call_key
from loopwright.modes._contracts import Bridge, Executed, Journal, ModelCall, PolicyFailed, StopRun
from loopwright.modes._policycall import _call_within, _PolicyTimeout
from loopwright.outputs import output_spec
from loopwright.policy import Completion, ModelRequest, Policy, call_policy, is_async_policy
from loopwright.prompts import DEFAULT_PROMPTS, PromptSet
from loopwright.safety import (
    ApprovalPending,
    ApprovalRequest,
    Approver,
    Decision,
    approval_key,
    ask,
    denial_observation,
)
from loopwright.trace import Step, Trace, Usage, estimate_tokens
from loopwright.wire.tools import Tool, ToolError, ToolRegistry, ToolResult
from loopwright.wire.toolset import tool_set

__all__ = [  # the contracts are re-exported: the loops import them from here
    "Bridge",
    "Executed",
    "Journal",
    "ModelCall",
    "PolicyFailed",
    "Run",
    "RunContext",
    "StepGen",
    "StopRun",
    "first_line",
    "open_context",
]

StepGen = Generator[Step, None, None]


class RunContext:
    """The state of one run that is not the mode's own: limits, counters and the trace."""

    def __init__(
        self,
        task: str,
        mode: str,
        policy: Policy,
        registry: ToolRegistry,
        limits: Limits,
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
        self.limits = limits
        self.prompts = prompts
        self.trace = Trace(task=task, mode=mode)
        self.deadline = Deadline(limits.timeout_s)
        self.started = time.perf_counter()
        self._schemas: list[dict[str, Any]] | None = None
        # a plain callable policy, no journal, no wall clock: call_text() may be used
        self.plain_policy = (
            not callable(getattr(policy, "complete", None))
            and journal is None
            and limits.timeout_s is None
            and not is_async_policy(policy)
        )
        self.bridge: Bridge | None = None  # set when an event loop drives the run (asyncrun.py)
        if on_deny not in ("observe", "stop"):
            raise ValueError(f"on_deny must be 'observe' or 'stop', got {on_deny!r}")
        self.approver = approver
        self.on_deny = on_deny
        self.journal = journal
        self.rerun_unfinished = rerun_unfinished
        self.output = output_spec(output_type)  # a typed final answer, or None
        self.trace.run_id = run_id
        # calls in flight by key ("model", or a tool call's key): (tool or None, args, start);
        # removed when the call returns, so after Ctrl-C what is left was cut off (Run._end)
        self.in_flight: dict[str, tuple[str | None, dict[str, Any] | None, float]] = {}
        self._ledger: dict[str, tuple[str, ToolResult]] = {}
        self._key_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self.otel: otel.RunSpans | None = None  # OpenTelemetry spans, when tracing is on
        self.pricing: pricing.PriceFunction | None = None  # and cost_budget: set by pricing.attach
        self._ephemeral_id: str | None = None

    def call_run_id(self) -> tuple[str, bool]:
        """The run id `lw.current_call()` reports, and whether it is durable."""
        if self.trace.run_id is not None:
            return self.trace.run_id, self.journal is not None
        if self._ephemeral_id is None:
            self._ephemeral_id = ephemeral_run_id()
        return self._ephemeral_id, False

    def _call_tool(self, name: str, args: dict[str, Any], key: str, attempt: int = 1) -> ToolResult:
        """The registry's execute, with the call current for `lw.current_call()`."""
        token = CURRENT_CALL.set((self, key, attempt, name))  # bind_call, without the call
        in_flight = self.in_flight
        in_flight[key] = (name, args, time.perf_counter())
        try:
            if self.bridge is None:
                result = self.registry.execute(name, args, timeout_s=self.deadline.remaining())
            else:  # an async run: async tools go to its event loop
                result = self.bridge.execute(self.registry, name, args, self.deadline.remaining())
        finally:
            CURRENT_CALL.reset(token)
        in_flight.pop(key, None)  # kept when Ctrl-C cut the call: the trace says what was running
        return result

    @property
    def schemas(self) -> list[dict[str, Any]]:
        """The tools' schemas for this run (a copy, built on first use: a plain policy
        on a text dialect never needs them)."""
        if self._schemas is None:
            self._schemas = self.registry.schemas()
        return self._schemas

    # -- the trace -------------------------------------------------------------------

    @property
    def next_index(self) -> int:
        return len(self.trace.steps) + 1

    def record(self, step: Step) -> Step:
        self.trace.steps.append(step)
        if self.journal is not None:
            self.journal.record_step(step)
        if self.pricing is not None:
            pricing.charge(self.pricing, step)
        if self.otel is not None:
            self.otel.step(step)
        return step

    def stop(self, reason: str, answer: str | None = None) -> None:
        self.trace.stopped_reason = reason
        self.trace.final_answer = answer

    # -- the model: the one place a policy is called -------------------------------

    def call_model(self, request: ModelRequest) -> ModelCall:
        """Call the policy once. Counts the call, adds its usage to the run's total.

        Raises PolicyFailed when the policy raises or outlives the run's wall clock.
        """
        self.trace.llm_calls += 1
        start = time.perf_counter()
        if self.journal is not None:
            recorded = self.journal.recorded_completion(self.trace.llm_calls)
            if recorded is not None:  # resumed run: the call was paid for already
                completion, usage = recorded
                self.trace.usage = self.trace.usage + usage
                return ModelCall(completion.text, completion, usage, 0.0)
        remaining = self.deadline.remaining()
        bridge = self.bridge
        in_flight = self.in_flight
        in_flight["model"] = (None, None, start)
        try:
            if bridge is not None:
                completion = bridge.complete(self.policy, request, remaining)
            elif remaining is None:
                completion = call_policy(self.policy, request)
            else:
                completion = _call_within(self.policy, request, remaining)
            in_flight.pop("model", None)
        except StopRun:  # cancelled from the event loop; the call stays in in_flight
            raise
        except _PolicyTimeout:
            in_flight.pop("model", None)
            raise self._failed(request.purpose, PolicyFailed(f"model call outlived the run's timeout_s={self.limits.timeout_s}", "timeout"), start) from None
        except Exception as exc:  # the choke point: any policy failure ends the run cleanly
            in_flight.pop("model", None)
            raise self._failed(request.purpose, PolicyFailed(f"policy raised {type(exc).__name__}: {exc}"), start) from exc
        usage = completion.usage or Usage.estimate(request.prompt, completion.text)
        if self.journal is not None:  # written before it is used
            self.journal.record_completion(self.trace.llm_calls, request, completion, usage)
        self.trace.usage = self.trace.usage + usage
        if self.otel is not None:
            self.otel.model(request.purpose, request.prompt, completion.text, usage, start, completion.meta, self.pricing)
        return ModelCall(completion.text, completion, usage, time.perf_counter() - start)

    def _failed(self, purpose: str, failed: PolicyFailed, start: float) -> PolicyFailed:
        if self.otel is not None:
            self.otel.model_failed(purpose, failed.message, time.perf_counter() - start)
        return failed

    def call_text(self, prompt: str) -> ModelCall:
        """call_model for the common case, a plain callable policy with no journal and no
        wall clock: the policy gets the prompt directly, with no ModelRequest to build."""
        trace = self.trace
        trace.llm_calls += 1
        start = time.perf_counter()
        in_flight = self.in_flight
        in_flight["model"] = (None, None, start)
        try:
            out = self.policy(prompt)  # type: ignore[operator]
        except Exception as exc:  # the same choke point as call_model
            in_flight.pop("model", None)
            raise self._failed("react", PolicyFailed(f"policy raised {type(exc).__name__}: {exc}"), start) from exc
        del in_flight["model"]
        if type(out) is str:
            text, completion = out, None
        elif isinstance(out, Completion):
            text, completion = out.text, out
        elif isinstance(out, str):  # a str subclass
            text, completion = str(out), None
        else:
            raise PolicyFailed(
                f"policy raised TypeError: a policy must return str or loopwright.Completion, "
                f"got {type(out).__name__}"
            )
        if completion is None or completion.usage is None:
            sent = estimate_tokens(prompt)  # Usage.estimate, inline: the hot path
            usage = Usage(sent, sent, estimate_tokens(text), True)
        else:
            usage = completion.usage
        trace.usage = trace.usage + usage
        if self.otel is not None:
            self.otel.model("react", prompt, text, usage, start, None if completion is None else completion.meta, self.pricing)
        return ModelCall(text, completion, usage, time.perf_counter() - start)

    def guard_after_call(self) -> str | None:
        """The stop reason if the token or cost budget or the wall clock is spent, else None."""
        budget = self.limits.token_budget
        if budget is not None and self.trace.usage.total_tokens >= budget:
            return "token_budget"
        if self.pricing is not None and pricing.spent(self):
            return "cost_budget"
        if self.deadline.expired():
            return "timeout"
        return None

    # -- tools: the one place a tool is executed ------------------------------------

    def execute(self, name: str, args: dict[str, Any], key: str) -> Executed:
        """The execution choke point: approval, exactly-once, the journal, then the
        registry (which never raises for tool failures). `key` names this call within
        the run (ReAct step index, ReWOO step id) so a resumed run finds its result.

        Raises StopRun when the run must end here (denied with on_deny="stop", approval
        pending, or a side effect whose outcome is unknown after a crash)."""
        tool = self.registry.get(name)
        journal = self.journal
        if journal is None and (tool is None or (tool.idempotent and not tool.requires_approval)):
            # nothing to gate, record or deduplicate: straight to the registry
            return self._done(key, self._call_tool(name, args, key))
        recorded = journal.recorded_tool(key) if journal is not None else None
        if recorded is not None and recorded[0] == "done" and recorded[1] is not None:
            self.trace.tool_calls += 1
            if tool is not None and not tool.idempotent and recorded[1].error is None:
                self._ledger[name + "\x00" + _idempotency_key(tool, args)] = (key, recorded[1])
            return Executed(recorded[1], meta={"replayed": True})

        if tool is not None and tool.requires_approval:
            decision = self._approval(name, args, key, tool.side_effects, tool.description)
            if decision.approved is not True:  # fail closed on anything but an approval
                observation = denial_observation(name, decision.reason)
                denied = ToolResult(name, args, None, observation, ToolError(name, decision.reason, "denied"), 0.0)
                if self.otel is not None:
                    self.otel.tool(key, denied, "denied")
                if self.on_deny == "stop":
                    self.record(Step(self.next_index, "denied", tool=name, args=args,
                                     observation=observation, error=decision.reason))
                    raise StopRun("denied", observation)
                return Executed(denied, "denied")

        if tool is not None and not tool.idempotent:
            ledger_key = name + "\x00" + _idempotency_key(tool, args)
            with self._lock:
                lock = self._key_locks.setdefault(ledger_key, threading.Lock())
            with lock:  # two concurrent identical side effects: the second waits, then reuses
                done = self._ledger.get(ledger_key)
                if done is not None:
                    note = f"not run again: same call and idempotency key as {done[0]}"
                    return Executed(done[1], meta={"exactly_once": note})
                executed = self._run_tool(tool, tool.name, args, key, recorded)
                if executed.result.error is None:
                    self._ledger[ledger_key] = (key, executed.result)
                return executed
        return self._run_tool(tool, name, args, key, recorded)

    def _run_tool(
        self,
        tool: Tool | None,
        name: str,
        args: dict[str, Any],
        key: str,
        recorded: tuple[str, ToolResult | None] | None,
    ) -> Executed:
        if (
            recorded is not None
            and recorded[0] == "started"
            and tool is not None
            and not tool.idempotent
            and not tool.dedupes_on_call_key  # its system ignores the same key twice: safe to rerun
            and not self.rerun_unfinished
        ):
            message = (
                f"{name} was started before the run stopped but its result was not recorded; "
                f"it is not idempotent, so it was not run again. Check whether it took effect, "
                f"then settle it (store.settle or `loopwright runs settle`), resume with "
                f"rerun_unfinished=True, or finish the run by hand."
            )
            self.record(Step(self.next_index, "error", tool=name, args=args, error=message))
            raise StopRun("error", message)

        journal = self.journal
        attempt = 1
        if journal is not None:
            attempt = journal.attempt(key)
            journal.record_tool_start(key, name, args)
        result = self._call_tool(name, args, key, attempt)
        if journal is not None:
            journal.record_tool_result(key, result)
        return self._done(key, result)

    def _done(self, key: str, result: ToolResult) -> Executed:
        with self._lock:
            self.trace.tool_calls += 1
        if self.otel is not None:
            self.otel.tool(key, result)
        return Executed(result)

    async def aexecute(self, name: str, args: dict[str, Any], key: str) -> Executed:
        """execute() for the concurrent ReWOO scheduler. A plain call goes straight to the
        registry (async tools on the event loop, sync tools on the worker pool); a call
        that needs the gate (approval, exactly-once, journal) runs execute() on a worker
        thread."""
        tool = self.registry.get(name)
        gated = self.journal is not None or (
            tool is not None
            and (not tool.idempotent or tool.requires_approval)
        )
        if gated:
            return await asyncio.to_thread(self.execute, name, args, key)
        token = bind_call(self, key, 1, name)
        self.in_flight[key] = (name, args, time.perf_counter())
        try:
            if self.bridge is not None:
                result = await self.bridge.aexecute(self.registry, name, args, self.deadline.remaining())
            else:
                result = await self.registry.aexecute(name, args, timeout_s=self.deadline.remaining())
        finally:
            unbind_call(token)
        self.in_flight.pop(key, None)
        return self._done(key, result)

    def _approval(self, name: str, args: dict[str, Any], key: str, side_effects: str, description: str) -> Decision:
        request = ApprovalRequest(name, args, approval_key(name, args), key, side_effects,
                                  description, self.trace.run_id)
        journal = self.journal
        if journal is not None:
            known = journal.recorded_decision(request.key)
            if known is not None:
                return known
        if self.approver is None:  # fail closed: a gated tool never runs unapproved
            return Decision(False, "this tool needs approval and the run has no approver")
        try:
            decision = ask(self.approver, request)
        except ApprovalPending:
            self.trace.meta["pending_approval"] = request.to_dict()
            if journal is not None:
                journal.record_pending(request)
            raise StopRun("paused", f"waiting for approval of {name}") from None
        if journal is not None:
            journal.record_decision(request, decision)
        return decision


def _idempotency_key(tool: Any, args: dict[str, Any]) -> str:
    """Same arguments and same idempotency key make the same side effect. A tool may
    name the argument that carries its key (`idempotency_key="request_id"`) or give a
    function of the arguments; by default the key is the arguments themselves."""
    spec = getattr(tool, "idempotency_key", None)
    if callable(spec):
        return str(spec(args))
    if isinstance(spec, str):
        return call_key("", args) + "\x00" + str(args.get(spec))
    return call_key("", args)


RUN_OPTIONS = frozenset(
    {"prompts", "tools", "approver", "on_deny", "store", "run_id", "max_tokens", "memory", "context_tokens",
     "journal_meta", "tracer", "cost_budget_usd", "prices", "output_type"}
)


def open_context(
    task: str,
    mode: str,
    policy: Policy,
    registry: ToolRegistry,
    limits: Limits,
    config: dict[str, Any],
    options: dict[str, Any],
) -> RunContext:
    """Build a RunContext from a mode's limits and the run options shared by all modes.

    options: prompts, tools (the names this run may use), approver, on_deny, store (a
    durable journal: the run's config is saved so `resume` can rebuild it, with the tool
    set: each tool's name and schema fingerprint), run_id, max_tokens, journal_meta (JSON
    data saved with a journaled run's config under "meta": the CLI saves how it loaded
    the tools). Unknown names are a TypeError, not silently ignored.
    """
    journal: Journal | None = None
    rerun_unfinished = False
    if options:
        options = dict(options)
        journal = options.pop("_journal", None)  # set by resume()
        rerun_unfinished = bool(options.pop("_rerun_unfinished", False))
        unknown = sorted(options.keys() - RUN_OPTIONS)
        if unknown:
            raise TypeError(f"unknown run option(s): {', '.join(unknown)}")
    run_id = options.get("run_id")
    store = options.get("store")
    if store is not None and journal is None:
        scope = options.get("tools")
        config = {
            **config,
            "tools": None if scope is None else list(scope),
            "approver": options.get("approver") is not None,  # resume needs to know one was used
            "on_deny": options.get("on_deny", "observe"),
            "tool_set": tool_set(registry if scope is None else registry.subset(scope)),
        }
        if options.get("journal_meta") is not None:
            config["meta"] = dict(options["journal_meta"])
        run_id, journal = store.start_run(run_id, task, mode, config)
    tools = options.get("tools")
    ctx = RunContext(
        task,
        mode,
        policy,
        registry,
        limits,
        options.get("prompts") or DEFAULT_PROMPTS,
        tools=None if tools is None else list(tools),
        approver=options.get("approver"),
        on_deny=options.get("on_deny", "observe"),
        journal=journal,
        run_id=run_id,
        rerun_unfinished=rerun_unfinished,
        output_type=options.get("output_type"),
    )
    ctx.otel = otel.run_spans(options.get("tracer"), task, mode, policy, run_id)
    return pricing.attach(ctx, policy, options.get("cost_budget_usd"), options.get("prices"))


class Run(Iterator[Step]):
    """A run in progress: iterate it to get each Step as it happens; `.trace` is the
    live (partial) trace. Ctrl-C marks the trace "interrupted" and raises RunInterrupted,
    a KeyboardInterrupt that carries it."""

    def __init__(self, ctx: RunContext, steps: StepGen) -> None:
        self._ctx = ctx
        self._steps = steps
        self._finished = False

    @property
    def trace(self) -> Trace:
        return self._ctx.trace

    def __iter__(self) -> Run:
        return self

    def __next__(self) -> Step:
        if self._finished:
            raise StopIteration
        try:
            return next(self._steps)
        except StopIteration:
            self._finish()
            raise
        except BaseException as exc:
            self._end(exc)
            raise StopIteration from exc

    def _end(self, exc: BaseException) -> None:
        """End the run on what the mode raised: StopRun and defects (any Exception) are
        recorded on the trace; Ctrl-C becomes RunInterrupted; anything else propagates."""
        if isinstance(exc, StopRun):
            self._ctx.stop(exc.reason)
            if exc.reason == "interrupted" and self._ctx.in_flight:  # cancelled from the event loop
                self.trace.meta["in_flight"] = self.in_flight
                self._ctx.in_flight.clear()
        elif isinstance(exc, KeyboardInterrupt):
            if self.trace.stopped_reason is None:
                self._ctx.stop("interrupted")
            if self._ctx.in_flight:  # what Ctrl-C cut off goes in the partial trace
                self.trace.meta["in_flight"] = self.in_flight
                self._ctx.in_flight.clear()
            self._finish()
            raise RunInterrupted(self.trace) from exc
        elif isinstance(exc, Exception):  # a defect in a mode: keep the partial trace, say why
            self._ctx.record(
                Step(
                    self._ctx.next_index,
                    "error",
                    error=f"internal error: {type(exc).__name__}: {exc}",
                    meta={"traceback": traceback.format_exc()},
                )
            )
            self._ctx.stop("error")
        else:
            raise exc
        self._finish()

    @property
    def in_flight(self) -> list[dict[str, Any]]:
        """The calls running now (a snapshot): {"call": "model" | "tool", "tool", "args", "key", "elapsed_s"}."""
        now = time.perf_counter()
        return [{"call": "model" if tool is None else "tool", "tool": tool, "args": args, "key": key,
                 "elapsed_s": round(now - start, 3)} for key, (tool, args, start) in list(self._ctx.in_flight.items())]

    def _finish(self) -> None:
        if not self._finished:
            self._finished = True
            self.trace.duration_s = time.perf_counter() - self._ctx.started
            self._steps.close()
            if self._ctx.pricing is not None:
                pricing.spent(self._ctx)
            if self._ctx.journal is not None:
                self._ctx.journal.record_end(self.trace)
            if self._ctx.otel is not None:
                self._ctx.otel.end(self.trace)

    def run(self) -> Trace:
        """Drive the run to its end and return the trace."""
        if not self._finished:
            try:  # the generator directly: __next__'s bookkeeping once, not per step
                for _ in self._steps:
                    pass
            except BaseException as exc:
                self._end(exc)
            else:
                self._finish()
        return self.trace


def first_line(text: str, limit: int = 500) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…"
