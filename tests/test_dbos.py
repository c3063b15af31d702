"""loopwright.durable.dbos: runs as DBOS workflows on a real DBOS (SQLite system database
in tmp_path; PostgreSQL for the slow trial). DBOS is one per process, so each in-process
test launches its own on its own file and destroys it; the crash and approval trials run
workers (helpers/dbos_worker.py) that are SIGKILLed and relaunched, and answer them from
this process with a DBOSClient."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos")

from dbos import DBOS, DBOSClient

import loopwright as lw
from helpers import payments_workload as payments
from helpers.durable import comparable
from loopwright.durable import dbos as lwdbos
from loopwright.errors import EngineError

HELPERS = Path(__file__).parent / "helpers"
MODES = ["react", "rewoo", "plan_execute"]
SRC = str(Path(lwdbos.__file__).resolve().parents[2])

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")


# -- agents registered at import, as an application module does -------------------------

LEDGER: list[str] = []


@lw.tool(side_effects="write")
def charge(invoice: str) -> str:
    """Charge an invoice."""
    LEDGER.append(invoice)
    return f"charged {invoice}"


@lw.tool(side_effects="read")
def lookup(n: int) -> str:
    """Look a number up."""
    return f"value {n} " + "x" * 40


class Steps:
    """ReAct: `lookup` n times, then the answer (answers from the prompt, so a replay and a
    live run get the same)."""

    def __init__(self, n: int) -> None:
        self.n, self.calls = n, 0

    def __call__(self, prompt: str) -> str:
        self.calls += 1
        done = prompt.count("Observation:")
        if done >= self.n:
            return "Thought: done\nFinal Answer: looked up"
        return f'Thought: next\nAction: lookup\nAction Input: {{"n": {done + 1}}}'


MODEL_CALLS: Counter[str] = Counter()


def charger(mode: str) -> lw.Agent:
    def policy(prompt: str) -> str:
        MODEL_CALLS[mode] += 1
        if mode == "react":
            if "charged inv-2" in prompt:
                return "Thought: done\nFinal Answer: charged"
            k = 2 if "charged inv-1" in prompt else 1
            return f'Thought: charge\nAction: charge\nAction Input: {{"invoice": "inv-{k}"}}'
        if mode == "rewoo" and "charged inv-" in prompt:
            return "Final Answer: charged"
        return json.dumps({"plan": [{"id": f"E{k}", "tool": "charge", "args": {"invoice": f"inv-{k}"}}
                                    for k in (1, 2)]})

    return lw.Agent(f"charger-{mode}", policy, [charge], mode=mode)


CHARGERS = {mode: lwdbos.DBOSAgent(charger(mode)) for mode in MODES}
STEPPERS: dict[int, tuple[Steps, lwdbos.DBOSAgent]] = {}
for _n in (50, 200):
    _policy = Steps(_n)
    STEPPERS[_n] = (_policy, lwdbos.DBOSAgent(lw.Agent(f"stepper-{_n}", _policy, [lookup], max_steps=_n + 2)))
CHILD = lwdbos.DBOSAgent(lw.Agent("child", lambda p: "Thought: easy\nFinal Answer: 42", [lookup]))
PARENT = lwdbos.DBOSAgent(lw.Agent("parent", lambda p: (
    "Thought: done\nFinal Answer: the child said 42" if "42" in p.split("Question:")[-1] else
    'Thought: ask\nAction: child\nAction Input: {"task": "what is six times seven?"}'), [CHILD.as_tool()]))

LOOPER = lwdbos.DBOSAgent(lw.Agent("looper", lambda p: (
    f'Thought: more\nAction: lookup\nAction Input: {{"n": {p.count("Observation:") + 1}}}'), [lookup],
    max_steps=40))
BUDGETED = lwdbos.DBOSAgent(lw.Agent("budgeted", lambda p: (
    "Thought: done\nFinal Answer: gave up" if "Observation:" in p.split("Question:")[-1] else
    'Thought: ask\nAction: looper\nAction Input: {"task": "look everything up"}'), [LOOPER.as_tool()],
    token_budget=3000, timeout_s=600))


@lw.tool(side_effects="write")
def unsure(invoice: str) -> str:
    """Pay an invoice with a provider that may time out."""
    LEDGER.append(invoice)
    if len(LEDGER) == 1:
        raise lw.ToolError("unsure", "the provider timed out after taking the request", "in_doubt")
    return f"paid {invoice}"


DOUBTER = lwdbos.DBOSAgent(lw.Agent("doubter", lambda p: (
    "Thought: done\nFinal Answer: paid" if "Observation:" in p else
    'Thought: pay\nAction: unsure\nAction Input: {"invoice": "inv-1"}'), [unsure]))


@pytest.fixture
def launched(tmp_path) -> Iterator[str]:
    """DBOS launched on a system database of this test's own; destroyed after it."""
    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    DBOS(config={"name": "lwtest", "system_database_url": url, "application_version": "1",
                 "log_level": "ERROR"})
    DBOS.launch()
    LEDGER.clear()
    yield url
    DBOS.destroy()


