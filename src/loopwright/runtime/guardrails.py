"""Guardrails: checks a run passes its input, its tool calls and its final answer through.

`lw.run(..., guardrails=[...])` takes Guardrails made by `input_guardrail` (the task, before
the first model call, or raced against it), `output_guardrail` (the final answer, before it is
returned, journaled as the run's end or sent as `run_finished`) and `tool_guardrail` (a call's
arguments before it runs and before any approval question, or its result before the model
reads it). A guardrail is a plain or async function, or a classifier prompt through any
policy (`model_guardrail`); it returns a Verdict: `allow()`, `block(reason)`, `replace(value)`
(redacted text or arguments, recorded as such) or `revise(feedback)` (a tool call is not run
and the model reads the feedback; bounded by `max_revisions`, then it blocks). None or True
allow, False blocks.

A block ends the run with stop reason "guardrail" and a Step of kind "guardrail" naming the
guardrail and its reason; a guardrail that raises or outlives `timeout_s` blocks (fails
closed) unless it was made with `fail_open=True`. Every verdict but a plain allow is listed
in `trace.meta["guardrails"]`. A model guardrail's tokens are the run's: they are added to
`trace.usage`, priced and held to the token and cost budgets (a spent budget stops the run
before the check's input or tool call goes on). With a journal every verdict is recorded, its
tokens with it, before it is used, and a resumed or forked run replays it: a model guardrail
is not paid for twice, and the resumed run's usage is the same.

When the run is watched (`iter_events`, the web page) and has output guardrails, the model's
text reaches the watcher through a StreamCheck: text before the answer passes, the answer is
released sentence by sentence as the output guardrails allow each, and after a block nothing
more leaves; the run's last step (the answer's) goes out, and is yielded, only after the
verdict on the whole answer.

The checks are sans-I/O like the modes: `input_checks`, `args_check`, `result_check` and
`output_check` are generators that yield a `Check` (call this guardrail on these values)
and are sent its Outcome; `drive` serves them on this thread and `adrive` on an event loop,
so the sync and the async driver share every rule.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import KW_ONLY, dataclass
from functools import partial
from typing import Any, Final, Literal, Protocol, TypeVar, runtime_checkable

from loopwright.events import Emitter
from loopwright.modes.machine import CallTool, Executed, StopRun
from loopwright.offload import Outcome, Timeout, call_in_thread, capture, run_until_complete
from loopwright.policy import ModelRequest, Policy, call_policy
from loopwright.tools.registry import ToolError, ToolResult
from loopwright.trace import Step, Trace, Usage
from loopwright.untrusted import fence

GuardrailKind = Literal["input", "output", "tool"]
Action = Literal["allow", "block", "replace", "revise"]
On = Literal["args", "result"]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a guardrail decided: `action` and, for block and revise, why (`reason`, the
    feedback the model reads on a revise); for replace, the `value` put in place. A model
    guardrail's verdict carries the `usage` of the call that decided it."""

    action: Action
    reason: str = ""
    value: Any = None
    usage: Usage | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action, "reason": self.reason}
        if self.action == "replace":
            out["value"] = json.loads(json.dumps(self.value, default=str))
        if self.usage is not None:
            out["usage"] = self.usage.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        usage = d.get("usage")
        return cls(d["action"], d.get("reason", ""), d.get("value"), None if usage is None else Usage.from_dict(usage))


def allow() -> Verdict:
    """Let it through."""
    return Verdict("allow")


def block(reason: str) -> Verdict:
    """End the run with stop reason "guardrail", saying why."""
    return Verdict("block", str(reason))


def replace(value: Any, reason: str = "") -> Verdict:
    """Put `value` in place of what was checked (redacted text, or a tool call's arguments
    as a dict) and go on; the trace records that it was replaced."""
    return Verdict("replace", str(reason), value)


def revise(feedback: str) -> Verdict:
    """A tool guardrail's: do not run the call; the model reads `feedback` as the call's
    observation and may revise it (at most the guardrail's `max_revisions` times, then it
    blocks). From an input or output guardrail, where the model has nothing to redo, it blocks."""
    return Verdict("revise", str(feedback))


