"""The crash test: a run with a side-effecting tool is killed with SIGKILL at random
points; after each kill `resume` completes it, the journal is sound, the trace equals
an uninterrupted run's, and every side effect happened exactly once. The payments trial
does the same in all three modes with a tool that deduplicates on its call key, on
SQLite and on PostgreSQL: no run is left for a person, every payment is made once.

A fork server (helpers/crash_child.py) imports loopwright once and forks one child per
trial, so 50 trials cost well under a minute on two cores.
"""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

import loopwright as lw
from helpers import crash_workload as work
from helpers import payments_workload as pay
from helpers.durable import comparable
from loopwright.durable.resume import resume
from loopwright.durable.sqlite import SQLiteStore
from loopwright.interfaces.common import open_store

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="needs fork and SIGKILL"),
]

HELPERS = Path(__file__).parent / "helpers"
TRIALS = 50  # kills that land inside a run; a kill that lands after the end is extra
SEED = 20240601


class ForkServer:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HELPERS / "crash_child.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )

    def trial(self, **request: object) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the fork server died"
        return json.loads(line)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServer]:
    s = ForkServer()
    yield s
    s.close()


def journal_state(db: Path, run_id: str) -> tuple[str, dict[str, str], int]:
    """What the killed run left: its status, each tool call's state, model calls made."""
    # closed explicitly: a sqlite3 connection left to the garbage collector keeps
    # descriptors (and locks) on the journal that confuse the next connection
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        status = conn.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
        tools = dict(conn.execute("SELECT key, state FROM tool_calls WHERE run_id = ?", (run_id,)))
        calls = conn.execute("SELECT count(*) FROM model_calls WHERE run_id = ?", (run_id,)).fetchone()[0]
    return status, tools, calls


def test_runs_killed_at_random_points_resume_with_each_side_effect_exactly_once(tmp_path, server):
    db = tmp_path / "journal.db"
    with SQLiteStore(db) as store:  # the uninterrupted reference
        ref_dir = tmp_path / "reference"
        ref_dir.mkdir()
        expected = lw.run(work.TASK, work.StepPolicy(), work.registry(ref_dir / "f", ref_dir / "x"),
                          max_steps=work.STEPS + 2, store=store, run_id="reference")
    calibration = [
        server.trial(db=str(db), run_id=f"calibrate-{i}", effects=str(ref_dir / f"f{i}"),
                     executions=str(ref_dir / f"x{i}"), delay_s=None, variant="idempotent")
        for i in range(2)
    ]
    assert all(not c["killed"] and c["error"] is None for c in calibration), calibration
    run_s = min(c["elapsed_s"] for c in calibration)  # how long a child's run takes here
    assert expected.final_answer == f"{work.STEPS} lines" and expected.tool_calls == work.STEPS
    ops = [f"op-{k}" for k in range(1, work.STEPS + 1)]

    rng = random.Random(SEED)
    outcomes: Counter[str] = Counter()
    trial = 0
    while outcomes["killed mid-run"] < TRIALS and trial < 3 * TRIALS:
        trial += 1
        run_id, effects, executions = f"t{trial}", tmp_path / f"effects-{trial}", tmp_path / f"exec-{trial}"
        reply = server.trial(db=str(db), run_id=run_id, effects=str(effects), executions=str(executions),
                             delay_s=rng.uniform(0, 0.9 * run_s), variant="idempotent")
        assert reply["error"] is None, reply

        status, tools_at_kill, calls_at_kill = journal_state(db, run_id)
        outcomes["killed mid-run" if status == "running" else f"ended first ({status})"] += 1
        outcomes.update(f"tool call left {state}" for state in tools_at_kill.values())

        policy = work.StepPolicy()
        with SQLiteStore(db) as store:
            trace = resume(run_id, policy, work.registry(effects, executions), store=store)
            assert store.integrity_check() == "ok"
            assert comparable(store.trace(run_id)) == comparable(expected)

        assert comparable(trace) == comparable(expected), f"trial {trial}"
        assert policy.calls == work.STEPS + 1 - calls_at_kill  # recorded model calls were not paid again
        lines = effects.read_text().splitlines()
        assert sorted(lines) == sorted(f"{op} line {op[3:]}" for op in ops), f"trial {trial}: {lines}"
        ran = Counter(executions.read_text().splitlines())
        for op, key in zip(ops, map(str, range(1, work.STEPS + 1)), strict=True):
            if tools_at_kill.get(key) == "done":
                assert ran[op] == 1, f"trial {trial}: {op} had a recorded result but ran {ran[op]} times"
            elif tools_at_kill.get(key) == "started":
                assert ran[op] in (1, 2), f"trial {trial}: {op} ran {ran[op]} times"
            else:
                assert ran[op] == 1, f"trial {trial}: {op} ran {ran[op]} times"

    print(f"\n{trial} trials, a run takes {run_s * 1000:.0f} ms: {dict(sorted(outcomes.items()))}")
    assert outcomes["killed mid-run"] >= TRIALS, outcomes  # 50 kills landed inside a run
    assert outcomes["tool call left started"] >= 3, outcomes  # and some inside a tool call


