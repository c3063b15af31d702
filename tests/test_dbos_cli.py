"""The command line on DBOS, driven in subprocesses on a real DBOS SQLite system database:
`loopwright runs list/show/export/settle --dbos` and `loopwright view --dbos` read runs
executed under DBOS (a run killed mid-way, stopped in doubt, settled, finished), and bad
input to `worker`, `batch --dbos` and `runs --dbos` is one line on stderr, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos")

from helpers import payments_workload as payments
from loopwright.durable import dbos as lwdbos
from loopwright.trace import Trace

HELPERS = Path(__file__).parent / "helpers"
SRC = str(Path(lwdbos.__file__).resolve().parents[2])

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, str(HELPERS.parent)])}


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loopwright", *args], capture_output=True, text=True, env=env(),
                          cwd=cwd, timeout=120)


def worker(**request: Any) -> dict[str, Any] | None:
    """helpers/dbos_worker.py run to its end: its JSON reply, or None when it was killed."""
    out = subprocess.run([sys.executable, str(HELPERS / "dbos_worker.py"), json.dumps(request)],
                         capture_output=True, text=True, env=env(), timeout=120)
    if out.returncode == -9:
        return None
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def row(listing: str, run_id: str) -> list[str]:
    [line] = [line for line in listing.splitlines() if line.startswith(run_id + " ")]
    return line.split()


def test_runs_list_show_settle_export_and_view_follow_a_dbos_run_from_killed_to_finished(tmp_path):
    db = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    request = dict(db=db, mode="react", run_id="pay-1", ledger=str(tmp_path / "ledger"), keyed=False)
    assert worker(**request, kill=["tool", 2]) is None  # killed inside its second payment

    listed = cli("runs", "list", "--dbos", db, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert row(listed.stdout, "pay-1")[1:4] == ["payer", "PENDING", "5"]  # model, start, result, model, start
    assert listed.stdout.splitlines()[0].split()[:4] == ["ID", "AGENT", "STATUS", "STEPS"]
    shown = cli("runs", "show", "pay-1", "--dbos", db, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "(not ended: rebuilt from its step records)" in shown.stdout
    assert 'pay({"invoice": "inv-2", "amount": 20}) !! started; no result recorded yet' in shown.stdout
    assert "receipt inv-1" in shown.stdout

    reply = worker(**request)  # the relaunch stops in doubt at the payment that was killed
    assert reply is not None and reply["unsettled"] == ["2"], reply
    listed = cli("runs", "list", "--dbos", db, cwd=tmp_path)
    assert row(listed.stdout, "pay-1")[2:4] == ["IN", "DOUBT"]
    shown = cli("runs", "show", "pay-1", "--dbos", db, cwd=tmp_path)
    assert "Calls in doubt" in shown.stdout and "  2  pay(" in shown.stdout and "call key pay-1:2" in shown.stdout
    assert "loopwright.durable.dbos.settle('pay-1', '2', result=... | error=... | rerun=True)" in shown.stdout

    settled = cli("runs", "settle", "pay-1", "2", "--result", "receipt inv-2", "--dbos", db, cwd=tmp_path)
    assert settled.returncode == 0, settled.stderr
    assert settled.stdout.startswith("settled 2 of run pay-1")

    reply = worker(**request)
    assert reply is not None and reply["final_answer"] == payments.final_answer("react"), reply
    again = cli("runs", "settle", "pay-1", "2", "--rerun", "--dbos", db, cwd=tmp_path)
    assert again.returncode == 2
    assert again.stderr == "loopwright runs: run 'pay-1': call '2' is done, not waiting to be settled; " \
                           "`unsettled(run_id)` lists the calls in doubt\n"
    exported = cli("runs", "export", "pay-1", "--dbos", db, cwd=tmp_path)
    trace = Trace.from_json(exported.stdout)
    assert trace.final_answer == payments.final_answer("react") and trace.run_id == "pay-1"
    assert [s.tool for s in trace.steps if s.tool] == ["pay"] * payments.PAYMENTS
    viewed = cli("view", "pay-1", "--dbos", db, "--out", str(tmp_path / "pay-1.html"), cwd=tmp_path)
    assert viewed.returncode == 0, viewed.stderr
    assert payments.final_answer("react") in (tmp_path / "pay-1.html").read_text()
    assert row(cli("runs", "list", "--dbos", db, cwd=tmp_path).stdout, "pay-1")[2] == "SUCCESS"
    paid = sorted(line.split()[1] for line in (tmp_path / "ledger").read_text().splitlines())
    assert paid == [f"inv-{k}" for k in range(1, payments.PAYMENTS + 1)]


@pytest.mark.parametrize("args, message", [
    (["worker", "--dbos", "mysql://db", "--agents", "x", "--executor-id", "w", "--app-version", "1"],
     "loopwright worker: error: --dbos takes a system database URL, sqlite:///PATH or postgresql://USER@HOST/DB, "
     "got 'mysql://db'"),
    (["worker", "--dbos", "sqlite:///{tmp}/d.sqlite", "--agents", "no_such_agents", "--executor-id", "w",
      "--app-version", "1"], "loopwright worker: error: cannot import 'no_such_agents' for --agents no_such_agents"),
    (["worker", "--dbos", "sqlite:///{tmp}/d.sqlite", "--agents", "helpers.dbos_queue_agents:policy",
      "--executor-id", "w", "--app-version", "1"],
     "loopwright worker: error: --agents helpers.dbos_queue_agents:policy: expected a DBOSAgent (or a list of them), "
     "got function"),
    (["worker", "--dbos", "postgresql://nobody@127.0.0.1:1/nodb", "--agents", "helpers.dbos_queue_agents",
      "--executor-id", "w", "--app-version", "1"],
     "loopwright worker: error: cannot launch DBOS on postgresql://nobody@127.0.0.1:1/nodb: "),
    (["worker", "--dbos", "sqlite:///{tmp}/d.sqlite", "--agents", "helpers.dbos_queue_agents"],
     "loopwright worker: error: the following arguments are required: --executor-id, --app-version"),
    (["batch", "{tmp}/tasks.jsonl", "--out", "{tmp}/r.jsonl", "--dbos", "{db}", "--queue",
      "nope", "--agent", "payer"],
     "loopwright batch: error: no DBOS queue named 'nope' in this system database; a worker registers it"),
    (["batch", "{tmp}/tasks.jsonl", "--out", "{tmp}/r.jsonl", "--dbos", "{db}"],
     "loopwright batch: error: --dbos needs --queue NAME"),
    (["batch", "{tmp}/tasks.jsonl", "--out", "{tmp}/r.jsonl", "--dbos", "sqlite:///{tmp}/missing.sqlite", "--queue",
      "q", "--agent", "payer"], "loopwright batch: error: no DBOS system database at {tmp}/missing.sqlite"),
    (["batch", "{tmp}/tasks.jsonl", "--out", "{tmp}/r.jsonl", "--dbos", "{db}", "--queue",
      "q", "--agent", "payer", "--policy", "m:p"], "loopwright batch: error: --dbos runs each task on the workers' "
     "agent 'payer', so --policy has no use here"),
    (["runs", "show", "nope", "--dbos", "{db}"],
     "loopwright runs: no loopwright run 'nope' in this DBOS system database"),
    (["runs", "resume", "x", "--dbos", "{db}"],
     "loopwright runs: runs under DBOS are not resumed from here: a worker relaunched"),
    (["runs", "settle", "x", "1", "--rerun", "--db", "{tmp}/j.db"],
     "loopwright runs: --rerun settles a run under DBOS (with --dbos)"),
    (["view", "nope", "--dbos", "{db}"],
     "loopwright view: no loopwright run 'nope' in this DBOS system database"),
])
def test_bad_input_is_one_line_on_stderr_and_exit_2(tmp_path, system_db, args, message):
    (tmp_path / "tasks.jsonl").write_text('"pay invoice 1"\n')
    out = cli(*[a.replace("{tmp}", str(tmp_path)).replace("{db}", system_db) for a in args], cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.startswith(message.replace("{tmp}", str(tmp_path))), out.stderr


@pytest.fixture(scope="module")
def system_db(tmp_path_factory) -> str:
    """A system database with one finished run, as a worker leaves it."""
    folder = tmp_path_factory.mktemp("dbos")
    db = f"sqlite:///{folder / 'dbos.sqlite'}"
    assert worker(db=db, mode="react", run_id="r", ledger=str(folder / "ledger"), keyed=True) is not None
    return db