# -- in one process -----------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_run_in_any_mode_is_a_workflow_whose_steps_are_its_records(launched, mode):
    agent = CHARGERS[mode]
    trace = agent.run("Charge invoices 1 and 2.", run_id=f"run-{mode}")
    assert trace.answered and trace.run_id == f"run-{mode}"
    assert LEDGER == ["inv-1", "inv-2"]
    kinds = [op.kind for op in lwdbos.recorded_ops(f"run-{mode}")]
    assert kinds.count("tool_start") == 2 and kinds.count("tool") == 2 and "model" in kinds
    assert set(kinds) <= {"model", "tool_start", "tool"}
    again = agent.run("Charge invoices 1 and 2.", run_id=f"run-{mode}")  # the same run, not another
    assert again.to_dict() == trace.to_dict() and LEDGER == ["inv-1", "inv-2"]


@pytest.mark.parametrize("mode", MODES)
def test_a_workflow_executed_again_replays_its_records_without_calling_the_model_or_the_tool(launched, mode):
    first = CHARGERS[mode].run("Charge invoices 1 and 2.", run_id=f"once-{mode}")
    steps = len(lwdbos.recorded_ops(f"once-{mode}"))
    calls = MODEL_CALLS[mode]
    # the whole workflow run again on a copy of its records, as a recovery runs it
    replayed = lwdbos.DBOSRun("copy", DBOS.fork_workflow(f"once-{mode}", steps + 1)).result()
    assert MODEL_CALLS[mode] == calls and LEDGER == ["inv-1", "inv-2"]
    assert comparable(replayed) == comparable(first)


def test_each_step_output_holds_only_its_delta_so_the_system_database_grows_linearly(launched):
    per_step = {}
    for n in (50, 200):
        trace = STEPPERS[n][1].run("look them up", run_id=f"steps-{n}")
        assert trace.answered and len(trace.steps) == n + 1
        per_step[n] = run_bytes(launched, f"steps-{n}") / n
    ops = lwdbos.recorded_ops("steps-200")
    prompts = [op.payload["prompt"] for op in ops if op.kind == "model"]
    assert all("look them up" not in p for p in prompts[1:])  # the question is in the first prompt only
    assert per_step[200] < 1.25 * per_step[50], per_step  # whole histories would grow it about 4x


def run_bytes(url: str, run_id: str) -> int:
    """The bytes a run holds in the system database: its step outputs, input and output."""
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        steps = conn.execute("SELECT coalesce(sum(length(output)), 0) + coalesce(sum(length(function_name)), 0) "
                             "FROM operation_outputs WHERE workflow_uuid = ?", (run_id,)).fetchone()[0]
        rest = conn.execute("SELECT coalesce(sum(length(inputs)), 0) FROM workflow_input WHERE workflow_uuid = ?",
                            (run_id,)).fetchone()[0]
        out = conn.execute("SELECT coalesce(sum(length(output)), 0) FROM workflow_output WHERE workflow_uuid = ?",
                           (run_id,)).fetchone()[0]
    return int(steps + rest + out)


def test_a_child_agent_runs_as_its_own_workflow_named_by_the_parent_run_and_call_key(launched):
    trace = PARENT.run("ask the child", run_id="family")
    assert trace.final_answer == "the child said 42"
    assert list(trace.children) == ["family:1"]
    assert trace.steps[0].meta["child_run_id"] == "family:1"
    child = lwdbos.DBOSRun("family:1", DBOS.retrieve_workflow("family:1")).result()
    assert child.final_answer == "42" and child.run_id == "family:1"


