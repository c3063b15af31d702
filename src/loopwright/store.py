"""A durable run journal on SQLite: every model call, tool call, approval and step is
written before the run uses it, so a run killed at any point can be resumed
(`loopwright.resume`) without paying for a model call twice or repeating a side effect.

One row per event, written in its own small transaction (never the whole history):
`runs` (one row per run), `model_calls`, `tool_calls` (state `started` -> `done`),
`steps` (the trace's Steps as JSON) and `approvals` (`pending` -> `decided`). The tables
are meant to be read with the sqlite3 shell as well as through this class; see
docs/durable-runs.md.

Durability: WAL mode. With `synchronous="NORMAL"` (the default) a committed event
survives the process being killed; `"FULL"` also survives power loss, at an fsync per
event.

Tool values are stored as JSON (rendered like `json_safe`): JSON data comes back as is
(tuples come back as lists), anything else comes back as its `str()`.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final, Literal

from loopwright.errors import StoreError, describe
from loopwright.policy import Completion, ModelRequest, ToolCall
from loopwright.safety import ApprovalRequest, Decision
from loopwright.tools import ToolError, ToolResult
from loopwright.trace import Step, Trace, Usage

APPLICATION_ID: Final = 0x4C57524A  # "LWRJ" in the SQLite header: this file is a loopwright journal
SCHEMA_NAME: Final = "loopwright-journal"
Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
RunStatus = Literal["running", "paused", "interrupted", "blocked", "finished"]
RESUMABLE: Final = frozenset({"running", "paused", "interrupted", "blocked"})
_WAL_SIZE_LIMIT: Final = 64 * 1024 * 1024  # bytes the WAL file is cut back to after a checkpoint

_SCHEMA_V1: Final = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    task TEXT NOT NULL,
    mode TEXT NOT NULL,
    config TEXT NOT NULL,                 -- JSON: limits and tool scope
    status TEXT NOT NULL,                 -- running | paused | interrupted | blocked | finished
    stopped_reason TEXT,
    final_answer TEXT,
    llm_calls INTEGER NOT NULL DEFAULT 0,
    tool_calls INTEGER NOT NULL DEFAULT 0,
    replans INTEGER NOT NULL DEFAULT 0,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    evaluated_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    usage_estimated INTEGER NOT NULL DEFAULT 0,
    duration_s REAL NOT NULL DEFAULT 0,
    resumes INTEGER NOT NULL DEFAULT 0,
    transcript TEXT,
    scratchpad TEXT,
    meta TEXT,                            -- JSON
    started_at REAL,                      -- when the latest (resumed) session began
    created_at REAL NOT NULL,             -- unix seconds: datetime(created_at, 'unixepoch')
    updated_at REAL NOT NULL
);
CREATE TABLE model_calls (
    run_id TEXT NOT NULL REFERENCES runs(id),
    n INTEGER NOT NULL,                   -- 1-based call number within the run
    purpose TEXT NOT NULL,
    prompt_base INTEGER,                  -- the call whose prompt this one extends, or NULL
    prompt TEXT NOT NULL,                 -- the whole prompt, or only what follows prompt_base's
    messages TEXT,                        -- JSON chat messages, after prompt_base's when it is set
    request TEXT NOT NULL,                -- JSON: stop, max_tokens, dialect
    completion TEXT NOT NULL,
    tool_calls TEXT,                      -- JSON [[name, arguments, id], ...] of native calls
    completion_meta TEXT,                 -- JSON
    prompt_tokens INTEGER NOT NULL,
    evaluated_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    usage_estimated INTEGER NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (run_id, n)
);
CREATE TABLE tool_calls (
    run_id TEXT NOT NULL REFERENCES runs(id),
    key TEXT NOT NULL,                    -- ReAct step "3", ReWOO "E2", plan-execute "2:E1"
    name TEXT NOT NULL,
    args TEXT NOT NULL,                   -- JSON
    state TEXT NOT NULL CHECK (state IN ('started', 'done')),
    attempts INTEGER NOT NULL DEFAULT 1,  -- > 1: an idempotent call re-run after a crash
    value TEXT,                           -- JSON of the result value
    observation TEXT,
    error_kind TEXT,
    error TEXT,
    duration_s REAL,
    started_at REAL NOT NULL,
    finished_at REAL,
    PRIMARY KEY (run_id, key)
);
CREATE TABLE steps (
    run_id TEXT NOT NULL REFERENCES runs(id),
    idx INTEGER NOT NULL,
    kind TEXT NOT NULL,
    tool TEXT,
    step TEXT NOT NULL,                   -- JSON of the Step
    created_at REAL NOT NULL,
    PRIMARY KEY (run_id, idx)
);
CREATE TABLE approvals (
    run_id TEXT NOT NULL REFERENCES runs(id),
    key TEXT NOT NULL,                    -- loopwright.safety.approval_key(tool, args)
    tool TEXT NOT NULL,
    args TEXT NOT NULL,                   -- JSON
    step TEXT NOT NULL,
    side_effects TEXT NOT NULL,
    description TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'decided')),
    approved INTEGER,
    reason TEXT,
    requested_at REAL NOT NULL,
    decided_at REAL,
    PRIMARY KEY (run_id, key)
);
CREATE VIEW model_call_prompts AS
WITH RECURSIVE chain(run_id, n, prompt) AS (
    SELECT run_id, n, prompt FROM model_calls WHERE prompt_base IS NULL
    UNION ALL
    SELECT m.run_id, m.n, chain.prompt || m.prompt
    FROM model_calls AS m JOIN chain ON m.run_id = chain.run_id AND m.prompt_base = chain.n
)
SELECT run_id, n, prompt FROM chain;
"""

