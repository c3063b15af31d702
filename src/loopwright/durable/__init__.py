"""Durable runs: the SQLite run journal (`store`), the per-run journal the loops write
through (`journal`), and `resume`, which continues a run from it after a crash.

This subtree imports the loops; the loops never import it (they see a Journal Protocol)."""

from loopwright.durable.resume import resume
from loopwright.durable.store import RunRecord, SQLiteStore

__all__ = ["RunRecord", "SQLiteStore", "resume"]