def test_the_run_events_reach_the_sinks_of_the_process_that_runs_it(launched):
    events: list[Any] = []
    trace = CHARGERS["react"].run("Charge invoices 1 and 2.", run_id="watched", sinks=[events.append])
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunFinished", kinds
    assert sum(k == "StepEvent" for k in kinds) == len(trace.steps)


def test_a_child_agent_gets_what_is_left_of_its_parents_budgets_as_its_workflow_input(launched):
    trace = BUDGETED.run("look everything up through the looper", run_id="budget")
    child = trace.children["budget:1"]
    assert child.stopped_reason == "token_budget", child.stopped_reason  # alone it would run 40 steps
    assert trace.usage.total_tokens >= child.usage.total_tokens
    [status] = DBOS.list_workflows(workflow_ids=["budget:1"])
    assert status.input is not None
    limits = status.input["args"][1]  # a recovered child starts from the same input
    assert set(limits) == {"token_budget", "timeout_s"}
    assert 0 < limits["token_budget"] < 3000 and 0 < limits["timeout_s"] < 600


def test_a_child_agents_events_reach_its_parents_sinks_tagged_with_its_name(launched):
    events: list[Any] = []
    PARENT.run("ask the child", run_id="told", sinks=[events.append])
    child = [(type(e).__name__, e.agent) for e in events if e.run_id == "told:1"]
    assert child[0] == ("RunStarted", "child") and child[-1] == ("RunFinished", "child"), child


def test_a_run_stopped_in_doubt_says_how_to_settle_it_under_dbos_and_goes_on_once_settled(launched):
    stopped = DOUBTER.run("Pay invoice 1.", run_id="doubt")
    assert stopped.stopped_reason == "error" and LEDGER == ["inv-1"]
    assert stopped.steps[-1].error.endswith(
        "Check whether it took effect, then settle it: loopwright.durable.dbos.settle('doubt', '1', "
        "result=... | error=... | rerun=True); the run goes on from there."), stopped.steps[-1].error
    assert [c.key for c in lwdbos.unsettled("doubt")] == ["1"]
    lwdbos.settle("doubt", "1", result="paid inv-1")
    trace = DOUBTER.retrieve("doubt").result()
    assert trace.final_answer == "paid" and LEDGER == ["inv-1"]  # the tool was not run again
    assert trace.steps[0].observation == "paid inv-1"


def test_settle_refuses_a_call_that_is_not_in_doubt_and_needs_exactly_one_answer(launched):
    CHARGERS["react"].run("Charge invoices 1 and 2.", run_id="clean")
    with pytest.raises(EngineError, match="call '1' is done, not waiting to be settled"):
        lwdbos.settle("clean", "1", result="x")
    with pytest.raises(EngineError, match="call '9' was never started"):
        lwdbos.settle("clean", "9", rerun=True)
    with pytest.raises(ValueError, match="exactly one of"):
        lwdbos.settle("clean", "1", result="x", error="y")
    assert lwdbos.unsettled("clean") == []


def test_a_second_dbos_agent_of_the_same_name_or_one_with_a_store_is_a_typed_error(tmp_path):
    with pytest.raises(EngineError, match="named 'charger-react' exists already"):
        lwdbos.DBOSAgent(charger("react"))
    with pytest.raises(TypeError, match="wraps an lw.Agent"):
        lwdbos.DBOSAgent("not an agent")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="limits of a DBOS run are token_budget, .*; got max_steps"):
        CHARGERS["react"].start("Charge.", limits={"max_steps": 3})
    with pytest.raises(EngineError, match="make the Agent without store="):
        lwdbos.DBOSAgent(lw.Agent("stored", Steps(1), [lookup], store=lw.SQLiteStore(tmp_path / "j.db")))


def test_starting_a_run_before_dbos_is_launched_says_so():
    with pytest.raises(EngineError, match=r"DBOS is not launched.*DBOS.launch\(\)"):
        CHARGERS["react"].start("Charge.", run_id="early")


