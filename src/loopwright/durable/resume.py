"""Resume a journaled run: replay what it recorded, then continue live.

`resume` rebuilds the run from its journal (task, mode, limits, tool scope) and runs it
again with the journal attached. Every model call the journal holds is answered from it
(the policy is not called), every tool result it holds is returned from it (the tool is
not run), and the run continues live from the first step that was not recorded.

A tool call that was started but whose result was not recorded (the process died while
it ran) is run again only if the tool is idempotent; otherwise the run stops with
"error" and says so, and a person decides (then `rerun_unfinished=True`).

Resuming takes the run's lease first (see `StoreBase.take_lease`): a run that another live
worker runs or resumes is refused with a StoreError. A call left in doubt can instead be
settled by a person (`store.settle`), after which the run goes on from its outcome.

A resume runs with the tools the run started with: the journal records each tool's name
and schema fingerprint (`loopwright.tools.toolset`), and a registry that differs (a tool
added, removed or changed) is a ToolSetChangedError naming the difference, before
anything is replayed, unless `allow_tool_changes=True` (the trace's meta["tool_changes"]
then says what changed; the recorded set stays the original one). A journal written
before tool sets were recorded (no "tool_set" in its config) resumes as before: its
tools are unknown, so nothing is refused.

A run that already ended replays to the same trace: deterministic ends (final,
max_steps, token_budget, denied, ...) come back without a model call or a tool call;
an end caused by something outside the journal (the policy raised, the wall clock ran
out, Ctrl-C, a pause for approval) is where the replay picks up live.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Unpack

from loopwright.durable.base import RunRecord, StoreBase
from loopwright.errors import ToolSetChangedError
from loopwright.events import EventSink
from loopwright.policy import Policy
from loopwright.runtime import Run
from loopwright.runtime.front import start
from loopwright.runtime.spec import ResumeOptions, RunSpec
from loopwright.safety import Approver, Decision, decisions_approver
from loopwright.tools.registry import ToolRegistry
from loopwright.tools.toolset import (
    Tools,
    ToolSetDiff,
    as_registry,
    diff_tool_sets,
    tool_names,
    tool_set,
)
from loopwright.trace import Trace

OVERRIDES: Final = frozenset(ResumeOptions.__annotations__)
"""The run options resume and fork take, replacing what the run recorded (the store, the
run's id and approver are their own arguments; the journal's meta stays the run's)."""


def tool_changes(record: RunRecord, registry: ToolRegistry, tools: Any = None) -> ToolSetDiff:
    """How `registry` (scoped to `tools`, else to the recorded scope) differs from the
    tool set the run recorded; empty when it is the same or the journal recorded none
    (written before tool sets were recorded: unknown, so nothing to compare)."""
    recorded = record.config.get("tool_set")
    if not isinstance(recorded, dict):
        return ToolSetDiff()
    scope = record.config.get("tools") if tools is None else tools
    if scope is not None:  # a scoped tool this registry lacks shows as removed
        registry = registry.subset([n for n in tool_names(scope) if n in registry])
    return diff_tool_sets(recorded, tool_set(registry))


def check_tools(record: RunRecord, registry: ToolRegistry, tools: Any = None) -> None:
    """Raise ToolSetChangedError when `registry` differs from the run's recorded tools."""
    diff = tool_changes(record, registry, tools)
    if diff:
        raise ToolSetChangedError(record.id, diff.added, diff.removed, diff.changed)


def overrides(caller: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options a caller of resume or fork gave, those not None. Raises TypeError, as
    for any unknown keyword, for one that is not a run option or that a continued run
    cannot change (its store, id, approver and journal meta are its own)."""
    unknown = sorted(options.keys() - OVERRIDES)
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
    return {k: v for k, v in options.items() if v is not None}


def iter_resume(
    run_id: str, policy: Policy, registry: Tools, *, store: StoreBase, approver: Approver | None = None,
    decisions: Mapping[str, Decision | bool] | None = None, rerun_unfinished: bool = False,
    allow_tool_changes: bool = False, sinks: Sequence[EventSink] = (),
    **options: Unpack[ResumeOptions],
) -> Run:
    """`resume`, as a Run to iterate for each Step as it is replayed or made. `sinks`:
    where its events go (as for `lw.iter_events`)."""
    given = overrides("iter_resume", options)
    registry = as_registry(registry)
    record, journal = store.reopen(run_id)
    try:
        changes = tool_changes(record, registry, given.get("tools"))
        if changes and not allow_tool_changes:
            raise ToolSetChangedError(run_id, changes.added, changes.removed, changes.changed)
        approver = recorded_approver(store, record, approver, decisions)
        spec = RunSpec.from_config(record.task, record.mode, record.config, **given, approver=approver,
                                   run_id=run_id)
        run = start(spec, policy, registry, journal=journal, rerun_unfinished=rerun_unfinished, sinks=sinks)
    except BaseException:
        store.release_lease(run_id)  # it never started: the next resume may
        raise
    if changes:
        run.trace.meta["tool_changes"] = changes.to_dict()
    journal.mark_resumed()
    return run


def recorded_approver(
    store: StoreBase, record: RunRecord, approver: Approver | None, decisions: Mapping[str, Decision | bool] | None,
) -> Approver | None:
    """The approver of a continued run. The approver is code and cannot be journaled: a
    run that had one (the config says so, or it asked for approval before) pauses again at
    a call with no decision; a run that had none is denied such calls, as it was (the gate
    fails closed either way). `decisions` given ahead answer first."""
    had_approver = record.config.get("approver")
    if had_approver is None:
        had_approver = bool(store.approvals(record.id))
    if decisions or approver is not None or had_approver:
        return decisions_approver(dict(decisions or {}), fallback=approver)
    return approver


def resume(
    run_id: str, policy: Policy, registry: Tools, *, store: StoreBase, approver: Approver | None = None,
    decisions: Mapping[str, Decision | bool] | None = None, rerun_unfinished: bool = False,
    allow_tool_changes: bool = False,
    **options: Unpack[ResumeOptions],
) -> Trace:
    """Continue run `run_id` from its journal in `store` and return its trace.

    policy and registry: what the rest of the run uses (recorded calls do not reach
    them). approver: asked for calls that need approval and have no recorded decision;
    decisions: {approval_key: Decision | bool} given ahead (see `store.pending_approvals`
    and `store.decide`, which records one in the journal). rerun_unfinished: run again a
    non-idempotent call whose outcome is unknown, once a person has checked it did not
    take effect. allow_tool_changes: resume even though `registry` differs from the
    tools the run recorded (by default that is a ToolSetChangedError). The other
    keywords: run options the journal cannot hold (prompts, memory, context_tokens); a
    limit given here replaces the recorded one.

    Raises StoreError for an unknown run id, ToolSetChangedError for other tools.
    """
    given = overrides("resume", options)
    return iter_resume(
        run_id, policy, registry, store=store, approver=approver, decisions=decisions,
        rerun_unfinished=rerun_unfinished, allow_tool_changes=allow_tool_changes, **given,
    ).run()
