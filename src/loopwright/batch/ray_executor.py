"""Run a batch on a Ray cluster: `run_many(..., executor=RayExecutor(address=None))`.

Ray is an optional extra (`pip install loopwright[ray]`), imported only here. The batch
runs on `num_workers` Ray actors (by default one per CPU the cluster has). Each actor
receives the batch's spec once: policy, tools, mode, limits, pickled by Ray with
cloudpickle (a function or class from a module the workers can import travels by
reference, anything else by value). A policy that holds a native handle (LlamaCpp)
cannot be pickled: give `policy_factory(LlamaCpp, per="worker")`, and each actor loads
the model once and keeps it for every task it runs; `per="run"` makes one per task.

The actors are async: each keeps up to concurrency / num_workers runs in flight on its
own event loop. Each task is one ordinary run (`arun_task`), with the same results,
failure isolation and journaling as the local executor. The journal: a SQLiteStore is reopened
by path on each actor, so it works for actors on the machine that holds the file; on
several machines the journal must be a database every machine reaches (the
durable-operations issue adds Postgres).

address: None starts (or joins) a Ray instance in this process's machine; "auto" or
"HOST:PORT" connects to a running cluster (`ray start --head`). A Ray already
initialised in this process is used as it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from loopwright.batch.runner import BatchSpec, PolicyFactory, Progress, arun_task
from loopwright.policy import Policy
from loopwright.trace import Trace

INSTALL_HINT = "pip install 'loopwright[ray]'  (or scripts/install.sh --dev)"


class _Worker:
    """A Ray actor: holds the batch spec (and a per-worker policy) and runs tasks."""

    def __init__(self, spec: BatchSpec, store_path: str | None) -> None:
        if store_path is not None:
            from dataclasses import replace

            from loopwright.durable.sqlite import SQLiteStore

            spec = replace(spec, store=SQLiteStore(store_path))
        self.spec = spec
        policy = spec.policy
        self.shared: Policy | None = (
            policy.make() if isinstance(policy, PolicyFactory) and policy.per == "worker" else None
        )

    async def run(self, index: int, task: str) -> dict[str, Any]:
        # An async actor: Ray runs its calls concurrently on the actor's event loop, so
        # one worker keeps many runs in flight (each an ordinary arun).
        return (await arun_task(self.spec, index, task, self.shared)).to_dict()


class RayExecutor:
    """Runs each task of a batch on Ray actors (see the module docstring)."""

    def __init__(
        self,
        address: str | None = None,
        *,
        num_workers: int | None = None,
        num_cpus_per_worker: float = 1.0,
        init_options: dict[str, Any] | None = None,
    ) -> None:
        if num_workers is not None and num_workers < 1:
            raise ValueError(f"num_workers must be a positive integer, got {num_workers!r}")
        self.address = address
        self.num_workers = num_workers
        self.num_cpus_per_worker = num_cpus_per_worker
        self.init_options = dict(init_options or {})

    def __repr__(self) -> str:
        return f"RayExecutor(address={self.address!r}, num_workers={self.num_workers!r})"

    def _ray(self) -> Any:
        try:
            import ray
        except ImportError as exc:
            raise ImportError(f"RayExecutor needs Ray ({exc}); install it with: {INSTALL_HINT}") from exc
        if not ray.is_initialized():
            ray.init(address=self.address, **{"log_to_driver": False, **self.init_options})
        return ray

    async def run_tasks(
        self, tasks: Sequence[str], spec: BatchSpec, concurrency: int, done: Progress
    ) -> None:
        await asyncio.to_thread(self._run, tasks, spec, concurrency, done, asyncio.get_running_loop())

    def _run(
        self,
        tasks: Sequence[str],
        spec: BatchSpec,
        concurrency: int,
        done: Progress,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        ray = self._ray()
        workers = self.num_workers or max(1, int(ray.cluster_resources().get("CPU", 1) // self.num_cpus_per_worker))
        store_path = None if spec.store is None else spec.store.path
        if store_path == ":memory:":
            raise ValueError("a Ray batch cannot journal to an in-memory SQLiteStore; give a file path")
        portable = spec if spec.store is None else _without_store(spec)
        actor = ray.remote(num_cpus=self.num_cpus_per_worker)(_Worker)
        spec_ref = ray.put(portable)
        actors = [actor.remote(spec_ref, store_path) for _ in range(workers)]
        per_actor = max(1, -(-concurrency // workers))  # tasks queued on each actor at once
        pending: dict[Any, tuple[int, int]] = {}  # ref -> (task index, actor number)
        load = [0] * workers
        queue = list(enumerate(tasks))
        queue.reverse()
        try:
            while queue or pending:
                while queue and min(load) < per_actor and len(pending) < concurrency:
                    slot = load.index(min(load))
                    index, task = queue.pop()
                    pending[actors[slot].run.remote(index, task)] = (index, slot)
                    load[slot] += 1
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    index, slot = pending.pop(ref)
                    load[slot] -= 1
                    try:
                        trace = Trace.from_dict(ray.get(ref))
                    except Exception as exc:  # the actor died: this task's trace says why
                        from loopwright.batch.runner import failed_trace

                        trace = failed_trace(tasks[index], spec.mode, exc)
                    loop.call_soon_threadsafe(done, index, trace)
        finally:
            for a in actors:
                ray.kill(a)


def _without_store(spec: BatchSpec) -> BatchSpec:
    from dataclasses import replace

    return replace(spec, store=None)  # reopened by path on each actor


__all__ = ["RayExecutor"]
