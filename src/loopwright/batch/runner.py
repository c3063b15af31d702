"""Many runs at once: `run_many` / `await arun_many` with bounded concurrency, a trace per
task in input order, failure isolation, progress, and resumption through a journal.

Each task is one ordinary run (`arun`, or `resume` when the journal holds an unfinished
run for it), so every limit and option of `run` applies. With `store=`, the run id of
task i is `task_run_id(i, task, batch_id)`: the same list run again finds its runs,
returns the finished ones from the journal without a model or tool call, and resumes the
unfinished ones from where they stopped.

Policies: one policy object is shared by all runs (it must be safe to call from several
at once: a model client is, and LlamaCpp serialises its calls). When each run needs its
own (a ScriptedPolicy, a policy with per-run state), pass `policy_factory(make)`: `make()`
is called once per run, or once per worker process with `per="worker"` (an embedded
model loaded once per Ray worker).

Executors: local (the default) runs everything on this process's event loop;
`loopwright.RayExecutor` runs each task on Ray actors (see ray_executor.py).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, Unpack, cast

from loopwright.durable.base import task_run_id
from loopwright.errors import StoreError
from loopwright.offload import run_until_complete
from loopwright.policy import Policy
from loopwright.runtime import AsyncRun, arun
from loopwright.runtime.spec import RunOptions
from loopwright.tools.registry import ToolRegistry
from loopwright.tools.toolset import Tools, as_registry
from loopwright.trace import Step, Trace

if TYPE_CHECKING:
    from loopwright.durable.sqlite import SQLiteStore

Progress = Callable[[int, Trace], None]
"""Called with the task's index and its trace as each task ends (from the event loop)."""


@dataclass(frozen=True)
class PolicyFactory:
    """Marks a callable that makes policies (a plain callable is a policy already, so
    the intent must be said). per="run": one policy per run; per="worker": one per
    worker process, shared by the runs there."""

    make: Callable[[], Policy]
    per: Literal["run", "worker"] = "run"

    def __post_init__(self) -> None:
        if not callable(self.make):
            raise TypeError(f"policy_factory needs a callable, got {type(self.make).__name__}")
        if self.per not in ("run", "worker"):
            raise ValueError(f"per must be 'run' or 'worker', got {self.per!r}")


def policy_factory(make: Callable[[], Policy], *, per: Literal["run", "worker"] = "run") -> PolicyFactory:
    """Give `run_many` a way to make policies instead of one shared policy."""
    return PolicyFactory(make, per)


PolicySource = Policy | PolicyFactory


@dataclass(frozen=True)
class BatchSpec:
    """What every task of a batch shares: how to get a policy, the tools, the mode, the
    limits and options, the journal."""

    policy: PolicySource
    registry: ToolRegistry
    mode: str = "react"
    limits: dict[str, Any] = field(default_factory=dict)
    store: SQLiteStore | None = None
    batch_id: str = "batch"

    def policy_for_run(self, shared: Policy | None = None) -> Policy:
        """The policy for one run: `shared` (a per-worker instance) if given, else a new
        one from a per-run factory, else the one shared policy."""
        if shared is not None:
            return shared
        if isinstance(self.policy, PolicyFactory):
            return self.policy.make()
        return self.policy


class Executor(Protocol):
    """Runs a batch's tasks and reports each trace through `done(index, trace)`."""

    async def run_tasks(
        self, tasks: Sequence[str], spec: BatchSpec, concurrency: int, done: Progress
    ) -> None: ...


# -- one task -------------------------------------------------------------------------


def journal_state(store: SQLiteStore | None, run_id: str | None) -> str:
    """"new" (nothing recorded), "finished", or "resumable" for this run id."""
    if store is None or run_id is None:
        return "new"
    try:
        record = store.load_run(run_id)
    except StoreError:
        return "new"
    return "resumable" if record.resumable else "finished"


def failed_trace(task: str, mode: str, exc: BaseException, run_id: str | None = None) -> Trace:
    """The trace of a run that could not run at all (bad options, a policy factory that
    raised, a defect): stopped "error", one step saying why."""
    trace = Trace(task=task, mode=mode, run_id=run_id)
    trace.steps.append(
        Step(1, "error", error=f"run failed: {type(exc).__name__}: {exc}",
             meta={"traceback": "".join(traceback.format_exception(exc))})
    )
    trace.stopped_reason = "error"
    return trace


def _options(spec: BatchSpec, index: int, task: str) -> tuple[str | None, dict[str, Any]]:
    limits = dict(spec.limits)
    if spec.store is None:
        return limits.get("run_id"), limits
    run_id = task_run_id(index, task, spec.batch_id)
    limits.update(store=spec.store, run_id=run_id)
    return run_id, limits


