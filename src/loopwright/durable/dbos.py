"""Runs as DBOS workflows: `DBOSAgent(agent)` runs an `lw.Agent` in any mode as a DBOS
workflow whose steps are the run's records (`pip install 'loopwright[dbos]'`).

Making a DBOSAgent registers a workflow named `loopwright.agent.<name>`, so a process
that makes the same DBOSAgent before `DBOS.launch()` recovers the runs a dead process
left pending. The workflow id is the run id. Inside it the ordinary driver runs the mode
with an `EngineJournal` (loopwright.durable.engine) on this module's `DBOSStepLog`: each
model call's completion, each tool call's start and its result are DBOS steps named
`loopwright.<kind>` whose outputs are the records (see `engine.result_record` and
`EngineJournal.record_completion` for their fields). The user's tools are not wrapped.

- A tool call started before a crash and never finished stops the run in doubt, unless
  the tool is safe to run again: the run's trace ends as with the SQLite journal, and its
  workflow is CANCELLED (a `loopwright.blocked` step holds the keys and the trace);
  `settle(run_id, key, ...)` answers the call and resumes the workflow, which goes on.
- With `approvals=True` a call that needs approval waits durably (`DBOS.recv`) for
  `approve(run_id, key, ...)`, sent from any process (`DBOSClient` outside the app).
- `DBOSAgent.as_tool()`: a child agent whose each call is its own workflow, with the
  id `<parent run id>:<call key>` (`agents.child_run_id`). What is left of the parent's
  token budget, cost budget and clock is the child workflow's input (a recovered child
  has the same), and its events go to the parent's sinks while both run here.

This is the one module that imports dbos.
"""

from __future__ import annotations

import contextvars
import dataclasses
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, TypeVar

from loopwright.durable.base import UnsettledCall, task_run_id
from loopwright.durable.engine import (
    KINDS,
    EngineJournal,
    InOrderRun,
    Op,
    approval_topic,
    call_state,
    decode_result,
    settle_topic,
)
from loopwright.errors import EngineError
from loopwright.events import EventSink
from loopwright.pricing import Prices
from loopwright.runtime.agents import Agent, child_run_id
from loopwright.runtime.calls import bound_call
from loopwright.runtime.context import RunContext
from loopwright.runtime.front import start
from loopwright.safety import ApprovalRequest, Decision
from loopwright.tools.registry import SideEffects, Tool, ToolError
from loopwright.trace import STEP_KINDS, Step, Trace, Usage

try:
    from dbos import DBOS, DBOSClient, EnqueueOptions, SetWorkflowID, WorkflowHandle, WorkflowStatus
    from dbos._error import DBOSAwaitedWorkflowCancelledError
except ImportError as exc:  # the extra is not installed
    raise ImportError(f"loopwright.durable.dbos needs the dbos extra ({exc.name} is missing): "
                      "pip install 'loopwright[dbos]'") from None

T = TypeVar("T")
STEP_PREFIX = "loopwright."
AGENT_PREFIX: Final = STEP_PREFIX + "agent."
"""A DBOSAgent's workflow is `AGENT_PREFIX + <its name>`."""
APP_NAME: Final = "loopwright"
"""The DBOS application name of `loopwright worker` (a DBOSClient that enqueues for it
passes `application_name=APP_NAME`)."""
CHILD_LIMITS = ("token_budget", "timeout_s", "cost_budget_usd", "prices")
"""The run options a child run's workflow takes from its parent (what is left of them)."""
_RECV = "DBOS.recv"
_POLL_S = 0.2  # how often a DBOSClient looks whether a run it waits for has ended
_SLEEP = "DBOS.sleep"


def _checkpoint(payload: dict[str, Any]) -> dict[str, Any]:
    """A record: DBOS stores the output; a replay returns it without calling this."""
    return payload


_STEPS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    kind: DBOS.step(name=STEP_PREFIX + kind)(partial(_checkpoint)) for kind in KINDS
}