@dataclass(frozen=True, slots=True)
class Guardrail:
    """One check and where it applies (made by `input_guardrail`, `output_guardrail`,
    `tool_guardrail` or `model_guardrail`). `check` is called with the task (input), the
    final answer (output), the tool's name and arguments (tool, on="args") or the tool's
    name and the observation the model would read (tool, on="result")."""

    check: Callable[..., Any]
    kind: GuardrailKind
    _: KW_ONLY
    name: str
    fail_open: bool = False
    timeout_s: float | None = None
    race: bool = False
    tools: tuple[str, ...] | None = None
    on: On = "args"
    max_revisions: int = 2
    model: bool = False  # a classifier prompt through a policy (what a replay saves)

    def __post_init__(self) -> None:
        if not callable(self.check):
            raise TypeError(f"a guardrail's check must be callable, got {type(self.check).__name__}")
        if self.kind not in ("input", "output", "tool"):
            raise ValueError(f"kind must be 'input', 'output' or 'tool', got {self.kind!r}")
        if self.on not in ("args", "result"):
            raise ValueError(f"on must be 'args' or 'result', got {self.on!r}")
        if self.timeout_s is not None and (isinstance(self.timeout_s, bool) or not isinstance(
                self.timeout_s, int | float) or self.timeout_s <= 0):
            raise ValueError(f"timeout_s must be a positive number of seconds or None, got {self.timeout_s!r}")
        if isinstance(self.max_revisions, bool) or not isinstance(self.max_revisions, int) or self.max_revisions < 0:
            raise ValueError(f"max_revisions must be a non-negative integer, got {self.max_revisions!r}")
        if self.race and self.kind != "input":
            raise ValueError("race=True is for input guardrails only")

    def applies_to(self, tool: str) -> bool:
        return self.tools is None or tool in self.tools


def _name(fn: Any, name: str | None) -> str:
    return name or getattr(fn, "__name__", None) or type(fn).__name__


def input_guardrail(fn: Callable[[str], Any], *, name: str | None = None, fail_open: bool = False,
                    timeout_s: float | None = None, race: bool = False) -> Guardrail:
    """A check of the task, `fn(task)`, before the first model call. With `race=True` the
    first model call runs beside it, but nothing the model said leaves (no tool runs, no
    step or text event goes out) until it allows; a raced `replace` blocks, since the model
    has read the original already."""
    return Guardrail(fn, "input", name=_name(fn, name), fail_open=fail_open, timeout_s=timeout_s, race=race)


def output_guardrail(fn: Callable[[str], Any], *, name: str | None = None, fail_open: bool = False,
                     timeout_s: float | None = None) -> Guardrail:
    """A check of the final answer, `fn(answer)`, before the run returns it; when the run is
    watched (`iter_events`) also of the model's text as it streams, sentence by sentence."""
    return Guardrail(fn, "output", name=_name(fn, name), fail_open=fail_open, timeout_s=timeout_s)


def tool_guardrail(fn: Callable[[str, Any], Any], *, tools: Iterable[str] | None = None, on: On = "args",
                   name: str | None = None, fail_open: bool = False, timeout_s: float | None = None,
                   max_revisions: int = 2) -> Guardrail:
    """A check of tool calls (all, or those named in `tools`): `fn(tool, args)` before the
    call and before any approval question (on="args"), or `fn(tool, observation)` on the
    text the model would read (on="result"). replace gives new arguments (a dict) or a new
    observation; revise gives the model feedback in place of the call or its result."""
    names = None if tools is None else tuple(tools)
    return Guardrail(fn, "tool", name=_name(fn, name), fail_open=fail_open, timeout_s=timeout_s, tools=names,
                     on=on, max_revisions=max_revisions)


VERDICT_SCHEMA: Final = {
    "type": "object",
    "properties": {"verdict": {"enum": ["allow", "block"]}, "reason": {"type": "string", "maxLength": 120}},
    "required": ["verdict", "reason"],
}
"""What a model guardrail's reply is held to (a backend that constrains decoding keeps to it)."""