Migration = Callable[[sqlite3.Connection], None]


def _script(sql: str) -> Migration:
    def apply(conn: sqlite3.Connection) -> None:
        for statement in _statements(sql):
            conn.execute(statement)

    return apply


def _statements(sql: str) -> list[str]:
    """Split a schema script at top-level semicolons (executescript would commit)."""
    out, current = [], ""
    for line in sql.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            out.append(current.strip())
            current = ""
    return [s for s in out if s]


_MIGRATIONS: list[Migration] = [_script(_SCHEMA_V1)]
"""_MIGRATIONS[i] takes the schema from version i to i + 1, inside one transaction."""


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run as the journal knows it (the `runs` row)."""

    id: str
    task: str
    mode: str
    config: dict[str, Any]
    status: str
    stopped_reason: str | None
    final_answer: str | None
    llm_calls: int
    tool_calls: int
    step_count: int
    usage: Usage
    duration_s: float
    resumes: int
    created_at: float
    updated_at: float

    @property
    def resumable(self) -> bool:
        return self.status in RESUMABLE


class SQLiteStore:
    """A run journal in one SQLite file (WAL mode), safe to share between threads and
    readable by other processes while a run writes it.

    Opening refuses, with a StoreError and without writing, a file that is not SQLite,
    a SQLite database that is not a loopwright journal, and a journal written by a
    newer loopwright. An older journal is migrated in one transaction.

    synchronous: SQLite's setting; "NORMAL" survives a killed process, "FULL" power loss.
    checkpoint_pages: WAL pages between checkpoints. Each checkpoint costs two fsyncs
    (milliseconds on a virtual disk), so the default checkpoints rarely: 10,000 pages
    (about 40 MB of WAL); the WAL file is cut back to 64 MB after one.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "NORMAL",
        checkpoint_pages: int = 10_000,
    ) -> None:
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, got {synchronous!r}")
        if isinstance(checkpoint_pages, bool) or not isinstance(checkpoint_pages, int) or checkpoint_pages < 1:
            raise ValueError(f"checkpoint_pages must be a positive integer, got {checkpoint_pages!r}")
        self.path = str(path)
        self._lock = threading.RLock()
        memory = self.path == ":memory:"
        if not memory:
            _check_file(Path(self.path))
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=10.0)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open run journal {self.path}: {exc}") from exc
        try:
            version = _check_schema(conn, self.path)
            self._migrate(conn, version)
            if not memory:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(f"PRAGMA wal_autocheckpoint={checkpoint_pages}")
                conn.execute(f"PRAGMA journal_size_limit={_WAL_SIZE_LIMIT}")
            conn.execute(f"PRAGMA synchronous={synchronous}")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.DatabaseError as exc:
            conn.close()
            what = ("is not a SQLite database (corrupt, or another kind of file)" if "not a database" in str(exc)
                    else f"is not a usable SQLite database ({exc})")
            raise StoreError(f"{self.path} {what}; nothing was changed") from exc
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn
        self._journals: weakref.WeakSet[RunJournal] = weakref.WeakSet()

    # -- opening --------------------------------------------------------------------

    def _migrate(self, conn: sqlite3.Connection, version: int) -> None:
        if version == len(_MIGRATIONS):
            return
        with _transaction(conn):
            for target in range(version, len(_MIGRATIONS)):
                _MIGRATIONS[target](conn)
            if version == 0:
                conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
                conn.execute("INSERT INTO meta VALUES ('schema', ?), ('created_at', ?)",
                             (SCHEMA_NAME, repr(time.time())))
            conn.execute(f"PRAGMA user_version={len(_MIGRATIONS)}")

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"run journal {self.path} is closed")
        return self._conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                for journal in list(self._journals):
                    journal.flush()
                self._conn.close()
                self._conn = None

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    @property
    def schema_version(self) -> int:
        return int(self._one("PRAGMA user_version")[0])

    def integrity_check(self) -> str:
        """SQLite's `PRAGMA integrity_check`: "ok" for a sound file."""
        return "\n".join(str(r[0]) for r in self._all("PRAGMA integrity_check"))

    # -- runs -----------------------------------------------------------------------

    def start_run(
        self, run_id: str | None, task: str, mode: str, config: Mapping[str, Any]
    ) -> tuple[str, RunJournal]:
        """Record a new run and return its id and journal. An id already in the journal
        is a StoreError: a run's history is never overwritten."""
        if run_id is None:
            run_id = new_run_id()
        elif not isinstance(run_id, str) or not 0 < len(run_id) <= 200 or not run_id.isprintable():
            raise StoreError(f"run_id must be 1-200 printable characters, got {describe(run_id)}")
        now = time.time()
        try:
            self._write(
                "INSERT INTO runs (id, task, mode, config, status, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, 'running', ?, ?)",
                (run_id, task, mode, _dumps(dict(config)), now, now),
            )
        except sqlite3.IntegrityError:
            raise StoreError(
                f"run id {run_id!r} already exists in {self.path}; nothing was overwritten "
                "(use loopwright.resume to continue it, or pick another id)"
            ) from None
        return run_id, RunJournal(self, run_id)

    def load_run(self, run_id: str) -> RunRecord:
        """The run's record; an unknown id is a StoreError naming it."""
        row = self._one(_RUN_SELECT + " WHERE id = ?", (run_id,))
        if row is None:
            raise StoreError(f"no run {run_id!r} in {self.path} (see `loopwright runs list`)")
        return _run_record(row)

    def list_runs(self, *, status: str | None = None, limit: int | None = None) -> list[RunRecord]:
        """Runs, newest first."""
        sql = _RUN_SELECT + (" WHERE status = ?" if status else "") + " ORDER BY created_at DESC, id DESC"
        params: tuple[Any, ...] = (status,) if status else ()
        if limit is not None:
            sql += " LIMIT ?"
            params += (int(limit),)
        return [_run_record(r) for r in self._all(sql, params)]

    def reopen(self, run_id: str) -> tuple[RunRecord, RunJournal]:
        """For resume: the run's record and a journal preloaded with everything it
        recorded. `journal.mark_resumed()` marks the run running again."""
        record = self.load_run(run_id)
        return record, RunJournal(self, run_id, preload=True)

    def trace(self, run_id: str) -> Trace:
        """The run's trace, rebuilt from its steps and its run row. For a run that never
        ended (killed) the counters and usage are summed from what was recorded."""
        with self._snapshot():
            record = self.load_run(run_id)
            transcript, scratchpad, meta, replans, started_at = self._one(
                "SELECT transcript, scratchpad, meta, replans, started_at FROM runs WHERE id = ?", (run_id,))
            steps = [Step.from_dict(json.loads(s)) for (s,) in
                     self._all("SELECT step FROM steps WHERE run_id = ? ORDER BY idx", (run_id,))]
            trace = Trace(task=record.task, mode=record.mode, steps=steps, final_answer=record.final_answer,
                          stopped_reason=record.stopped_reason, llm_calls=record.llm_calls,
                          tool_calls=record.tool_calls, replans=replans, usage=record.usage,
                          transcript=transcript or "", started_at=started_at or record.created_at,
                          duration_s=record.duration_s, run_id=run_id,
                          meta=json.loads(meta) if meta else {}, scratchpad=scratchpad or "")
            if record.stopped_reason is None:  # never ended: count what was recorded
                calls, sent, evaluated, completion, estimated = self._one(
                    "SELECT count(*), coalesce(sum(prompt_tokens), 0), coalesce(sum(evaluated_tokens), 0), "
                    "coalesce(sum(completion_tokens), 0), coalesce(max(usage_estimated), 0) "
                    "FROM model_calls WHERE run_id = ?", (run_id,))
                trace.llm_calls = calls
                trace.usage = Usage(sent, evaluated, completion, bool(estimated))
                trace.tool_calls = self._one(
                    "SELECT count(*) FROM tool_calls WHERE run_id = ? AND state = 'done'", (run_id,))[0]
                if record.mode == "react" and calls:
                    trace.scratchpad = self.prompt(run_id, calls)
        return trace

    def prompt(self, run_id: str, n: int) -> str:
        """Exactly what model call n of the run was sent."""
        parts: list[str] = []
        current: int | None = n
        while current is not None:
            row = self._one("SELECT prompt_base, prompt FROM model_calls WHERE run_id = ? AND n = ?",
                            (run_id, current))
            if row is None:
                raise StoreError(f"run {run_id!r} has no model call {current} in {self.path}")
            parts.append(row[1])
            current = row[0]
        return "".join(reversed(parts))

    # -- approvals ------------------------------------------------------------------

    def pending_approvals(self, run_id: str) -> list[ApprovalRequest]:
        """Calls of the run waiting for a decision (see `decide`)."""
        return [request for request, decision in self.approvals(run_id) if decision is None]

    def approvals(self, run_id: str) -> list[tuple[ApprovalRequest, Decision | None]]:
        """Every call of the run that asked for approval, with its decision (None: pending)."""
        self.load_run(run_id)
        rows = self._all(
            "SELECT tool, args, key, step, side_effects, description, state, approved, reason FROM approvals "
            "WHERE run_id = ? ORDER BY requested_at", (run_id,))
        return [(ApprovalRequest(tool, json.loads(args), key, _step_key(step), side, desc, run_id),
                 None if state == "pending" else Decision(bool(approved), reason or ""))
                for tool, args, key, step, side, desc, state, approved, reason in rows]

    def decide(self, run_id: str, approval_key: str, decision: Decision | bool) -> None:
        """Record a person's decision on a pending call; `resume` applies it."""
        if isinstance(decision, bool):
            decision = Decision(decision, "approved" if decision else "denied by approver")
        if not isinstance(decision, Decision):
            raise TypeError(f"decision must be a Decision or bool, got {type(decision).__name__}")
        self.load_run(run_id)
        row = self._one("SELECT state FROM approvals WHERE run_id = ? AND key = ?", (run_id, approval_key))
        if row is None or row[0] != "pending":
            pending = [r.key for r in self.pending_approvals(run_id)]
            what = "was already decided" if row is not None else "is not a pending approval"
            raise StoreError(f"{approval_key!r} {what} in run {run_id!r}; pending: {pending or 'none'}")
        self._write("UPDATE approvals SET state = 'decided', approved = ?, reason = ?, decided_at = ? "
                    "WHERE run_id = ? AND key = ?",
                    (int(decision.approved), decision.reason, time.time(), run_id, approval_key))

    # -- low level ------------------------------------------------------------------

    def _write(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        with self._lock:  # one statement is one transaction (autocommit)
            self.conn.execute(sql, params)

    def _one(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        with self._lock:
            return self.conn.execute(sql, params).fetchone()

    def _all(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        with self._lock:
            return self.conn.execute(sql, params).fetchall()

    @contextmanager
    def _batch(self) -> Iterator[sqlite3.Connection]:
        with self._lock, _transaction(self.conn):
            yield self.conn

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """Reads that see one consistent state while another process writes."""
        with self._lock, _transaction(self.conn, "BEGIN"):
            yield


_RUN_SELECT: Final = (
    "SELECT id, task, mode, config, status, stopped_reason, final_answer, llm_calls, tool_calls, "
    "(SELECT count(*) FROM steps WHERE steps.run_id = runs.id), prompt_tokens, evaluated_tokens, "
    "completion_tokens, usage_estimated, duration_s, resumes, created_at, updated_at FROM runs"
)


def _run_record(row: Any) -> RunRecord:
    return RunRecord(
        id=row[0], task=row[1], mode=row[2], config=json.loads(row[3]), status=row[4],
        stopped_reason=row[5], final_answer=row[6], llm_calls=row[7], tool_calls=row[8],
        step_count=row[9], usage=Usage(row[10], row[11], row[12], bool(row[13])), duration_s=row[14],
        resumes=row[15], created_at=row[16], updated_at=row[17],
    )  # fmt: skip


@dataclass(eq=False)
class RunJournal:
    """The Journal of one run (see `loopwright.modes._core.Journal`). A resumed run's
    journal is preloaded with everything recorded, so lookups cost a dict access."""

    store: SQLiteStore
    run_id: str
    preload: bool = False
    _completions: dict[int, tuple[Completion, Usage]] = field(default_factory=dict)
    _tools: dict[str, tuple[str, ToolResult | None]] = field(default_factory=dict)
    _steps: dict[int, str] = field(default_factory=dict)
    _unfinished: set[str] = field(default_factory=set)
    _last_prompt: tuple[int, str, tuple[dict[str, Any], ...]] | None = None
    _pending: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    _spec: tuple[tuple[Any, ...], str] | None = None

    def __post_init__(self) -> None:
        self.store._journals.add(self)
        if self.preload:
            self._load()

    def _load(self) -> None:
        store, rid = self.store, self.run_id
        for row in store._all(
            "SELECT n, completion, tool_calls, completion_meta, prompt_tokens, evaluated_tokens, "
            "completion_tokens, usage_estimated FROM model_calls WHERE run_id = ?", (rid,)):
            usage = Usage(row[4], row[5], row[6], bool(row[7]))
            calls = tuple(ToolCall(*c) for c in json.loads(row[2])) if row[2] else ()
            meta = json.loads(row[3]) if row[3] else {}
            self._completions[row[0]] = (Completion(row[1], None if usage.estimated else usage, calls, meta), usage)
        for key, name, args, state, value, obs, kind, error, duration in store._all(
            "SELECT key, name, args, state, value, observation, error_kind, error, duration_s "
            "FROM tool_calls WHERE run_id = ?", (rid,)):
            if state == "done":
                err = None if kind is None else ToolError(name, error or "", kind)
                result = ToolResult(name, json.loads(args), None if value is None else json.loads(value),
                                    obs or "", err, duration or 0.0)
                self._tools[key] = ("done", result)
            else:
                self._tools[key] = ("started", None)
                self._unfinished.add(key)
        for idx, step in store._all("SELECT idx, step FROM steps WHERE run_id = ?", (rid,)):
            self._steps[idx] = _comparable_step(json.loads(step))

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
            try:
                if len(batch) == 1:
                    self.store.conn.execute(*batch[0])  # one statement: its own transaction
                else:
                    with self.store._batch() as conn:
                        for statement, params in batch:
                            conn.execute(statement, params)
            except sqlite3.Error as exc:
                raise StoreError(f"run journal {self.store.path}: cannot record run {self.run_id!r}: {exc}") from exc
            self._pending.clear()

    def mark_resumed(self) -> None:
        """The run is running again (its status until it ends), and counted as resumed."""
        self._commit("UPDATE runs SET status = 'running', resumes = resumes + 1, updated_at = ? WHERE id = ?",
                     (time.time(), self.run_id))

    def flush(self) -> None:
        """Commit the events waiting for the next durable one (the store's close does)."""
        self._commit()

    # -- model calls ----------------------------------------------------------------

    def recorded_completion(self, n: int) -> tuple[Completion, Usage] | None:
        if self._pending:
            self._commit()  # before a model call is paid for, what came before is durable
        return self._completions.get(n)

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
        self._last_prompt = (n, prompt, messages)
        spec_key = (request.stop, request.max_tokens, request.dialect)
        if self._spec is None or self._spec[0] != spec_key:  # the same for every call of a run
            self._spec = (spec_key, _dumps({"stop": list(request.stop), "max_tokens": request.max_tokens,
                                            "dialect": request.dialect}))
        calls = [[c.name, c.arguments, c.id] for c in completion.tool_calls]
        self._defer(
            "INSERT INTO model_calls VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (self.run_id, n, request.purpose, base, stored, _dumps(list(new_messages)) if new_messages else None,
             self._spec[1], completion.text, _dumps(calls) if calls else None,
             _dumps(completion.meta) if completion.meta else None, usage.prompt_tokens,
             usage.evaluated_tokens, usage.completion_tokens, int(usage.estimated), time.time()),
        )

    # -- tool calls -----------------------------------------------------------------

    def recorded_tool(self, key: str) -> tuple[str, ToolResult | None] | None:
        return self._tools.get(key)

    def record_tool_start(self, key: str, name: str, args: dict[str, Any]) -> None:
        self._unfinished.add(key)
        self._commit(
            "INSERT INTO tool_calls (run_id, key, name, args, state, started_at) "
            "VALUES (?, ?, ?, ?, 'started', ?) ON CONFLICT (run_id, key) DO UPDATE SET "
            "attempts = attempts + 1, started_at = excluded.started_at, name = excluded.name, "
            "args = excluded.args",
            (self.run_id, key, name, _dumps(args), time.time()),
        )

    def record_tool_result(self, key: str, result: ToolResult) -> None:
        err = result.error
        self._defer(
            "UPDATE tool_calls SET state = 'done', value = ?, observation = ?, error_kind = ?, error = ?, "
            "duration_s = ?, finished_at = ? WHERE run_id = ? AND key = ?",
            (None if err is not None else _dumps(result.value), result.observation,
             None if err is None else err.kind, None if err is None else err.message,
             result.duration_s, time.time(), self.run_id, key),
        )
        self._unfinished.discard(key)

    # -- approvals ------------------------------------------------------------------

    def recorded_decision(self, key: str) -> Decision | None:
        # Asked live, not preloaded: a person may decide while this process runs.
        row = self.store._one("SELECT approved, reason FROM approvals WHERE run_id = ? AND key = ? "
                              "AND state = 'decided'", (self.run_id, key))
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

    # -- steps and the end ----------------------------------------------------------

    def record_step(self, step: Step) -> None:
        text = _step_json(step)
        old = self._steps.get(step.index)
        if old is not None and old == _comparable_step(json.loads(text)):
            self._commit()  # a replayed step: the original row (timings included) is kept
            return
        self._commit(
            "INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, idx) DO UPDATE SET "
            "kind = excluded.kind, tool = excluded.tool, step = excluded.step, created_at = excluded.created_at",
            (self.run_id, step.index, step.kind, step.tool, text, time.time()),
        )

    def record_end(self, trace: Trace) -> None:
        u = trace.usage
        end = (
            "UPDATE runs SET status = ?, stopped_reason = ?, final_answer = ?, llm_calls = ?, tool_calls = ?, "
            "replans = ?, prompt_tokens = ?, evaluated_tokens = ?, completion_tokens = ?, usage_estimated = ?, "
            "duration_s = ?, transcript = ?, scratchpad = ?, meta = ?, started_at = ?, updated_at = ? WHERE id = ?",
            (self._status(trace), trace.stopped_reason, trace.final_answer, trace.llm_calls, trace.tool_calls,
             trace.replans, u.prompt_tokens, u.evaluated_tokens, u.completion_tokens, int(u.estimated),
             trace.duration_s, trace.transcript, trace.scratchpad, _dumps(trace.meta), trace.started_at,
             time.time(), self.run_id),
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
        if reason == "error" and self._unfinished:
            return "blocked"  # a side effect of unknown outcome waits for a person
        return "finished"


# -- helpers ---------------------------------------------------------------------------


def new_run_id() -> str:
    """A time-sortable id: UTC second, then 6 random hex digits."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


_ENCODER: Final = json.JSONEncoder(default=str, ensure_ascii=False)  # one, not one per call
_STEP_FIELDS: Final = tuple(f.name for f in fields(Step))


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


_VOLATILE_META: Final = frozenset({"tool_s", "model_s", "replayed"})


def _comparable_step(d: Mapping[str, Any]) -> str:
    """A step's JSON without what differs between a run and its replay (timings)."""
    out = {k: v for k, v in d.items() if k != "duration_s"}
    out["meta"] = {k: v for k, v in (d.get("meta") or {}).items() if k not in _VOLATILE_META}
    return json.dumps(out, sort_keys=True, default=str)


def _step_key(step: str) -> int | str:
    return int(step) if step.isdigit() else step


@contextmanager
def _transaction(conn: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE") -> Iterator[None]:
    conn.execute(begin)
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _check_file(path: Path) -> None:
    """Refuse a path that cannot be a journal file. The file itself is not opened here:
    opening and closing another descriptor on a SQLite file drops every POSIX lock this
    process holds on it (other connections' included), so only SQLite reads it."""
    if path.is_dir():
        raise StoreError(f"{path} is a directory, not a run journal")
    if not path.exists() and not path.parent.is_dir():
        raise StoreError(f"cannot create run journal {path}: {path.parent} does not exist")


def _check_schema(conn: sqlite3.Connection, path: str) -> int:
    """The journal's schema version; StoreError for a foreign or newer database."""
    tables = sorted(r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%'"))
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    app = int(conn.execute("PRAGMA application_id").fetchone()[0])
    if not tables and version == 0 and app == 0:
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
        if pages == 0 and path != ":memory:" and os.path.getsize(path) > 0:
            # SQLite reads a file too short to hold a page as an empty database
            raise StoreError(
                f"{path} is not a SQLite database (corrupt, or another kind of file); nothing was changed"
            )
        return 0  # a new, empty database
    ours = app == APPLICATION_ID and "meta" in tables
    if ours:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        ours = row is not None and row[0] == SCHEMA_NAME
    if not ours:
        shown = ", ".join(tables[:8]) + (", ..." if len(tables) > 8 else "")
        raise StoreError(
            f"{path} is a SQLite database but not a loopwright run journal (tables: {shown or 'none'}); "
            "nothing was changed. Use another path."
        )
    if version > len(_MIGRATIONS):
        raise StoreError(
            f"{path} was written by a newer loopwright (journal schema {version}; this version "
            f"reads up to {len(_MIGRATIONS)}); nothing was changed. Upgrade loopwright to open it."
        )
    return version
