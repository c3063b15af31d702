"""DBOS queues: DBOSAgent.enqueue and run_many in the app, and `loopwright worker`
processes serving a queue that a separate process (`loopwright batch --dbos`, a
DBOSClient) fills; one worker SIGKILLed inside a tool and relaunched under its executor id.
On a real DBOS: a SQLite system database in tmp_path, PostgreSQL (the suite's server) slow."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos")

from dbos import DBOS

from loopwright.durable import dbos as lwdbos
from loopwright.durable.base import task_run_id
from loopwright.errors import EngineError

HELPERS = Path(__file__).parent / "helpers"
SRC = str(Path(lwdbos.__file__).resolve().parents[2])
AGENTS = "helpers.dbos_queue_agents"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")


def env(ledger: Path, worker: str = "-") -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, str(HELPERS.parent)]),
            "LW_QUEUE_LEDGER": str(ledger), "LW_WORKER": worker}


def paid(ledger: Path) -> Counter[str]:
    """How many times each invoice was paid (the ledger's lines)."""
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    return Counter(line.split()[1] for line in lines)


# -- in the app ---------------------------------------------------------------------------


@pytest.fixture
def app(tmp_path, monkeypatch) -> Iterator[Path]:
    """DBOS launched here with the queue `q`; the ledger path the agent writes to."""
    from helpers import dbos_queue_agents  # noqa: F401  (its DBOSAgent is registered before launch)

    ledger = tmp_path / "ledger"
    monkeypatch.setenv("LW_QUEUE_LEDGER", str(ledger))
    DBOS(config={"name": "lwqueue", "system_database_url": f"sqlite:///{tmp_path / 'dbos.sqlite'}",
                 "application_version": "1", "log_level": "ERROR"})
    DBOS.launch()
    DBOS.register_queue("q", worker_concurrency=3, polling_interval_sec=0.05)
    yield ledger
    DBOS.destroy()


def test_run_many_enqueues_every_task_and_returns_the_traces_in_input_order(app):
    from helpers.dbos_queue_agents import PAYER

    tasks = [f"pay invoice {i}" for i in range(6)]
    traces = PAYER.run_many(tasks, queue="q", batch_id="b")
    assert [t.final_answer for t in traces] == [f"paid inv-{i}" for i in range(6)]
    assert [t.run_id for t in traces] == [task_run_id(i, task, "b") for i, task in enumerate(tasks)]
    assert {DBOS.get_workflow_status(t.run_id).queue_name for t in traces if t.run_id} == {"q"}
    again = PAYER.run_many(tasks, queue="q", batch_id="b")  # the same runs, not new ones
    assert [t.to_dict() for t in again] == [t.to_dict() for t in traces]
    assert paid(app) == Counter(f"inv-{i}" for i in range(6))


def test_enqueuing_on_a_queue_nobody_registered_is_a_typed_error(app, tmp_path):
    from helpers.dbos_queue_agents import PAYER

    with pytest.raises(EngineError, match=r"no DBOS queue named 'nope'.*DBOS.register_queue\('nope'"):
        PAYER.enqueue("pay invoice 1", queue="nope")
    from dbos import DBOSClient

    client = DBOSClient(system_database_url=f"sqlite:///{tmp_path / 'dbos.sqlite'}")
    try:
        with pytest.raises(EngineError, match=r"no DBOS queue named 'nope'.*loopwright worker --queue nope"):
            lwdbos.enqueue(client, "queue-payer", "pay invoice 1", queue="nope")
        run_id = lwdbos.enqueue(client, "queue-payer", "pay invoice 7", queue="q", run_id="from-a-client")
        assert run_id == "from-a-client"
        assert lwdbos.wait(run_id, client=client).final_answer == "paid inv-7"
    finally:
        client.destroy()


def test_enqueuing_before_dbos_is_launched_says_so():
    from helpers.dbos_queue_agents import PAYER

    with pytest.raises(EngineError, match=r"DBOS is not launched.*DBOS.launch\(\)"):
        PAYER.enqueue("pay invoice 1", queue="q")
    with pytest.raises(TypeError, match="task must be a str"):
        PAYER.enqueue(3, queue="q")  # type: ignore[arg-type]


# -- worker processes ----------------------------------------------------------------------


class Worker:
    """A `loopwright worker` process, started and waited for until it serves the queue."""

    def __init__(self, db: str, executor: str, ledger: Path, tmp_path: Path, concurrency: int = 2) -> None:
        self.executor = executor
        self.log = tmp_path / f"{executor}.{time.monotonic_ns()}.err"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "loopwright", "worker", "--dbos", db, "--agents", AGENTS, "--executor-id",
             executor, "--app-version", "1", "--queue", "q", "--concurrency", str(concurrency),
             "--polling-interval-s", "0.05"],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"), env=env(ledger, executor), cwd=tmp_path)
        deadline = time.monotonic() + 120
        while "serving queue 'q'" not in self.log.read_text():
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the worker never said it serves the queue"
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM: the worker destroys DBOS and exits 0."""
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=60) == 0, self.log.read_text()[-3000:]
        assert self.log.read_text().rstrip().endswith(f"loopwright worker {self.executor}: stopped")


def open_calls(ledger: Path, worker: str) -> set[str]:
    """The call keys `worker` is inside the tool for now (entered, not left)."""
    entered = Path(f"{ledger}.entered")
    inside: set[str] = set()
    for line in entered.read_text().splitlines() if entered.exists() else []:
        what, who, key = line.split()
        if who == worker:
            (inside.add if what == "enter" else inside.discard)(key)
    return inside


def queue_trial(db: str, tmp_path: Path, runs: int = 20) -> dict[str, Any]:
    """Two workers on queue q; `runs` tasks enqueued by `loopwright batch --dbos` in another
    process; w1 SIGKILLed inside the tool after its payment, then relaunched under its
    executor id. Every run's result comes back in order, each invoice paid once."""
    ledger = tmp_path / "ledger"
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(f"pay invoice {i}") + "\n" for i in range(runs)))
    hold = Path(f"{ledger}.hold-w1")
    hold.touch()  # w1 waits inside the tool, after the payment, until it is killed
    w1, w2 = Worker(db, "w1", ledger, tmp_path), Worker(db, "w2", ledger, tmp_path)
    batch = subprocess.Popen(
        [sys.executable, "-m", "loopwright", "batch", str(tasks), "--out", str(tmp_path / "results.jsonl"),
         "--dbos", db, "--queue", "q", "--agent", "queue-payer", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(ledger), cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not open_calls(ledger, "w1"):
        assert time.monotonic() < deadline and batch.poll() is None, "w1 never entered the tool"
        time.sleep(0.01)
    w1.proc.kill()
    assert w1.proc.wait(timeout=30) == -signal.SIGKILL
    killed_in = open_calls(ledger, "w1")
    hold.unlink()
    w1 = Worker(db, "w1", ledger, tmp_path)  # recovers what the dead w1 left PENDING
    out, err = batch.communicate(timeout=300)
    w1.stop()
    w2.stop()
    assert batch.returncode == 0, err[-3000:]
    results = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["final_answer"] for r in results] == [f"paid inv-{i}" for i in range(runs)]
    assert [r["run_id"] for r in results] == [task_run_id(i, f"pay invoice {i}") for i in range(runs)]
    assert paid(ledger) == Counter(f"inv-{i}" for i in range(runs)), "an invoice paid twice, or not at all"
    entries = [line.split() for line in Path(f"{ledger}.entered").read_text().splitlines()]
    entered = Counter(key for what, _, key in entries if what == "enter")
    assert all(entered[key] == 2 for key in killed_in), (killed_in, entered)  # the recovered call ran again
    return {"killed_in": killed_in, "by": Counter(who for what, who, _ in entries if what == "exit")}


def test_two_workers_one_killed_in_a_tool_and_relaunched_finish_every_run_once_in_order(tmp_path):
    outcome = queue_trial(f"sqlite:///{tmp_path / 'dbos.sqlite'}", tmp_path)
    assert outcome["by"]["w1"] >= 1 and outcome["by"]["w2"] >= 1, outcome  # both served the queue


@pytest.mark.slow
def test_two_workers_on_a_postgresql_queue_one_killed_finish_every_run_once(tmp_path, pg_server):
    import psycopg

    name = f"dbosq_{os.getpid()}_{random.randrange(10**6)}"
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    outcome = queue_trial(f"postgresql+psycopg:///{name}?host={pg_server.root}&user={pg_server.user}", tmp_path)
    assert outcome["by"]["w1"] >= 1 and outcome["by"]["w2"] >= 1, outcome


def test_an_agent_module_that_makes_no_dbos_agent_is_refused_at_worker_start(tmp_path):
    out = subprocess.run([sys.executable, "-m", "loopwright", "worker", "--dbos", f"sqlite:///{tmp_path / 'd.sqlite'}",
                          "--agents", "json", "--executor-id", "w", "--app-version", "1"],
                         capture_output=True, text=True, env=env(tmp_path / "ledger"), timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip() == ("loopwright worker: error: --agents json: importing it made no DBOSAgent (a worker "
                                  "serves the DBOSAgents its modules make when imported, or name one with "
                                  "MODULE:ATTR)")

