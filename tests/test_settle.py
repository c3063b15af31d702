"""Settling a call left in doubt by a crash: the journal lists it, a person records its
outcome, and resume goes on as if the tool had returned it. On SQLite and Postgres."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import loopwright as lw
from conftest import STORE_KINDS, act, final, open_journal
from helpers.durable import comparable
from loopwright.interfaces.runs import runs_main

SCRIPT = [act("charge", '{"amount": 30}', "pay"), final("paid 30")]


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path):
    with open_journal(request.param, request, tmp_path / "runs.db") as s:
        yield s


def ledger_tools(ledger: list[int], crash: dict[str, bool]) -> lw.ToolRegistry:
    @lw.tool(side_effects="write")
    def charge(amount: int) -> str:
        """Charge the card (not idempotent)."""
        ledger.append(amount)
        if crash.get("now"):
            crash["now"] = False
            raise SystemExit("killed after the charge, before its result was recorded")
        return f"charged {amount}"

    return lw.ToolRegistry([charge])


def blocked_run(store, ledger: list[int]) -> lw.Trace:
    """A run killed inside its charge, then resumed: it stops blocked on that call."""
    with pytest.raises(SystemExit):
        lw.run("pay 30", lw.ScriptedPolicy(SCRIPT), ledger_tools(ledger, {"now": True}), store=store, run_id="r")
    blocked = lw.resume("r", lw.ScriptedPolicy([]), ledger_tools(ledger, {}), store=store)
    assert blocked.stopped_reason == "error" and store.load_run("r").status == "blocked"
    return blocked


def test_unsettled_lists_the_started_call_with_its_tool_args_and_keys(store):
    ledger: list[int] = []
    blocked_run(store, ledger)
    [call] = store.unsettled("r")
    assert (call.run_id, call.key, call.tool, call.args, call.attempts) == ("r", "1", "charge", {"amount": 30}, 1)
    assert call.call_key == "r:1"


def test_blocked_run_settled_with_a_result_resumes_to_the_same_answer_with_the_charge_once(store, tmp_path):
    ledger: list[int] = []
    blocked_run(store, ledger)
    store.settle("r", "1", result="charged 30")  # a person saw the charge in the ledger
    assert store.unsettled("r") == []
    policy = lw.ScriptedPolicy(SCRIPT[1:])
    trace = lw.resume("r", policy, ledger_tools(ledger, {}), store=store)
    reference = lw.run("pay 30", lw.ScriptedPolicy(SCRIPT), ledger_tools([], {}))
    assert comparable(trace) == comparable(reference)
    assert trace.final_answer == "paid 30" and ledger == [30]  # the side effect once
    assert trace.steps[0].observation == "charged 30" and trace.steps[0].meta["replayed"] is True
    assert policy.calls == 1 and store.load_run("r").status == "finished"


def test_a_settled_result_is_data_the_model_reads_as_the_tool_rendered_it(store):
    blocked_run(store, [])
    store.settle("r", "1", result={"receipt": "rc-7", "amount": 30})
    policy = lw.ScriptedPolicy(SCRIPT[1:])
    trace = lw.resume("r", policy, ledger_tools([], {}), store=store)
    assert trace.steps[0].observation == '{"receipt": "rc-7", "amount": 30}'
    assert '{"receipt": "rc-7", "amount": 30}' in policy.prompts[-1]


def test_blocked_run_settled_with_an_error_shows_the_model_that_error(store):
    ledger: list[int] = []
    blocked_run(store, ledger)
    store.settle("r", "1", error="card declined (checked with the bank)")
    policy = lw.ScriptedPolicy([final("could not pay")])
    trace = lw.resume("r", policy, ledger_tools(ledger, {}), store=store)
    assert trace.final_answer == "could not pay" and ledger == [30]
    step = trace.steps[0]
    assert step.error == "card declined (checked with the bank)"
    assert step.observation == "ERROR[charge]: card declined (checked with the bank)"
    assert "ERROR[charge]: card declined (checked with the bank)" in policy.prompts[-1]


def test_settling_twice_or_a_recorded_call_or_an_unknown_key_is_a_store_error(store):
    blocked_run(store, [])
    with pytest.raises(lw.StoreError, match="exactly one of result"):
        store.settle("r", "1")
    with pytest.raises(lw.StoreError, match="exactly one of result"):
        store.settle("r", "1", result=1, error="x")
    with pytest.raises(lw.StoreError, match=r"'9' is not a tool call of the run.*waiting to be settled: \['1'\]"):
        store.settle("r", "9", result=1)
    with pytest.raises(lw.StoreError, match="no run 'ghost'"):
        store.settle("ghost", "1", result=1)
    store.settle("r", "1", result="charged 30")
    with pytest.raises(lw.StoreError, match="'1' was settled already.*nothing was changed"):
        store.settle("r", "1", error="declined")
    assert store.trace("r").steps  # unchanged by the refusals
    lw.resume("r", lw.ScriptedPolicy(SCRIPT[1:]), ledger_tools([], {}), store=store)
    lw.run("again", lw.ScriptedPolicy(SCRIPT), ledger_tools([], {}), store=store, run_id="ok")
    with pytest.raises(lw.StoreError, match="'1' has a recorded result already"):
        store.settle("ok", "1", result="charged 30")


def test_settling_a_run_another_live_worker_holds_is_refused(store):
    blocked_run(store, [])
    store._execute("UPDATE runs SET lease_owner = ?, lease_expires = ? WHERE id = 'r'",
                   ("elsewhere.example:4242:beef", 4e9))
    with pytest.raises(lw.StoreError, match="running in another worker.*nothing was changed"):
        store.settle("r", "1", result="charged 30")
    assert [c.key for c in store.unsettled("r")] == ["1"]


def test_cli_shows_unsettled_calls_and_settles_one(tmp_path, capsys):
    db = tmp_path / "runs.db"
    with lw.SQLiteStore(db) as store:
        blocked_run(store, [])
    assert runs_main(["show", "r", "--db", str(db)]) == 0
    shown = capsys.readouterr().out
    assert "Calls started and never recorded" in shown
    assert '1  charge({"amount": 30})  attempts 1  call key r:1' in shown
    assert runs_main(["settle", "r", "1", "--result", json.dumps("charged 30"), "--db", str(db)]) == 0
    assert "settled 1 of run r" in capsys.readouterr().out
    assert runs_main(["settle", "r", "1", "--error", "no", "--db", str(db)]) == 2
    assert "was settled already" in capsys.readouterr().err
    with lw.SQLiteStore(db) as store:
        trace = lw.resume("r", lw.ScriptedPolicy(SCRIPT[1:]), ledger_tools([], {}), store=store)
    assert trace.final_answer == "paid 30" and trace.steps[0].observation == "charged 30"


def test_cli_settle_needs_exactly_one_outcome(tmp_path, capsys):
    db = tmp_path / "runs.db"
    with lw.SQLiteStore(db) as store:
        blocked_run(store, [])
    with pytest.raises(SystemExit):
        runs_main(["settle", "r", "1", "--db", str(db)])
    with pytest.raises(SystemExit):
        runs_main(["settle", "r", "1", "--result", "1", "--error", "x", "--db", str(db)])
    assert "one of the arguments --result --error --rerun is required" in capsys.readouterr().err