class ModelCheck:
    """A classifier prompt through a policy: `prompt` with `{text}` replaced by what is
    checked (fenced as untrusted data). The reply is JSON {"verdict": "allow" | "block",
    "reason": ...}, or text starting with allow/block; the verdict carries the call's usage
    (the backend's, else the documented estimate)."""

    def __init__(self, policy: Policy, prompt: str, max_tokens: int) -> None:
        if "{text}" not in prompt:
            raise ValueError("a model guardrail's prompt must hold {text}, where the checked text goes")
        self.policy = policy
        self.prompt = prompt
        self.max_tokens = max_tokens

    def __call__(self, *values: Any) -> Verdict:
        text = values[0] if len(values) == 1 else json.dumps({"tool": values[0], "value": values[1]}, default=str)
        request = ModelRequest(self.prompt.replace("{text}", fence(str(text), "checked")), purpose="solve",
                               max_tokens=self.max_tokens, output_schema=VERDICT_SCHEMA)
        completion = call_policy(self.policy, request)
        usage = completion.usage or Usage.estimate(request.prompt, completion.text)
        return dataclasses.replace(model_verdict(completion.text), usage=usage)


def model_verdict(text: str) -> Verdict:
    """A classifier's reply as a Verdict: JSON with "verdict", else its first word; anything
    that is not plainly an allow blocks."""
    reply = text.strip()
    try:
        data = json.loads(reply[reply.find("{"):reply.rfind("}") + 1]) if "{" in reply else None
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("verdict"), str):
        word, reason = data["verdict"].lower(), str(data.get("reason", ""))
    else:
        word, reason = (reply.split() or [""])[0].strip(".:,!").lower(), reply
    if word in ("allow", "allowed", "safe", "yes", "ok"):
        return allow()
    return block(reason or f"the classifier did not allow it: {reply[:120]!r}")


def model_guardrail(policy: Policy, prompt: str, *, kind: GuardrailKind = "input", name: str | None = None,
                    tools: Iterable[str] | None = None, on: On = "args", fail_open: bool = False,
                    timeout_s: float | None = None, race: bool = False, max_tokens: int = 48) -> Guardrail:
    """A guardrail that asks a model (any policy, the embedded one included): `prompt` holds
    `{text}`, where the checked text goes; the model answers allow or block (see
    `model_verdict`). Its verdicts are journaled, so a resumed run does not ask again."""
    check = ModelCheck(policy, prompt, max_tokens)
    return Guardrail(check, kind, name=name or f"model:{kind}", fail_open=fail_open, timeout_s=timeout_s,
                     race=race, tools=None if tools is None else tuple(tools), on=on, model=True)


def guardrail_list(given: Any) -> tuple[Guardrail, ...]:
    """`guardrails=` as a tuple, each checked to be a Guardrail."""
    items = tuple(given)
    for item in items:
        if not isinstance(item, Guardrail):
            raise TypeError(f"guardrails= takes lw.input_guardrail(...), lw.output_guardrail(...), "
                            f"lw.tool_guardrail(...) or lw.model_guardrail(...), got {item!r}")
    places = [(g.kind, g.on, g.name) for g in items]  # a verdict is journaled by name and place
    twice = sorted({p for p in places if places.count(p) > 1})
    if twice:
        raise ValueError(f"two {twice[0][0]} guardrails share the name {twice[0][2]!r}: give one name=")
    return items


def as_verdict(returned: Any, guardrail: str) -> Verdict:
    """What a check returned as a Verdict; TypeError for anything else."""
    if isinstance(returned, Verdict):
        return returned
    if returned is None or returned is True:
        return allow()
    if returned is False:
        return block(f"{guardrail} said no")
    raise TypeError(f"a guardrail returns lw.allow(), lw.block(reason), lw.replace(value), lw.revise(feedback), "
                    f"None or a bool; {guardrail} returned {returned!r}")


# -- the per-run checks ---------------------------------------------------------------


@dataclass(slots=True)
class Check:
    """A request of the checks to their driver: call `guardrail` with `values`; answered
    with its Outcome, or a Verdict the journal recorded (nothing is called)."""

    guardrail: Guardrail
    values: tuple[Any, ...]
    key: str


Checks = Generator[Check, Any, T]


@runtime_checkable
class VerdictJournal(Protocol):
    """A journal that records guardrail verdicts (RunJournal)."""

    def recorded_verdict(self, key: str) -> dict[str, Any] | None: ...
    def record_verdict(self, key: str, guardrail: str, verdict: dict[str, Any]) -> None: ...


class Host(Protocol):
    """What the checks need of their run (a RunContext)."""

    task: str
    trace: Trace
    output: Any
    cost: Any  # a CostMeter, or None
    events: Emitter | None

    @property
    def next_index(self) -> int: ...
    def record(self, step: Step, emit: bool = True) -> Step: ...
    def guard_after_call(self) -> str | None: ...