def test_without_the_extra_the_import_says_how_to_install_it():
    code = "import sys; sys.modules['dbos'] = None\nimport loopwright.durable.dbos"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=worker_env())
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        "ImportError: loopwright.durable.dbos needs the dbos extra (dbos is missing): pip install 'loopwright[dbos]'")


# -- workers killed and relaunched --------------------------------------------------------


def worker_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, str(HELPERS.parent)])}


def worker(**request: Any) -> dict[str, Any] | None:
    """Run a worker to its end: its JSON reply, or None when it was killed."""
    out = subprocess.run([sys.executable, str(HELPERS / "dbos_worker.py"), json.dumps(request)],
                         capture_output=True, text=True, env=worker_env(), timeout=120)
    if out.returncode == -9:
        return None
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def ledger_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def finish(db: str, client: DBOSClient, run_id: str, mode: str, ledger: Path, keyed: bool,
           outcomes: Counter[str]) -> dict[str, Any]:
    """Relaunch workers until the run ends; settle each call it stops at in doubt with what
    the ledger says happened (its receipt, or run it again when it left no line)."""
    for _ in range(6):
        reply = worker(db=db, mode=mode, run_id=run_id, ledger=str(ledger), keyed=keyed)
        assert reply is not None
        if not reply["unsettled"]:
            return reply
        [call] = lwdbos.unsettled(run_id, client=client)
        outcomes["in doubt"] += 1
        entered = ledger_lines(Path(f"{ledger}.entered"))
        assert f"{run_id}:{call.key}" in entered, f"{run_id}: in doubt at {call.key}, which never started"
        done = any(line.split()[0] == call.call_key for line in ledger_lines(ledger))
        if done:
            lwdbos.settle(run_id, call.key, result=f"receipt {call.args['invoice']}", client=client)
        else:
            lwdbos.settle(run_id, call.key, rerun=True, client=client)
    raise AssertionError(f"{run_id} did not finish")


def kill_trial(db: str, tmp_path: Path, kills: list[tuple[str, bool, list[Any]]]) -> Counter[str]:
    """Each (mode, keyed, kill): a worker killed there, relaunched until the run ends; every
    invoice paid once, in-doubt stops only where the tool started, none with a keyed tool."""
    client = DBOSClient(system_database_url=db)
    outcomes: Counter[str] = Counter()
    try:
        for i, (mode, keyed, kill) in enumerate(kills):
            run_id, ledger = f"{mode}-{i}", tmp_path / f"ledger-{i}"
            first = worker(db=db, mode=mode, run_id=run_id, ledger=str(ledger), keyed=keyed, kill=kill)
            outcomes["killed" if first is None else "ended first"] += 1
            doubts = outcomes["in doubt"]
            reply = finish(db, client, run_id, mode, ledger, keyed, outcomes)
            assert reply["final_answer"] == payments.final_answer(mode), reply
            paid = sorted(line.split()[1] for line in ledger_lines(ledger))
            assert paid == [f"inv-{k}" for k in range(1, payments.PAYMENTS + 1)], (run_id, kill, paid)
            if keyed:
                assert outcomes["in doubt"] == doubts, f"{run_id}: a keyed tool's call was left in doubt"
    finally:
        client.destroy()
    return outcomes


def test_workers_killed_in_the_model_in_the_tool_and_anywhere_finish_every_run_once_in_every_mode(tmp_path):
    db = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    # Every kill here lands whatever the machine's load (a kill on a timer may come after the
    # run ended; the slow trial below has those): inside a payment, whose unkeyed call is then
    # in doubt and settled, and, with a keyed tool, inside a model call or a payment.
    keyed = {"react": ["model", 3], "rewoo": ["tool", 3], "plan_execute": ["model", 1]}
    kills: list[tuple[str, bool, list[Any]]] = []
    for mode, paid_before in zip(MODES, (4, 1, 2), strict=True):
        kills.append((mode, False, ["tool", paid_before + 1]))
        kills.append((mode, True, keyed[mode]))
    outcomes = kill_trial(db, tmp_path, kills)
    assert outcomes == {"killed": 6, "in doubt": 3}, outcomes


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_workers_killed_at_random_points_on_sqlite_and_postgres_finish_every_run_once(kind, tmp_path, request):
    if kind == "postgres":
        import psycopg

        pg, name = request.getfixturevalue("pg_server"), f"dbos_{os.getpid()}_{random.randrange(10**6)}"
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:  # the client never creates it
            conn.execute(f"CREATE DATABASE {name}")
        db = f"postgresql+psycopg:///{name}?host={pg.root}&user={pg.user}"
    else:
        db = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    rng = random.Random(3500 + (kind == "postgres"))
    kills: list[tuple[str, bool, list[Any]]] = []
    for mode in MODES:
        for keyed in (False, True):
            where = rng.choice(["model", "tool", "timer"])
            point = rng.uniform(0.0, 0.5) if where == "timer" else rng.randint(1, 5 if where == "tool" else 2)
            kills.append((mode, keyed, [where, point]))
    outcomes = kill_trial(db, tmp_path, kills)
    landed = sum(kill[0] != "timer" for _, _, kill in kills)  # a timer may fire after the run ended
    assert outcomes["killed"] >= landed, outcomes