def outside_workflow(fn: Callable[[], T]) -> T:
    """Call `fn` as if no workflow ran here: what it asks DBOS is not one of the workflow's
    steps (a read of the system database, a child run's own workflow)."""
    return contextvars.Context().run(fn)


class DBOSStepLog:
    """engine.StepLog on one DBOS workflow."""

    def __init__(self, workflow_id: str, client: DBOSClient | None = None) -> None:
        self.workflow_id = workflow_id
        self.client = client

    def recorded(self) -> list[Op]:
        return recorded_ops(self.workflow_id, self.client)

    def record(self, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        if DBOS.workflow_id != self.workflow_id:  # another thread (a tool with timeout_s, a raced guardrail)
            raise EngineError(f"a {kind} record of run {self.workflow_id!r} was made outside its workflow's "
                              "thread, where it would not be a DBOS step; under DBOS a tool that records "
                              "notes runs without timeout_s, and guardrails are not raced")
        return _STEPS[kind](payload)

    def receive(self, topic: str, timeout_s: float) -> Any:
        return DBOS.recv(topic, timeout_s)


def recorded_ops(workflow_id: str, client: DBOSClient | None = None) -> list[Op]:
    """A workflow's recorded steps as the journal's records, in order: `loopwright.<kind>`
    steps by their kind, `DBOS.recv` as "receive" (its sleep left out), anything else by
    its DBOS name."""
    if client is not None:
        steps = client.list_workflow_steps(workflow_id)
    else:
        steps = outside_workflow(partial(DBOS.list_workflow_steps, workflow_id))
    ops = []
    for step in sorted(steps, key=lambda s: s["function_id"]):
        name = step["function_name"]
        if name == _SLEEP:
            continue
        kind = name[len(STEP_PREFIX):] if name.startswith(STEP_PREFIX) else "receive" if name == _RECV else name
        ops.append(Op(kind, step["output"]))
    return ops


# -- the agent as a workflow ------------------------------------------------------------

_SINKS: dict[str, tuple[EventSink, ...]] = {}  # run id -> where a run started here sends its events
_REGISTERED: dict[str, DBOSAgent] = {}


@dataclass(frozen=True)
class DBOSRun:
    """A run started as a DBOS workflow: `result()` waits for its trace."""

    run_id: str
    handle: WorkflowHandle[str]

    def result(self) -> Trace:
        """The run's trace once it ends (a run stopped in doubt: its trace then; see `settle`)."""
        try:
            return Trace.from_json(self.handle.get_result())
        except DBOSAwaitedWorkflowCancelledError:
            blocked = [op for op in recorded_ops(self.run_id) if op.kind == "blocked"]
            if not blocked:
                raise EngineError(f"run {self.run_id!r} was cancelled (DBOS.cancel_workflow) before it ended; "
                                  "DBOS.resume_workflow goes on with it") from None
            return Trace.from_json(blocked[-1].payload["trace"])

    def status(self) -> str:
        """DBOS's status of the workflow: PENDING, SUCCESS, ERROR, ENQUEUED, CANCELLED."""
        return str(self.handle.get_status().status)


class DBOSAgent:
    """An lw.Agent whose runs are DBOS workflows (see the module's docstring).
    `approvals`: a call that needs approval waits up to `approval_timeout_s` for `approve`
    (else the agent's own approver decides, or the call is denied)."""

    def __init__(self, agent: Agent, *, name: str | None = None, approvals: bool = False,
                 approval_timeout_s: float = 7 * 24 * 3600.0) -> None:
        if not isinstance(agent, Agent):
            raise TypeError(f"DBOSAgent wraps an lw.Agent, got {type(agent).__name__}")
        if agent.spec.store is not None:
            raise EngineError(f"agent {agent.name!r} has a store; under DBOS its runs are recorded in DBOS's system "
                              "database, so make the Agent without store=")
        self.agent = agent
        self.name = name or agent.name
        self.approvals = approvals
        self.approval_timeout_s = approval_timeout_s
        self.workflow_name = AGENT_PREFIX + self.name
        if self.workflow_name in _REGISTERED:
            raise EngineError(f"a DBOSAgent named {self.name!r} exists already in this process (its workflow "
                              f"{self.workflow_name!r} is registered once); give this one another name=")

        def workflow(task: str, limits: dict[str, Any] | None = None) -> str:
            return self._drive(task, limits or {})

        self.workflow = DBOS.workflow(name=self.workflow_name)(workflow)
        _REGISTERED[self.workflow_name] = self

    def __repr__(self) -> str:
        return f"DBOSAgent({self.agent!r}, workflow={self.workflow_name!r})"

    def start(self, task: str, *, run_id: str | None = None, sinks: Sequence[EventSink] = (),
              limits: Mapping[str, Any] | None = None) -> DBOSRun:
        """Start a run of the agent on `task` as the workflow `run_id` (a new id if None)
        and return without waiting. Starting a run id that exists gives that run back, as
        DBOS does. `sinks` get its events while it runs in this process. `limits`: run
        options (`CHILD_LIMITS`) that replace the agent's own; they are the workflow's
        input, so a recovered run has the same."""
        if not isinstance(task, str):
            raise TypeError(f"task must be a str, got {type(task).__name__}")
        unknown = set(limits or ()) - set(CHILD_LIMITS)
        if unknown:
            raise TypeError(f"limits of a DBOS run are {', '.join(CHILD_LIMITS)}; got {', '.join(sorted(unknown))}")
        run_id = run_id or uuid.uuid4().hex
        if sinks:
            _SINKS[run_id] = tuple(sinks)
        try:
            with SetWorkflowID(run_id):
                handle = (DBOS.start_workflow(self.workflow, task, dict(limits)) if limits
                          else DBOS.start_workflow(self.workflow, task))
        except Exception as exc:
            _SINKS.pop(run_id, None)
            if _launched():
                raise
            raise EngineError(f"DBOS is not launched, so run {run_id!r} cannot start: make DBOS(config=...) and "
                              f"call DBOS.launch() first ({type(exc).__name__}: {exc})") from exc
        return DBOSRun(run_id, handle)

    def run(self, task: str, *, run_id: str | None = None, sinks: Sequence[EventSink] = ()) -> Trace:
        """Run the agent on `task` as a DBOS workflow to its end; its trace."""
        return self.start(task, run_id=run_id, sinks=sinks).result()

    def retrieve(self, run_id: str) -> DBOSRun:
        """The run `run_id` (started here or by another process)."""
        return DBOSRun(run_id, outside_workflow(partial(DBOS.retrieve_workflow, run_id)))

    def enqueue(self, task: str, *, queue: str, run_id: str | None = None) -> DBOSRun:
        """Put a run of the agent on `task` on the DBOS queue `queue` (registered with
        `DBOS.register_queue`) as the workflow `run_id` (a new id if None); any process of
        the app that serves the queue runs it. Enqueuing a run id that exists gives that
        run back."""
        if not isinstance(task, str):
            raise TypeError(f"task must be a str, got {type(task).__name__}")
        run_id = run_id or uuid.uuid4().hex
        if not _launched():
            raise EngineError(f"DBOS is not launched, so run {run_id!r} cannot be enqueued: make DBOS(config=...) "
                              "and call DBOS.launch() first")
        found = outside_workflow(partial(DBOS.retrieve_queue, queue))
        if found is None:
            raise EngineError(f"no DBOS queue named {queue!r}: register it after DBOS.launch() with "
                              f"DBOS.register_queue({queue!r}, worker_concurrency=N)")
        with SetWorkflowID(run_id):
            handle = found.enqueue(self.workflow, task)
        return DBOSRun(run_id, handle)

    def run_many(self, tasks: Iterable[str], *, queue: str, batch_id: str = "batch") -> list[Trace]:
        """Enqueue a run per task on `queue` and wait for them all; their traces in input
        order. Task i is the workflow `task_run_id(i, task, batch_id)`, so the same list
        enqueued again (after this process died, say) waits for the same runs instead of
        starting new ones."""
        items = list(tasks)
        runs = [self.enqueue(task, queue=queue, run_id=task_run_id(i, task, batch_id))
                for i, task in enumerate(items)]
        return [run.result() for run in runs]

    def _drive(self, task: str, limits: Mapping[str, Any]) -> str:
        """The workflow: the agent's run with an EngineJournal on this workflow's steps."""
        run_id = DBOS.workflow_id
        assert run_id is not None
        journal = EngineJournal(DBOSStepLog(run_id), run_id, settle=f"{__name__}.settle")
        spec = self.agent.spec.replace(task=task, run_id=run_id, **limits)
        if self.approvals:
            spec = spec.replace(approver=partial(journal.await_decision, timeout_s=self.approval_timeout_s))
        run = start(spec, self.agent.policy, self.agent.registry, journal=journal, sinks=_SINKS.pop(run_id, ()),
                    agent=self.name)
        run.context.agent = self.name
        trace = InOrderRun(run).run()
        keys = journal.in_doubt(trace)
        text = trace.to_json(indent=None)
        if keys:  # it waits for a person: cancelled, so DBOS.resume_workflow (what `settle` does) goes on
            journal.block(keys, text)
            outside_workflow(partial(DBOS.cancel_workflow, run_id))
        return text

    def as_tool(self, description: str | None = None, name: str | None = None) -> Tool:
        """The agent as a tool of another agent's run: each call is a child run, its own
        workflow `<parent run id>:<call key>` (see DBOSAgentTool)."""
        return DBOSAgentTool(self, description, name)


class DBOSAgentTool(Tool):
    """A DBOSAgent as a Tool: a `task` (and optional `context`) in, the agent's final
    answer out. Its call runs the child workflow, or waits for it when it exists (a
    recovered parent finds the child a dead process started): it dedupes on its call key.
    A child stopped in doubt leaves the call in doubt (the parent stops there too, rather
    than have its model ask again)."""

    def __init__(self, agent: DBOSAgent, description: str | None, name: str | None) -> None:
        inner = agent.agent
        safe = all(t.idempotent and not t.requires_approval for t in inner.registry)
        side_effects: SideEffects = "read" if safe else "write"

        def call(task: str, context: str = "") -> Any:
            text = task if not context else f"{task}\n\nContext: {context}"
            bound = bound_call()
            if bound is None or not isinstance(bound[0], RunContext):
                return _answer(inner.name, agent.run(text))
            parent, key = bound[0], bound[1]
            child_id = child_run_id(parent, key)
            limits = _child_limits(inner, parent)
            sinks = () if parent.events is None else parent.events.sinks
            trace = outside_workflow(partial(_child_trace, agent, text, child_id, limits, sinks))
            if key in parent.in_flight:
                parent.adopt(key, child_id, trace)
            if not trace.answered and outside_workflow(partial(unsettled, child_id)):  # the parent is in doubt too
                return ToolError(inner.name, f"its run {child_id!r} stopped at a call in doubt; settle that call "
                                 f"(settle({child_id!r}, key, ...)), then this one with rerun=True", "in_doubt")
            return _answer(inner.name, trace)

        call.__doc__ = "Give the agent a task.\n\nArgs:\n    task: what to do, in plain words\n" \
                       "    context: anything the agent should know (optional)"
        super().__init__(call, name=name or inner.name,
                         description=description or f"Ask the {inner.name} agent",
                         side_effects=side_effects, dedupes_on_call_key=True)
        self.dbos_agent = agent

    def recorded_child(self, ctx: RunContext, key: str) -> str | None:
        """A replayed call: the child's trace kept in the parent's, as when it ran."""
        child_id = child_run_id(ctx, key)
        trace = outside_workflow(partial(_finished_trace, child_id))
        if trace is None:
            return None
        ctx.adopt(key, child_id, trace)
        ctx.gate.children.pop(key, None)
        return child_id


def _child_limits(agent: Agent, parent: RunContext) -> dict[str, Any]:
    """What a child run of `agent` may spend: its own limits capped by what is left of
    the parent's (`Agent`'s rule for in-process children), as data for the child
    workflow's input. A price function stays out (the child prices as its agent does);
    so do the parent's approver and tracer, which live in this process."""
    limits = {k: v for k, v in agent._limits_left(parent).items() if k in CHILD_LIMITS}
    if not isinstance(limits.get("prices"), Prices):
        limits.pop("prices", None)
    return limits


def _child_trace(agent: DBOSAgent, task: str, child_id: str, limits: Mapping[str, Any],
                 sinks: Sequence[EventSink]) -> Trace:
    if DBOS.get_workflow_status(child_id) is not None:
        return agent.retrieve(child_id).result()
    return agent.start(task, run_id=child_id, sinks=sinks, limits=limits).result()


def _finished_trace(run_id: str) -> Trace | None:
    if DBOS.get_workflow_status(run_id) is None:
        return None
    return DBOSRun(run_id, DBOS.retrieve_workflow(run_id)).result()


def _answer(name: str, trace: Trace) -> Any:
    if trace.answered:
        return trace.final_answer
    last = trace.steps[-1].error if trace.steps and trace.steps[-1].error else None
    return ToolError(name, f"agent {name!r} stopped ({trace.stopped_reason}) without an answer"
                     + (f": {last}" if last else ""))


# -- answering a run from any process ---------------------------------------------------


def approve(run_id: str, key: str, approved: bool | Decision, reason: str = "", *,
            client: DBOSClient | None = None) -> None:
    """Answer the approval request `key` (ApprovalRequest.key, from `pending_approvals`)
    of run `run_id`; its workflow, waiting, goes on. `client`: from a process that is not
    the DBOS app. Sending twice sends once."""
    decision = approved if isinstance(approved, Decision) else Decision(bool(approved), reason)
    message = {"approved": decision.approved, "reason": decision.reason}
    _send(run_id, message, approval_topic(key), client)


def pending_approvals(run_id: str, *, client: DBOSClient | None = None) -> list[ApprovalRequest]:
    """The approval requests run `run_id` waits on."""
    ops = recorded_ops(run_id, client)
    out = []
    for i, op in enumerate(ops):
        answered = i + 1 < len(ops) and ops[i + 1].kind == "receive" and isinstance(ops[i + 1].payload, dict)
        if op.kind == "pending" and not answered:
            out.append(ApprovalRequest.from_dict(op.payload["request"]))
    return out


def unsettled(run_id: str, *, client: DBOSClient | None = None) -> list[UnsettledCall]:
    """The tool calls run `run_id` stopped at in doubt (started, no result recorded)."""
    ops = recorded_ops(run_id, client)
    keys = [k for op in ops if op.kind == "blocked" for k in op.payload["keys"]]
    out = []
    for key in dict.fromkeys(keys):
        state, _, starts = call_state(ops, key)
        if state == "blocked":
            start_op = [op for op in ops if op.kind == "tool_start" and op.payload["key"] == key][-1]
            out.append(UnsettledCall(run_id, key, start_op.payload["name"], start_op.payload.get("args") or {},
                                     starts, 0.0, f"{run_id}:{key}"))
    return out


_UNSET: Any = object()


def settle(run_id: str, key: str, *, result: Any = _UNSET, error: str | None = None, rerun: bool = False,
           client: DBOSClient | None = None) -> None:
    """Say what became of call `key` that run `run_id` stopped at in doubt (exactly one
    of: the `result` the tool returned, the `error` it failed with, or `rerun` it: it did
    not take effect), then resume the run's workflow, which goes on from there.
    EngineError when the call is not in doubt (unknown, finished, settled already)."""
    given = (result is not _UNSET) + (error is not None) + bool(rerun)
    if given != 1:
        raise ValueError(f"settle needs exactly one of result=, error= or rerun=True (got {given})")
    state = call_state(recorded_ops(run_id, client), key)[0]
    if state != "blocked":
        what = "was never started" if state is None else f"is {state}, not waiting to be settled"
        raise EngineError(f"run {run_id!r}: call {key!r} {what}; `unsettled(run_id)` lists the calls in doubt")
    message: Mapping[str, Any] = ({"rerun": True} if rerun else {"error": error} if error is not None
                                  else {"result": result})
    _send(run_id, dict(message), settle_topic(key), client)
    if client is not None:
        client.resume_workflow(run_id)
    else:
        outside_workflow(partial(DBOS.resume_workflow, run_id))


def _send(run_id: str, message: dict[str, Any], topic: str, client: DBOSClient | None) -> None:
    idempotency_key = f"{topic}@{run_id}"
    if client is not None:
        client.send(run_id, message, topic, idempotency_key=idempotency_key)
    else:
        outside_workflow(partial(DBOS.send, run_id, message, topic, idempotency_key=idempotency_key))


# -- queues, results and listings from any process ---------------------------------------


def enqueue(client: DBOSClient, agent: str, task: str, *, queue: str, run_id: str | None = None,
            app_version: str | None = None) -> str:
    """From a process that is not the DBOS app: put a run of the DBOSAgent named `agent`
    on `queue` (one a worker registered) and return its run id (`run_id`, or a new one;
    enqueuing a run id that exists gives that run back). `app_version`: only workers of
    that application version take it (None: those of the latest version)."""
    if not isinstance(task, str):
        raise TypeError(f"task must be a str, got {type(task).__name__}")
    if client.retrieve_queue(queue) is None:
        raise EngineError(f"no DBOS queue named {queue!r} in this system database; a worker registers it "
                          f"(`loopwright worker --queue {queue} ...`, or DBOS.register_queue in your app)")
    options = EnqueueOptions(workflow_name=AGENT_PREFIX + agent, queue_name=queue,
                             workflow_id=run_id or uuid.uuid4().hex)
    if app_version is not None:
        options["app_version"] = app_version
    return client.enqueue(options, task).workflow_id


def wait(run_id: str, *, client: DBOSClient | None = None) -> Trace:
    """Wait for run `run_id` to end; its trace (a run stopped in doubt: its trace then,
    as `DBOSRun.result` gives it). `client`: from a process that is not the DBOS app."""
    if client is None:
        return DBOSRun(run_id, outside_workflow(partial(DBOS.retrieve_workflow, run_id))).result()
    try:
        return Trace.from_json(client.retrieve_workflow(run_id).get_result(polling_interval_sec=_POLL_S))
    except DBOSAwaitedWorkflowCancelledError:
        trace = _blocked_trace(recorded_ops(run_id, client))
        if trace is None:
            raise EngineError(f"run {run_id!r} was cancelled before it ended; DBOS.resume_workflow goes on "
                              "with it") from None
        return trace


@dataclass(frozen=True)
class DBOSRunInfo:
    """One loopwright run in a DBOS system database, as `list_runs` reads it."""

    run_id: str
    agent: str
    status: str  # DBOS's: ENQUEUED, PENDING, SUCCESS, ERROR, CANCELLED, ...
    task: str
    steps: int  # the workflow's recorded steps (model calls, tool starts and results, ...)
    created_at: float  # Unix seconds
    queue: str | None
    executor: str | None
    in_doubt: bool  # stopped at a tool call in doubt (CANCELLED with a `blocked` step)


def list_runs(client: DBOSClient, *, status: str | None = None, limit: int = 50) -> list[DBOSRunInfo]:
    """The DBOSAgents' runs in the client's system database, newest first (`status`: only
    DBOS's status, e.g. PENDING)."""
    found: list[DBOSRunInfo] = []
    offset, page = 0, max(limit, 100)
    while len(found) < limit:
        batch = client.list_workflows(status=status, sort_desc=True, limit=page, offset=offset,
                                      load_input=True, load_output=False)
        for wf in batch:
            if wf.name.startswith(AGENT_PREFIX) and len(found) < limit:
                ops = recorded_ops(wf.workflow_id, client)
                found.append(DBOSRunInfo(wf.workflow_id, wf.name[len(AGENT_PREFIX):], str(wf.status),
                                         _task_of(wf), len(ops), (wf.created_at or 0) / 1000.0, wf.queue_name,
                                         wf.executor_id,
                                         str(wf.status) == "CANCELLED" and any(op.kind == "blocked" for op in ops)))
        if len(batch) < page:
            break
        offset += page
    return found


def run_trace(run_id: str, *, client: DBOSClient) -> Trace:
    """Run `run_id`'s trace as far as it got, without waiting: an ended run's own trace
    (its workflow output, or its trace when it stopped in doubt); a run still queued or
    running, or one that failed, rebuilt from its step records (`records_trace`).
    EngineError when the system database has no loopwright run of that id."""
    found = client.list_workflows(workflow_ids=[run_id], load_input=True, load_output=True)
    status = found[0] if found else None
    if status is None or not status.name.startswith(AGENT_PREFIX):
        raise EngineError(f"no loopwright run {run_id!r} in this DBOS system database")
    if str(status.status) == "SUCCESS" and isinstance(status.output, str):
        return Trace.from_json(status.output)
    ops = recorded_ops(run_id, client)
    trace = _blocked_trace(ops)
    if trace is not None:
        return trace
    return records_trace(run_id, _task_of(status), str(status.status), ops)


def records_trace(run_id: str, task: str, status: str, ops: Sequence[Op]) -> Trace:
    """A trace of a run that has not ended, built from its step records alone (no agent,
    no mode): each model call a step with its whole prompt and reply, each tool call a
    step with its arguments and result (or that it started and has none yet). The mode's
    own steps come with the run's end, in its workflow output."""
    trace = Trace(task=task, mode="-", run_id=run_id, meta={"dbos": {"status": status, "from": "step records"}})
    prompts: dict[int, str] = {}
    started: dict[str, int] = {}  # call key -> the index of its step
    for op in ops:
        payload = op.payload if isinstance(op.payload, dict) else {}
        if op.kind == "model":
            n = int(payload["n"])
            base = payload.get("prompt_base")
            prompt = prompts.get(int(base), "") + payload["prompt"] if base is not None else payload["prompt"]
            prompts[n] = prompt
            usage = Usage.from_dict(payload["usage"])
            purpose = str(payload.get("purpose") or "")
            kind = purpose if purpose in STEP_KINDS else "action"
            trace.steps.append(Step(len(trace.steps) + 1, kind, payload["text"], prompt=prompt, usage=usage,
                                    meta={"record": "model", "n": n}))
            trace.llm_calls += 1
            trace.add_usage(usage)
        elif op.kind == "tool_start":
            started[payload["key"]] = len(trace.steps)
            trace.steps.append(Step(len(trace.steps) + 1, "action", tool=payload["name"],
                                    args=payload.get("args") or {}, error="started; no result recorded yet",
                                    meta={"record": "tool", "key": payload["key"]}))
        elif op.kind == "tool" and payload["key"] in started:
            result, at = decode_result(payload), started.pop(payload["key"])
            trace.steps[at] = dataclasses.replace(
                trace.steps[at], observation=result.observation, duration_s=result.duration_s,
                error=None if result.error is None else result.error.message)
            trace.tool_calls += 1
    return trace


def _task_of(status: WorkflowStatus) -> str:
    args = status.input["args"] if status.input is not None else ()
    return str(args[0]) if args else ""


def _blocked_trace(ops: Sequence[Op]) -> Trace | None:
    blocked = [op for op in ops if op.kind == "blocked"]
    return Trace.from_json(blocked[-1].payload["trace"]) if blocked else None


def _launched() -> bool:
    from dbos._dbos import _dbos_global_instance  # no public flag says whether DBOS was launched

    return _dbos_global_instance is not None and bool(_dbos_global_instance._launched)


__all__ = ["APP_NAME", "DBOSAgent", "DBOSAgentTool", "DBOSRun", "DBOSRunInfo", "DBOSStepLog", "approve", "enqueue",
           "list_runs", "pending_approvals", "recorded_ops", "records_trace", "run_trace", "settle", "unsettled",
           "wait"]
