"""The run journal stores: the schema, one small write per event, and refusing what they
must not touch. The `store` tests run on SQLiteStore and on PostgresStore (a real server
the session starts); `sqlite_store` tests are about the SQLite file itself."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loopwright as lw
from conftest import STORE_KINDS, act, final, make_registry, open_journal
from loopwright.durable import sqlite as store_module
from loopwright.durable.sqlite import APPLICATION_ID, SQLiteStore
from loopwright.policy import Completion, ModelRequest, ToolCall
from loopwright.tools.registry import ToolError, ToolResult

REACT = [act("add", '{"x": 2, "y": 3}'), act("multiply", '{"x": 5, "y": 10}'), final("50")]
PLAN = json.dumps({"plan": [
    {"id": "E1", "tool": "search", "args": {"q": "france"}},
    {"id": "E2", "tool": "word_count", "args": {"text": "#E1"}},
]})
SCRIPTS = {"react": REACT, "rewoo": [PLAN, "Final Answer: 8"], "plan_execute": [PLAN]}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, db: Path):
    with open_journal(request.param, request, db) as s:
        yield s


@pytest.fixture
def sqlite_store(db: Path):
    with SQLiteStore(db) as s:
        yield s


def snapshot(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def rows(store, sql: str, *params: object) -> list[tuple]:
    return [tuple(r) for r in store._all(sql, params)]


def other_connection(store):
    """A second connection to the store's database, as another process would open."""
    if isinstance(store, SQLiteStore):
        return closing(sqlite3.connect(store.path))
    import psycopg

    return psycopg.connect(store.dsn, autocommit=True)


# -- schema ------------------------------------------------------------------------------


