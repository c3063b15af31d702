"""PostgresStore on a real server the session starts: what is particular to Postgres
(opening, schemas, migrations, the DSN). Behaviour shared with SQLite is tested on both
stores in test_store.py, test_resume.py, test_settle.py, test_fork.py and test_lease.py."""

from __future__ import annotations

import psycopg
import pytest

import loopwright as lw
from conftest import act, final, make_registry
from loopwright.durable import postgres as pg_module
from loopwright.durable.postgres import redact
from loopwright.interfaces.runs import runs_main

pytestmark = pytest.mark.slow

REACT = [act("add", '{"x": 2, "y": 3}'), final("5")]


def raw(dsn: str, sql: str, *params: object) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


def tables(dsn: str) -> list[str]:
    return [r[0] for r in raw(dsn, "SELECT table_name FROM information_schema.tables "
                                   "WHERE table_schema = current_schema() ORDER BY 1")]


def test_a_new_journal_has_the_versioned_tables_and_reopens_with_its_runs(pg_dsn):
    with lw.PostgresStore(pg_dsn) as store:
        assert store.schema_version == len(pg_module._SCHEMAS) == 4
        lw.run("t", lw.ScriptedPolicy(REACT), make_registry(), store=store, run_id="r")
    assert {"meta", "runs", "model_calls", "tool_calls", "steps", "approvals", "model_call_prompts"} <= set(tables(pg_dsn))
    # a person with psql reads it without loopwright, the prompts view included
    assert raw(pg_dsn, "SELECT status, final_answer FROM runs") == [("finished", "5")]
    assert raw(pg_dsn, "SELECT count(*) FROM model_call_prompts WHERE run_id = 'r'") == [(2,)]
    with lw.PostgresStore(pg_dsn) as store:
        assert [r.id for r in store.list_runs()] == ["r"] and store.load_run("r").final_answer == "5"
        assert store.prompt("r", 2).startswith(store.prompt("r", 1))


