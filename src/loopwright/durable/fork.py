"""Fork a journaled run at a step: a new run that replays the first k steps of another and
then goes on live, with another model, prompt or limits.

The fork's journal answers from the source run while fewer than k steps are recorded (no
model call is made, no tool is run again) and copies each answer into the new run's own
rows, so the fork is a complete run of its own: it resumes, exports and views like any
other, and it records where it came from (`RunRecord.forked_from`, `forked_at_step`, and
`trace.meta["forked_from"]`). Its calls after step k get the fork's own call keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Unpack

from loopwright.durable.base import StoreBase
from loopwright.durable.resume import overrides, recorded_approver
from loopwright.errors import StoreError, describe
from loopwright.policy import Policy
from loopwright.runtime import Run
from loopwright.runtime.front import start
from loopwright.runtime.spec import ResumeOptions, RunSpec, spread
from loopwright.safety import Approver, Decision
from loopwright.tools.toolset import Tools, as_registry, tool_set
from loopwright.trace import Trace


def iter_fork(
    run_id: str, at_step: int, policy: Policy, registry: Tools, *, store: StoreBase,
    new_run_id: str | None = None, approver: Approver | None = None,
    decisions: Mapping[str, Decision | bool] | None = None,
    **options: Unpack[ResumeOptions],
) -> Run:
    """`fork`, as a Run to iterate for each Step as it is replayed or made."""
    given = overrides("iter_fork", options)
    registry = as_registry(registry)
    record = store.load_run(run_id)
    if isinstance(at_step, bool) or not isinstance(at_step, int) or not 0 <= at_step <= record.step_count:
        raise StoreError(f"at_step must be a step number from 0 to {record.step_count} "
                         f"(run {run_id!r} has {record.step_count} steps), got {describe(at_step)}")
    approver = recorded_approver(store, record, approver, decisions)
    spec = RunSpec.from_config(record.task, record.mode, record.config, **given, approver=approver)
    # What the journal can hold is the fork's own config, so resuming the fork rebuilds it:
    # its limits, scope and the tools it runs with (another registry is allowed here).
    changed = given.keys() | spread(spec.mode, given.get("limits"), given.get("settings")).keys()
    config = {**record.config, **{k: getattr(spec, k) for k in changed if k in record.config}}
    config["tools"] = None if spec.tools is None else list(spec.tools)
    if "tool_set" in config:
        config["tool_set"] = tool_set(registry if spec.tools is None else registry.subset(spec.tool_scope() or ()))
    new_id, journal = store.start_run(new_run_id, record.task, record.mode, config,
                                      forked_from=run_id, forked_at_step=at_step)
    try:
        run = start(spec.replace(run_id=new_id), policy, registry, journal=journal)
    except BaseException:
        store.release_lease(new_id)
        raise
    run.trace.meta["forked_from"] = {"run_id": run_id, "at_step": at_step}
    return run


def fork(
    run_id: str, at_step: int, policy: Policy, registry: Tools, *, store: StoreBase,
    new_run_id: str | None = None, approver: Approver | None = None,
    decisions: Mapping[str, Decision | bool] | None = None,
    **options: Unpack[ResumeOptions],
) -> Trace:
    """Start a new journaled run whose first `at_step` steps are run `run_id`'s recorded
    ones (replayed: no model call, no tool executed), then continue it live with `policy`,
    and return its trace (`trace.run_id` is the new id).

    The other keywords: run options and limits for the new run (prompts, memory,
    max_steps, ...); a limit given here replaces the source's and is recorded with the
    fork. new_run_id: the fork's id (default: a new one). A StoreError for an unknown run,
    an at_step outside 0..steps, or a new_run_id that exists.
    """
    given = overrides("fork", options)
    return iter_fork(run_id, at_step, policy, registry, store=store, new_run_id=new_run_id,
                     approver=approver, decisions=decisions, **given).run()
