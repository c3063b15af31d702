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
from typing import Any

from loopwright.durable.base import StoreBase
from loopwright.durable.resume import recorded_options
from loopwright.errors import StoreError, describe
from loopwright.modes import Run, iter_run
from loopwright.policy import Policy
from loopwright.safety import Approver, Decision
from loopwright.trace import Trace
from loopwright.wire.tools import ToolRegistry
from loopwright.wire.toolset import tool_set


def iter_fork(
    run_id: str,
    at_step: int,
    policy: Policy,
    registry: ToolRegistry,
    *,
    store: StoreBase,
    new_run_id: str | None = None,
    approver: Approver | None = None,
    decisions: Mapping[str, Decision | bool] | None = None,
    **options: Any,
) -> Run:
    """`fork`, as a Run to iterate for each Step as it is replayed or made."""
    fixed = sorted({"_journal", "_rerun_unfinished"} & set(options))
    if fixed:
        raise TypeError(f"fork names its own run; it does not take {', '.join(fixed)}")
    record = store.load_run(run_id)
    if isinstance(at_step, bool) or not isinstance(at_step, int) or not 0 <= at_step <= record.step_count:
        raise StoreError(f"at_step must be a step number from 0 to {record.step_count} "
                         f"(run {run_id!r} has {record.step_count} steps), got {describe(at_step)}")
    rest = dict(options)
    tools = rest.pop("tools", record.config.get("tools"))
    limits, approver = recorded_options(store, record, rest, approver, decisions)
    # What the journal can hold is the fork's own config, so resuming the fork rebuilds it:
    # its limits, scope and the tools it runs with (another registry is allowed here).
    config = {**record.config, **{k: v for k, v in rest.items() if k in record.config}}
    config["tools"] = None if tools is None else list(tools)
    if "tool_set" in config:
        config["tool_set"] = tool_set(registry if tools is None else registry.subset(tools))
    new_id, journal = store.start_run(new_run_id, record.task, record.mode, config,
                                      forked_from=run_id, forked_at_step=at_step)
    try:
        run = iter_run(record.task, policy, registry, record.mode, **limits, tools=tools,
                       approver=approver, run_id=new_id, _journal=journal)
    except BaseException:
        store.release_lease(new_id)
        raise
    run.trace.meta["forked_from"] = {"run_id": run_id, "at_step": at_step}
    return run


def fork(
    run_id: str,
    at_step: int,
    policy: Policy,
    registry: ToolRegistry,
    *,
    store: StoreBase,
    new_run_id: str | None = None,
    approver: Approver | None = None,
    decisions: Mapping[str, Decision | bool] | None = None,
    **options: Any,
) -> Trace:
    """Start a new journaled run whose first `at_step` steps are run `run_id`'s recorded
    ones (replayed: no model call, no tool executed), then continue it live with `policy`,
    and return its trace (`trace.run_id` is the new id).

    options: run options and limits for the new run (prompts, memory, max_steps, ...); a
    limit given here replaces the source's and is recorded with the fork. new_run_id: the
    fork's id (default: a new one). A StoreError for an unknown run, an at_step outside
    0..steps, or a new_run_id that exists.
    """
    return iter_fork(run_id, at_step, policy, registry, store=store, new_run_id=new_run_id,
                     approver=approver, decisions=decisions, **options).run()
