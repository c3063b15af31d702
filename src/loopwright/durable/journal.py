"""The journal of one run on a store (SQLite or PostgreSQL): what the loops record and
replay through.

RunJournal implements `loopwright.modes.machine.Journal`: each model call, tool call,
approval and step is written (see `store` for the tables and durability) before the run
uses it, and a resumed run's journal answers lookups from what was recorded. A fork's
journal also answers from its source run for the steps it replays, copying each answer
into its own rows. The journal renews its run's lease as it writes. It is the store's
close collaborator and uses its lock and query primitives (`JournalStore`) directly.
"""

from __future__ import annotations

import json
import threading
import time
import weakref
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final, Literal, Protocol

from loopwright.errors import StoreError
from loopwright.policy import Completion, ModelRequest, ToolCall
from loopwright.safety import ApprovalRequest, Decision
from loopwright.tools.registry import ToolError, ToolResult
from loopwright.trace import Step, Trace, Usage

RunStatus = Literal["running", "paused", "interrupted", "blocked", "finished"]
"""Where a journaled run stands: `blocked` waits for a person (a side effect of unknown outcome)."""


class JournalStore(Protocol):
    """What a journal needs of the store it writes to (SQLiteStore and PostgresStore are
    two). The store creates journals and flushes them; the journal never imports the store.
    SQL is written with `?` placeholders; the store adapts it to its driver."""

    path: Any
    lease_s: float
    _lock: threading.RLock
    _journals: weakref.WeakSet[RunJournal]

    def _all(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]: ...
    def _one(self, sql: str, params: tuple[Any, ...] = ()) -> Any: ...
    def _run_batch(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None: ...


@dataclass(eq=False)
class RunJournal:
    """The Journal of one run (see `loopwright.modes.machine.Journal`). A resumed run's
    journal is preloaded with everything recorded, so lookups cost a dict access."""

    store: JournalStore
    run_id: str
    preload: bool = False
    lease_owner: str | None = None  # renewed as the journal writes; released at the run's end
    fork_of: tuple[str, int] | None = None  # (source run, k): replay its first k steps
    _completions: dict[int, tuple[Completion, Usage]] = field(default_factory=dict)
    _tools: dict[str, tuple[str, ToolResult | None]] = field(default_factory=dict)
    _steps: dict[int, str] = field(default_factory=dict)
    _unfinished: set[str] = field(default_factory=set)
    _last_prompt: tuple[int, str, tuple[dict[str, Any], ...]] | None = None
    _pending: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    _spec: tuple[tuple[Any, ...], str] | None = None
    _attempts: dict[str, int] = field(default_factory=dict)
    _last_step: int = 0
    _renew_at: float = 0.0
    _source: RunJournal | None = None
    failed: str | None = None  # why a write failed; set once, and nothing more is written
    _started: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (name, args JSON) as stored
    _verdicts: dict[str, dict[str, Any]] = field(default_factory=dict)  # guardrail verdicts by key

    def __post_init__(self) -> None:
        self.store._journals.add(self)
        self._renew_at = time.monotonic() + self.store.lease_s / 3
        if self.preload:
            self._load(self.run_id)
        if self.fork_of is not None:
            self._source = RunJournal(self.store, self.fork_of[0])
            self._source._load(self.fork_of[0])

    def _load(self, rid: str) -> None:
        store = self.store
        where = f"{store.path} (run {rid!r})"
        for row in store._all(f"SELECT {_MODEL_CALL_SUMMED}, checksum FROM model_calls WHERE run_id = ?", (rid,)):
            verify(row, f"{where}: model call {row[0]}")
            usage = Usage(row[9], row[10], row[11], estimated=bool(row[12]))
            calls = tuple(ToolCall(*c) for c in loads(row[7], where)) if row[7] else ()
            meta = loads(row[8], where) if row[8] else {}
            self._completions[row[0]] = (Completion(row[6], None if usage.estimated else usage, calls, meta), usage)
        for row in store._all(f"SELECT {_TOOL_CALL_SUMMED}, checksum, duration_s, attempts FROM tool_calls "
                              "WHERE run_id = ?", (rid,)):
            key, name, args, state, value, obs, kind, error = row[:8]
            verify(row[:9], f"{where}: tool call {key!r}")
            self._attempts[key] = int(row[10])
            if state == "done":
                err = None if kind is None else ToolError(name, error or "", kind)
                result = ToolResult(name, loads(args, where), None if value is None else loads(value, where),
                                    observation=observation_of(obs, value), error=err, duration_s=row[9] or 0.0)
                self._tools[key] = ("done", result)
            else:
                self._started[key] = (name, args)
                self._tools[key] = ("started", None)
                self._unfinished.add(key)
        for key, verdict in store._all("SELECT key, verdict FROM guardrail_verdicts WHERE run_id = ?", (rid,)):
            self._verdicts[key] = loads(verdict, where)
        for row in store._all(f"SELECT {_STEP_SUMMED}, checksum FROM steps WHERE run_id = ?", (rid,)):
            verify(row, f"{where}: step {row[0]}")
            self._steps[row[0]] = _comparable_step(loads(row[3], where))

    def _replaying_source(self) -> RunJournal | None:
        """A fork's source journal while the fork is within the steps it replays."""
        if self._source is not None and self.fork_of is not None and self._last_step < self.fork_of[1]:
            return self._source
        return None

    # -- writing --------------------------------------------------------------------
    # Events that nothing outside the process has acted on yet (a completion, a tool's
    # result) wait in `_pending` and are committed in the same transaction as the next
    # event that must be durable before the run goes on: a tool start (before the tool
    # runs), a step (before the caller sees it), an approval, the end, or the next model
    # call. Two small transactions a ReAct step instead of four.

    def _defer(self, sql: str, params: tuple[Any, ...]) -> None:
        with self.store._lock:
            self._pending.append((sql, params))

    def _commit(self, sql: str | None = None, params: tuple[Any, ...] = ()) -> None:
        statements = [] if sql is None else [(sql, params)]
        self._write_all(statements)

    def _write_all(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        """The pending events and `statements` in one transaction. The pending list is
        cleared only once the transaction committed, so an interrupt loses nothing."""
        with self.store._lock:
            batch = [*self._pending, *statements]
            if not batch:
                return
            now, tick = time.time(), time.monotonic()  # renewals on a clock that cannot jump
            renew = self.lease_owner is not None and tick >= self._renew_at
            if renew:  # the run is alive: keep it, if it is still this worker's
                self._check_lease()
                batch.append(("UPDATE runs SET lease_expires = ? WHERE id = ? AND lease_owner = ?",
                              (now + self.store.lease_s, self.run_id, self.lease_owner)))
            if self.failed is not None:
                raise StoreError(f"run {self.run_id!r}: nothing more is written to its journal after a failed "
                                 f"write ({self.failed})")
            try:
                self.store._run_batch(batch)
            except StoreError as exc:
                self.failed = str(exc)
                raise StoreError(f"cannot record run {self.run_id!r}: {exc}") from exc
            if renew:
                self._renew_at = tick + self.store.lease_s / 3
            self._pending.clear()

    def _check_lease(self) -> None:
        """Fail (nothing more is written) when another worker holds this run's lease now:
        it took the run over after the lease expired, and two workers never write one run."""
        try:
            row = self.store._one("SELECT lease_owner FROM runs WHERE id = ?", (self.run_id,))
        except StoreError as exc:
            self.failed = str(exc)
            raise
        if row is not None and row[0] not in (None, self.lease_owner):
            self.failed = f"the run's lease was taken over by another worker ({row[0]})"
            raise StoreError(f"cannot record run {self.run_id!r}: {self.failed}, after it expired; this worker "
                             "stops and writes nothing more to it (give the store a longer lease_s)")

    def mark_resumed(self) -> None:
        """The run is running again (its status until it ends), and counted as resumed. Its
        previous end (stop reason, answer, counters, transcript) is cleared, so until it ends
        again its record reads like any unfinished run's: counted from what is recorded."""
        self._commit(
            "UPDATE runs SET status = 'running', resumes = resumes + 1, updated_at = ?, stopped_reason = NULL, "
            "final_answer = NULL, llm_calls = 0, tool_calls = 0, replans = 0, prompt_tokens = 0, "
            "evaluated_tokens = 0, completion_tokens = 0, usage_estimated = 0, transcript = NULL, "
            "scratchpad = NULL, meta = NULL, end_checksum = NULL WHERE id = ?",
            (time.time(), self.run_id),
        )

    def flush(self) -> None:
        """Commit the events waiting for the next durable one (the store's close does;
        a journal whose write failed writes nothing more)."""
        if self.failed is None:
            self._commit()

    # -- model calls ----------------------------------------------------------------

    def recorded_completion(self, n: int) -> tuple[Completion, Usage] | None:
        if self._pending:
            self._commit()  # before a model call is paid for, what came before is durable
        found = self._completions.get(n)
        source = self._replaying_source() if found is None else None
        if source is not None and n in source._completions:  # a fork's prefix: copied, then used
            found = self._completions[n] = source._completions[n]
            self._defer(f"INSERT INTO model_calls SELECT ?, {_MODEL_CALL_COLUMNS} FROM model_calls "
                        "WHERE run_id = ? AND n = ?", (self.run_id, source.run_id, n))
        return found

    def record_completion(self, n: int, request: ModelRequest, completion: Completion, usage: Usage) -> None:
        prompt, messages, base = request.prompt, request.messages, None
        last = self._last_prompt
        # A ReAct prompt extends the previous one: store only the new part, so a step's
        # write does not grow with the run.
        if (last is not None and last[0] == n - 1 and prompt.startswith(last[1])
                and len(messages) >= len(last[2])
                and all(a is b for a, b in zip(messages, last[2], strict=False))):
            base, stored, new_messages = last[0], prompt[len(last[1]):], messages[len(last[2]):]
        else:
            stored, new_messages = prompt, messages
        if n > 0:  # a summarizer call (n < 0) is no step of the run's prompt chain
            self._last_prompt = (n, prompt, messages)
        spec_key = (request.stop, request.max_tokens, request.dialect)
        if self._spec is None or self._spec[0] != spec_key:  # the same for every call of a run
            self._spec = (spec_key, _dumps({"stop": list(request.stop), "max_tokens": request.max_tokens,
                                            "dialect": request.dialect}))
        calls = [[c.name, c.arguments, c.id] for c in completion.tool_calls]
        row = (n, request.purpose, base, stored, _dumps(list(new_messages)) if new_messages else None,
               self._spec[1], completion.text, _dumps(calls) if calls else None,
               _dumps(completion.meta) if completion.meta else None, usage.prompt_tokens,
               usage.evaluated_tokens, usage.completion_tokens, int(usage.estimated))
        self._defer(
            "INSERT INTO model_calls VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (self.run_id, *row, time.time(), checksum(*row)),
        )

    # -- tool calls -----------------------------------------------------------------

    def recorded_tool(self, key: str) -> tuple[str, ToolResult | None] | None:
        found = self._tools.get(key)
        source = self._replaying_source() if found is None else None
        if source is not None and source._tools.get(key, ("", None))[0] == "done":
            found = self._tools[key] = source._tools[key]
            self._defer(f"INSERT INTO tool_calls SELECT ?, {_TOOL_CALL_COLUMNS} FROM tool_calls "
                        "WHERE run_id = ? AND key = ?", (self.run_id, source.run_id, key))
        return found

    def attempt(self, key: str) -> int:
        """Which attempt at call `key` a start now would be (1: the first)."""
        return self._attempts.get(key, 0) + 1

    def record_tool_start(self, key: str, name: str, args: dict[str, Any]) -> None:
        self._unfinished.add(key)
        self._attempts[key] = self._attempts.get(key, 0) + 1
        stored = _dumps(args)
        self._started[key] = (name, stored)
        self._commit(
            "INSERT INTO tool_calls (run_id, key, name, args, state, started_at, checksum) "
            "VALUES (?, ?, ?, ?, 'started', ?, ?) ON CONFLICT (run_id, key) DO UPDATE SET "
            "attempts = tool_calls.attempts + 1, started_at = excluded.started_at, name = excluded.name, "
            "args = excluded.args, checksum = excluded.checksum",
            (self.run_id, key, name, stored, time.time(),
             checksum(key, name, stored, "started", None, None, None, None)),
        )

    def record_tool_result(self, key: str, result: ToolResult) -> None:
        err = result.error
        value = None if err is not None else _dumps(result.value)
        observation: str | None = result.observation
        # A result whose observation is its value's text (a str itself, a number, a dict's
        # JSON) is stored once, in `value`: a 5 MB result is journaled as 5 MB, not 10.
        if value is not None and observation == (result.value if type(result.value) is str else value):
            observation = None
        kind, message = (None, None) if err is None else (err.kind, err.message)
        name, args = self._started.pop(key, (result.name, _dumps(result.args)))
        self._defer(
            "UPDATE tool_calls SET state = 'done', value = ?, observation = ?, error_kind = ?, error = ?, "
            "duration_s = ?, finished_at = ?, checksum = ? WHERE run_id = ? AND key = ?",
            (value, observation, kind, message, result.duration_s, time.time(),
             checksum(key, name, args, "done", value, observation, kind, message), self.run_id, key),
        )
        self._unfinished.discard(key)

    # -- notes ----------------------------------------------------------------------

    def record_note(self, key: str, what: str, value: Any) -> None:
        """Keep `value` (JSON data) as the note `what` on call `key`, durable at once: a
        tool's own record of its call (lw.A2AAgent: the remote task it started). Kept as
        the done row `<key>@<what>` of tool_calls, so a fork copies it as it copies calls;
        the run's call count leaves it out (see `NOTE_MARK`)."""
        row_key, name, stored = note_key(key, what), NOTE_MARK + what, _dumps(value)
        self._tools[row_key] = ("done", ToolResult(name, {}, value, observation=observation_of(None, stored),
                                                   error=None, duration_s=0.0))
        now = time.time()
        self._commit(
            "INSERT INTO tool_calls (run_id, key, name, args, state, value, duration_s, started_at, finished_at, "
            "checksum) VALUES (?, ?, ?, '{}', 'done', ?, 0, ?, ?, ?) ON CONFLICT (run_id, key) DO UPDATE SET "
            "value = excluded.value, finished_at = excluded.finished_at, checksum = excluded.checksum",
            (self.run_id, row_key, name, stored, now, now,
             checksum(row_key, name, "{}", "done", stored, None, None, None)),
        )

    def recorded_note(self, key: str, what: str) -> Any:
        """The value of the note `what` on call `key`; None when there is none."""
        found = self.recorded_tool(note_key(key, what))
        return None if found is None or found[1] is None else found[1].value

    # -- approvals ------------------------------------------------------------------

    def recorded_decision(self, key: str) -> Decision | None:
        # Asked live, not preloaded: a person may decide while this process runs.
        sql = "SELECT approved, reason FROM approvals WHERE run_id = ? AND key = ? AND state = 'decided'"
        row = self.store._one(sql, (self.run_id, key))
        source = self._replaying_source() if row is None else None
        if source is not None:  # a fork's prefix is decided as its source was
            row = self.store._one(sql, (source.run_id, key))
        return None if row is None else Decision(bool(row[0]), row[1] or "")

    def record_pending(self, request: ApprovalRequest) -> None:
        self._approval(request, None)

    def record_decision(self, request: ApprovalRequest, decision: Decision) -> None:
        self._approval(request, decision)

    def _approval(self, request: ApprovalRequest, decision: Decision | None) -> None:
        now = time.time()
        self._commit(
            "INSERT INTO approvals VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (run_id, key) DO UPDATE SET state = excluded.state, approved = excluded.approved, "
            "reason = excluded.reason, decided_at = excluded.decided_at",
            (self.run_id, request.key, request.tool, _dumps(request.args), str(request.step),
             request.side_effects, request.description, "pending" if decision is None else "decided",
             None if decision is None else int(decision.approved),
             None if decision is None else decision.reason, now, None if decision is None else now),
        )

    # -- guardrail verdicts ---------------------------------------------------------

    def recorded_verdict(self, key: str) -> dict[str, Any] | None:
        """A guardrail's verdict recorded at `key` (this run's, or a fork's source's while
        the fork replays its prefix), or None."""
        found = self._verdicts.get(key)
        source = self._replaying_source() if found is None else None
        if source is not None and key in source._verdicts:
            found = source._verdicts[key]
            self.record_verdict(key, "", found)
        return found

    def record_verdict(self, key: str, guardrail: str, verdict: dict[str, Any]) -> None:
        """Record a verdict before the run acts on it (a replay then acts the same way)."""
        self._verdicts[key] = verdict
        self._commit("INSERT INTO guardrail_verdicts VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_id, key) DO UPDATE SET "
                     "verdict = excluded.verdict", (self.run_id, key, guardrail or key.partition(" @ ")[0],
                                                    _dumps(verdict), time.time()))

    # -- steps and the end ----------------------------------------------------------

    def record_step(self, step: Step) -> None:
        self._last_step = max(self._last_step, step.index)
        text = _step_json(step)
        old = self._steps.get(step.index)
        if old is not None and old == _comparable_step(json.loads(text)):
            self._commit()  # a replayed step: the original row (timings included) is kept
            return
        self._commit(
            "INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, idx) DO UPDATE SET "
            "kind = excluded.kind, tool = excluded.tool, step = excluded.step, created_at = excluded.created_at, "
            "checksum = excluded.checksum",
            (self.run_id, step.index, step.kind, step.tool, text, time.time(),
             checksum(step.index, step.kind, step.tool, text)),
        )

    def settle_advice(self, key: str, dedupes: bool) -> str:
        """What a person does about call `key` that the run stopped at in doubt."""
        if dedupes:
            return ("A resume runs it again with the same call key, which its system deduplicates on; "
                    "or settle it (store.settle or `loopwright runs settle`).")
        return ("Check whether it took effect, then settle it (store.settle or `loopwright runs settle`), "
                "resume with rerun_unfinished=True, or finish the run by hand.")

    def record_end(self, trace: Trace) -> None:
        u = trace.usage
        row = (self._status(trace), trace.stopped_reason, trace.final_answer, trace.llm_calls, trace.tool_calls,
               trace.replans, u.prompt_tokens, u.evaluated_tokens, u.completion_tokens, int(u.estimated),
               float(trace.duration_s), trace.transcript, trace.scratchpad, _dumps(trace.meta),
               None if trace.started_at is None else float(trace.started_at))
        end = (
            "UPDATE runs SET status = ?, stopped_reason = ?, final_answer = ?, llm_calls = ?, tool_calls = ?, "
            "replans = ?, prompt_tokens = ?, evaluated_tokens = ?, completion_tokens = ?, usage_estimated = ?, "
            "duration_s = ?, transcript = ?, scratchpad = ?, meta = ?, started_at = ?, end_checksum = ?, "
            "updated_at = ?, lease_owner = NULL, lease_expires = NULL WHERE id = ?",
            (*row, checksum(*row), time.time(), self.run_id),
        )
        # A resumed run that ended earlier than the recorded one (other limits): the
        # journal's steps must be the trace's steps.
        trim = ("DELETE FROM steps WHERE run_id = ? AND idx > ?", (self.run_id, len(trace.steps)))
        self._write_all([end, trim])

    def _status(self, trace: Trace) -> RunStatus:
        reason = trace.stopped_reason
        if reason == "paused":
            return "paused"
        if reason == "interrupted":
            return "interrupted"
        if reason in ("error", "timeout") and self._unfinished:
            return "blocked"  # a side effect of unknown outcome waits for a person
        return "finished"


# -- helpers ---------------------------------------------------------------------------

NOTE_MARK: Final = "@"
"""Marks a tool_calls row that is a note on a call (`<call key>@<what>`), not a call: no
mode makes a call key with it."""


def note_key(key: str, what: str) -> str:
    """The tool_calls key of the note `what` on call `key`."""
    return f"{key}{NOTE_MARK}{what}"


_MODEL_CALL_COLUMNS: Final = (
    "n, purpose, prompt_base, prompt, messages, request, completion, tool_calls, completion_meta, "
    "prompt_tokens, evaluated_tokens, completion_tokens, usage_estimated, created_at, checksum"
)
_TOOL_CALL_COLUMNS: Final = (
    "key, name, args, state, attempts, value, observation, error_kind, error, duration_s, started_at, "
    "finished_at, settled_at, checksum"
)
# The columns each row's checksum covers, in order: what a replay or a reader uses (not
# timings, attempts or the run id, so a fork's copy of a row keeps its checksum).
_MODEL_CALL_SUMMED: Final = (
    "n, purpose, prompt_base, prompt, messages, request, completion, tool_calls, completion_meta, "
    "prompt_tokens, evaluated_tokens, completion_tokens, usage_estimated"
)
_TOOL_CALL_SUMMED: Final = "key, name, args, state, value, observation, error_kind, error"
_RUN_SUMMED: Final = "task, mode, config, forked_from, forked_at_step"  # `checksum`, set when the run starts
_RUN_END_SUMMED: Final = (  # `end_checksum`, set when it ends (NULL while it runs)
    "status, stopped_reason, final_answer, llm_calls, tool_calls, replans, prompt_tokens, evaluated_tokens, "
    "completion_tokens, usage_estimated, duration_s, transcript, scratchpad, meta, started_at"
)
_STEP_SUMMED: Final = "idx, kind, tool, step"
_ENCODER: Final = json.JSONEncoder(default=str, ensure_ascii=False)  # one, not one per call
_STEP_FIELDS: Final = tuple(f.name for f in fields(Step))


def observation_of(observation: str | None, value: str | None) -> str:
    """A done tool call's observation from its row: NULL when it is the text of the value
    (a JSON str's content, else the JSON itself; see `record_tool_result`)."""
    if observation is not None:
        return observation
    if value is None:
        return ""
    loaded = loads(value)
    return loaded if type(loaded) is str else value


def checksum(*values: Any) -> int:
    """CRC-32 of a row's values as stored, so a damaged record is found when it is read.
    Text is taken as the bytes the store writes (a lone surrogate escaped, as `escape_text`
    stores it), so a value reads back with the checksum it was written with."""
    crc = 0
    for value in values:
        if value is None:
            data = b"\x00"
        elif isinstance(value, str):
            data = b"s" + value.encode("utf-8", "backslashreplace")
        else:
            data = b"n" + repr(int(value) if isinstance(value, bool) else value).encode()
        crc = zlib.crc32(len(data).to_bytes(8, "little") + data, crc)
    return crc


def verify(row: tuple[Any, ...] | Any, what: str) -> None:
    """Check a row read back: its summed values, then its stored checksum (NULL in a row
    written before journals kept checksums: read as it is). StoreError when they differ."""
    stored = row[-1]
    if stored is not None and checksum(*row[:-1]) != stored:
        raise StoreError(f"{what} is damaged (its content does not match the checksum it was written with); "
                         "it was not used. Restore the journal from a copy, or settle or fork around the record")


def loads(text: str, where: str = "the run journal") -> Any:
    """A stored JSON value; StoreError when the stored text is not JSON (a damaged record)."""
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"{where}: a stored record is damaged (not the JSON it was written as: {exc}); "
                         "it was not used") from None


def escape_text(params: tuple[Any, ...]) -> tuple[Any, ...]:
    """The parameters with text that UTF-8 cannot hold (lone surrogates, such as a file
    name that was not UTF-8) written as backslash escapes (\\udcff): stored and read back,
    never a failed write. In JSON text such an escape reads back as the original."""
    return tuple(p.encode("utf-8", "backslashreplace").decode("utf-8") if type(p) is str else p for p in params)


def _dumps(value: Any) -> str:
    """JSON text of the value, rendered like `json_safe`: str() for what JSON cannot hold."""
    try:
        return _ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError):
        return _ENCODER.encode(str(value))


def _step_json(step: Step) -> str:
    """The JSON of `step.to_dict()`, encoded once rather than round-tripped per field."""
    d = {name: getattr(step, name) for name in _STEP_FIELDS}
    d["usage"] = step.usage.to_dict()
    try:
        return _ENCODER.encode(d)
    except (TypeError, ValueError, RecursionError):  # what to_dict renders with str()
        return _ENCODER.encode(step.to_dict())


# What a replay cannot reproduce: timings, its own marker, and a failed tool's traceback
# (journaled with the step, not with the call), so a replayed step keeps its recorded row.
_VOLATILE_META: Final = frozenset({"tool_s", "model_s", "replayed", "traceback"})


def _comparable_step(d: Mapping[str, Any]) -> str:
    """A step's JSON without what differs between a run and its replay (timings)."""
    out = {k: v for k, v in d.items() if k != "duration_s"}
    out["meta"] = {k: v for k, v in (d.get("meta") or {}).items() if k not in _VOLATILE_META}
    return json.dumps(out, sort_keys=True, default=str)