def test_non_idempotent_call_killed_mid_flight_is_not_rerun_and_the_run_stops(tmp_path, server):
    db, effects, executions = tmp_path / "journal.db", tmp_path / "effects", tmp_path / "exec"
    reply = server.trial(db=str(db), run_id="r", effects=str(effects), executions=str(executions),
                         delay_s=0.0, variant="non_idempotent")
    assert reply["killed"] and reply["error"] is None
    status, tools, _ = journal_state(db, "r")
    assert status == "running" and tools == {"1": "started"}

    with SQLiteStore(db) as store:
        trace = resume("r", work.StepPolicy(), work.registry(effects, executions, idempotent=False),
                       store=store)
        assert store.load_run("r").status == "blocked"
    assert executions.read_text().splitlines() == ["op-1"]  # not run again
    assert trace.stopped_reason == "error"
    assert trace.steps[-1].error == (
        "append_line was started before the run stopped but its result was not recorded; it is "
        "not idempotent, so it was not run again. Check whether it took effect, then settle it "
        "(store.settle or `loopwright runs settle`), resume with rerun_unfinished=True, or finish "
        "the run by hand."
    )


MODES = ["react", "rewoo", "plan_execute"]
KILLS = {"sqlite": 54, "postgres": 15}  # kills that land inside a run, over the three modes


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_payment_runs_killed_at_random_points_in_every_mode_finish_with_each_payment_once(
    kind, tmp_path, server, request
):
    if kind == "postgres":
        pg = request.getfixturevalue("pg_server")
        db, ledger_at = pg.dsn(pg.new_schema()), pg.dsn(pg.new_schema())
    else:
        db, ledger_at = str(tmp_path / "journal.db"), str(tmp_path / "payments.db")
    open_store(db).close()  # the journal exists before the first child opens it
    ledger = pay.Ledger(ledger_at)
    invoices = sorted(f"inv-{k}" for k in range(1, pay.PAYMENTS + 1))
    run_s = {}
    for mode in MODES:  # how long an uninterrupted run takes here
        cal = server.trial(workload="payments", db=db, run_id=f"calibrate-{mode}", mode=mode,
                           ledger=ledger_at, delay_s=None)
        assert not cal["killed"] and cal["error"] is None, cal
        assert ledger.invoices(f"calibrate-{mode}") == invoices
        run_s[mode] = cal["elapsed_s"]

    rng = random.Random(SEED)
    outcomes: Counter[str] = Counter()
    per_mode = KILLS[kind] // len(MODES)
    for mode in MODES:
        killed = trial = 0
        while killed < per_mode and trial < 3 * per_mode:
            trial += 1
            run_id = f"{mode}-{trial}"
            reply = server.trial(workload="payments", db=db, run_id=run_id, mode=mode, ledger=ledger_at,
                                 delay_s=rng.uniform(0, 0.9 * run_s[mode]))
            assert reply["error"] is None, reply
            with open_store(db) as store:
                status = store.load_run(run_id).status
                killed += status == "running"
                outcomes[f"{mode}: killed mid-run" if status == "running" else f"{mode}: ended first"] += 1
                outcomes["payment left in doubt"] += len(store.unsettled(run_id))
                trace = lw.resume(run_id, pay.PaymentsPolicy(mode), pay.registry(ledger), store=store)
                record, unsettled = store.load_run(run_id), store.unsettled(run_id)
            assert (record.status, trace.final_answer, unsettled) == ("finished", pay.final_answer(mode), []), \
                f"{run_id}: {record.status} {trace.stopped_reason} {trace.steps[-1:]}"
            assert ledger.invoices(run_id) == invoices, f"{run_id}: every payment exactly once"
        assert killed >= per_mode, (mode, outcomes)
    print(f"\n{kind}: runs take {', '.join(f'{m} {s * 1000:.0f} ms' for m, s in run_s.items())}: "
          f"{dict(sorted(outcomes.items()))}")
    with open_store(db) as store:
        assert store.list_runs(status="blocked") == []  # zero runs left needing a person
    assert outcomes["payment left in doubt"] >= 2, outcomes  # some kills landed inside a payment
