"""A run journal kept as the checkpointed steps of a durable-execution engine's workflow.

An engine such as DBOS (`loopwright.durable.dbos`; a Temporal driver would be a sibling)
runs a workflow function again from its start after a crash, and answers each step it
already recorded with the recorded output, matched by position: the n-th step of the
replay gets the n-th output. `EngineJournal` implements `modes.machine.Journal` on such
an engine's `StepLog`. Every record is one step whose output is the record's delta (a
completion, a tool call's start, its result, a note, an approval asked, a guardrail's
verdict), never the history. A lookup that finds a record replays every recorded step up
to it, in order, so the engine's positions stay aligned with the run's; a record is
written only past the last recorded step.

What the engine does not know, this journal does: a tool call whose start is recorded
and whose result is not was in flight when the process died. The gate then stops the
run in doubt, as with the SQLite journal (unless the tool is safe to run again); the
engine's driver records the stop as a `blocked` step, and a settlement received after it
(`settle_topic`) answers the call when the workflow runs again.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

from loopwright.durable.journal import _dumps, loads, observation_of
from loopwright.errors import StoreError
from loopwright.modes.machine import CallDone, CallTool
from loopwright.policy import Completion, ModelRequest, ToolCall
from loopwright.runtime.driver import Run, execute
from loopwright.safety import ApprovalRequest, Decision
from loopwright.tools.registry import ToolError, ToolResult
from loopwright.trace import Step, Trace, Usage

Kind = Literal["model", "tool_start", "tool", "note", "pending", "verdict", "blocked", "receive"]
KINDS: Final[tuple[Kind, ...]] = ("model", "tool_start", "tool", "note", "pending", "verdict", "blocked")
"""The records the journal writes as steps (`receive` is the engine's own message step)."""


@dataclass(frozen=True, slots=True)
class Op:
    """One recorded step of a run's workflow: its kind and output; `topic` is the message
    topic of a `receive` (taken from the record before it)."""

    kind: str
    payload: Any
    topic: str | None = None


class StepLog(Protocol):
    """What the journal needs of an engine: one workflow's ordered, checkpointed steps."""

    def recorded(self) -> list[Op]:
        """The steps recorded so far, in order (read once, when the workflow starts)."""
        ...

    def record(self, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        """A step whose output is `payload`; on replay, the recorded output."""
        ...

    def receive(self, topic: str, timeout_s: float) -> Any:
        """Wait durably for a message on `topic` (None after `timeout_s`); checkpointed."""
        ...


def approval_topic(key: str) -> str:
    """The message topic that answers the approval request `key` (ApprovalRequest.key)."""
    return f"loopwright.approval:{key}"


def settle_topic(key: str) -> str:
    """The message topic that settles the in-doubt tool call `key` (its journal key)."""
    return f"loopwright.settle:{key}"


def owner(op: Op) -> tuple[str, str] | None:
    """What a record belongs to: ("tool", call key), ("model", n), ("approval", key),
    ("verdict", key); None for a `blocked` record (it belongs to each of its keys)."""
    payload = op.payload if isinstance(op.payload, dict) else {}
    if op.kind in ("tool_start", "tool", "note"):
        return "tool", str(payload["key"])
    if op.kind == "model":
        return "model", str(payload["n"])
    if op.kind == "pending":
        return "approval", str(payload["key"])
    if op.kind == "verdict":
        return "verdict", str(payload["key"])
    return None


CallState = Literal["started", "done", "blocked", "rerun"]


def call_state(ops: Sequence[Op], key: str) -> tuple[CallState | None, dict[str, Any] | None, int]:
    """Where tool call `key` stands in a run's records: its state (None: never started),
    its result record when done, and how many times it was started."""
    state: CallState | None = None
    result: dict[str, Any] | None = None
    starts = 0
    current: str | None = None  # the call a `receive` after a `blocked` record answers
    for op in ops:
        who = owner(op)
        if op.kind == "blocked":
            current = key if key in op.payload["keys"] else None
            if current is not None:
                state = "blocked"
            continue
        if op.kind == "receive":
            if current == key:
                state = _settled_state(op.payload)
            current = None
            continue
        current = None
        if who != ("tool", key):
            continue
        if op.kind == "tool_start":
            state, result, starts = "started", None, starts + 1
        elif op.kind == "tool":
            state, result = "done", op.payload
    return state, result, starts


def _settled_state(message: Any) -> CallState:
    if not isinstance(message, dict):
        return "started"  # no settlement came: still in doubt
    return "rerun" if message.get("rerun") else "done"


def decode_result(payload: dict[str, Any]) -> ToolResult:
    """A ToolResult from a `tool` record."""
    name, error = payload["name"], payload.get("error")
    value_text = payload.get("value")
    err = None if error is None else ToolError(name, error[1], error[0])
    value = None if value_text is None else loads(value_text)
    return ToolResult(name, payload.get("args") or {}, value,
                      observation=observation_of(payload.get("observation"), value_text),
                      error=err, duration_s=float(payload.get("duration_s") or 0.0))


def result_record(key: str, result: ToolResult) -> dict[str, Any]:
    """The `tool` record of a result: its value as JSON text; its observation only when it
    is not the value's own text (as the SQLite journal stores it)."""
    err = result.error
    value = None if err is not None else _dumps(result.value)
    record: dict[str, Any] = {"key": key, "name": result.name, "value": value,
                              "duration_s": round(result.duration_s, 6)}
    if value is None or result.observation != (result.value if type(result.value) is str else value):
        record["observation"] = result.observation
    if err is not None:
        record["error"] = [err.kind, err.message]
    return record


def settled_result(name: str, args: dict[str, Any], message: dict[str, Any]) -> ToolResult:
    """The result a settlement says the call had: its value, or its error."""
    if "error" in message:
        err = ToolError(name, str(message["error"]), "exception")
        return ToolResult(name, args, None, observation=err.as_observation(), error=err, duration_s=0.0)
    value = message.get("result")
    text = _dumps(value)
    return ToolResult(name, args, value, observation=value if type(value) is str else text, error=None,
                      duration_s=0.0)


class EngineJournal:
    """The Journal of one run on an engine's StepLog (see the module's docstring)."""

    def __init__(self, log: StepLog, run_id: str, settle: str = "settle") -> None:
        """`settle`: the function that settles a call of this engine's runs, as a person
        would call it (named in the message of a run stopped in doubt)."""
        self.log = log
        self.run_id = run_id
        self.settle = settle
        self.failed: str | None = None
        self._ops = log.recorded()
        self._at = 0  # recorded steps replayed so far
        self._last: dict[tuple[str, str], int] = {}  # owner -> the index of its last record
        self._notes: dict[tuple[str, str], Any] = {}
        self._asked: set[str] = set()  # approvals whose `pending` record was replayed
        self._tools: dict[str, tuple[str, ToolResult | None]] = {}
        self._attempts: dict[str, int] = {}
        self._started: dict[str, tuple[str, dict[str, Any]]] = {}  # key -> (tool, args) of its last start
        self._unfinished: set[str] = set()
        self._last_prompt: tuple[int, str] | None = None
        self._index()

    def _index(self) -> None:
        previous: Op | None = None
        for i, op in enumerate(self._ops):
            if op.kind == "receive" and previous is not None:  # it answers the record before it
                keys = previous.payload["keys"] if previous.kind == "blocked" else [previous.payload["key"]]
                topic = settle_topic(keys[0]) if previous.kind == "blocked" else approval_topic(keys[0])
                self._ops[i] = op = Op(op.kind, op.payload, topic)
                who = owner(previous)
                for key in ([("tool", k) for k in keys] if who is None else [who]):
                    self._last[key] = i
            elif op.kind == "blocked":
                for key in op.payload["keys"]:
                    self._last[("tool", key)] = i
            elif (who := owner(op)) is not None:
                self._last[who] = i
                if op.kind == "note":
                    self._notes[(op.payload["key"], op.payload["what"])] = loads(op.payload["value"])
            previous = op

    # -- the engine's positions ------------------------------------------------------

    def _replay_through(self, index: int) -> None:
        """Replay the recorded steps up to `index`: the engine answers each from its record."""
        while self._at <= index:
            op = self._ops[self._at]
            if op.kind == "receive":
                assert op.topic is not None
                self.log.receive(op.topic, 0.0)
            elif op.kind in KINDS:
                self.log.record(op.kind, op.payload)
            else:
                raise StoreError(f"run {self.run_id!r}: step {self._at + 1} of its workflow is {op.kind!r}, which "
                                 "loopwright did not record; a tool or guardrail that calls the engine itself "
                                 "cannot be replayed")
            self._at += 1

    def _write(self, kind: Kind, payload: dict[str, Any]) -> dict[str, Any]:
        if self.failed is not None:
            raise StoreError(f"run {self.run_id!r}: nothing more is recorded after a failed write ({self.failed})")
        if self._at < len(self._ops):
            recorded = self._ops[self._at]
            raise StoreError(f"run {self.run_id!r} replayed differently from its record: it asked to record "
                             f"{kind!r} where step {self._at + 1} of its workflow is {recorded.kind!r} "
                             f"({json.dumps(recorded.payload, default=str)[:200]}); the agent's code, tools or "
                             "model changed since the run was recorded")
        try:
            return self.log.record(kind, payload)
        except Exception as exc:
            self.failed = f"{type(exc).__name__}: {exc}"
            raise StoreError(f"cannot record run {self.run_id!r}: {self.failed}") from exc

    def _receive(self, topic: str, timeout_s: float) -> Any:
        try:
            return self.log.receive(topic, timeout_s)
        except Exception as exc:
            self.failed = f"{type(exc).__name__}: {exc}"
            raise StoreError(f"cannot wait for {topic!r} in run {self.run_id!r}: {self.failed}") from exc

    def flush(self) -> None:
        """Nothing waits: each record is its own step."""

    # -- model calls -----------------------------------------------------------------

    def recorded_completion(self, n: int) -> tuple[Completion, Usage] | None:
        index = self._last.get(("model", str(n)))
        if index is None:
            return None
        self._replay_through(index)
        payload = self._ops[index].payload
        usage = Usage.from_dict(payload["usage"])
        calls = tuple(ToolCall(*c) for c in payload.get("calls", ()))
        completion = Completion(payload["text"], None if usage.estimated else usage, calls,
                                dict(payload.get("meta") or {}))
        return completion, usage

    def record_completion(self, n: int, request: ModelRequest, completion: Completion, usage: Usage) -> None:
        record: dict[str, Any] = {"n": n, "purpose": request.purpose, "text": completion.text,
                                  "usage": usage.to_dict()}
        last = self._last_prompt
        if last is not None and last[0] == n - 1 and request.prompt.startswith(last[1]):
            record["prompt_base"], record["prompt"] = last[0], request.prompt[len(last[1]):]  # only what it adds
        else:
            record["prompt"] = request.prompt
        if n > 0:
            self._last_prompt = (n, request.prompt)
        if completion.tool_calls:
            record["calls"] = [[c.name, c.arguments, c.id] for c in completion.tool_calls]
        if completion.meta:
            record["meta"] = json.loads(_dumps(completion.meta))
        self._write("model", record)

    # -- tool calls ------------------------------------------------------------------

    def recorded_tool(self, key: str) -> tuple[str, ToolResult | None] | None:
        if key in self._tools:
            return self._tools[key]
        index = self._last.get(("tool", key))
        if index is None:
            return None
        self._replay_through(index)
        state, result, starts = call_state(self._ops[:index + 1], key)
        self._attempts[key] = starts
        for op in self._ops[:index + 1]:
            if op.kind == "tool_start" and op.payload["key"] == key:
                self._started[key] = (op.payload["name"], op.payload.get("args") or {})
        if state == "done" and result is not None:
            found: tuple[str, ToolResult | None] = ("done", decode_result(result))
        elif state == "blocked":
            return self._settlement(key)
        elif state == "rerun":
            return None
        else:
            self._unfinished.add(key)
            found = ("started", None)
        self._tools[key] = found
        return found

    def _settlement(self, key: str) -> tuple[str, ToolResult | None] | None:
        """A call the run stopped at in doubt: the settlement sent since (`settle_topic`)."""
        message = self._receive(settle_topic(key), 0.0)
        name, args = self._started.get(key, ("", {}))
        if not isinstance(message, dict):  # nobody settled it: still in doubt
            self._unfinished.add(key)
            return "started", None
        if message.get("rerun"):
            return None
        result = settled_result(name, args, message)
        self.record_tool_result(key, result)
        return "done", result

    def attempt(self, key: str) -> int:
        """Which attempt at call `key` a start now would be (1: the first)."""
        return self._attempts.get(key, 0) + 1

    def record_tool_start(self, key: str, name: str, args: dict[str, Any]) -> None:
        self._write("tool_start", {"key": key, "name": name, "args": json.loads(_dumps(args))})
        self._attempts[key] = self._attempts.get(key, 0) + 1
        self._started[key] = (name, args)
        self._unfinished.add(key)
        self._tools.pop(key, None)  # what a lookup said before this start is out of date

    def record_tool_result(self, key: str, result: ToolResult) -> None:
        self._write("tool", result_record(key, result))
        self._unfinished.discard(key)
        self._tools.pop(key, None)

    def record_note(self, key: str, what: str, value: Any) -> None:
        """Keep `value` as the note `what` on call `key`, a step of its own."""
        self._notes[(key, what)] = value
        self._write("note", {"key": key, "what": what, "value": _dumps(value)})

    def recorded_note(self, key: str, what: str) -> Any:
        return self._notes.get((key, what))

    # -- approvals -------------------------------------------------------------------

    def recorded_decision(self, key: str) -> Decision | None:
        index = self._last.get(("approval", key))
        if index is None:
            return None
        self._replay_through(index)
        op = self._ops[index]
        if op.kind == "pending":  # asked, never answered: the approver waits again
            self._asked.add(key)
            return None
        return decision_of(op.payload)

    def await_decision(self, request: ApprovalRequest, timeout_s: float) -> Decision:
        """The approver of a run on an engine: record the request, then wait durably for
        its answer (`approval_topic`), sent from any process. No answer in time is a denial."""
        if request.key not in self._asked:
            self._write("pending", {"key": request.key, "request": json.loads(_dumps(request.to_dict()))})
        return decision_of(self._receive(approval_topic(request.key), timeout_s), timeout_s)

    def record_pending(self, request: ApprovalRequest) -> None:
        """Nothing to add: `await_decision` recorded the request."""

    def record_decision(self, request: ApprovalRequest, decision: Decision) -> None:
        """Nothing to add: the answer is the recorded message."""

    # -- guardrail verdicts ----------------------------------------------------------

    def recorded_verdict(self, key: str) -> dict[str, Any] | None:
        index = self._last.get(("verdict", key))
        if index is None:
            return None
        self._replay_through(index)
        verdict: dict[str, Any] = self._ops[index].payload["verdict"]
        return verdict

    def record_verdict(self, key: str, guardrail: str, verdict: dict[str, Any]) -> None:
        self._write("verdict", {"key": key, "guardrail": guardrail, "verdict": json.loads(_dumps(verdict))})

    # -- steps and the end -----------------------------------------------------------

    def record_step(self, step: Step) -> None:
        """Nothing: a replay rebuilds the steps from the records."""

    def record_end(self, trace: Trace) -> None:
        """Nothing: the engine keeps the workflow's output (the trace)."""

    def in_doubt(self, trace: Trace) -> list[str]:
        """The calls a run that ended this way left in doubt (it waits for a person)."""
        if trace.stopped_reason in ("error", "timeout") and self._unfinished:
            return sorted(self._unfinished)
        return []

    def settle_advice(self, key: str, dedupes: bool) -> str:
        """What a person does about call `key` that the run stopped at in doubt: settle
        it, which runs the workflow again from there."""
        call = f"{self.settle}({self.run_id!r}, {key!r}"
        if dedupes:
            return (f"Settle it with {call}, rerun=True) to run it again with the same call key, which its "
                    "system deduplicates on, or with the result= or error= it had; the run goes on from there.")
        return (f"Check whether it took effect, then settle it: {call}, result=... | error=... | rerun=True); "
                "the run goes on from there.")

    def block(self, keys: list[str], trace_json: str) -> None:
        """Record that the run stopped at these calls in doubt, and its trace then: a
        settlement answers them."""
        self._write("blocked", {"keys": keys, "trace": trace_json})


def decision_of(message: Any, timeout_s: float | None = None) -> Decision:
    """The Decision an approval message holds; none (a timeout) is a denial."""
    if not isinstance(message, dict):
        return Decision(False, f"no answer to the approval request within {timeout_s} s")
    return Decision(message.get("approved") is True, str(message.get("reason") or ""))


class InOrderRun(Run):
    """The sync driver with ReWOO's started calls run one at a time, in the order they are
    started, on the driver's thread: an engine matches recorded steps by position, so their
    order must be the same on every replay."""

    def __init__(self, run: Run) -> None:
        super().__init__(run.context, run.machine)
        self._finished_calls: deque[CallDone | Exception] = deque()

    def _start(self, call: CallTool) -> None:
        try:
            self._finished_calls.append(CallDone(call.key, execute(self.context, call)))
        except Exception as exc:  # a StopRun from the gate: raised where the machine waits
            self._finished_calls.append(exc)

    def _next_done(self) -> CallDone:
        done = self._finished_calls.popleft()
        if isinstance(done, Exception):
            raise done
        return done


__all__ = ["KINDS", "EngineJournal", "InOrderRun", "Op", "StepLog", "approval_topic", "call_state",
           "decision_of", "decode_result", "settle_topic"]