class RunGuards:
    """One run's guardrails by kind, their revision counts and the raced input check in flight."""

    def __init__(self, ctx: Host, guardrails: Sequence[Guardrail], journal: Any) -> None:
        self.ctx: Host = weakref.proxy(ctx)  # the context owns this: no reference cycle
        self.inputs = tuple(g for g in guardrails if g.kind == "input" and not g.race)
        self.raced = tuple(g for g in guardrails if g.kind == "input" and g.race)
        self.outputs = tuple(g for g in guardrails if g.kind == "output")
        self.args = tuple(g for g in guardrails if g.kind == "tool" and g.on == "args")
        self.results = tuple(g for g in guardrails if g.kind == "tool" and g.on == "result")
        self.journal = journal if isinstance(journal, VerdictJournal) else None
        self.revisions: dict[str, int] = {}
        self.race: Any = None  # the raced input check in flight (a future or a task), until settled
        self.started = False  # the input guardrails were started (before the machine's first request)
        self.prices: dict[str, Any] = {}  # a model guardrail's price function, by name (see `spend`)
        self.replaced: tuple[str, str] | None = None  # the answer an output guardrail replaced, and by what
        self._lock = threading.Lock()

    # -- shared by every check ------------------------------------------------------

    def verdict(self, guardrail: Guardrail, values: tuple[Any, ...], where: str) -> Checks[Verdict]:
        """The guardrail's verdict: the journal's, or a call's (its failure or timeout a
        block, or an allow when it fails open), journaled before it is used."""
        key = f"{guardrail.name} @ {where}"
        recorded = self.journal.recorded_verdict(key) if self.journal is not None else None
        if recorded is not None:
            verdict = Verdict.from_dict(recorded)
            self.spend(guardrail, where, verdict)
            return verdict
        start = time.perf_counter()
        ok, out = yield Check(guardrail, values, key)
        failure = None
        if ok:
            try:
                verdict = as_verdict(out, guardrail.name)
            except TypeError as exc:
                failure = str(exc)
        elif isinstance(out, Timeout):
            failure = f"{guardrail.name} did not answer within timeout_s={guardrail.timeout_s}"
        else:
            failure = f"{guardrail.name} raised {type(out).__name__}: {out}"
        if failure is not None:
            verdict = allow() if guardrail.fail_open else block(f"{failure} (it fails closed)")
            self.note(guardrail, where, verdict, failed=failure, fail_open=guardrail.fail_open)
        if self.journal is not None:
            self.journal.record_verdict(key, guardrail.name, {**verdict.to_dict(),
                                                              "seconds": round(time.perf_counter() - start, 6)})
        self.spend(guardrail, where, verdict)
        return verdict

    def spend(self, guardrail: Guardrail, where: str, verdict: Verdict) -> None:
        """Add a model guardrail's tokens to the run's usage and cost. When they spent a
        budget, the input or tool call it checked goes no further (StopRun; a block still
        wins); an answer it allowed stands, as one whose own model call overran would."""
        usage = verdict.usage
        if usage is None:
            return
        ctx = self.ctx
        ctx.trace.add_usage(usage)
        if ctx.cost is not None:
            with self._lock:  # ReWOO's workers may check calls at once
                price = self.prices.get(guardrail.name)
                if price is None:
                    price = self.prices[guardrail.name] = ctx.cost.price_of(getattr(guardrail.check, "policy", None))
                ctx.cost.add_apart(usage, price(usage))
        spent = ctx.guard_after_call()
        if spent is None or spent == "timeout" or verdict.action == "block" or guardrail.kind == "output":
            return
        message = f"{spent.replace('_', ' ')} reached: guardrail {guardrail.name!r} spent what was left on the {where}"
        ctx.record(Step(ctx.next_index, "guardrail", error=message,
                        meta={"guardrail": guardrail.name, "where": where, "reason": message}))
        raise StopRun(spent, message)

    def note(self, guardrail: Guardrail, where: str, verdict: Verdict, **extra: Any) -> dict[str, Any]:
        """List a verdict in trace.meta["guardrails"] (what the viewer and the journal keep)."""
        entry = {"guardrail": guardrail.name, "kind": guardrail.kind, "where": where, **verdict.to_dict(), **extra}
        with self._lock:
            self.ctx.trace.meta.setdefault("guardrails", []).append(entry)
        return entry

    def trip(self, guardrail: Guardrail, where: str, verdict: Verdict, tool: str | None = None,
             args: dict[str, Any] | None = None, withheld: str = "") -> StopRun:
        """Record the step of a block and return the StopRun that ends the run. `withheld`:
        the model text it stopped on the way out, kept as the step's raw in the trace and
        the journal, not in the step's event."""
        message = f"guardrail {guardrail.name!r} blocked the {where}: {verdict.reason}"
        self.note(guardrail, where, Verdict("block", verdict.reason))
        ctx = self.ctx
        step = Step(ctx.next_index, "guardrail", withheld, tool=tool, args=args, error=message,
                    meta={"guardrail": guardrail.name, "where": where, "reason": verdict.reason})
        ctx.record(step, emit=not withheld)
        if withheld and ctx.events is not None:
            ctx.events.step(dataclasses.replace(step, raw=""))
        return StopRun("guardrail", message)

    # -- input ----------------------------------------------------------------------

    def input_checks(self, raced: bool) -> Checks[list[tuple[Guardrail, Verdict]]]:
        """The verdicts of the input guardrails on the task, in order, up to the first that
        does not allow (its effect is applied by `apply_input`)."""
        out: list[tuple[Guardrail, Verdict]] = []
        for guardrail in self.raced if raced else self.inputs:
            verdict = yield from self.verdict(guardrail, (self.ctx.task,), "input")
            out.append((guardrail, verdict))
            if verdict.action == "replace" and not raced:
                self.ctx.task = str(verdict.value)  # the next guardrail checks the replaced task
            elif verdict.action != "allow":
                break
        return out

    def apply_input(self, verdicts: list[tuple[Guardrail, Verdict]], raced: bool) -> None:
        """Raise StopRun at a block (a revise, or a raced replace: the model read the task
        already); note a replace (the task is the replaced one from now on)."""
        for guardrail, verdict in verdicts:
            if verdict.action == "replace" and not raced:
                self.ctx.trace.task = self.ctx.task
                self.note(guardrail, "input", Verdict("replace", verdict.reason, "(the task, replaced)"))
            elif verdict.action == "replace":
                raise self.trip(guardrail, "input", block(
                    "a raced input guardrail cannot replace the task: the model read it already "
                    "(make it with race=False to redact)"))
            elif verdict.action != "allow":
                raise self.trip(guardrail, "input", verdict)

    # -- tools ----------------------------------------------------------------------

    def _revise(self, guardrail: Guardrail, verdict: Verdict) -> Verdict:
        """A revise within the guardrail's bound, else a block saying so."""
        with self._lock:
            n = self.revisions[guardrail.name] = self.revisions.get(guardrail.name, 0) + 1
        if n > guardrail.max_revisions:
            return block(f"{verdict.reason} (still refused after {guardrail.max_revisions} revisions)")
        return verdict

    def args_check(self, call: CallTool) -> Checks[CallTool | Executed]:
        """The call to run (its arguments replaced, if a guardrail said so), or an Executed
        in its place (a revise: not run, the feedback as its observation). Raises StopRun at
        a block."""
        for guardrail in self.args:
            if not guardrail.applies_to(call.name):
                continue
            verdict = yield from self.verdict(guardrail, (call.name, call.args), f"args of {call.name}#{call.key}")
            where = f"args of {call.name}#{call.key}"
            if verdict.action == "revise":
                verdict = self._revise(guardrail, verdict)
            if verdict.action == "block":
                raise self.trip(guardrail, where, verdict, call.name, call.args)
            if verdict.action == "revise":
                self.note(guardrail, where, verdict)
                return _not_run(call, guardrail, verdict.reason)
            if verdict.action == "replace":
                if not isinstance(verdict.value, dict):
                    raise self.trip(guardrail, where, block(
                        f"replace() of tool arguments needs a dict, got {type(verdict.value).__name__}"),
                        call.name, call.args)
                self.note(guardrail, where, verdict)
                call = CallTool(call.name, dict(verdict.value), call.key, call.repaired)
        return call

    def result_check(self, call: CallTool, executed: Executed) -> Checks[Executed]:
        """The Executed the model reads: its observation replaced, or the feedback of a
        revise in its place. Raises StopRun at a block."""
        result = executed.result
        for guardrail in self.results:
            if not guardrail.applies_to(call.name):
                continue
            where = f"result of {call.name}#{call.key}"
            verdict = yield from self.verdict(guardrail, (call.name, result.observation), where)
            if verdict.action == "revise":
                verdict = self._revise(guardrail, verdict)
            if verdict.action == "block":
                raise self.trip(guardrail, where, verdict, call.name, call.args)
            if verdict.action in ("revise", "replace"):
                self.note(guardrail, where, verdict)
                observation = verdict.reason if verdict.action == "revise" else _text(verdict.value)
                value = None if verdict.action == "revise" else verdict.value
                error = ToolError(call.name, verdict.reason, "guardrail") if verdict.action == "revise" else None
                result = dataclasses.replace(result, value=value, observation=observation, error=error)
                meta = {**(executed.meta or {}), "guardrail": {"name": guardrail.name, "action": verdict.action}}
                executed = Executed(result, executed.kind, meta)
        return executed

    # -- output ---------------------------------------------------------------------

    def output_check(self) -> Checks[None]:
        """Check a final answer: a block ends the run "guardrail" with no answer (raised as
        StopRun); a replace puts the redacted answer in its place."""
        trace = self.ctx.trace
        if trace.stopped_reason != "final" or trace.final_answer is None:
            return
        for guardrail in self.outputs:
            verdict = yield from self.verdict(guardrail, (trace.final_answer,), "output")
            if verdict.action in ("block", "revise"):
                trace.output = None
                raise self.trip(guardrail, "output", Verdict("block", verdict.reason))
            if verdict.action == "replace":
                self.note(guardrail, "output", verdict)
                original, trace.final_answer = trace.final_answer, _text(verdict.value)
                self.replaced = (original if self.replaced is None else self.replaced[0], trace.final_answer)
                spec = self.ctx.output
                if spec is not None:
                    try:
                        trace.output = spec.parse(trace.final_answer)
                    except ValueError:
                        trace.output = None


    def as_sent(self, step: Step) -> Step:
        """A step as its event carries it: where an output guardrail replaced the answer,
        the replacement in its text (the trace keeps what the model said)."""
        if self.replaced is None:
            return step
        original, replacement = self.replaced
        raw = step.raw.replace(original, replacement) if original in step.raw else ""
        return dataclasses.replace(step, raw=raw, thought=step.thought.replace(original, replacement))

    def stream(self, step: int, release: Callable[[str], None], whole: bool,
               serve: Callable[[Checks[Verdict]], Verdict]) -> StreamCheck:
        """The StreamCheck of one model call's text (see StreamCheck)."""
        return StreamCheck(self, step, release, whole, serve)

    def end_stream(self, stream: StreamCheck, raw: str) -> None:
        """The streamed call returned: StopRun when a sentence of it was blocked (its text,
        `raw`, withheld from the events) or a check spent a budget."""
        if stream.blocked is not None:
            guardrail, verdict, where = stream.blocked
            raise self.trip(guardrail, where, Verdict("block", verdict.reason), withheld=raw)
        if stream.stop is not None:
            raise stream.stop