def test_an_approval_answered_from_another_process_after_the_worker_that_asked_restarted(tmp_path):
    db = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    ledger = tmp_path / "ledger"
    asked = worker(db=db, mode="plan_execute", run_id="approve-me", ledger=str(ledger), keyed=False,
                   approval=True, action="pending")
    assert asked is not None and len(asked["pending"]) == 1  # it asked, waits, and its worker is gone
    assert ledger_lines(ledger) == []
    client = DBOSClient(system_database_url=db)
    try:
        seen = set()
        proc = subprocess.Popen([sys.executable, str(HELPERS / "dbos_worker.py"), json.dumps(
            dict(db=db, mode="plan_execute", run_id="approve-me", ledger=str(ledger), keyed=False, approval=True))],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=worker_env())
        while proc.poll() is None:
            for request in lwdbos.pending_approvals("approve-me", client=client):
                if request.key not in seen:
                    seen.add(request.key)
                    lwdbos.approve("approve-me", request.key, True, "checked by Ann", client=client)
            time.sleep(0.05)
        out, err = proc.communicate(timeout=60)
    finally:
        client.destroy()
    assert proc.returncode == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])["final_answer"] == payments.final_answer("plan_execute")
    assert sorted(line.split()[1] for line in ledger_lines(ledger)) == [f"inv-{k}" for k in range(1, 6)]
    assert len(seen) == payments.PAYMENTS


def test_a_child_agent_killed_in_its_tool_is_recovered_with_its_parent_and_pays_once(tmp_path):
    db = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    ledger = tmp_path / "ledger"
    request = dict(db=db, mode="react", run_id="family", ledger=str(ledger), keyed=True, family=True)
    assert worker(**request, kill=["tool", 3]) is None
    assert len(ledger_lines(ledger)) == 3
    reply = worker(**request)
    assert reply is not None and reply["final_answer"] == "delegated", reply
    assert reply["children"] == ["family:1"]
    assert sorted(line.split()[1] for line in ledger_lines(ledger)) == [f"inv-{k}" for k in range(1, 6)]
    assert {line.split()[0].rsplit(":", 1)[0] for line in ledger_lines(ledger)} == {"family:1"}


@pytest.mark.slow
def test_a_child_agent_stopped_in_doubt_stops_its_parent_until_both_are_settled(tmp_path):
    db = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    ledger = tmp_path / "ledger"
    request = dict(db=db, mode="react", run_id="kin", ledger=str(ledger), keyed=False, family=True)
    assert worker(**request, kill=["tool", 2]) is None
    reply = worker(**request)
    assert reply is not None and reply["stopped_reason"] == "error" and reply["unsettled"] == ["1"], reply
    client = DBOSClient(system_database_url=db)
    try:
        [call] = lwdbos.unsettled("kin:1", client=client)
        assert call.key == "2" and call.call_key == "kin:1:2"
        lwdbos.settle("kin:1", "2", result="receipt inv-2", client=client)  # the ledger has its line
        lwdbos.settle("kin", "1", rerun=True, client=client)
    finally:
        client.destroy()
    reply = worker(**request)
    assert reply is not None and reply["final_answer"] == "delegated", reply
    assert sorted(line.split()[1] for line in ledger_lines(ledger)) == [f"inv-{k}" for k in range(1, 6)]
