"""Persistent memory: a Session restarted in a new process recalls what the old one
remembered; forgetting a fact or a namespace removes it from recall and from the file."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

import loopwright as lw
from loopwright.errors import StoreError
from loopwright.memory import HashingEmbedder, HybridMemory, SQLiteMemoryStore

SECRET = "QX-5512-LOCKER"

# Run in a fresh interpreter: process 1 tells the session a fact, process 2 (a new
# Session on the same file) is asked for it and answers only from what its prompt shows.
CHILD = textwrap.dedent(
    """
    import re, sys
    import loopwright as lw
    from loopwright.memory import SQLiteMemoryStore

    path, namespace, step = sys.argv[1], sys.argv[2], sys.argv[3]

    def policy(prompt):
        if step == "tell":
            return "Thought: noted\\nFinal Answer: Noted, I will remember that."
        found = re.search(r"QX-\\d+-LOCKER", prompt)
        return "Thought: look\\nFinal Answer: " + (found.group(0) if found else "I do not know")

    session = lw.Session(policy, lw.ToolRegistry([]), store=SQLiteMemoryStore(path),
                         namespace=namespace)
    task = ("Please remember: my locker code is " + "QX-5512-LOCKER" if step == "tell"
            else "What is my locker code?")
    print(session.ask(task).final_answer)
    """
)


def child(path: Path, namespace: str, step: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), namespace, step],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def rows_with(path: Path, needle: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(
            conn.execute(
                "SELECT COUNT(*) FROM memory_items WHERE text LIKE ?", (f"%{needle}%",)
            ).fetchone()[0]
        )


def bytes_on_disk(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


def test_a_session_restarted_in_a_new_process_recalls_a_fact_from_the_old_one(
    tmp_path: Path,
) -> None:
    db = tmp_path / "memory.db"
    assert child(db, "user:ada", "tell") == "Noted, I will remember that."
    assert child(db, "user:ada", "ask") == SECRET
    assert child(db, "user:bo", "ask") == "I do not know"  # another namespace, another memory


def test_forgetting_a_fact_removes_it_from_recall_and_from_the_file(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    child(db, "user:ada", "tell")
    assert rows_with(db, SECRET) == 1
    store = SQLiteMemoryStore(db)
    memory = HybridMemory(store=store, namespace="user:ada")
    hit = memory.recall("locker code", 1)[0]
    assert SECRET in hit.text
    assert memory.forget(hit.id) == 1
    assert memory.recall("locker code", 5) == []
    assert rows_with(db, SECRET) == 0
    store.close()
    assert SECRET.encode() not in bytes_on_disk(db)  # not left in freed pages or the WAL
    assert child(db, "user:ada", "ask") == "I do not know"


def test_forgetting_a_namespace_removes_every_turn_of_it_and_only_it(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    with SQLiteMemoryStore(db) as store:
        ada = HybridMemory(store=store, namespace="user:ada")
        ada.add_many([f"Ada said {SECRET}", "Ada likes tea"])
        HybridMemory(store=store, namespace="user:bo").add("Bo likes coffee")
        assert store.namespaces() == ["user:ada", "user:bo"]
        assert store.forget_namespace("user:ada") == 2
        assert store.namespaces() == ["user:bo"]
        assert HybridMemory(store=store, namespace="user:ada").recall("tea", 3) == []
        assert [h.text for h in HybridMemory(store=store, namespace="user:bo").recall("coffee")] == [
            "Bo likes coffee"
        ]
    assert SECRET.encode() not in bytes_on_disk(db)


def test_export_gives_every_row_as_json(tmp_path: Path) -> None:
    with SQLiteMemoryStore(tmp_path / "m.db") as store:
        HybridMemory(store=store, namespace="a").add_many(["one", "two"], [{"turn": 1}, None])
        HybridMemory(store=store, namespace="b").add("three")
        rows = store.export(path=tmp_path / "all.jsonl")
        assert [(r["namespace"], r["text"], r["metadata"]) for r in rows] == [
            ("a", "one", {"turn": 1}), ("a", "two", {}), ("b", "three", {})
        ]
        lines = (tmp_path / "all.jsonl").read_text().splitlines()
        assert [json.loads(line) for line in lines] == rows
        assert [r["text"] for r in store.export("b")] == ["three"]


class CountingEmbedder:
    """HashingEmbedder that counts the texts it embeds."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(dim=64)
        self.name = self.inner.name
        self.embedded = 0

    @property
    def dim(self) -> int:
        return 64

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.embedded += len(texts)
        return self.inner.embed(texts)


def test_vectors_are_kept_in_the_file_and_not_recomputed_on_reload(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    texts = [f"note {i} about topic {i % 5}" for i in range(20)]
    first = CountingEmbedder()
    with SQLiteMemoryStore(db) as store:
        HybridMemory(first, store=store).add_many(texts)
    assert first.embedded == 20
    again = CountingEmbedder()
    with SQLiteMemoryStore(db) as store:
        reloaded = HybridMemory(again, store=store)
        assert again.embedded == 0 and len(reloaded) == 20
        assert reloaded.dense is not None
        np.testing.assert_allclose(reloaded.dense.vectors, first.inner.embed(texts), atol=1e-6)
        assert reloaded.recall("topic 3", 1)[0].text.endswith("topic 3")
    # another embedder: its vectors are computed once and stored beside the first ones
    other = HashingEmbedder(dim=32)
    with SQLiteMemoryStore(db) as store:
        HybridMemory(other, store=store)
        conn = sqlite3.connect(db)
        assert conn.execute("SELECT COUNT(DISTINCT embedder) FROM memory_vectors").fetchone()[0] == 2
        conn.close()


def test_a_session_on_a_run_journal_keeps_its_memory_in_the_journals_file(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"

    def policy(prompt: str) -> str:
        answer = SECRET if SECRET in prompt else "noted"
        return f"Thought: ok\nFinal Answer: {answer}"

    first = lw.Session(policy, lw.ToolRegistry([]), store=lw.SQLiteStore(db))
    first.ask(f"Remember the locker code {SECRET}")
    journal = lw.SQLiteStore(db)  # the journal still opens: memory tables sit beside its own
    assert len(journal.list_runs()) == 1
    second = lw.Session(policy, lw.ToolRegistry([]), store=journal)
    assert second.ask("What is the locker code?").final_answer == SECRET
    assert len(journal.list_runs()) == 2  # and every run is journaled as before


def test_a_file_that_is_not_sqlite_is_a_store_error(tmp_path: Path) -> None:
    bad = tmp_path / "notes.db"
    bad.write_text("not a database, just text " * 100)
    with pytest.raises(StoreError, match="cannot hold memory"):
        SQLiteMemoryStore(bad)
    with pytest.raises(StoreError, match="directory"):
        SQLiteMemoryStore(tmp_path)
    with SQLiteMemoryStore(":memory:") as store, pytest.raises(ValueError, match="namespace"):
        store.add("", ["x"])