ANSWER_MARKERS: Final = ("final answer:", "finish[")
"""Where a model's answer starts in its text (the ReAct family's JSON and bracket dialects)."""

_SENTENCE_END: Final = re.compile(r"[.!?]+[\"')\]]*(?=\s)|\n")


class StreamCheck:
    """One model call's text on its way to a watcher while the run has output guardrails.

    Text before the answer (before "Final Answer:" or "finish[") passes as it comes; the
    answer (or all of the call's text, `whole`, for a call whose text is the answer: a
    solve call, native tool calling) is cut at sentence ends, and each sentence is released
    once every output guardrail allows it (a replace releases the replacement). After a
    block nothing more of the call leaves (`blocked`; the driver ends the run when the
    call returns). Chunk verdicts are journaled by step and chunk number, so a replayed
    call is not judged again."""

    def __init__(self, guards: RunGuards, step: int, release: Callable[[str], None], whole: bool,
                 serve: Callable[[Checks[Verdict]], Verdict]) -> None:
        self.guards = guards
        self.step = step
        self.release = release
        self.serve = serve
        self.answer = whole  # in the answer: text waits for the checks
        self.pending = ""  # text not yet released
        self.chunks = 0
        self.blocked: tuple[Guardrail, Verdict, str] | None = None
        self.stop: StopRun | None = None  # a check spent a budget

    def feed(self, text: str) -> None:
        """A delta of the model's text."""
        if self.blocked is not None or self.stop is not None:
            return
        self.pending += text
        if not self.answer:
            self._before_answer()
        if self.answer:
            self._sentences(False)

    def close(self) -> None:
        """The call's text ended: the rest is the last chunk."""
        if self.blocked is None and self.stop is None:
            if self.answer:
                self._sentences(True)
            elif self.pending:
                self.release(self.pending)
                self.pending = ""

    def _before_answer(self) -> None:
        text = self.pending
        lower = text.lower()
        found = [(at, marker) for marker in ANSWER_MARKERS if (at := lower.find(marker)) >= 0]
        if found:
            at, marker = min(found)
            cut = at + len(marker)
            self.answer = True
        else:  # hold back a tail that may be the start of a marker
            cut = len(text) - max((n for marker in ANSWER_MARKERS for n in range(len(marker), 0, -1)
                                   if lower.endswith(marker[:n])), default=0)
        if cut:
            self.release(text[:cut])
            self.pending = text[cut:]

    def _sentences(self, last: bool) -> None:
        while self.blocked is None and self.stop is None and self.pending:
            end = _SENTENCE_END.search(self.pending)
            if end is None and not last:
                return
            cut = len(self.pending) if end is None else end.end()
            chunk, self.pending = self.pending[:cut], self.pending[cut:]
            self._check(chunk)

    def _check(self, chunk: str) -> None:
        if not chunk.strip():
            self.release(chunk)
            return
        self.chunks += 1
        where = f"output chunk {self.chunks} of step {self.step}"
        text = chunk
        try:
            for guardrail in self.guards.outputs:
                verdict = self.serve(self.guards.verdict(guardrail, (text,), where))
                if verdict.action in ("block", "revise"):
                    self.blocked = (guardrail, verdict, where)
                    return
                if verdict.action == "replace":
                    self.guards.note(guardrail, where, verdict)
                    text = _text(verdict.value)
        except StopRun as stop:
            self.stop = stop
            return
        self.release(text)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _not_run(call: CallTool, guardrail: Guardrail, feedback: str) -> Executed:
    error = ToolError(call.name, feedback, "guardrail")
    observation = f"ERROR[{call.name}]: not run: guardrail {guardrail.name!r}: {feedback}"
    result = ToolResult(call.name, call.args, None, observation=observation, error=error, duration_s=0.0)
    return Executed(result, "guardrail", {"guardrail": {"name": guardrail.name, "action": "revise"}})


