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
event (with NORMAL a power loss can drop the last commits, so resume may run a side effect
again: see docs/durable-runs.md). Each row carries a checksum checked when read.

Tool values are stored as JSON (rendered like `json_safe`): JSON data comes back as is
(tuples come back as lists), anything else comes back as its `str()`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Final, Literal

from loopwright.durable.base import DEFAULT_LEASE_S, SCHEMA_NAME, StoreBase
from loopwright.durable.base import RESUMABLE as RESUMABLE
from loopwright.durable.base import RunRecord as RunRecord
from loopwright.durable.base import UnsettledCall as UnsettledCall
from loopwright.durable.base import new_run_id as new_run_id
from loopwright.durable.journal import RunStatus as RunStatus
from loopwright.errors import StoreError

APPLICATION_ID: Final = 0x4C57524A  # "LWRJ" in the SQLite header: this file is a loopwright journal
Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
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


_SCHEMA_V2: Final = """
ALTER TABLE runs ADD COLUMN lease_owner TEXT;            -- host:pid:tag of the process running it
ALTER TABLE runs ADD COLUMN lease_expires REAL;          -- unix seconds; renewed as the run writes
ALTER TABLE runs ADD COLUMN forked_from TEXT;            -- loopwright.fork: the source run
ALTER TABLE runs ADD COLUMN forked_at_step INTEGER;      -- and how many of its steps were replayed
ALTER TABLE tool_calls ADD COLUMN settled_at REAL;       -- set when a person settled the call
"""

_SCHEMA_V3: Final = """
ALTER TABLE model_calls ADD COLUMN checksum BIGINT;      -- CRC-32 of the row as written (journal.checksum)
ALTER TABLE tool_calls ADD COLUMN checksum BIGINT;       -- checked when read: a damaged row is an error
ALTER TABLE steps ADD COLUMN checksum BIGINT;            -- NULL in rows written before: read as they are
ALTER TABLE runs ADD COLUMN checksum BIGINT;             -- of task, mode, config and the fork's origin
ALTER TABLE runs ADD COLUMN end_checksum BIGINT;         -- of the run's end (status, answer, counters, ...)
"""

_SCHEMA_V4: Final = """
CREATE TABLE guardrail_verdicts (
    run_id TEXT NOT NULL REFERENCES runs(id),
    key TEXT NOT NULL,                    -- the guardrail's name @ where it checked (input, output, a call)
    guardrail TEXT NOT NULL,
    verdict TEXT NOT NULL,                -- JSON: action, reason, value (a replace), seconds
    created_at REAL NOT NULL,
    PRIMARY KEY (run_id, key)
);
"""

_MIGRATIONS: list[Migration] = [_script(_SCHEMA_V1), _script(_SCHEMA_V2), _script(_SCHEMA_V3), _script(_SCHEMA_V4)]
"""_MIGRATIONS[i] takes the schema from version i to i + 1, inside one transaction."""


