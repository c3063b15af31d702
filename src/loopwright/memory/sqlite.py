"""Persistent memory in SQLite: what a Session or a long run remembered outlives the
process.

One table of remembered texts (namespace, text, JSON metadata, time) and one of their
vectors (float32 blobs, one row per text and embedder), in a file of their own or in a
run journal's file (the journal's tables are left alone). Namespaces separate users or
sessions. Forgetting deletes rows with SQLite's `secure_delete` on and then checkpoints
the write-ahead log, so a forgotten text is gone from the file's bytes, not only from
queries.

Why blobs and not the `sqlite-vec` extension: recall scans the vectors in numpy (one
matrix-vector product, benchmarks/recall.py), so SQLite only has to hand them back once
at start-up; and the extension needs `sqlite3.Connection.enable_load_extension`, which
Python builds without loadable-extension support (this machine's, several distributions')
do not have.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from loopwright.errors import StoreError
from loopwright.trace import json_safe

FloatMatrix = npt.NDArray[np.float32]

SCHEMA = """
CREATE TABLE IF NOT EXISTS memory_items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace TEXT NOT NULL,
    text TEXT NOT NULL,
    metadata TEXT,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_items_namespace ON memory_items (namespace, id);
CREATE TABLE IF NOT EXISTS memory_vectors (
    item_id INTEGER NOT NULL REFERENCES memory_items (id) ON DELETE CASCADE,
    embedder TEXT NOT NULL,
    dim INTEGER NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (item_id, embedder)
);
"""


@dataclass(frozen=True, slots=True)
class StoredMemory:
    """One remembered text as stored: its row id, namespace, text, metadata, and when
    it was filed (seconds since the epoch)."""

    id: int
    namespace: str
    text: str
    metadata: dict[str, Any]
    created_at: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "namespace": self.namespace,
            "text": self.text,
            "metadata": self.metadata,
            "created_at": self.created_at,
        }


@runtime_checkable
class MemoryStore(Protocol):
    """Where a HybridMemory keeps its turns between processes."""

    def add(
        self,
        namespace: str,
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> list[int]: ...

    def items(self, namespace: str) -> list[StoredMemory]: ...

    def put_vectors(self, ids: Sequence[int], embedder: str, vectors: FloatMatrix) -> None: ...

    def vectors(self, ids: Sequence[int], embedder: str, dim: int) -> dict[int, FloatMatrix]: ...

    def forget(self, ids: Iterable[int]) -> int: ...

    def forget_namespace(self, namespace: str) -> int: ...


def _check_namespace(namespace: str) -> str:
    if not isinstance(namespace, str) or not namespace:
        raise ValueError(f"namespace must be a non-empty str, got {namespace!r}")
    return namespace


class SQLiteMemoryStore:
    """Remembered texts and their vectors in one SQLite file.

    `path` may be a file of its own or a run journal's (`lw.SQLiteStore`) file; ":memory:"
    keeps everything in the process. Safe to share between threads.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        if self.path != ":memory:" and Path(self.path).is_dir():
            raise StoreError(f"{self.path} is a directory, not a memory file")
        self._lock = threading.RLock()
        try:
            self._conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30.0)
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._conn.execute("PRAGMA secure_delete=ON")  # forgotten text is overwritten
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode=WAL")
            with self._conn:
                self._conn.executescript(SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} cannot hold memory: {exc}") from exc

    # -- writing ---------------------------------------------------------------------

    def add(
        self,
        namespace: str,
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> list[int]:
        """File texts under a namespace in one transaction; return their row ids."""
        _check_namespace(namespace)
        if isinstance(texts, str):
            raise TypeError("expected a sequence of texts, not a single str")
        if metadatas is not None and len(metadatas) != len(texts):
            raise ValueError(f"got {len(texts)} texts but {len(metadatas)} metadata entries")
        now = time.time()
        rows = []
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"texts must be str, got {type(text).__name__}")
            meta = None if metadatas is None else metadatas[i]
            blob = None if meta is None else json.dumps(json_safe(dict(meta)), ensure_ascii=False)
            rows.append((namespace, text, blob, now))
        ids: list[int] = []
        with self._lock, self._conn:
            for row in rows:
                cursor = self._conn.execute(
                    "INSERT INTO memory_items (namespace, text, metadata, created_at) "
                    "VALUES (?, ?, ?, ?)",
                    row,
                )
                ids.append(int(cursor.lastrowid or 0))
        return ids

    def put_vectors(self, ids: Sequence[int], embedder: str, vectors: FloatMatrix) -> None:
        """Store one vector per row id for an embedder (float32, little-endian)."""
        rows = np.asarray(vectors, dtype="<f4")
        if rows.ndim != 2 or len(rows) != len(ids):
            raise ValueError(f"expected {len(ids)} vectors, got an array of shape {rows.shape}")
        dim = int(rows.shape[1])
        with self._lock, self._conn:
            self._conn.executemany(
                "INSERT OR REPLACE INTO memory_vectors (item_id, embedder, dim, vector) "
                "VALUES (?, ?, ?, ?)",
                [(int(i), embedder, dim, row.tobytes()) for i, row in zip(ids, rows, strict=True)],
            )

    def forget(self, ids: Iterable[int]) -> int:
        """Delete rows (and their vectors) from the file; return how many existed."""
        wanted = [(int(i),) for i in ids]
        with self._lock:
            with self._conn:
                self._conn.executemany("DELETE FROM memory_vectors WHERE item_id = ?", wanted)
                removed = self._conn.executemany("DELETE FROM memory_items WHERE id = ?", wanted).rowcount
            self._scrub()
        return max(int(removed), 0)

    def forget_namespace(self, namespace: str) -> int:
        """Delete every row of a namespace (a user, a session); return how many."""
        _check_namespace(namespace)
        with self._lock:
            with self._conn:
                count = int(
                    self._conn.execute(
                        "SELECT COUNT(*) FROM memory_items WHERE namespace = ?", (namespace,)
                    ).fetchone()[0]
                )
                self._conn.execute(
                    "DELETE FROM memory_vectors WHERE item_id IN "
                    "(SELECT id FROM memory_items WHERE namespace = ?)",
                    (namespace,),
                )
                self._conn.execute("DELETE FROM memory_items WHERE namespace = ?", (namespace,))
            self._scrub()
        return count

    def _scrub(self) -> None:
        """Copy the WAL back into the file and truncate it, so deleted text is not left
        in the log (secure_delete has already zeroed it in the file's pages)."""
        if self.path != ":memory:":
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    # -- reading ---------------------------------------------------------------------

    def items(self, namespace: str) -> list[StoredMemory]:
        """Every row of a namespace, oldest first."""
        _check_namespace(namespace)
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, namespace, text, metadata, created_at FROM memory_items "
                "WHERE namespace = ? ORDER BY id",
                (namespace,),
            ).fetchall()
        return [_stored(row) for row in rows]

    def vectors(self, ids: Sequence[int], embedder: str, dim: int) -> dict[int, FloatMatrix]:
        """The stored vectors of these rows for an embedder of this dimension (rows
        without one, or with another dimension, are absent)."""
        wanted = set(int(i) for i in ids)
        if not wanted:
            return {}
        with self._lock:
            rows = self._conn.execute(
                "SELECT item_id, vector FROM memory_vectors WHERE embedder = ? AND dim = ?",
                (embedder, dim),
            ).fetchall()
        return {
            int(i): np.frombuffer(blob, dtype="<f4").astype(np.float32)
            for i, blob in rows
            if int(i) in wanted and len(blob) == 4 * dim
        }

    def namespaces(self) -> list[str]:
        """The namespaces that hold at least one row."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT DISTINCT namespace FROM memory_items ORDER BY namespace"
            ).fetchall()
        return [str(r[0]) for r in rows]

    def export(
        self, namespace: str | None = None, path: str | os.PathLike[str] | None = None
    ) -> list[dict[str, Any]]:
        """Every row (of one namespace, or all) as JSON-ready dicts, oldest first; with
        `path`, also written there as JSON Lines. Vectors are not exported: they are
        derived from the text."""
        if namespace is None:
            records = [m for ns in self.namespaces() for m in self.items(ns)]
            records.sort(key=lambda m: m.id)
        else:
            records = self.items(namespace)
        out = [m.to_dict() for m in records]
        if path is not None:
            with open(path, "w", encoding="utf-8") as fh:
                for record in out:
                    fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        return out

    def count(self, namespace: str | None = None) -> int:
        """Rows in the file (of one namespace, or all)."""
        with self._lock:
            if namespace is None:
                row = self._conn.execute("SELECT COUNT(*) FROM memory_items").fetchone()
            else:
                row = self._conn.execute(
                    "SELECT COUNT(*) FROM memory_items WHERE namespace = ?", (namespace,)
                ).fetchone()
        return int(row[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> SQLiteMemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteMemoryStore({self.path!r})"


def _stored(row: tuple[Any, ...]) -> StoredMemory:
    id_, namespace, text, meta, created = row
    metadata = json.loads(meta) if meta else {}
    return StoredMemory(
        int(id_), str(namespace), str(text), metadata if isinstance(metadata, dict) else {}, float(created)
    )
