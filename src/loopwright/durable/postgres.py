"""A run journal on PostgreSQL, so workers on several machines share one journal.

The same tables, semantics and errors as SQLiteStore (the SQL lives in `base`; the schema
scripts are SQLite's, with PostgreSQL's float type): runs, events, approvals, settling,
forks, migrations, and refusing a database that is not a loopwright journal or was written
by a newer one. The lease (`take_lease`) is what keeps two workers off one run.

The driver is psycopg 3 (`pip install loopwright[postgres]`), imported when a store is
opened, so `import loopwright` never pays for it. Tables live in the connection's current
schema (set `options=-csearch_path=NAME` in the DSN to use another).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final, Literal

from loopwright.durable.base import DEFAULT_LEASE_S, SCHEMA_NAME, StoreBase
from loopwright.durable.sqlite import (
    _SCHEMA_V1,
    _SCHEMA_V2,
    _SCHEMA_V3,
    _SCHEMA_V4,
    _statements,
    check_lease,
)
from loopwright.errors import StoreError

_LOCK_ID: Final = 0x4C57524A  # the advisory lock two workers opening a new journal take in turn
_SCHEMAS: Final = [_SCHEMA_V1, _SCHEMA_V2, _SCHEMA_V3, _SCHEMA_V4]
"""_SCHEMAS[i] takes the journal from version i to i + 1 (SQLite's scripts, translated)."""
INSTALL_HINT: Final = "pip install 'loopwright[postgres]' (psycopg 3)"


def _pg(sql: str) -> str:
    """A SQLite schema script as PostgreSQL reads it (REAL is a 4-byte float there)."""
    return re.sub(r"\bREAL\b", "DOUBLE PRECISION", sql)


class PostgresStore(StoreBase):
    """A run journal in a PostgreSQL database, shared by any number of processes and hosts.

    dsn: a libpq connection string or URI (`postgresql://user@host:5432/db`,
    `postgresql:///db?host=/run/postgresql`). lease_s: how long a run's lease lasts without a
    journal write. synchronous_commit: PostgreSQL's setting for this connection; "on" (the
    default) waits for each commit to reach disk on the server, "off" does not, and still
    survives a killed worker, losing the last moments only if the server itself crashes
    (like SQLite's "NORMAL" against "FULL"). Opening refuses, with a StoreError and without writing, a database whose
    current schema holds other tables, or a journal from a newer loopwright; an older
    journal is migrated in one transaction.
    """

    def __init__(
        self,
        dsn: str,
        *,
        lease_s: float = DEFAULT_LEASE_S,
        synchronous_commit: Literal["on", "off"] = "on",
        connect_timeout_s: int = 10,
    ) -> None:
        if synchronous_commit not in ("on", "off"):
            raise ValueError(f"synchronous_commit must be 'on' or 'off', got {synchronous_commit!r}")
        try:
            import psycopg
        except ImportError as exc:
            raise StoreError(f"PostgresStore needs the psycopg driver: {INSTALL_HINT}") from exc
        super().__init__()
        if not isinstance(dsn, str) or not dsn:
            raise StoreError(f"dsn must be a PostgreSQL connection string, got {dsn!r}")
        self.dsn = dsn
        self.path = redact(dsn)
        self.lease_s = check_lease(lease_s)
        self._db_errors = (psycopg.Error,)
        self._unique_errors = (psycopg.errors.UniqueViolation,)
        self._sql: dict[str, str] = {}
        self._synchronous_commit = synchronous_commit
        self._connect_timeout_s = connect_timeout_s
        conn = self._connect()
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_ID,))
                version = _check_schema(conn, self.path)
                for target in range(version, len(_SCHEMAS)):
                    for statement in _statements(_pg(_SCHEMAS[target])):
                        conn.execute(statement)
                if version == 0:
                    conn.execute("INSERT INTO meta VALUES ('schema', %s), ('created_at', %s), ('version', %s)",
                                 (SCHEMA_NAME, repr(time.time()), str(len(_SCHEMAS))))
                elif version < len(_SCHEMAS):
                    conn.execute("UPDATE meta SET value = %s WHERE key = 'version'", (str(len(_SCHEMAS)),))
        except psycopg.Error as exc:
            conn.close()
            raise StoreError(f"cannot open run journal {self.path}: {_first_line(exc)}; nothing was changed") from exc
        except BaseException:
            conn.close()
            raise
        self._conn: Any = conn
        self._client_cursor = psycopg.ClientCursor

    def _connect(self) -> Any:
        """A new autocommit connection with this store's settings."""
        import psycopg

        try:
            conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=self._connect_timeout_s)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to run journal {self.path}: {_first_line(exc)}") from exc
        try:
            conn.execute(f"SET synchronous_commit = {self._synchronous_commit}")
        except psycopg.Error as exc:
            conn.close()
            raise StoreError(f"cannot connect to run journal {self.path}: {_first_line(exc)}") from exc
        return conn

    def _live(self) -> Any:
        """The connection, made again when the last one was lost (a server restart, a
        dropped network): the store goes on with the next call. A run's lease says who owns
        it, so a new connection changes nothing about who may write."""
        conn = self.conn
        if conn.broken or conn.closed:
            self._conn = None
            conn = self._conn = self._connect()
        return conn

    def _failed(self, exc: Exception) -> StoreError:
        lost = self._conn is not None and (self._conn.broken or self._conn.closed)
        then = "; the connection was lost, and the next call connects again" if lost else ""
        return StoreError(f"run journal {self.path}: {_first_line(exc)}{then}")

    @property
    def conn(self) -> Any:
        """The psycopg connection (autocommit)."""
        if self._conn is None:
            raise StoreError(f"run journal {self.path} is closed")
        return self._conn

    def __repr__(self) -> str:
        return f"PostgresStore({self.path!r})"

    @property
    def schema_version(self) -> int:
        return int(self._one("SELECT value FROM meta WHERE key = 'version'")[0])

    # -- low level ------------------------------------------------------------------

    def _q(self, sql: str) -> str:
        """`?` placeholders as psycopg's `%s`, a `%` in the text (a LIKE pattern) as `%%`
        (the shared SQL has no `?` in text)."""
        out = self._sql.get(sql)
        if out is None:
            out = self._sql[sql] = sql.replace("%", "%%").replace("?", "%s")
        return out

    def _raw_execute(self, sql: str, params: tuple[Any, ...]) -> int:
        return int(self._live().execute(self._q(sql), params).rowcount)

    def _raw_one(self, sql: str, params: tuple[Any, ...]) -> Any:
        return self._live().execute(self._q(sql), params).fetchone()

    def _raw_all(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        return list(self._live().execute(self._q(sql), params).fetchall())

    def _raw_batch(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        conn = self._live()
        if len(statements) == 1:
            conn.execute(self._q(statements[0][0]), statements[0][1])
            return
        # One round trip: the statements as one simple query, which PostgreSQL runs as
        # one implicit transaction (all or nothing); values are bound by psycopg's
        # client-side binding, which quotes them.
        sql = "; ".join(self._q(statement) for statement, _ in statements)
        params = tuple(p for _, ps in statements for p in ps)
        with self._client_cursor(conn) as cursor:
            cursor.execute(sql, params)

    @contextmanager
    def _raw_snapshot(self) -> Iterator[None]:
        conn = self._live()
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            yield


def _check_schema(conn: Any, where: str) -> int:
    """The journal's schema version in the current schema; StoreError for a schema that
    holds other tables or a journal from a newer loopwright."""
    schema = conn.execute("SELECT current_schema()").fetchone()[0]
    if schema is None:
        raise StoreError(f"{where}: the connection has no current schema (check search_path); nothing was changed")
    tables = sorted(r[0] for r in conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)))
    if not tables:
        return 0
    ours = "meta" in tables
    if ours:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        ours = row is not None and row[0] == SCHEMA_NAME
    if not ours:
        shown = ", ".join(tables[:8]) + (", ..." if len(tables) > 8 else "")
        raise StoreError(
            f"{where} (schema {schema}) is a PostgreSQL database but not a loopwright run journal "
            f"(tables: {shown}); nothing was changed. Use another database or schema."
        )
    version = int(conn.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()[0])
    if version > len(_SCHEMAS):
        raise StoreError(
            f"{where} was written by a newer loopwright (journal schema {version}; this version "
            f"reads up to {len(_SCHEMAS)}); nothing was changed. Upgrade loopwright to open it."
        )
    return version


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def redact(dsn: str) -> str:
    """The DSN without its password, for messages."""
    dsn = re.sub(r"(://[^:/@?]*:)[^@/?]*@", r"\1***@", dsn)
    return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", dsn)


def is_postgres_dsn(target: str) -> bool:
    """Whether `--db` names a PostgreSQL database rather than a SQLite file."""
    return target.startswith(("postgresql://", "postgres://"))
