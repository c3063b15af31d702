"""The run lease: two workers never run or resume one run at once. On SQLite and Postgres."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import loopwright as lw
from conftest import STORE_KINDS, act, final, make_registry, open_journal
from loopwright.durable.base import lease_owner

HELPERS = Path(__file__).parent / "helpers"
HOST = socket.gethostname()


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path):
    with open_journal(request.param, request, tmp_path / "runs.db") as s:
        yield s


def target(store) -> str:
    return store.dsn if isinstance(store, lw.PostgresStore) else store.path


def interrupted(store, run_id: str = "r") -> None:
    with pytest.raises(lw.RunInterrupted):
        lw.run("t", lw.ScriptedPolicy([KeyboardInterrupt()]), make_registry(), store=store, run_id=run_id)


def lease(store, run_id: str = "r") -> tuple:
    return tuple(store._one("SELECT lease_owner, lease_expires FROM runs WHERE id = ?", (run_id,)))


def hold(store, owner: str, expires: float, run_id: str = "r") -> None:
    store._execute("UPDATE runs SET lease_owner = ?, lease_expires = ? WHERE id = ?", (owner, expires, run_id))


def test_two_workers_racing_to_resume_one_run_one_wins_and_the_other_is_refused(store):
    interrupted(store)
    racers = [subprocess.Popen([sys.executable, str(HELPERS / "lease_race.py"), target(store), "r"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(2)]
    try:
        for p in racers:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        first = [json.loads(p.stdout.readline() or '{"outcome": "died"}') for p in racers]  # type: ignore[union-attr]
        outcomes = sorted(f["outcome"] for f in first)
        assert outcomes == ["holding", "refused"], (first, [p.stderr.read() for p in racers if p.poll()])  # type: ignore[union-attr]
        winner = racers[[f["outcome"] for f in first].index("holding")]
        refused = first[[f["outcome"] for f in first].index("refused")]
        assert "is held by another worker" in refused["error"] and "two workers never run one run at once" in refused["error"]
        winner.stdin.write("release\n")  # type: ignore[union-attr]
        winner.stdin.flush()  # type: ignore[union-attr]
        assert json.loads(winner.stdout.readline()) == {"outcome": "resumed", "answer": "held"}  # type: ignore[union-attr]
    finally:
        for p in racers:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)
    record = store.load_run("r")
    assert record.status == "finished" and record.resumes == 1 and record.final_answer == "held"
    assert lease(store) == (None, None)  # the end released it


def test_a_live_worker_on_this_host_keeps_the_run_from_a_resumer(store):
    interrupted(store)
    hold(store, f"{HOST}:{os.getppid()}:other", time.time() + 300)  # our parent: alive
    with pytest.raises(lw.StoreError, match="is held by another worker"):
        lw.resume("r", lw.ScriptedPolicy([final("x")]), make_registry(), store=store)
    assert store.load_run("r").status == "interrupted" and store.load_run("r").resumes == 0


def test_a_worker_on_another_host_keeps_the_run_until_its_lease_expires(store):
    interrupted(store)
    hold(store, "elsewhere.example:1:abcd", time.time() + 300)
    with pytest.raises(lw.StoreError, match=r"held by another worker \(elsewhere.example:1:abcd\)"):
        lw.resume("r", lw.ScriptedPolicy([final("x")]), make_registry(), store=store)
    hold(store, "elsewhere.example:1:abcd", time.time() - 1)  # expired: the worker is gone
    assert lw.resume("r", lw.ScriptedPolicy([final("x")]), make_registry(), store=store).final_answer == "x"


def test_a_dead_process_on_this_host_does_not_keep_its_run_until_expiry(store):
    interrupted(store)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    hold(store, f"{HOST}:{int(gone.stdout)}:dead", time.time() + 300)  # killed mid-run, say
    assert lw.resume("r", lw.ScriptedPolicy([final("x")]), make_registry(), store=store).final_answer == "x"


def test_a_run_holds_its_lease_while_it_runs_renews_it_as_it_writes_and_releases_it_at_the_end(store):
    seen: list[tuple] = []

    def policy(prompt: str) -> str:
        seen.append(lease(store, "live"))
        return [act("add", '{"x": 1, "y": 2}'), final("3")][len(seen) - 1]

    lw.run("t", policy, make_registry(), store=store, run_id="live")
    assert seen[0][0] == lease_owner() and seen[0][1] > time.time()
    assert lease(store, "live") == (None, None)

    _, journal = store.start_run("renew", "t", "react", {})
    hold(store, lease_owner(), 1.0, "renew")  # about to expire
    journal._renew_at = 0.0  # due: the next write renews it
    journal.record_step(lw.Step(1, "action", tool="add", args={}, observation="3"))
    assert lease(store, "renew")[1] > time.time() + store.lease_s / 2


def test_a_resume_that_cannot_start_gives_the_lease_back(store):
    interrupted(store)
    with pytest.raises(TypeError):
        lw.resume("r", lw.ScriptedPolicy([]), make_registry(), store=store, no_such_option=1)
    assert lease(store) == (None, None)


def test_lease_seconds_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="lease_s must be a positive number"):
        lw.SQLiteStore(tmp_path / "x.db", lease_s=0)


def test_a_wall_clock_jump_past_the_lease_does_not_hand_a_live_run_to_a_second_worker(store, monkeypatch):
    interrupted(store)
    holder = subprocess.Popen([sys.executable, str(HELPERS / "lease_race.py"), target(store), "r"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        holder.stdin.write("go\n")  # type: ignore[union-attr]
        holder.stdin.flush()  # type: ignore[union-attr]
        assert json.loads(holder.stdout.readline()) == {"outcome": "holding"}  # type: ignore[union-attr]
        wall = time.time
        monkeypatch.setattr(time, "time", lambda: wall() + 10 * store.lease_s)  # this host's clock jumps ahead
        with pytest.raises(lw.StoreError, match="is held by another worker"):
            lw.resume("r", lw.ScriptedPolicy([final("taken")]), make_registry(), store=store,
                      allow_tool_changes=True)
        monkeypatch.undo()
        holder.stdin.write("release\n")  # type: ignore[union-attr]
        holder.stdin.flush()  # type: ignore[union-attr]
        assert json.loads(holder.stdout.readline()) == {"outcome": "resumed", "answer": "held"}  # type: ignore[union-attr]
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait(timeout=30)
    assert store.load_run("r").final_answer == "held" and store.load_run("r").resumes == 1


def test_a_worker_whose_expired_lease_was_taken_over_stops_and_writes_nothing_more(store):
    store.lease_s = 0.05  # the run outlives its lease inside one tool call

    @lw.tool(side_effects="write")
    def slow(text: str) -> str:
        """Takes longer than the lease; meanwhile a worker elsewhere takes the run over."""
        threading.Event().wait(0.1)
        hold(store, "elsewhere:1:x", time.time() + 300)
        return "done"

    trace = lw.run("t", lw.ScriptedPolicy([act("slow", '{"text": "a"}'), final("done")]), lw.ToolRegistry([slow]),
                   store=store, run_id="r")
    assert trace.stopped_reason == "store_error" and "taken over by another worker (elsewhere:1:x)" in trace.steps[-1].error
    assert re.search(r"after it expired; this worker stops and writes nothing more to it \(give the store a longer "
                     r"lease_s\)\. Nothing more was written", trace.steps[-1].error)
    assert lease(store)[0] == "elsewhere:1:x" and [c.key for c in store.unsettled("r")] == ["1"]
    assert store.trace("r").steps == []  # nothing of this worker's after the takeover


def test_a_lease_owner_whose_pid_now_belongs_to_another_process_is_gone(store):
    interrupted(store)
    hold(store, f"{HOST}:{os.getppid()}:1-deadbeef", time.time() + 300)  # our parent's pid, another start time
    done = lw.resume("r", lw.ScriptedPolicy([final("x")]), make_registry(), store=store)
    assert done.final_answer == "x"


def test_a_worker_that_cannot_read_its_lease_when_renewing_writes_nothing_more_even_once_it_reads_again(tmp_path):
    db = tmp_path / "runs.db"

    def edit(sql: str) -> None:  # another process changes the file under the worker
        with contextlib.closing(sqlite3.connect(db)) as conn:
            conn.execute(sql)
            conn.commit()

    with lw.SQLiteStore(db) as store:
        _, journal = store.start_run("r", "t", "react", {})
        journal.flush()
        journal._renew_at = 0.0  # due: the next write checks and renews the lease
        edit("ALTER TABLE runs RENAME TO runs_away")  # the lease cannot be read
        with pytest.raises(lw.StoreError, match="no such table: runs"):
            journal.record_step(lw.Step(1, "action", tool="add", args={}, observation="3"))
        edit("ALTER TABLE runs_away RENAME TO runs")  # readable again, but this worker no longer knows it holds the run
        with pytest.raises(lw.StoreError, match=r"nothing more is written to its journal after a failed write \(.*"
                                                 "no such table: runs"):
            journal.record_step(lw.Step(2, "action", tool="add", args={}, observation="3"))
        assert store.trace("r").steps == []


def test_a_journal_renews_its_lease_once_a_third_of_it_has_passed_not_at_every_write(store, monkeypatch):
    ahead, now = {"s": 0.0}, time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: now + ahead["s"])  # the clock renewals are timed on, held still
    _, journal = store.start_run("r", "t", "react", {})
    journal.flush()
    started, third = lease(store), store.lease_s / 3

    def write(index: int, later: float) -> tuple:
        """A step recorded `later` thirds of the lease after the journal was opened; the lease then."""
        ahead["s"] = later * third
        journal.record_step(lw.Step(index, "action", tool="add", args={}, observation="3"))
        return lease(store)

    assert write(1, 0.0) == started  # just taken
    assert write(2, 0.9) == started  # not a third of the lease yet
    renewed = write(3, 1.0)  # a third exactly
    assert renewed[0] == started[0] and renewed[1] > started[1]
    assert write(4, 1.0) == renewed  # renewed a moment ago: not at every write
    assert write(5, 1.9) == renewed  # not a third since it was renewed
    assert write(6, 2.05)[1] > renewed[1]
