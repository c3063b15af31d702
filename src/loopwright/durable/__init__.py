"""Durable runs: the run journal stores (`store` for SQLite, `postgres` for PostgreSQL,
sharing `base`), the per-run journal the loops write through (`journal`), `resume`, which
continues a run from it after a crash, and `fork`, which starts a new run from a step of one.

This subtree imports the loops; the loops never import it (they see a Journal Protocol)."""

from loopwright.durable.base import RunRecord, UnsettledCall
from loopwright.durable.fork import fork
from loopwright.durable.postgres import PostgresStore
from loopwright.durable.resume import resume
from loopwright.durable.sqlite import SQLiteStore

__all__ = ["PostgresStore", "RunRecord", "SQLiteStore", "UnsettledCall", "fork", "resume"]
