"""RayExecutor against a real Ray cluster started on this machine with `ray start --head`,
and against a Ray started in-process (both slow: Ray takes seconds to start)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from helpers.batch_policies import PidAdder, adder
from loopwright.batch import task_run_id
from loopwright.interfaces.demo_tools import demo_registry

HINT = "install Ray with: scripts/install.sh --dev  (the `ray` extra: pip install 'loopwright[ray]')"
TESTS = str(Path(__file__).parent)


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        pytest.fail(f"Ray is not installed; {HINT}")
    return ray


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module", autouse=True)
def quiet_ray() -> Iterator[None]:
    """No usage reporting and no auth token written to ~/.ray: tests write only to
    temporary folders."""
    saved = {k: os.environ.get(k) for k in ENV}
    os.environ.update(ENV)
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


@pytest.fixture
def short_tmp() -> Iterator[str]:
    """Ray's socket paths must stay under 108 bytes: a short temporary folder."""
    path = tempfile.mkdtemp(prefix="lwray")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(quiet_ray: None) -> Iterator[str]:
    """`ray start --head` with 2 CPUs; the workers find the test helpers on PYTHONPATH,
    as a real cluster has the user's code installed. Stopped with `ray stop`."""
    ray = _ray()
    cli = Path(sys.executable).parent / "ray"
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="lwray")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")])}
    start = [str(cli), "start", "--head", "--port", str(port), "--num-cpus", "2",
             "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"]
    done = subprocess.run(start, env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        pytest.fail(f"ray start failed ({done.returncode}): {done.stderr[-2000:]}")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        if ray.is_initialized():
            ray.shutdown()
        subprocess.run([str(cli), "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow
def test_two_hundred_tasks_on_a_real_cluster_come_back_in_order_with_journal_and_isolation(
    cluster: str, tmp_path: Path
) -> None:
    ray = _ray()
    tasks = [f"add {i} and {i}" if i % 50 != 7 else f"fail {i} and 1" for i in range(200)]
    store = lw.SQLiteStore(tmp_path / "runs.db")
    ended: list[int] = []
    try:
        traces = lw.run_many(tasks, adder, demo_registry(), concurrency=8, store=store,
                             executor=lw.RayExecutor(address=cluster, num_workers=2),
                             progress=lambda i, t: ended.append(i))
        assert ray.is_initialized() and ray.cluster_resources()["CPU"] == 2  # it ran on the cluster
        assert sorted(ended) == list(range(200))
        assert [t.task for t in traces] == tasks
        for i, trace in enumerate(traces):
            if i % 50 == 7:
                assert trace.stopped_reason == "error"
                assert trace.steps[0].error == f"policy raised RuntimeError: cannot do 'fail {i} and 1'"
            else:
                assert (trace.final_answer, trace.llm_calls, trace.tool_calls) == (str(2 * i), 2, 1)
            assert trace.run_id == task_run_id(i, tasks[i])
        # every run is in the journal the workers wrote
        assert len(store.list_runs(status="finished")) == 200
        assert store.trace(task_run_id(3, tasks[3])).final_answer == "6"
        # a re-run reads them back from the journal: nothing runs again
        again = lw.run_many(tasks, adder, demo_registry(), concurrency=8, store=store,
                            executor=lw.RayExecutor(address=cluster, num_workers=2))
        assert all(t.meta["batch"]["journal"] == "finished" for t in again)
        assert [t.final_answer for t in again] == [t.final_answer for t in traces]
    finally:
        store.close()
        ray.shutdown()


@pytest.mark.slow
def test_a_per_worker_factory_is_made_once_per_actor(cluster: str) -> None:
    ray = _ray()
    try:
        traces = lw.run_many([f"add {i} and 1" for i in range(20)],
                             lw.policy_factory(PidAdder, per="worker"), demo_registry(),
                             concurrency=4, executor=lw.RayExecutor(address=cluster, num_workers=2))
    finally:
        ray.shutdown()
    assert [t.final_answer for t in traces] == [str(i + 1) for i in range(20)]
    pids = {trace.steps[-1].thought.split("pid=")[1] for trace in traces}
    assert len(pids) == 2  # two actors, each with its own policy made once


@pytest.mark.slow
def test_a_ray_started_in_process_runs_the_batch_too(short_tmp: str) -> None:
    ray = _ray()
    if ray.is_initialized():
        ray.shutdown()
    try:
        executor = lw.RayExecutor(num_workers=1, init_options={
            "num_cpus": 1, "include_dashboard": False, "_temp_dir": short_tmp,
            "runtime_env": {"env_vars": {"PYTHONPATH": TESTS}},
        })
        traces = lw.run_many(["add 1 and 2", "fail 1 and 1", "add 5 and 5"], adder, demo_registry(),
                             executor=executor)
    finally:
        ray.shutdown()
    assert [t.final_answer for t in traces] == ["3", None, "10"]
    assert [t.stopped_reason for t in traces] == ["final", "error", "final"]