class SQLiteStore(StoreBase):
    """A run journal in one SQLite file (WAL mode), safe to share between threads and
    readable by other processes while a run writes it.

    Opening refuses, with a StoreError and without writing, a file that is not SQLite,
    a SQLite database that is not a loopwright journal, and a journal written by a
    newer loopwright. An older journal is migrated in one transaction.

    synchronous: SQLite's setting; "NORMAL" survives a killed process, "FULL" power loss.
    checkpoint_pages: WAL pages between checkpoints. Each checkpoint costs two fsyncs
    (milliseconds on a virtual disk), so the default checkpoints rarely: 10,000 pages
    (about 40 MB of WAL); the WAL file is cut back to 64 MB after one.
    lease_s: how long a run's lease lasts without a journal write (see `take_lease`).
    busy_timeout_s: how long a write waits for another process's lock before it fails (a
    run then stops with `store_error`).
    """

    _db_errors = (sqlite3.Error,)
    _unique_errors = (sqlite3.IntegrityError,)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "NORMAL",
        checkpoint_pages: int = 10_000,
        lease_s: float = DEFAULT_LEASE_S,
        busy_timeout_s: float = 10.0,
    ) -> None:
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, got {synchronous!r}")
        if isinstance(checkpoint_pages, bool) or not isinstance(checkpoint_pages, int) or checkpoint_pages < 1:
            raise ValueError(f"checkpoint_pages must be a positive integer, got {checkpoint_pages!r}")
        super().__init__()
        self.path = str(path)
        self.lease_s = check_lease(lease_s)
        memory = self.path == ":memory:"
        if not memory:
            _check_file(Path(self.path))
        if isinstance(busy_timeout_s, bool) or not isinstance(busy_timeout_s, int | float) or busy_timeout_s < 0:
            raise ValueError(f"busy_timeout_s must be a number of seconds, got {busy_timeout_s!r}")
        self._busy_s = float(busy_timeout_s)
        self._file_id: tuple[int, int] | None = None
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=self._busy_s)
        except sqlite3.Error as exc:
            raise self._open_failed(exc) from exc
        try:
            self._open(conn, memory, synchronous, checkpoint_pages)
        except (sqlite3.Error, UnicodeDecodeError) as exc:  # stored text that is not UTF-8: a damaged file
            conn.close()
            raise self._open_failed(exc) from exc
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn
        if not memory:
            st = os.stat(self.path)
            self._file_id = (st.st_dev, st.st_ino)

    def _open(self, conn: sqlite3.Connection, memory: bool, synchronous: str, checkpoint_pages: int) -> None:
        """Check the schema (refusing a foreign file before anything is written), switch
        to WAL, then migrate. Any number of processes may open one new file at once: the
        switch comes before any write transaction (in WAL mode readers never hold up the
        writer), and the version is read again under the write lock, so one of them
        creates the tables and the others find them."""
        with _transaction(conn, "BEGIN"):  # one consistent read of tables and version
            version = _check_schema(conn, self.path)
        if not memory:
            _switch_to_wal(conn, self._busy_s)
            conn.execute(f"PRAGMA wal_autocheckpoint={checkpoint_pages}")
            conn.execute(f"PRAGMA journal_size_limit={_WAL_SIZE_LIMIT}")
        if version < len(_MIGRATIONS):
            with _transaction(conn):
                self._migrate(conn, _check_schema(conn, self.path))
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("PRAGMA foreign_keys=ON")

    def _open_failed(self, exc: sqlite3.Error | UnicodeDecodeError) -> StoreError:
        text = str(exc)
        folder = os.path.dirname(os.path.abspath(self.path))
        if self.path != ":memory:" and _read_only(folder):
            return StoreError(f"cannot open run journal {self.path}: its folder {folder} is read-only (a journal "
                              f"writes its write-ahead log beside it); nothing was changed ({text})")
        if isinstance(exc, sqlite3.OperationalError) and not ("not a database" in text or "malformed" in text):
            return StoreError(f"cannot open run journal {self.path}: {self._why(exc)}; nothing was changed")
        what = ("is not a SQLite database (corrupt, or another kind of file)"
                if "not a database" in text else f"is not a usable SQLite database ({text})")
        return StoreError(f"{self.path} {what}; nothing was changed")

    # -- opening --------------------------------------------------------------------

    def _migrate(self, conn: sqlite3.Connection, version: int) -> None:
        """Take the schema from `version` to the current one (inside the caller's transaction)."""
        if version == len(_MIGRATIONS):
            return
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

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    @property
    def schema_version(self) -> int:
        return int(self._one("PRAGMA user_version")[0])

    def integrity_check(self) -> str:
        """SQLite's `PRAGMA integrity_check`: "ok" for a sound file."""
        return "\n".join(str(r[0]) for r in self._all("PRAGMA integrity_check"))

    # -- low level ------------------------------------------------------------------

    def _raw_execute(self, sql: str, params: tuple[Any, ...]) -> int:
        return self.conn.execute(sql, params).rowcount  # one statement is one transaction (autocommit)

    def _raw_one(self, sql: str, params: tuple[Any, ...]) -> Any:
        return self.conn.execute(sql, params).fetchone()

    def _raw_all(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        return self.conn.execute(sql, params).fetchall()

    def _raw_batch(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        if len(statements) == 1:
            self.conn.execute(*statements[0])  # one statement: its own transaction
            return
        conn = self.conn
        with _transaction(conn):
            for statement, params in statements:
                conn.execute(statement, params)

    def _raw_snapshot(self) -> AbstractContextManager[None]:
        return _transaction(self.conn, "BEGIN")

    def _before_write(self) -> None:
        """Refuse to write once the file at `path` is not the file this store opened: a
        deleted journal would take the writes with it, and a replaced one must never get
        this file's write-ahead log. The store is closed, so nothing more goes to either file."""
        if self._file_id is None or self._conn is None:
            return
        try:
            st = os.stat(self.path)
            now: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except FileNotFoundError:
            now = None
        if now == self._file_id:
            return
        what = "was deleted" if now is None else "was replaced by another file"
        self._fail_journals()
        # SQLite leaves the log of a moved file where it is when it closes, for whatever
        # file is at the path next: fold it into the file it belongs to and empty it first
        # (this works while no other process has the old file open).
        with contextlib.suppress(sqlite3.Error):
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._conn.close()
        self._conn = None
        raise StoreError(f"run journal {self.path} {what} while this store had it open; nothing more was "
                         "written (to either file) and the store is closed. Open the journal again to go on")

    def _fail_journals(self) -> None:
        """Mark the open journals failed: what they had not committed is not written."""
        for journal in list(self._journals):
            if journal.failed is None:
                journal.failed = f"run journal {self.path} changed on disk"

    def _failed(self, exc: Exception) -> StoreError:
        return StoreError(f"run journal {self.path}: {self._why(exc)}")

    def _why(self, exc: Exception) -> str:
        """What an operator needs to know of a SQLite error, with the driver's own words."""
        text = str(exc)
        if "locked" in text or "busy" in text:
            why = (f"another process held it locked for longer than the busy timeout ({self._busy_s:g} s); "
                   "nothing was written")
        elif "full" in text or ("I/O error" in text and _disk_full(self.path)):
            why = "the disk is full; nothing was written"
        elif "readonly" in text or "read-only" in text:
            why = "it is read-only (the file or its folder); nothing was written"
        elif ("malformed" in text or "not a database" in text or "corrupt" in text
              or isinstance(exc, UnicodeDecodeError)):
            why = "the file is damaged (check it with `sqlite3 FILE 'PRAGMA integrity_check'`)"
        else:
            why = "the database failed"
        return f"{why} ({type(exc).__name__}: {text})"


# -- helpers ---------------------------------------------------------------------------


def check_lease(lease_s: float) -> float:
    if isinstance(lease_s, bool) or not isinstance(lease_s, int | float) or not 0 < lease_s < 10**9:
        raise ValueError(f"lease_s must be a positive number of seconds, got {lease_s!r}")
    return float(lease_s)


def _switch_to_wal(conn: sqlite3.Connection, busy_s: float) -> None:
    """Put the file in WAL mode, waiting up to `busy_s` for other processes. SQLite answers
    a journal-mode change "database is locked" at once, without its busy handler, while
    another process's last connection closes the file (checkpointing and removing its
    log), so this waits here instead, with a short backoff, for as long as a lock may."""
    deadline = time.monotonic() + busy_s
    pause = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


@contextmanager
def _transaction(conn: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE") -> Iterator[None]:
    conn.execute(begin)
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _disk_full(path: str) -> bool:
    """Whether the filesystem holding `path` has no block left (SQLite may report a write
    that ran out of space as an I/O error)."""
    try:
        return os.statvfs(os.path.dirname(os.path.abspath(path))).f_bavail == 0
    except OSError:
        return False


def _read_only(folder: str) -> bool:
    """Whether the folder is on a read-only filesystem or not writable by this process."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY) or not os.access(folder, os.W_OK)
    except OSError:
        return False


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