def test_a_schema_holding_other_tables_is_refused_unchanged(pg_dsn):
    raw(pg_dsn, "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    with pytest.raises(lw.StoreError, match=r"not a loopwright run journal \(tables: users\); nothing was changed"):
        lw.PostgresStore(pg_dsn)
    assert tables(pg_dsn) == ["users"]


def test_a_journal_from_a_newer_version_is_refused_unchanged(pg_dsn):
    with lw.PostgresStore(pg_dsn) as store:
        lw.run("t", lw.ScriptedPolicy(REACT), make_registry(), store=store, run_id="r")
    raw(pg_dsn, "UPDATE meta SET value = '99' WHERE key = 'version'")
    with pytest.raises(lw.StoreError, match="newer loopwright.*schema 99.*up to 4.*nothing was changed"):
        lw.PostgresStore(pg_dsn)
    assert raw(pg_dsn, "SELECT value FROM meta WHERE key = 'version'") == [("99",)]


def test_an_older_journal_is_migrated_and_keeps_its_runs(pg_dsn, monkeypatch):
    monkeypatch.setattr(pg_module, "_SCHEMAS", pg_module._SCHEMAS[:1])  # a loopwright that wrote schema 1
    lw.PostgresStore(pg_dsn).close()
    raw(pg_dsn, "INSERT INTO runs (id, task, mode, config, status, stopped_reason, final_answer, created_at, "
                "updated_at) VALUES ('old', 't', 'react', '{}', 'finished', 'final', '42', 1, 1)")
    monkeypatch.undo()
    with lw.PostgresStore(pg_dsn) as store:
        assert store.schema_version == 4
        old = store.load_run("old")
        assert (old.final_answer, old.forked_from) == ("42", None)
        lw.run("t", lw.ScriptedPolicy(REACT), make_registry(), store=store, run_id="new")  # the new columns work


def test_a_failed_migration_leaves_the_journal_at_its_version(pg_dsn, monkeypatch):
    lw.PostgresStore(pg_dsn).close()
    monkeypatch.setattr(pg_module, "_SCHEMAS", [*pg_module._SCHEMAS, "ALTER TABLE runs ADD COLUMN labels TEXT;\n"
                                                                     "SELECT no_such_function();\n"])
    with pytest.raises(lw.StoreError, match="no_such_function.*nothing was changed"):
        lw.PostgresStore(pg_dsn)
    monkeypatch.undo()
    with lw.PostgresStore(pg_dsn) as store:
        assert store.schema_version == 4
    assert not raw(pg_dsn, "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
                           "AND table_name = 'runs' AND column_name = 'labels'")


def test_a_server_that_is_not_there_is_a_store_error_without_the_password(tmp_path):
    dsn = f"postgresql://ann:s3cret@/postgres?host={tmp_path}&connect_timeout=2"
    with pytest.raises(lw.StoreError, match="cannot connect to run journal") as info:
        lw.PostgresStore(dsn)
    assert "s3cret" not in str(info.value) and "ann:***@" in str(info.value)


def test_passwords_are_redacted_in_both_dsn_forms():
    assert redact("postgresql://ann:pw@db.example:5432/runs") == "postgresql://ann:***@db.example:5432/runs"
    assert redact("host=db user=ann password=pw dbname=runs") == "host=db user=ann password=*** dbname=runs"
    assert redact("postgresql:///runs?host=/tmp") == "postgresql:///runs?host=/tmp"


def test_the_command_line_takes_a_postgresql_dsn(pg_dsn, capsys):
    with lw.PostgresStore(pg_dsn) as store:
        lw.run("t", lw.ScriptedPolicy(REACT), make_registry(), store=store, run_id="r")
    assert runs_main(["list", "--db", pg_dsn]) == 0
    assert "r " in capsys.readouterr().out
    assert runs_main(["show", "r", "--db", pg_dsn]) == 0
    assert "status: finished" in capsys.readouterr().out


def test_two_stores_on_one_database_see_each_others_runs(pg_dsn):
    with lw.PostgresStore(pg_dsn) as a, lw.PostgresStore(pg_dsn) as b:
        lw.run("t", lw.ScriptedPolicy(REACT), make_registry(), store=a, run_id="from-a")
        assert b.load_run("from-a").final_answer == "5"
        assert b.trace("from-a").to_dict() == a.trace("from-a").to_dict()


def test_synchronous_commit_is_the_connections_setting(pg_dsn):
    with lw.PostgresStore(pg_dsn, synchronous_commit="off") as store:
        assert store._one("SHOW synchronous_commit") == ("off",)
        lw.run("t", lw.ScriptedPolicy(REACT), make_registry(), store=store, run_id="r")
    with lw.PostgresStore(pg_dsn) as store:
        assert store._one("SHOW synchronous_commit") == ("on",) and store.load_run("r").final_answer == "5"
    with pytest.raises(ValueError, match="synchronous_commit must be 'on' or 'off'"):
        lw.PostgresStore(pg_dsn, synchronous_commit="sometimes")  # type: ignore[arg-type]


def test_without_postgresql_installed_the_tests_fail_naming_the_install_command(monkeypatch):
    from helpers import pgserver

    monkeypatch.setattr(pgserver.shutil, "which", lambda name: None)
    monkeypatch.setattr(pgserver.glob, "glob", lambda pattern: [])
    with pytest.raises(RuntimeError, match=r"PostgreSQL is not installed.*scripts/test_deps.sh.*apt-get install -y postgresql"):
        pgserver.PostgresServer()


def test_a_store_whose_connection_dropped_reconnects_on_the_next_call(pg_server, pg_dsn):
    with lw.PostgresStore(pg_dsn) as store:
        lw.run("t", lw.ScriptedPolicy(REACT), make_registry(), store=store, run_id="r")
        pg_server.restart()  # every connection to the server is dropped
        with pytest.raises(lw.StoreError, match="connection was lost, and the next call connects again"):
            store.list_runs()
        assert [r.id for r in store.list_runs()] == ["r"]
        again = lw.run("t", lw.ScriptedPolicy(REACT), make_registry(), store=store, run_id="r2")
        assert again.final_answer == "5" and store.load_run("r2").status == "finished"


def test_a_run_whose_connection_drops_stops_as_store_error_and_resumes_on_the_same_store(pg_server, pg_dsn):
    restarts = [1]

    @lw.tool
    def add(x: int, y: int) -> int:
        """Add two integers; the first time, the server restarts meanwhile."""
        if restarts:
            restarts.pop()
            pg_server.restart()
        return x + y

    with lw.PostgresStore(pg_dsn) as store:
        trace = lw.run("t", lw.ScriptedPolicy(REACT), lw.ToolRegistry([add]), store=store, run_id="r")
        assert trace.stopped_reason == "store_error" and "connection" in trace.steps[-1].error
        assert store.load_run("r").status == "running"  # reconnected: the journal has what was written
        done = lw.resume("r", lw.ScriptedPolicy(REACT), lw.ToolRegistry([add]), store=store)
        assert (done.stopped_reason, done.final_answer) == ("final", "5")
        assert store.load_run("r").status == "finished"