async def arun_task(spec: BatchSpec, index: int, task: str, shared: Policy | None = None) -> Trace:
    """Run (or skip, or resume) task `index`; never raises for what the run does."""
    run_id: str | None = None
    try:
        run_id, limits = _options(spec, index, task)
        state = journal_state(spec.store, run_id)
        if state == "finished" and spec.store is not None and run_id is not None:
            trace = spec.store.trace(run_id)
        elif state == "resumable" and spec.store is not None and run_id is not None:
            from loopwright.durable.resume import OVERRIDES, iter_resume

            options = {k: v for k, v in limits.items() if k in OVERRIDES or k == "approver"}
            trace = await AsyncRun(
                iter_resume(run_id, spec.policy_for_run(shared), spec.registry, store=spec.store, **options)
            ).run()
        else:
            trace = await arun(task, spec.policy_for_run(shared), spec.registry, spec.mode, **limits)
    except Exception as exc:  # isolation: this task's trace says why, the others go on
        trace = failed_trace(task, spec.mode, exc, run_id)
        state = "crashed"
    trace.meta["batch"] = {"index": index, "journal": state}
    return trace


def run_task(spec: BatchSpec, index: int, task: str, shared: Policy | None = None) -> Trace:
    """`arun_task` from sync code (a Ray worker): on a private event loop."""
    return run_until_complete(arun_task(spec, index, task, shared))


class LocalExecutor:
    """Every task on this process's event loop, at most `concurrency` at a time."""

    async def run_tasks(
        self, tasks: Sequence[str], spec: BatchSpec, concurrency: int, done: Progress
    ) -> None:
        shared = spec.policy.make() if isinstance(spec.policy, PolicyFactory) and spec.policy.per == "worker" else None
        import asyncio  # loaded here, not on import (see loopwright.offload)

        gate = asyncio.Semaphore(concurrency)

        async def one(index: int, task: str) -> None:
            async with gate:
                trace = await arun_task(spec, index, task, shared)
            done(index, trace)

        await asyncio.gather(*(one(i, t) for i, t in enumerate(tasks)))


# -- the facade -----------------------------------------------------------------------


async def arun_many(
    tasks: Iterable[str], policy: PolicySource, registry: Tools, *, mode: str = "react",
    concurrency: int = 8, progress: Progress | None = None,
    executor: Executor | None = None, batch_id: str = "batch",
    **options: Unpack[RunOptions],
) -> list[Trace]:
    """Run every task; return their traces in input order.

    concurrency: runs in flight at once. store: a journal (SQLiteStore); a re-run of the
    same tasks skips the finished ones and resumes the others. progress(index, trace):
    called as each task ends. executor: None (this event loop) or a RayExecutor. The other
    keywords: what `run` takes (max_steps, timeout_s, ...). A run that fails or crashes
    never stops the others: its trace ends "error" and says why.
    """
    unknown = sorted(options.keys() - RunOptions.__annotations__.keys())
    if unknown:  # a misspelling fails at once, not in each run
        raise TypeError(f"arun_many() got an unexpected keyword argument {unknown[0]!r}")
    store = cast("SQLiteStore | None", options.pop("store", None))
    limits = {k: v for k, v in options.items() if v is not None}
    items = list(tasks)
    bad = [i for i, t in enumerate(items) if not isinstance(t, str)]
    if bad:
        raise TypeError(f"tasks must be str; item {bad[0]} is {type(items[bad[0]]).__name__}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency must be a positive integer, got {concurrency!r}")
    if "run_id" in limits and store is not None:
        raise TypeError("run_many names each run from its task (task_run_id); do not pass run_id with store")
    spec = BatchSpec(policy, as_registry(registry), mode, limits, store, batch_id)  # one registry for every task
    traces: list[Trace | None] = [None] * len(items)

    def done(index: int, trace: Trace) -> None:
        traces[index] = trace
        if progress is not None:
            progress(index, trace)

    await (executor or LocalExecutor()).run_tasks(items, spec, concurrency, done)
    missing = [i for i, t in enumerate(traces) if t is None]
    if missing:
        raise RuntimeError(f"the executor reported no trace for task(s) {missing[:10]}")
    return [t for t in traces if t is not None]


def run_many(
    tasks: Iterable[str], policy: PolicySource, registry: Tools, *, mode: str = "react",
    concurrency: int = 8, progress: Progress | None = None,
    executor: Executor | None = None, batch_id: str = "batch",
    **options: Unpack[RunOptions],
) -> list[Trace]:
    """`arun_many` from sync code (on a private event loop; from a helper thread if this
    one already runs a loop). Same arguments."""
    return run_until_complete(arun_many(tasks, policy, registry, mode=mode, concurrency=concurrency,
                                        progress=progress, executor=executor, batch_id=batch_id, **options))


__all__ = [
    "BatchSpec",
    "Executor",
    "LocalExecutor",
    "PolicyFactory",
    "arun_many",
    "arun_task",
    "failed_trace",
    "policy_factory",
    "run_many",
    "run_task",
    "task_run_id",
]
