"""Every journal row carries a checksum of what a replay or a reader uses, checked when it
is read: a damaged record (a flipped byte, an edit by hand) is a StoreError naming it,
never a different answer replayed in silence. Rows written before journals kept checksums
have none and are read as before."""

from __future__ import annotations

import contextlib
import re
import sqlite3
from pathlib import Path

import pytest

import loopwright as lw
from conftest import STORE_KINDS, act, final, make_registry, open_journal
from helpers import flip_trial
from loopwright.durable.journal import checksum
from loopwright.durable.sqlite import SQLiteStore

SCRIPT = [act("add", '{"x": 20, "y": 22}'), act("multiply", '{"x": 6, "y": 7}'), final("42")]


def edit(db: Path, sql: str) -> None:
    """Change the file behind the store's back, as a damaged disk or a hand edit would."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute(sql)
        conn.commit()


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    db = tmp_path / "runs.db"
    with SQLiteStore(db) as store:
        lw.run("t", lw.ScriptedPolicy(SCRIPT[:2]), make_registry(), store=store, run_id="r")  # ends: script ran out
    return db


@pytest.mark.parametrize(("sql", "damaged"), [
    ("UPDATE tool_calls SET value = '43' WHERE key = '1'", "tool call '1'"),
    ("UPDATE model_calls SET completion = replace(completion, '22', '23') WHERE n = 1", "model call 1"),
    ("UPDATE steps SET step = replace(step, '\"observation\": \"42\"', '\"observation\": \"43\"') WHERE idx = 1",
     "step 1"),
])
def test_a_damaged_row_is_an_error_on_resume_never_a_wrong_replay(journal, sql, damaged):
    edit(journal, sql)
    calls: list = []
    with SQLiteStore(journal) as store:
        with pytest.raises(lw.StoreError, match=re.escape(f"{journal} (run 'r'): {damaged}") + " is damaged .*it was "
                           "not used. Restore the journal from a copy, or settle or fork around the record$"):
            # named by its file, its run and its row, with what to do about it
            lw.resume("r", lw.ScriptedPolicy(SCRIPT), make_registry(calls), store=store)
    assert calls == []  # nothing ran on a damaged record


@pytest.mark.parametrize(("table", "column", "row"), [
    ("model_calls", "tool_calls", "n = 1"), ("model_calls", "completion_meta", "n = 1"),
    ("tool_calls", "args", "key = '1'"), ("tool_calls", "value", "key = '1'"), ("steps", "step", "idx = 1"),
])
def test_a_record_without_a_checksum_that_is_not_json_is_an_error_naming_its_journal_and_run(journal, table,
                                                                                               column, row):
    edit(journal, f"UPDATE {table} SET {column} = '[not json', checksum = NULL WHERE run_id = 'r' AND {row}")
    calls: list = []
    with SQLiteStore(journal) as store:
        with pytest.raises(lw.StoreError, match=re.escape(f"{journal} (run 'r'): a stored record is damaged (not the "
                                                          "JSON it was written as") + r": .*\); it was not used$"):
            lw.resume("r", lw.ScriptedPolicy(SCRIPT), make_registry(calls), store=store)
    assert calls == []


def test_a_damaged_end_of_run_is_an_error_when_read(tmp_path):
    db = tmp_path / "runs.db"
    with SQLiteStore(db) as store:
        lw.run("t", lw.ScriptedPolicy(SCRIPT), make_registry(), store=store, run_id="r")
    edit(db, "UPDATE runs SET final_answer = '41' WHERE id = 'r'")
    with SQLiteStore(db) as store, pytest.raises(lw.StoreError, match="the end of run 'r' is damaged"):
        store.load_run("r")
    edit(db, "UPDATE runs SET final_answer = '42', config = replace(config, 'max_steps', 'max_stepz') WHERE id = 'r'")
    with SQLiteStore(db) as store, pytest.raises(lw.StoreError, match="the record of run 'r' is damaged"):
        store.trace("r")


def test_flipped_bytes_never_read_back_as_different_content_and_never_leak_driver_errors():
    outcomes = flip_trial.trial(167)
    assert set(outcomes) <= {"same", "store_error"}, outcomes
    assert outcomes["store_error"] > 0


V3_COLUMNS = [("model_calls", "checksum"), ("tool_calls", "checksum"), ("steps", "checksum"), ("runs", "checksum"),
              ("runs", "end_checksum")]


def as_schema_2(kind: str, store) -> None:
    """Take a journal back to schema 2, as the loopwright before checksums wrote it."""
    for table, column in V3_COLUMNS:
        store._execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    store._execute("DROP TABLE guardrail_verdicts")  # schema 4's
    store._execute("PRAGMA user_version = 2" if kind == "sqlite" else "UPDATE meta SET value = '2' WHERE key = 'version'")


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_a_journal_written_without_checksums_migrates_and_resumes(kind, request, tmp_path):
    store = open_journal(kind, request, tmp_path / "runs.db")
    first = lw.run("t", lw.ScriptedPolicy(SCRIPT[:2]), make_registry(), store=store, run_id="r")
    assert first.stopped_reason == "error"
    as_schema_2(kind, store)
    store.close()
    dsn = request.getfixturevalue("pg_dsn") if kind == "postgres" else None
    with (lw.PostgresStore(dsn) if dsn else SQLiteStore(tmp_path / "runs.db")) as store:
        assert store.schema_version == 4
        calls: list = []
        done = lw.resume("r", lw.ScriptedPolicy(SCRIPT[2:]), make_registry(calls), store=store)
        assert (done.stopped_reason, done.final_answer) == ("final", "42") and calls == []  # both replayed
        assert [s.meta.get("replayed") for s in done.steps] == [True, True, None]
        assert store.trace("r").final_answer == "42" and store.load_run("r").status == "finished"


def test_row_checksums_never_change_so_journals_written_before_still_read():
    """A row's checksum is part of the file format: these are the values journals hold."""
    assert [checksum(), checksum(None), checksum(""), checksum("add"), checksum(2), checksum(2.5)] == [
        0, 4050780397, 947789931, 50485399, 3570839522, 3648094673]
    assert checksum("1", "add", '{"x": 2}', "done", "4", None, None, None) == 719806615  # a tool call's row
    assert checksum(True) == checksum(1) and checksum(False) == checksum(0)  # a bool column reads back as an int
    assert checksum("report-\udcff.pdf") == checksum("report-\\udcff.pdf") == 571676049  # stored escaped, read so