def test_new_journal_is_wal_with_a_versioned_schema_and_readable_tables(sqlite_store, db):
    store = sqlite_store
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.schema_version == len(store_module._MIGRATIONS) == 4
    assert store.conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    names = {r[0] for r in rows(store, "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    assert {"meta", "runs", "model_calls", "tool_calls", "steps", "approvals", "guardrail_verdicts",
            "model_call_prompts"} <= names
    assert store.integrity_check() == "ok"
    # a person with the sqlite3 module (or shell) reads it without loopwright
    lw.run("task", lw.ScriptedPolicy(REACT), make_registry(), store=store, run_id="r")
    with closing(sqlite3.connect(db)) as plain:
        assert plain.execute("SELECT status, final_answer FROM runs").fetchall() == [("finished", "50")]


def test_reopening_a_journal_keeps_its_runs(db):
    with SQLiteStore(db) as s:
        lw.run("task", lw.ScriptedPolicy(REACT), make_registry(), store=s, run_id="r")
    with SQLiteStore(db) as s:
        assert [r.id for r in s.list_runs()] == ["r"] and s.load_run("r").stopped_reason == "final"


@pytest.mark.parametrize("mode", list(SCRIPTS))
def test_trace_rebuilt_from_the_journal_equals_the_run_trace(store, mode):
    trace = lw.run("task", lw.ScriptedPolicy(SCRIPTS[mode]), make_registry(), mode=mode, store=store)
    assert trace.run_id is not None
    assert store.trace(trace.run_id).to_dict() == trace.to_dict()


def test_every_event_is_one_row_written_before_the_run_moves_on(store):
    seen: list[tuple[int, int, int]] = []

    def policy(prompt: str) -> str:  # sees what the journal holds at each model call
        seen.append(tuple(rows(store, f"SELECT count(*) FROM {t}")[0][0]
                          for t in ("model_calls", "tool_calls", "steps")))
        return REACT[len(seen) - 1]

    lw.run("task", policy, make_registry(), store=store, run_id="r")
    assert seen == [(0, 0, 0), (1, 1, 1), (2, 2, 2)]
    assert rows(store, "SELECT n, purpose, completion FROM model_calls ORDER BY n") == [
        (1, "react", REACT[0]), (2, "react", REACT[1]), (3, "react", REACT[2])]
    assert rows(store, "SELECT key, name, state, value, observation FROM tool_calls ORDER BY key") == [
        ("1", "add", "done", "5", None), ("2", "multiply", "done", "50", None)]  # the observation is the value's text
    assert rows(store, "SELECT idx, kind, tool FROM steps ORDER BY idx") == [
        (1, "action", "add"), (2, "action", "multiply"), (3, "final", None)]


def test_each_event_is_durable_before_anything_acts_on_it(store):
    """Seen from another connection (another process would see the same): the completion
    and the tool start are committed before the tool runs; the tool's result and the step
    before the next model call."""
    seen: dict[str, object] = {}

    def committed(sql: str) -> list[tuple]:
        with other_connection(store) as other:
            return [tuple(r) for r in other.execute(sql).fetchall()]

    @lw.tool(side_effects="write", idempotent=True)
    def write(x: int) -> int:
        """Write x."""
        seen[f"tool {x}"] = (committed(f"SELECT completion FROM model_calls WHERE n = {x}"),
                             committed(f"SELECT state FROM tool_calls WHERE key = '{x}'"))
        return x

    def policy(prompt: str) -> str:
        k = len([key for key in seen if key.startswith("model ")])  # model calls so far
        seen[f"model {k + 1}"] = committed("SELECT key, state, value FROM tool_calls ORDER BY key"), \
            committed("SELECT count(*) FROM steps")[0][0]
        return act("write", json.dumps({"x": k + 1})) if k < 2 else final("done")

    lw.run("t", policy, lw.ToolRegistry([write]), store=store, run_id="r")
    assert seen["tool 1"] == ([(act("write", '{"x": 1}'),)], [("started",)])
    assert seen["tool 2"] == ([(act("write", '{"x": 2}'),)], [("started",)])
    assert seen["model 2"] == ([("1", "done", "1")], 1)
    assert seen["model 3"] == ([("1", "done", "1"), ("2", "done", "2")], 2)


def react_script(n: int) -> list[str]:
    return [act("add", json.dumps({"x": i, "y": 1})) for i in range(n)] + [final(str(n))]


def test_writes_per_step_do_not_grow_with_the_run(sqlite_store):
    store = sqlite_store

    def measure(n: int) -> tuple[float, int]:
        before = store.conn.total_changes
        lw.run("task", lw.ScriptedPolicy(react_script(n)), make_registry(), max_steps=n + 1,
               store=store, run_id=f"n{n}", on_repeat="off")
        stored = rows(store, "SELECT max(length(prompt)) FROM model_calls WHERE run_id = ? AND n > 1", f"n{n}")
        return (store.conn.total_changes - before) / (n + 1), stored[0][0]

    rows_small, prompt_small = measure(5)
    rows_large, prompt_large = measure(60)
    assert abs(rows_small - rows_large) < 0.2  # the same few rows a step, however long the run
    assert prompt_large <= prompt_small + 10  # a ReAct prompt is stored as what it adds


def test_each_model_call_prompt_is_rebuilt_exactly_from_the_stored_deltas(store):
    trace = lw.run("task", lw.ScriptedPolicy(REACT), make_registry(), store=store, run_id="r")
    for n, step in enumerate(trace.steps, 1):
        assert store.prompt("r", n) == trace.prompt_for(step)
    view = dict(rows(store, "SELECT n, prompt FROM model_call_prompts WHERE run_id = 'r'"))
    assert view == {n: trace.prompt_for(s) for n, s in enumerate(trace.steps, 1)}


def test_a_chat_request_that_extends_the_last_one_stores_only_its_new_messages(store):
    _, journal = store.start_run(None, "t", "react", {})
    system, user = {"role": "system", "content": "be brief"}, {"role": "user", "content": "2 + 3?"}
    reply, again = {"role": "assistant", "content": "5"}, {"role": "user", "content": "and 3 + 4?"}
    usage = lw.Usage(1, 1, 1)
    journal.record_completion(1, ModelRequest("p", messages=(system, user)), Completion("5"), usage)
    journal.record_completion(2, ModelRequest("p5", messages=(system, user, reply, again)), Completion("7"), usage)
    other = {"role": "system", "content": "be brief"}  # equal, but not the message the last request sent
    journal.record_completion(3, ModelRequest("p57", messages=(other, user, reply, again)), Completion("7"), usage)
    journal.flush()
    stored = rows(store, "SELECT n, prompt_base, prompt, messages FROM model_calls ORDER BY n")
    assert stored == [(1, None, "p", json.dumps([system, user])), (2, 1, "5", json.dumps([reply, again])),
                      (3, None, "p57", json.dumps([other, user, reply, again]))]
    assert [store.prompt(journal.run_id, n) for n in (1, 2, 3)] == ["p", "p5", "p57"]


def test_each_model_call_records_the_stop_strings_token_cap_and_dialect_it_was_sent_with(store):
    _, journal = store.start_run(None, "t", "react", {})
    usage = lw.Usage(1, 1, 1)
    sent = [ModelRequest("p", ("\nObservation:",), max_tokens=64), ModelRequest("p", ("\nObservation:",), max_tokens=64),
            ModelRequest("q", ("END",), max_tokens=None, dialect="native"), ModelRequest("p")]
    for n, request in enumerate(sent, 1):
        journal.record_completion(n, request, Completion("x"), usage)
    journal.flush()
    recorded = [json.loads(r[0]) for r in rows(store, "SELECT request FROM model_calls ORDER BY n")]
    assert recorded == [{"stop": ["\nObservation:"], "max_tokens": 64, "dialect": "json"}] * 2 + [
        {"stop": ["END"], "max_tokens": None, "dialect": "native"}, {"stop": [], "max_tokens": None, "dialect": "json"}]
    # no chat messages, native calls or meta: nothing stored for them
    assert rows(store, "SELECT DISTINCT messages, tool_calls, completion_meta FROM model_calls") == [(None, None, None)]


def test_trace_of_a_run_that_never_ended_counts_what_was_recorded(store):
    with pytest.raises(SystemExit):
        lw.run("task", lw.ScriptedPolicy([REACT[0], SystemExit()]), make_registry(), store=store, run_id="r")
    trace = store.trace("r")
    assert trace.stopped_reason is None and store.load_run("r").status == "running"
    assert trace.llm_calls == 1 and trace.tool_calls == 1 and [s.kind for s in trace.steps] == ["action"]
    assert trace.prompt_for(trace.steps[0]) == store.prompt("r", 1)


def test_list_runs_is_newest_first_and_filters_by_status(store):
    # ids chosen so that newest-first differs from both alphabetical orders
    lw.run("a", lw.ScriptedPolicy(REACT), make_registry(), store=store, run_id="b-first")
    lw.run("b", lw.ScriptedPolicy([REACT[0], RuntimeError("x")]), make_registry(), store=store, run_id="c-second")
    with pytest.raises(lw.RunInterrupted):
        lw.run("c", lw.ScriptedPolicy([KeyboardInterrupt()]), make_registry(), store=store, run_id="a-third")
    assert [r.id for r in store.list_runs()] == ["a-third", "c-second", "b-first"]
    assert [r.id for r in store.list_runs(status="interrupted")] == ["a-third"]
    assert [r.id for r in store.list_runs(limit=1)] == ["a-third"]
    second = store.load_run("c-second")
    assert (second.status, second.stopped_reason, second.step_count) == ("finished", "error", 2)


def test_generated_run_ids_are_unique_and_time_sortable(store):
    ids = [lw.run("t", lw.ScriptedPolicy([final("x")]), make_registry(), store=store).run_id for _ in range(20)]
    assert len(set(ids)) == 20 and all(i is not None and i[:8].isdigit() for i in ids)
    assert [i[:15] for i in ids] == sorted(i[:15] for i in ids)  # the UTC second leads
    # newest first by creation, not by id: within one second the ids' random tails are unordered
    assert [r.id for r in store.list_runs(limit=20)] == ids[::-1]


# -- refusing what must not be touched --------------------------------------------------


def test_existing_run_id_is_refused_and_its_history_kept(store):
    lw.run("first", lw.ScriptedPolicy(REACT), make_registry(), store=store, run_id="r")
    before = store.trace("r").to_dict()
    policy = lw.ScriptedPolicy([final("other")])
    with pytest.raises(lw.StoreError, match="run id 'r' already exists.*nothing was overwritten"):
        lw.run("second", policy, make_registry(), store=store, run_id="r")
    assert policy.calls == 0 and store.trace("r").to_dict() == before


@pytest.mark.parametrize("bad", ["", "a\nb", "x" * 201])
def test_unusable_run_id_is_refused(store, bad):
    with pytest.raises(lw.StoreError, match="run_id must be"):
        store.start_run(bad, "t", "react", {})


def test_unknown_run_id_is_a_store_error_naming_it(store):
    for call in (store.load_run, store.trace, store.pending_approvals):
        with pytest.raises(lw.StoreError, match="no run 'ghost'"):
            call("ghost")
    with pytest.raises(lw.StoreError, match="no run 'ghost'"):
        store.decide("ghost", "key", True)


def test_file_that_is_not_sqlite_is_refused_unchanged(db):
    db.write_bytes(b"name,age\nann,41\n" * 50)
    before = snapshot(db)
    with pytest.raises(lw.StoreError, match="not a SQLite database.*nothing was changed"):
        SQLiteStore(db)
    assert snapshot(db) == before


def test_foreign_sqlite_database_is_refused_unchanged(db):
    with closing(sqlite3.connect(db)) as other:
        other.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        other.execute("INSERT INTO users (name) VALUES ('ann')")
        other.commit()
    before = snapshot(db)
    with pytest.raises(lw.StoreError, match=r"not a loopwright run journal \(tables: users\)"):
        SQLiteStore(db)
    assert snapshot(db) == before and not Path(str(db) + "-wal").exists()


def test_journal_from_a_newer_version_is_refused_unchanged(db):
    with SQLiteStore(db) as s:
        lw.run("t", lw.ScriptedPolicy(REACT), make_registry(), store=s, run_id="r")
    with closing(sqlite3.connect(db)) as raw:
        raw.execute("PRAGMA user_version = 99")
    before = snapshot(db)
    with pytest.raises(lw.StoreError, match="newer loopwright.*schema 99.*up to 4.*nothing was changed"):
        SQLiteStore(db)
    assert snapshot(db) == before


def test_corrupt_journal_is_a_store_error_and_left_as_is(db):
    with SQLiteStore(db) as s:
        lw.run("t", lw.ScriptedPolicy(REACT), make_registry(), store=s, run_id="r")
    data = bytearray(db.read_bytes())
    data[100:4096] = os.urandom(3996)  # the schema page, after a valid header
    db.write_bytes(bytes(data))
    before = snapshot(db)
    with pytest.raises(lw.StoreError, match="not a usable SQLite database"):
        SQLiteStore(db)
    assert snapshot(db) == before


def test_missing_directory_and_directory_paths_are_store_errors(tmp_path):
    with pytest.raises(lw.StoreError, match="does not exist"):
        SQLiteStore(tmp_path / "nope" / "runs.db")
    with pytest.raises(lw.StoreError, match="is a directory"):
        SQLiteStore(tmp_path)


def test_closed_store_is_a_store_error(db):
    s = SQLiteStore(db)
    s.close()
    with pytest.raises(lw.StoreError, match="is closed"):
        s.list_runs()


def test_synchronous_must_be_a_sqlite_level(db):
    with pytest.raises(ValueError, match="synchronous must be"):
        SQLiteStore(db, synchronous="sometimes")  # type: ignore[arg-type]
    with SQLiteStore(db, synchronous="FULL") as s:
        assert s.conn.execute("PRAGMA synchronous").fetchone()[0] == 2


# -- migrations --------------------------------------------------------------------------


def test_older_journal_is_migrated_in_order_and_keeps_its_runs(db, monkeypatch):
    with SQLiteStore(db) as s:
        lw.run("t", lw.ScriptedPolicy(REACT), make_registry(), store=s, run_id="r")
    applied: list[int] = []

    def v5(conn: sqlite3.Connection) -> None:
        applied.append(5)
        conn.execute("ALTER TABLE runs ADD COLUMN labels TEXT")

    monkeypatch.setattr(store_module, "_MIGRATIONS", [*store_module._MIGRATIONS, v5])
    with SQLiteStore(db) as s:
        assert applied == [5] and s.schema_version == 5
        assert s.load_run("r").final_answer == "50"
        assert "labels" in {r[1] for r in s.conn.execute("PRAGMA table_info(runs)")}
    with SQLiteStore(db) as s:
        assert applied == [5]  # applied once


def test_failed_migration_leaves_the_journal_at_its_version(db, monkeypatch):
    with SQLiteStore(db) as s:
        lw.run("t", lw.ScriptedPolicy(REACT), make_registry(), store=s, run_id="r")

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE runs ADD COLUMN labels TEXT")
        raise RuntimeError("migration bug")

    monkeypatch.setattr(store_module, "_MIGRATIONS", [*store_module._MIGRATIONS, broken])
    with pytest.raises(RuntimeError, match="migration bug"):
        SQLiteStore(db)
    monkeypatch.undo()
    with SQLiteStore(db) as s:
        assert s.schema_version == 4
        assert "labels" not in {r[1] for r in s.conn.execute("PRAGMA table_info(runs)")}


# -- values and concurrency --------------------------------------------------------------


class Point:
    def __str__(self) -> str:
        return "Point(1, 2)"


def reload_tool(store: SQLiteStore, value: object) -> ToolResult:
    _, journal = store.start_run(None, "t", "react", {})
    journal.record_tool_start("E1", "f", {"a": 1})
    journal.record_tool_result("E1", ToolResult("f", {"a": 1}, value, observation=str(value), error=None, duration_s=0.5))
    journal.flush()
    _, again = store.reopen(journal.run_id)
    state, result = again.recorded_tool("E1")
    assert state == "done" and result is not None
    return result


@pytest.mark.parametrize(("value", "back"), [
    (8, 8), (2.5, 2.5), ("text", "text"), (None, None), (True, True),
    ({"a": [1, {"b": None}]}, {"a": [1, {"b": None}]}), ((1, 2), [1, 2]),
    (Point(), "Point(1, 2)"), ({(1, 2): "tuple key"}, "{(1, 2): 'tuple key'}"),
])
def test_tool_values_come_back_as_json_data_or_their_str(store, value, back):
    result = reload_tool(store, value)
    assert result.value == back and type(result.value) is type(back)
    assert result.observation == str(value) and result.duration_s == 0.5 and result.error is None


@pytest.mark.parametrize(("message", "kind"), [("boom", "exception"), ("took too long", "timeout"), ("", "exception")])
def test_tool_errors_come_back_as_tool_errors(store, message, kind):
    _, journal = store.start_run(None, "t", "react", {})
    error = ToolError("f", message, kind)
    journal.record_tool_start("3", "f", {})
    journal.record_tool_result("3", ToolResult("f", {}, None, observation="ERROR[f]: boom", error=error, duration_s=0.1))
    journal.flush()
    _, again = store.reopen(journal.run_id)
    state, result = again.recorded_tool("3")
    assert (state, result) == ("done", ToolResult("f", {}, None, observation="ERROR[f]: boom", error=ToolError("f", message, kind), duration_s=0.1))
    assert result is not None and result.error is not None
    assert (result.error.message, result.error.kind) == (message, kind)
    assert rows(store, "SELECT value FROM tool_calls WHERE key = '3'") == [(None,)]  # an error has no value


def test_a_result_whose_observation_is_its_text_is_stored_once(store):
    _, journal = store.start_run(None, "t", "react", {})
    text, data = "x" * 1000, {"a": 1}
    for key, value, observation in (("1", text, text), ("2", data, '{"a": 1}'), ("3", text, "shown differently")):
        journal.record_tool_start(key, "f", {})
        journal.record_tool_result(key, ToolResult("f", {}, value, observation=observation, error=None, duration_s=0.1))
    journal.flush()
    stored = rows(store, "SELECT key, value, observation FROM tool_calls ORDER BY key")
    assert stored == [("1", json.dumps(text), None), ("2", '{"a": 1}', None), ("3", json.dumps(text), "shown differently")]
    _, again = store.reopen(journal.run_id)
    assert [again.recorded_tool(k)[1].observation for k in "123"] == [text, '{"a": 1}', "shown differently"]


def test_attempt_counts_the_starts_of_a_call_recorded_so_far(store):
    run_id, journal = store.start_run(None, "t", "react", {})
    assert journal.attempt("1") == 1
    journal.record_tool_start("1", "f", {})
    assert journal.attempt("1") == 2
    journal.record_tool_start("1", "f", {})  # started again: a rerun after it was cut short
    assert (journal.attempt("1"), journal.attempt("2")) == (3, 1)
    journal.flush()
    assert rows(store, "SELECT key, attempts FROM tool_calls") == [("1", 2)]
    _, again = store.reopen(run_id)
    assert again.attempt("1") == 3


def test_a_reopened_journal_records_the_result_of_a_call_its_earlier_session_started(store):
    run_id, journal = store.start_run(None, "t", "react", {})
    journal.record_tool_start("1", "f", {"path": "a.txt"})
    journal.flush()
    _, again = store.reopen(run_id)  # the session that started it is gone; this one finishes it
    again.record_tool_result("1", ToolResult("f", {"path": "a.txt"}, "ok", observation="ok", error=None, duration_s=0.1))
    again.flush()
    _, read = store.reopen(run_id)
    assert read.recorded_tool("1") == ("done", ToolResult("f", {"path": "a.txt"}, "ok", observation="ok", error=None, duration_s=0.1))


def test_a_result_is_checksummed_with_the_name_and_args_its_start_stored(store):
    _, journal = store.start_run(None, "t", "react", {})
    journal.record_tool_start("1", "f", {"path": "a.txt"})
    journal.record_tool_result("1", ToolResult("f", {"path": "/abs/a.txt"}, "ok", observation="ok", error=None, duration_s=0.1))  # its own copy
    journal.flush()
    _, again = store.reopen(journal.run_id)  # read back and checked: not damaged
    assert again.recorded_tool("1") == ("done", ToolResult("f", {"path": "a.txt"}, "ok", observation="ok", error=None, duration_s=0.1))


@pytest.mark.parametrize(("calls", "meta"), [
    ((ToolCall("add", '{"x": 1}', "c1"),), {"model": "m"}),
    ((ToolCall("add", '{"x": 1}', "c1"),), {}),  # native calls, no meta
    ((), {"model": "m"}),  # meta, no native calls
])
def test_completions_come_back_with_usage_native_calls_and_meta(store, calls, meta):
    _, journal = store.start_run(None, "t", "react", {})
    usage = lw.Usage(10, 4, 3)
    completion = Completion("hi", usage, calls, meta)
    journal.record_completion(1, ModelRequest("p", ("\nObs",)), completion, usage)
    journal.flush()
    _, again = store.reopen(journal.run_id)
    assert again.recorded_completion(1) == (completion, usage)
    assert again.recorded_completion(2) is None


def test_a_completion_whose_usage_was_estimated_comes_back_without_the_models_usage(store):
    _, journal = store.start_run(None, "t", "react", {})
    estimated = lw.Usage(10, 10, 3, estimated=True)  # counted by loopwright: the model reported none
    journal.record_completion(1, ModelRequest("p", ("\nObs",)), Completion("hi", None), estimated)
    journal.flush()
    _, again = store.reopen(journal.run_id)
    assert again.recorded_completion(1) == (Completion("hi", None), estimated)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(task=st.text(), value=json_values, args=st.dictionaries(st.text(), json_values, max_size=3))
def test_any_text_and_json_value_round_trips_through_the_journal(tmp_path, task, value, args):
    with SQLiteStore(tmp_path / "h.db") as s:
        run_id, journal = s.start_run(None, task, "react", {"tools": None})
        journal.record_tool_start("k", "f", args)
        journal.record_tool_result("k", ToolResult("f", args, value, observation="obs", error=None, duration_s=0.0))
        journal.flush()
        assert s.load_run(run_id).task == task
        _, again = s.reopen(run_id)
        state, result = again.recorded_tool("k")
        assert result is not None and result.value == value and result.args == args


def test_concurrent_rewoo_workers_all_land_in_the_journal(store):
    plan = {"plan": [{"id": f"E{i}", "tool": "add", "args": {"x": i, "y": 1}} for i in range(1, 17)]}
    trace = lw.run("t", lw.ScriptedPolicy([json.dumps(plan), "done"]), make_registry(), mode="rewoo",
                   max_steps=20, store=store, run_id="r")
    assert trace.tool_calls == 16
    done = rows(store, "SELECT key, value FROM tool_calls WHERE run_id = 'r' AND state = 'done'")
    assert sorted(done) == sorted((f"E{i}", str(i + 1)) for i in range(1, 17))
    if isinstance(store, SQLiteStore):
        assert store.integrity_check() == "ok"


def test_journal_can_be_written_from_many_threads_at_once(store):
    _, journal = store.start_run(None, "t", "rewoo", {})
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            for i in range(25):
                key = f"{t}:{i}"
                journal.record_tool_start(key, "f", {"i": i})
                journal.record_tool_result(key, ToolResult("f", {"i": i}, i, observation=str(i), error=None, duration_s=0.0))
                journal.flush()
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert rows(store, "SELECT count(*) FROM tool_calls WHERE state = 'done'") == [(200,)]


LOCK_PROBE = """
import fcntl, sys
with open(sys.argv[1], "rb+") as f:
    try:
        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 510, 0x40000002)  # SQLite's shared-lock bytes
    except OSError:
        print("held")
    else:
        print("free")
"""


def shared_lock_held(db: Path) -> bool:
    out = subprocess.run([sys.executable, "-c", LOCK_PROBE, str(db)], capture_output=True, text=True, check=True)
    return out.stdout.strip() == "held"


def test_opening_a_store_keeps_the_locks_of_other_connections_in_the_process(db):
    # POSIX locks belong to the process: opening and closing any other descriptor on the
    # file would drop them, and a writer in another process could then reset the WAL
    # under a connection still using it. So a store reads the file only through SQLite.
    with SQLiteStore(db):
        pass
    with closing(sqlite3.connect(db)) as other:
        other.execute("SELECT count(*) FROM runs").fetchone()
        assert shared_lock_held(db)
        with SQLiteStore(db) as s:
            s.list_runs()
        assert shared_lock_held(db)


def test_steps_holding_values_json_cannot_hold_are_stored_as_to_dict_renders_them(store):
    run_id, journal = store.start_run(None, "t", "react", {})
    odd = [lw.Step(1, "action", tool="f", args={"s": {1}}, meta={"p": Point()}),
           lw.Step(2, "action", tool="f", args={(1, 2): "tuple key"})]
    for step in odd:
        journal.record_step(step)
    assert [s.to_dict() for s in store.trace(run_id).steps] == [s.to_dict() for s in odd]


class FailingOnce:
    """A connection whose next statement matching `fail_on` raises, like a full disk."""

    def __init__(self, conn: sqlite3.Connection, fail_on: str) -> None:
        self.conn, self.fail_on = conn, fail_on

    def execute(self, sql: str, params: tuple = ()) -> sqlite3.Cursor:
        if self.fail_on and sql.startswith(self.fail_on):
            self.fail_on = ""
            raise sqlite3.OperationalError("disk I/O error")
        return self.conn.execute(sql, params)


def test_failed_journal_write_is_a_store_error_and_nothing_more_is_written(sqlite_store):
    store = sqlite_store
    run_id, journal = store.start_run(None, "t", "react", {})
    journal.record_tool_start("1", "f", {})
    journal.record_tool_result("1", ToolResult("f", {}, 5, observation="5", error=None, duration_s=0.0))  # waits for the step
    real = store._conn
    store._conn = FailingOnce(real, "INSERT INTO steps")  # type: ignore[assignment]
    with pytest.raises(lw.StoreError, match=f"cannot record run '{run_id}': .*disk I/O error"):
        journal.record_step(lw.Step(1, "action", tool="f", args={}, observation="5"))
    assert rows(store, "SELECT state FROM tool_calls") == [("started",)]  # rolled back together
    with pytest.raises(lw.StoreError, match=r"nothing more is written .*\(.*disk I/O error"):  # works again: refused
        journal.record_step(lw.Step(1, "action", tool="f", args={}, observation="5"))
    store._conn = real
    journal.flush()
    store.close()
    with contextlib.closing(sqlite3.connect(store.path)) as conn:
        assert conn.execute("SELECT state FROM tool_calls").fetchall() == [("started",)]
        assert conn.execute("SELECT * FROM steps").fetchall() == []


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(min_size=1, max_size=3000), header=st.booleans())
def test_any_non_journal_bytes_are_refused_and_left_unchanged(tmp_path, data, header):
    path = tmp_path / "junk.db"
    path.write_bytes((b"SQLite format 3\x00" if header else b"") + data)
    before = path.read_bytes()
    with pytest.raises(lw.StoreError, match="nothing was changed"):
        SQLiteStore(path)
    assert path.read_bytes() == before
