"""The tool gate: what stands between a proposed tool call and the tool, for both drivers.

In order: a resumed run's recorded result is replayed (the tool is not run again); a
tool that needs approval asks the run's approver (recorded decisions first; no approver,
or anything but an approval, is a denial: the gate fails closed); a side effect that
already ran in this run with the same idempotency key is not run again (exactly-once);
a side effect started before a crash with no recorded outcome is refused, and one that
outlived its deadline stops the run (both in doubt: they may have taken effect); the
call is journaled before and after it runs. A result past the registry's
`max_observation_chars` is journaled whole and placed as head and tail under a handle
(tools/handles.py); the built-in `read_output` is answered here from the kept results,
with no approval and no journal row (it reads what a replay rebuilds). The driver runs
the tool itself between `begin` and `finish`, on a thread or the event loop, and holds
`lock(ledger key)` around a side effect so two identical concurrent ones run once.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from loopwright.events import Emitter
from loopwright.guards import Deadline, call_key
from loopwright.modes.machine import CallTool, Executed, Journal, StopRun
from loopwright.runtime.observers import Observer
from loopwright.runtime.retry import Retry, attempt_record, tool_failure
from loopwright.safety import (
    NO_APPROVER,
    ApprovalPending,
    ApprovalRequest,
    Approver,
    Decision,
    approval_key,
    ask,
    denial_observation,
)
from loopwright.tools.handles import READ_OUTPUT, keep_output, read_output
from loopwright.tools.registry import Tool, ToolError, ToolRegistry, ToolResult
from loopwright.trace import Step, Trace


class Host(Protocol):
    """What the gate needs of its run (a RunContext)."""

    registry: ToolRegistry
    trace: Trace
    events: Emitter | None
    retry: Retry | None
    timed: bool
    deadline: Deadline

    @property
    def observers(self) -> Sequence[Observer]: ...
    @property
    def next_index(self) -> int: ...
    def record(self, step: Step) -> Step: ...
    def expired(self) -> bool: ...


@dataclass(slots=True)
class Admitted:
    """A call the gate lets through: run it between `begin` and `finish`. `ledger` is
    its exactly-once key when it is a side effect (hold `lock(ledger)` around it).
    (Not frozen: one is made per tool call and never leaves the driver.)"""

    call: CallTool
    tool: Tool | None
    recorded: tuple[str, ToolResult | None] | None = None
    ledger: str | None = None


class ToolGate:
    """Scope is the registry the run was given (already subset to `tools=`); the rest of
    the gate is here. One per run; safe to use from the sync driver's worker threads."""

    def __init__(self, ctx: Host, journal: Journal | None, approver: Approver | None,
                 on_deny: Literal["observe", "stop"], rerun_unfinished: bool) -> None:
        if on_deny not in ("observe", "stop"):
            raise ValueError(f"on_deny must be 'observe' or 'stop', got {on_deny!r}")
        # a proxy: the context owns the gate, and a strong link back would make every
        # finished run a reference cycle, left for the cyclic collector to find
        self.ctx: Host = weakref.proxy(ctx)
        self.journal = journal
        self.approver = approver
        self.on_deny = on_deny
        self.rerun_unfinished = rerun_unfinished
        self._ledger: dict[str, tuple[str, ToolResult]] = {}
        self.children: dict[str, str] = {}  # call key -> the child agent run it started (RunContext.adopt)
        self.step_meta: dict[str, dict[str, Any]] = {}  # call key -> what its step's meta adds (RunContext.adopt)
        self.attempts: dict[str, list[dict[str, Any]]] = {}  # call key -> its failed attempts (retry=)
        self._locks: dict[str, threading.RLock] = {}
        self._lock = threading.Lock()

    def admit(self, call: CallTool) -> Executed | Admitted | None:
        """Replay, approval: an Executed when the call is answered without running it, an
        Admitted when it may run, None when there is nothing to gate, record or deduplicate
        (run it, then `done`). Raises StopRun when the run must end here (denied with
        on_deny="stop", approval pending)."""
        ctx = self.ctx
        tool = ctx.registry.get(call.name)
        if tool is None and call.name == READ_OUTPUT:  # the built-in (a registry's own tool of that name wins)
            result = read_output(ctx.trace.outputs, call.args, ctx.registry.max_observation_chars)
            with self._lock:
                ctx.trace.tool_calls += 1
            for observer in ctx.observers:
                observer.tool(call.key, result, "action")
            return Executed(result)
        if call.repaired and tool is not None and tool.side_effects in ("write", "destructive"):
            return self._resend(call, tool)
        journal = self.journal
        if journal is None and (tool is None or (tool.idempotent and not tool.requires_approval)):
            return None
        recorded = journal.recorded_tool(call.key) if journal is not None else None
        if recorded is not None and recorded[0] == "done" and recorded[1] is not None:
            with self._lock:
                ctx.trace.tool_calls += 1
            result, kept = keep_output(ctx.trace.outputs, call.key, recorded[1], ctx.registry.max_observation_chars)
            if tool is not None and not tool.idempotent and result.error is None:
                self._ledger[self._ledger_key(tool, call.args)] = (call.key, result)
            meta: dict[str, Any] = {"replayed": True, **(kept or {})}
            recorded_child = getattr(tool, "recorded_child", None)  # an agent tool (loopwright.runtime.agents)
            if recorded_child is not None:
                child = recorded_child(ctx, call.key)
                if child is not None:
                    meta["child_run_id"] = child
                    meta.update(self.step_meta.pop(call.key, {}))
            return Executed(result, meta=meta)
        ledger = None if tool is None or tool.idempotent else self._ledger_key(tool, call.args)
        admitted = Admitted(call, tool, recorded, ledger)
        if tool is not None and tool.requires_approval:
            reused = self.reuse(admitted)  # the same side effect ran already: it will not run, so ask no one
            if reused is not None:
                return reused
            decision, failure = self._approval(call, tool)
            if decision.approved is not True:  # fail closed on anything but an approval
                observation = denial_observation(call.name, decision.reason)
                denied = ToolResult(call.name, call.args, None, observation=observation,
                                    error=ToolError(call.name, decision.reason, "denied"), duration_s=0.0)
                for observer in ctx.observers:
                    observer.tool(call.key, denied, "denied")
                why = None if failure is None else {"traceback": failure}  # the approver raised
                if self.on_deny == "stop":
                    ctx.record(Step(ctx.next_index, "denied", tool=call.name, args=call.args,
                                    observation=observation, error=decision.reason, meta=why or {}))
                    raise StopRun("denied", observation)
                return Executed(denied, "denied", why)
        return admitted

    def lock(self, ledger: str) -> threading.RLock:
        """The lock two identical side effects share (the second waits, then reuses);
        reentrant, so a driver holding it from a call's approval on takes it again."""
        with self._lock:
            return self._locks.setdefault(ledger, threading.RLock())

    def gated_ledger(self, call: CallTool) -> str | None:
        """The exactly-once key of a side effect that needs approval, None for any other
        call. A driver holds its lock from the question to the result, so an identical
        call in flight settles first and a repeat is answered from it, never asked about."""
        tool = self.ctx.registry.get(call.name)
        if tool is None or tool.idempotent or not tool.requires_approval:
            return None
        return self._ledger_key(tool, call.args)

    def reuse(self, admitted: Admitted) -> Executed | None:
        """The earlier result of the same side effect in this run, if it succeeded."""
        done = self._ledger.get(admitted.ledger) if admitted.ledger is not None else None
        if done is None:
            return None
        return Executed(done[1], meta={"exactly_once": f"not run again: same call and idempotency key as {done[0]}"})

    def begin(self, admitted: Admitted) -> int:
        """Journal the call's start; its attempt number. Raises StopRun for a side effect
        left in doubt by a crash (started, no outcome recorded)."""
        journal = self.journal
        if journal is None:
            return 1
        call, tool, recorded = admitted.call, admitted.tool, admitted.recorded
        if (
            recorded is not None
            and recorded[0] == "started"
            and tool is not None
            and not rerun_safe(tool)
            and not self.rerun_unfinished
        ):
            message = (
                f"{call.name} was started before the run stopped but its result was not recorded; "
                f"it is not idempotent, so it was not run again. {journal.settle_advice(call.key, False)}"
            )
            self.ctx.record(Step(self.ctx.next_index, "error", tool=call.name, args=call.args, error=message))
            raise StopRun("error", message)
        attempt = journal.attempt(call.key)
        journal.record_tool_start(call.key, call.name, call.args)
        return attempt

    def retry_tool(self, call: CallTool, result: ToolResult, attempt: int) -> float | None:
        """After attempt `attempt` of a call failed: the seconds to wait before the next one,
        or None to keep this result. Only a call that is safe to run again (`rerun_safe`)
        is retried; one whose effect may have happened stops the run in doubt (StopRun),
        its journal row left `started`, as after a crash. The next attempt is journaled."""
        retry = self.ctx.retry
        kind = tool_failure(result)
        if retry is None or not retry.covers(kind) or result.error is None:
            return None
        tool = self.ctx.registry.get(call.name)
        if tool is not None and not rerun_safe(tool):
            if kind == "tool_timeout":
                return None  # `finish` stops the run at it: a side effect abandoned while it ran
            self._in_doubt(call, tool, f"failed ({result.error.message})", "error")
        delay: float | None = None
        if attempt < retry.attempts:
            delay = retry.delay(attempt)
            if self.ctx.timed and delay >= (self.ctx.deadline.remaining() or 0.0):
                delay = None
        with self._lock:
            self.attempts.setdefault(call.key, []).append(
                attempt_record(attempt, str(kind), result.error.message, delay))
        if delay is not None and self.journal is not None and tool is not None:
            self.journal.record_tool_start(call.key, call.name, call.args)  # the next attempt
        return delay

    def finish(self, admitted: Admitted, result: ToolResult) -> Executed:
        """Journal the result, remember a side effect's success, tell the observers.
        Raises StopRun when the call ran a child agent that paused for an approval: the
        run pauses with it, the call not journaled as done (resume re-enters the child)."""
        key = admitted.call.key
        if self.children and key in self.children:
            self._child_paused(key)
        if result.error is not None and result.error.kind in ("timeout", "in_doubt") and admitted.ledger is not None:
            self._timed_out(admitted, result)
        if self.journal is not None:
            self.journal.record_tool_result(key, result)  # whole
        executed = self.done(key, result)
        if admitted.ledger is not None and result.error is None:
            self._ledger[admitted.ledger] = (key, executed.result)
        return executed

    def _timed_out(self, admitted: Admitted, result: ToolResult) -> None:
        """Stop the run at a side effect that outlived its deadline (abandoned, not stopped,
        it may still take effect), or whose tool said it cannot tell whether it took effect
        (kind "in_doubt", its message says why). The stop reason is `timeout` when the run's
        own wall clock cut the call, else `error`."""
        error = result.error
        stop = "timeout" if self.ctx.expired() else "error"
        if error is not None and error.kind == "in_doubt":
            what, own_words = f"cannot tell whether it took effect: {error.message.rstrip('.')}", True
        else:
            reason = error.message if error is not None else "timeout"
            what, own_words = f"did not finish in time ({reason}) and was abandoned while it ran", False
        self._in_doubt(admitted.call, admitted.tool, what, stop, own_words)

    def _in_doubt(self, call: CallTool, tool: Tool | None, what: str, stop: str, own_words: bool = False) -> None:
        """Stop the run (StopRun `stop`) at a side effect that may have happened: it timed
        out, the tool cannot tell, or it failed in a way a retry would cover (it may have
        failed after its effect). It is in doubt, as after a crash: reported as a failure,
        the model would call it again and the effect could happen twice. Its journal row
        stays `started`, so the run is blocked until a person settles it (or, for a tool
        that dedupes on its call key, a resume runs it again with the same key)."""
        if self.journal is None:
            then = "Check whether it took effect before running the task again."
        else:
            then = self.journal.settle_advice(call.key, tool is not None and tool.dedupes_on_call_key)
        unreported = "it was not reported to the model as failed (a retry could repeat it)"
        if own_words:  # the tool's reason, in its own sentence
            message = f"{call.name} {what}. It is not idempotent, so {unreported}. {then}"
        else:
            message = (f"{call.name} {what}; it is not idempotent, so whether it took effect is unknown and "
                       f"{unreported}. {then}")
        run_id = self.ctx.trace.run_id
        meta: dict[str, Any] = {"in_doubt": True}
        if run_id is not None:
            meta["call_key"] = f"{run_id}:{call.key}"
        if call.key in self.attempts:
            meta["attempts"] = self.attempts.pop(call.key)
        self.ctx.record(Step(self.ctx.next_index, "error", tool=call.name, args=call.args, error=message,
                             meta=meta))
        raise StopRun(stop, message)

    def done(self, key: str, result: ToolResult) -> Executed:
        """Keep a result past the cap, count the call and tell the observers (all `finish`
        does after the journal for an ungated call)."""
        ctx = self.ctx
        result, kept = keep_output(ctx.trace.outputs, key, result, ctx.registry.max_observation_chars)
        with self._lock:
            ctx.trace.tool_calls += 1
        for observer in ctx.observers:
            observer.tool(key, result, "action")
        if result.error is not None and result.error.traceback:  # the step keeps where the tool failed
            kept = {**(kept or {}), "traceback": result.error.traceback}
        if self.attempts and key in self.attempts:  # retried (retry=): each failed attempt
            kept = {**(kept or {}), "attempts": self.attempts.pop(key)}
        if self.children and key in self.children:  # the call ran a child agent
            self._child_paused(key)
            meta = {**(kept or {}), "child_run_id": self.children.pop(key), **self.step_meta.pop(key, {})}
            return Executed(result, meta=meta)
        return Executed(result, "action", kept)

    def _child_paused(self, key: str) -> None:
        """Raise StopRun("paused") when call `key` ran a child agent that paused for an
        approval: the run pauses with it (and a resume re-enters the child)."""
        child = self.ctx.trace.children.get(self.children[key])
        if child is not None and child.stopped_reason == "paused":
            self.ctx.trace.meta["pending_approval"] = child.meta.get("pending_approval")
            raise StopRun("paused", f"waiting for an approval in child agent run {self.children.pop(key)}")

    def _resend(self, call: CallTool, tool: Tool) -> Executed:
        """Not run: the arguments of a call that changes things had to be repaired to be
        read (they may have been cut short), so the model is asked to send it again whole."""
        message = (f"invalid args: the arguments were not valid JSON as sent and had to be repaired "
                   f"({'; '.join(call.repaired)}); {call.name} changes things ({tool.side_effects}), so a "
                   f"repaired call is not run: send the call again with its complete arguments")
        error = ToolError(call.name, message, "invalid_args")
        result = ToolResult(call.name, call.args, None, observation=error.as_observation(), error=error, duration_s=0.0)
        for observer in self.ctx.observers:
            observer.tool(call.key, result, "action")
        return Executed(result, meta={"not_run": "repaired arguments"})

    def _ledger_key(self, tool: Tool, args: dict[str, Any]) -> str:
        return tool.name + "\x00" + idempotency_key(tool, args)

    def _approval(self, call: CallTool, tool: Tool) -> tuple[Decision, str | None]:
        """The decision on a gated call, and the traceback when the approver raised."""
        request = ApprovalRequest(call.name, call.args, approval_key(call.name, call.args), call.key,
                                  tool.side_effects, tool.description, self.ctx.trace.run_id)
        agent = getattr(self.ctx, "agent", None)
        if agent is not None:  # a child agent's call: the person asked sees whose it is
            request.meta["agent"] = agent
        journal = self.journal
        if journal is not None:
            known = journal.recorded_decision(request.key)
            if known is not None:
                return known, None
        if self.approver is None:  # fail closed: a gated tool never runs unapproved
            return Decision(False, NO_APPROVER), None
        events = self.ctx.events
        if events is not None:  # a UI watching the run can ask a person now
            events.approval(request)
        try:
            decision, failure = ask(self.approver, request)
        except ApprovalPending:
            self.ctx.trace.meta["pending_approval"] = request.to_dict()
            if journal is not None:
                journal.record_pending(request)
            raise StopRun("paused", f"waiting for approval of {call.name}") from None
        if journal is not None:
            journal.record_decision(request, decision)
        return decision, failure


def rerun_safe(tool: Tool) -> bool:
    """Whether running a started call of `tool` again cannot repeat its effect: it has
    none that repeats (idempotent), or its system ignores the same call key twice. The one
    rule for a resume after a crash and for a retry after a failed attempt."""
    return tool.idempotent or tool.dedupes_on_call_key


def idempotency_key(tool: Any, args: dict[str, Any]) -> str:
    """Same arguments and same idempotency key make the same side effect. A tool may
    name the argument that carries its key (`idempotency_key="request_id"`) or give a
    function of the arguments; by default the key is the arguments themselves."""
    spec = getattr(tool, "idempotency_key", None)
    if callable(spec):
        return str(spec(args))
    if isinstance(spec, str):
        return call_key("", args) + "\x00" + str(args.get(spec))
    return call_key("", args)


__all__ = ["Admitted", "ToolGate", "idempotency_key", "rerun_safe"]
