"""Many runs: `run_many` / `arun_many` (bounded concurrency, input order, isolation,
resumption through a journal), `evaluate` on top of them, and the Ray executor (an
optional extra, imported only when used)."""

from loopwright.batch.runner import (
    BatchSpec,
    Executor,
    LocalExecutor,
    PolicyFactory,
    PolicySource,
    Progress,
    arun_many,
    arun_task,
    failed_trace,
    policy_factory,
    run_many,
    run_task,
    task_run_id,
)

__all__ = [
    "BatchSpec",
    "Executor",
    "LocalExecutor",
    "PolicyFactory",
    "PolicySource",
    "Progress",
    "arun_many",
    "arun_task",
    "failed_trace",
    "policy_factory",
    "run_many",
    "run_task",
    "task_run_id",
]