# -- serving the checks ---------------------------------------------------------------


def call_check(check: Check) -> Outcome:
    """Call a guardrail on this thread (an async one on a private loop), held to its
    timeout_s on a daemon thread when it has one."""
    guardrail = check.guardrail
    call = partial(_sync_call, guardrail.check, check.values)
    if guardrail.timeout_s is None:
        return capture(call)
    return call_in_thread(call, guardrail.timeout_s, "guardrail")


def _sync_call(fn: Callable[..., Any], values: tuple[Any, ...]) -> Any:
    out = fn(*values)
    return run_until_complete(out) if inspect.isawaitable(out) else out


async def acall_check(check: Check) -> Outcome:
    """`call_check` on an event loop: an async guardrail awaited here, a sync one on a thread."""
    from loopwright.offload import acall_in_thread, guard

    guardrail = check.guardrail
    fn = guardrail.check
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):  # noqa: B004
        return await guard(fn(*check.values), guardrail.timeout_s)
    ok, out = await acall_in_thread(partial(fn, *check.values), guardrail.timeout_s, "guardrail")
    if ok and inspect.isawaitable(out):
        return await guard(out, guardrail.timeout_s)
    return ok, out


def drive(checks: Checks[T]) -> T:
    """Serve checks on this thread."""
    try:
        request = next(checks)
        while True:
            request = checks.send(call_check(request))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def adrive(checks: Checks[T]) -> T:
    """Serve checks on this event loop."""
    try:
        request = next(checks)
        while True:
            request = checks.send(await acall_check(request))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


__all__ = ["Check", "Guardrail", "RunGuards", "StreamCheck", "Verdict", "adrive", "allow", "block", "drive", "input_guardrail",
           "model_guardrail", "model_verdict", "output_guardrail", "replace", "revise", "tool_guardrail"]
