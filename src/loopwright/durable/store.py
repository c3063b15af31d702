"""A durable run journal on SQLite: every model call, tool call, approval and step is
written before the run uses it, so a run killed at any point can be resumed
(`loopwright.durable.resume`) without paying for a model call twice or repeating a side effect.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from loopwright.durable.journal import RunJournal as RunJournal  # re-exported: it used to live here
from loopwright.durable.journal import RunStatus as RunStatus
from loopwright.durable.journal import _dumps
from loopwright.errors import StoreError, describe
from loopwright.safety import ApprovalRequest, Decision
from loopwright.trace import Step, Trace, Usage

APPLICATION_ID: Final = 0x4C57524A  # "LWRJ" in the SQLite header: this file is a loopwright journal
SCHEMA_NAME: Final = "loopwright-journal"
Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
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
                "(use loopwright.durable.resume to continue it, or pick another id)"
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


# -- helpers ---------------------------------------------------------------------------


def new_run_id() -> str:
    """A time-sortable id: UTC second, then 6 random hex digits."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


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
