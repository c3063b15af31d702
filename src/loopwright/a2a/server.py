"""loopwright runs served as A2A tasks (protocol 1.0), on a2a-sdk's own request handler and
route factories (JSON-RPC at `/`, HTTP+JSON under `/v1`... as the SDK lays them out, the
agent card at `/.well-known/agent-card.json`).

A task is a run: its id is the run's id (and the journal's, with a store). The SDK's
handler keeps the task records and streams; `RunExecutor` (its AgentExecutor) starts or
follows the run and turns the run's events into task status and artifact updates:

- each recorded Step and each tool call started: a `working` status whose message holds a
  line of text and the step as data (metadata names the run and, for a child agent, its
  name);
- a gated tool call: `input-required`, the request as data; the client's next message on
  the task answers it ("approve"/"deny", or data {"approved": bool, "reason": str});
- the run's end: the final answer as the artifact "answer", then `completed`; a run that
  stopped without one `failed` (the stop reason says why); a cancelled one `canceled`.

CancelTask cancels the run's task: the run ends "interrupted" (resumable). A message with
a context id and no task id starts a new task in that conversation: the run's prompt
carries the earlier turns of the context, fenced as data. With a store, every run is
journaled; a server started on a store re-lists the A2A tasks it holds, and resumes the
runs that were still running when the last process died, or that its graceful shutdown
interrupted (a client's CancelTask stays cancelled).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

from a2a.helpers import get_data_parts, get_message_text, new_data_part, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Artifact,
    HTTPAuthSecurityScheme,
    Message,
    Role,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from starlette.applications import Starlette
from starlette.middleware import Middleware

from loopwright.durable.base import RunRecord, StoreBase
from loopwright.durable.resume import iter_resume
from loopwright.errors import RunInterrupted, StoreError
from loopwright.events import Event, RunFinished, StepEvent, ToolStarted
from loopwright.httpguard import MAX_BODY, Access, Guard
from loopwright.policy import Policy
from loopwright.runtime.driver import Run
from loopwright.runtime.front import start as start_run
from loopwright.runtime.session import SESSION_TASK, render_turn
from loopwright.runtime.spec import MODES, RunSpec
from loopwright.runtime.watch import AsyncEvents
from loopwright.safety import ApprovalRequest, Approver, Decision
from loopwright.tools.toolset import Tools, as_registry
from loopwright.trace import Trace
from loopwright.untrusted import fence

log = logging.getLogger("loopwright.a2a")

PROTOCOL_VERSION: Final = "1.0"
CARD_PATH: Final = "/.well-known/agent-card.json"
META: Final = "a2a"
"""The key of the journal's meta that marks a run as an A2A task: {"context_id", "message"}."""
INTERRUPTED_BY: Final = "interrupted_by"
"""The trace meta key saying why this server interrupted a run: "cancel" (CancelTask) or
"shutdown" (the server stopped; started again on the store, it resumes the run)."""
_APP_OWNS: Final = ("task", "policy", "registry", "approver", "run_id", "journal_meta")
_APPROVE: Final = frozenset({"approve", "approved", "yes", "y", "ok", "allow"})
_DENY: Final = frozenset({"deny", "denied", "no", "n", "reject", "refuse"})


@dataclass
class _Ask:
    """An approval the run waits on: what it asks, and the future the answer completes."""

    key: str
    request: ApprovalRequest
    future: concurrent.futures.Future[Decision]


@dataclass
class LiveRun:
    """One task's run as this process drives it: the run's events and approval asks in
    order, how far the executor has read them, what it waits for. Touched on the loop only."""

    task_id: str
    context_id: str
    message: str
    items: list[Event | _Ask] = field(default_factory=list)
    read: int = 0
    pending: _Ask | None = None
    driver: asyncio.Task[None] | None = None
    trace: Trace | None = None
    cancelled: bool = False
    events: AsyncEvents | None = None
    started_at: float = field(default_factory=time.time)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def push(self, item: Event | _Ask) -> None:
        self.items.append(item)
        self._changed.set()
        self._changed = asyncio.Event()

    async def next(self) -> Event | _Ask | None:
        """The next item the executor has not read; None once the run has ended and all is read."""
        while True:
            changed = self._changed
            if self.read < len(self.items):
                self.read += 1
                return self.items[self.read - 1]
            if self.driver is not None and self.driver.done():
                return None
            await changed.wait()


class RunServer:
    """The runs this app drives, by task id, and how one starts or resumes."""

    def __init__(self, policy: Policy, registry: Tools, mode: str, options: Mapping[str, Any],
                 approval_timeout_s: float) -> None:
        self.policy, self.registry, self.mode = policy, as_registry(registry), mode
        self.options = dict(options)
        self.store: StoreBase | None = options.get("store") if isinstance(options.get("store"), StoreBase) else None
        self.approval_timeout_s = approval_timeout_s
        self.runs: dict[str, LiveRun] = {}
        self.tasks = InMemoryTaskStore()

    def start(self, task_id: str, context_id: str, message: str) -> LiveRun:
        live = self.runs[task_id] = LiveRun(task_id, context_id, message)
        prompt = self._with_conversation(context_id, message, task_id)
        spec = RunSpec(prompt, self.mode, **self.options, run_id=task_id,
                       approver=self._approver(live, asyncio.get_running_loop()),
                       journal_meta={META: {"context_id": context_id, "message": message}})
        self._drive(live, lambda sinks: start_run(spec, self.policy, self.registry, sinks=sinks))
        return live

    def resume(self, task_id: str, context_id: str, message: str) -> LiveRun:
        """Resume a journaled run that a process left running (it died)."""
        assert self.store is not None
        live = self.runs[task_id] = LiveRun(task_id, context_id, message)
        approver = self._approver(live, asyncio.get_running_loop())
        store = self.store
        self._drive(live, lambda sinks: iter_resume(task_id, self.policy, self.registry, store=store,
                                                    approver=approver, sinks=sinks))
        return live

    def _drive(self, live: LiveRun, begin: Callable[[Sequence[Any]], Run]) -> None:
        async def drive() -> None:
            events = live.events = AsyncEvents(begin)
            try:
                async for event in events:
                    live.push(event)
                    if isinstance(event, RunFinished) and event.run_id == live.task_id:
                        live.trace = event.trace
            except (RunInterrupted, asyncio.CancelledError):  # cancelled: the run ends "interrupted"
                pass
            finally:
                trace = await events.aclose()
                if live.pending is not None:
                    live.pending.future.cancel()
                if live.trace is None:  # cancelled before its RunFinished came through
                    live.trace = trace
                    live.push(RunFinished(live.task_id, None, trace))
                live._changed.set()

        live.driver = asyncio.get_running_loop().create_task(drive())

    def _approver(self, live: LiveRun, loop: asyncio.AbstractEventLoop) -> Approver:
        timeout = self.approval_timeout_s

        def ask(item: _Ask) -> None:  # on the loop
            if live.driver is not None and live.driver.done():
                item.future.cancel()
                return
            live.pending = item
            live.push(item)

        def approver(request: ApprovalRequest) -> Decision:
            """On the driver's approval thread: post the ask, wait for the answering message."""
            item = _Ask(secrets.token_urlsafe(16), request, concurrent.futures.Future())
            try:
                loop.call_soon_threadsafe(ask, item)
                return item.future.result(timeout=timeout)
            except concurrent.futures.TimeoutError:
                return Decision(False, f"no answer within {timeout:g}s")
            except (concurrent.futures.CancelledError, RuntimeError):
                return Decision(False, "the task ended before an answer")

        return approver

    def _with_conversation(self, context_id: str, message: str, task_id: str) -> str:
        """The run's task: the message, after the earlier turns of its context (as data)."""
        turns = [render_turn(q, t) for q, t in self._context_turns(context_id, task_id)]
        if not turns:
            return message
        return SESSION_TASK.format(task=message, memory=fence("\n\n".join(turns), "conversation"))

    def _context_turns(self, context_id: str, task_id: str) -> list[tuple[str, Trace]]:
        out: dict[str, tuple[float, str, Trace]] = {}
        for live in self.runs.values():
            if live.context_id == context_id and live.task_id != task_id and live.trace is not None:
                out[live.task_id] = (live.started_at, live.message, live.trace)
        if self.store is not None:
            for record in self.store.list_runs():
                meta = _a2a_meta(record.config)
                if meta is not None and meta.get("context_id") == context_id and record.id not in out \
                        and record.id != task_id and record.status not in ("running",):
                    out[record.id] = (record.created_at, str(meta.get("message", "")), self.store.trace(record.id))
        return [(q, t) for _, q, t in sorted(out.values(), key=lambda x: x[0])]

    async def cancel(self, task_id: str) -> None:
        live = self.runs.get(task_id)
        if live is None or live.driver is None or live.driver.done():
            return
        live.cancelled = True
        await _interrupt([live], "cancel")

    async def recover(self, handler: DefaultRequestHandler) -> None:
        """On start with a store: list the A2A tasks it holds; resume those whose process
        died mid-run, each followed by the executor as a task this process started (see
        `_follow_resumed`)."""
        if self.store is None:
            return
        context = ServerCallContext()
        for record in reversed(self.store.list_runs()):
            meta = _a2a_meta(record.config)
            if meta is None or record.id in self.runs:
                continue
            context_id, message = str(meta.get("context_id", record.id)), str(meta.get("message", record.task))
            task = Task(id=record.id, context_id=context_id, history=[_user_message(message, record.id, context_id)])
            if record.status != "running" and not _shut_down(self.store, record):
                _finish(task, self.store.trace(record.id), cancelled=record.stopped_reason == "interrupted")
                await self.tasks.save(task, context)
                continue
            task.status.CopyFrom(TaskStatus(state=TaskState.TASK_STATE_WORKING))
            await self.tasks.save(task, context)
            try:
                self.resume(record.id, context_id, message)
            except StoreError as exc:  # another live worker holds it
                log.warning("not resuming task %s: %s", record.id, exc)
                continue
            await _follow_resumed(handler, task, context)

    async def shutdown(self) -> None:
        """Interrupt the runs still going, as "shutdown": a server started again on the store
        resumes them (a client's CancelTask is "cancel", and stays cancelled)."""
        await _interrupt([live for live in self.runs.values() if live.driver is not None and not live.driver.done()],
                         "shutdown")


async def _interrupt(lives: Sequence[LiveRun], by: str) -> None:
    """Cancel these runs (each ends "interrupted"), saying who in their traces' meta
    (`INTERRUPTED_BY`), which the journal records with their end."""
    drivers = []
    for live in lives:
        if live.events is not None:
            live.events.trace.meta[INTERRUPTED_BY] = by
        if live.driver is not None:
            live.driver.cancel()
            drivers.append(live.driver)
    await asyncio.gather(*drivers, return_exceptions=True)


def _shut_down(store: StoreBase, record: RunRecord) -> bool:
    """Whether the run was interrupted by a server's shutdown (not by a client's cancel)."""
    return record.status == "interrupted" and store.trace(record.id).meta.get(INTERRUPTED_BY) == "shutdown"


async def _follow_resumed(handler: DefaultRequestHandler, task: Task, context: ServerCallContext) -> None:
    """Have the SDK's handler run the executor on a resumed task as it does for a message
    sent: the run's events keep the task's record true, and SubscribeToTask and CancelTask
    reach it as any task of this process. The handler's registry of active tasks is
    private (a2a-sdk is pinned to 1.3.0; the restart tests fail if it changes)."""
    registry = handler._active_task_registry
    active = await registry.get_or_create(task.id, call_context=context, context_id=task.context_id)
    await active.enqueue_request(RequestContext(context, task_id=task.id, context_id=task.context_id, task=task))


Emit = Callable[[TaskStatusUpdateEvent | TaskArtifactUpdateEvent], Coroutine[Any, Any, None]]


async def follow(live: LiveRun, emit: Emit) -> None:
    """Turn the run's items into task updates, from where the last reader stopped, until the
    run asks for approval (`input-required`) or ends (its final state)."""
    while True:
        item = await live.next()
        if item is None:  # the run's task ended without a RunFinished (it could not start)
            await emit(_status(live, TaskState.TASK_STATE_FAILED, "the run could not start"))
            return
        if isinstance(item, _Ask):
            if item.future.done():
                continue  # answered (or the run ended) before this reader got here
            await emit(_status(live, TaskState.TASK_STATE_INPUT_REQUIRED, _ask_text(item.request),
                               {"approval": {**item.request.to_dict(), "key": item.key}}))
            return
        if isinstance(item, RunFinished) and item.run_id == live.task_id:
            for event in _end(live, item.trace):
                await emit(event)
            return
        update = _progress(live, item)
        if update is not None:
            await emit(update)


def _progress(live: LiveRun, event: Event) -> TaskStatusUpdateEvent | None:
    meta = {"run_id": event.run_id, "agent": event.agent, "kind": event.kind}
    if isinstance(event, StepEvent):
        step = event.step
        line = f"step {step.kind}" + (f": {step.tool}" if step.tool else "") + \
            (f" -> {step.observation[:200]}" if step.observation else "")
        return _status(live, TaskState.TASK_STATE_WORKING, line, {"step": step.to_dict()}, meta)
    if isinstance(event, ToolStarted):
        return _status(live, TaskState.TASK_STATE_WORKING, f"calling {event.tool}", {"tool_started": event.to_dict()},
                       meta)
    return None


def _end(live: LiveRun, trace: Trace) -> list[TaskStatusUpdateEvent | TaskArtifactUpdateEvent]:
    task = Task(id=live.task_id, context_id=live.context_id)
    _finish(task, trace, cancelled=live.cancelled)
    out: list[TaskStatusUpdateEvent | TaskArtifactUpdateEvent] = [
        TaskArtifactUpdateEvent(task_id=live.task_id, context_id=live.context_id, artifact=a, last_chunk=True)
        for a in task.artifacts]
    out.append(TaskStatusUpdateEvent(task_id=live.task_id, context_id=live.context_id, status=task.status))
    return out


def _finish(task: Task, trace: Trace, *, cancelled: bool) -> None:
    """Fill `task`'s final status and answer artifact from the run's trace."""
    summary = {"run_id": trace.run_id, "stopped_reason": trace.stopped_reason, "llm_calls": trace.llm_calls,
               "tool_calls": trace.tool_calls}
    if trace.answered and trace.final_answer is not None:
        parts = [new_text_part(trace.final_answer)]
        if trace.output is not None:
            parts.append(new_data_part(json.loads(json.dumps(trace.to_dict().get("output"), default=str))))
        del task.artifacts[:]
        task.artifacts.append(Artifact(artifact_id=f"{task.id}:answer", name="answer", parts=parts))
        state, text = TaskState.TASK_STATE_COMPLETED, trace.final_answer
    elif cancelled or trace.stopped_reason == "interrupted":
        state, text = TaskState.TASK_STATE_CANCELED, "cancelled: the run ended interrupted (resumable)"
    else:
        why = trace.steps[-1].error if trace.steps and trace.steps[-1].error else ""
        state, text = TaskState.TASK_STATE_FAILED, f"the run stopped ({trace.stopped_reason}) without an answer" + \
            (f": {why}" if why else "")
    message = _agent_message(text, {"run": summary}, task.id, task.context_id)
    task.status.CopyFrom(TaskStatus(state=state, message=message))
    task.status.timestamp.GetCurrentTime()


def _status(live: LiveRun, state: Any, text: str, data: Mapping[str, Any] | None = None,
            metadata: Mapping[str, Any] | None = None) -> TaskStatusUpdateEvent:
    status = TaskStatus(state=state, message=_agent_message(text, data, live.task_id, live.context_id))
    status.timestamp.GetCurrentTime()
    event = TaskStatusUpdateEvent(task_id=live.task_id, context_id=live.context_id, status=status)
    if metadata:
        event.metadata.update({"loopwright": _json_safe(metadata)})
    return event


def _agent_message(text: str, data: Mapping[str, Any] | None, task_id: str, context_id: str) -> Message:
    parts = [new_text_part(text)] + ([new_data_part(_json_safe(data))] if data is not None else [])
    return Message(message_id=secrets.token_hex(16), role=Role.ROLE_AGENT, parts=parts, task_id=task_id,
                   context_id=context_id)


def _user_message(text: str, task_id: str, context_id: str) -> Message:
    return Message(message_id=f"{task_id}:message", role=Role.ROLE_USER, parts=[new_text_part(text)],
                   task_id=task_id, context_id=context_id)


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _ask_text(request: ApprovalRequest) -> str:
    args = json.dumps(request.args, ensure_ascii=False, default=str)
    who = f" (agent {request.meta['agent']})" if request.meta.get("agent") else ""
    return (f"Approve {request.tool}({args}) [{request.side_effects}]{who}? "
            "Answer 'approve' or 'deny', optionally followed by a reason.")


def decision_of(message: Message | None) -> Decision | None:
    """The approval answer a message carries: data {"approved": bool, "reason": str}, or
    text starting with approve/yes or deny/no (the rest is the reason); None otherwise."""
    if message is None:
        return None
    for data in get_data_parts(list(message.parts)):
        if isinstance(data, dict) and isinstance(data.get("approved"), bool):
            reason = data.get("reason")
            return Decision(data["approved"], reason if isinstance(reason, str) else "")
    text = get_message_text(message).strip()
    word, _, rest = text.partition(" ")
    word = word.strip(".,!:;").lower()
    if word in _APPROVE:
        return Decision(True, rest.strip() or "approved by the A2A client")
    if word in _DENY:
        return Decision(False, rest.strip() or "denied by the A2A client")
    return None


def _a2a_meta(config: Mapping[str, Any]) -> dict[str, Any] | None:
    meta = config.get("meta")
    value = meta.get(META) if isinstance(meta, dict) else None
    return value if isinstance(value, dict) else None


class RunExecutor(AgentExecutor):
    """The SDK's AgentExecutor for loopwright runs: a new task starts a run, a message to a
    task waiting for approval answers it, and either way the run is followed (see
    `follow`) until it asks again or ends."""

    def __init__(self, server: RunServer) -> None:
        self.server = server

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id, context.context_id
        assert task_id is not None and context_id is not None  # the SDK fills both in
        updater = TaskUpdater(event_queue, task_id, context_id)
        live = self.server.runs.get(task_id)
        if live is None:
            text = context.get_user_input().strip()
            if context.current_task is None:
                await event_queue.enqueue_event(Task(id=task_id, context_id=context_id,
                                                     status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                                                     history=[context.message] if context.message else []))
            if not text:
                await updater.reject(updater.new_agent_message([new_text_part("send the task as a text part")]))
                return
            live = self.server.start(task_id, context_id, text)
            await updater.start_work()
        elif live.pending is not None and not live.pending.future.done():
            decision = decision_of(context.message)
            if decision is None:  # not an answer: ask again
                await updater.requires_input(_agent_message(
                    "This task waits for an approval. " + _ask_text(live.pending.request),
                    {"approval": {**live.pending.request.to_dict(), "key": live.pending.key}}, task_id, context_id))
                return
            live.pending.future.set_result(decision)
            live.pending = None
            await updater.start_work()
        await follow(live, event_queue.enqueue_event)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id
        assert task_id is not None
        live = self.server.runs.get(task_id)
        await self.server.cancel(task_id)
        if live is not None and live.trace is not None and live.trace.answered:
            return  # it finished first: nothing to cancel; the executor reported it
        context_id = context.context_id or (live.context_id if live else task_id)
        await TaskUpdater(event_queue, task_id, context_id).cancel(
            _agent_message("cancelled: the run ended interrupted (resumable)", None, task_id, context_id))


class _CancellingStore(InMemoryTaskStore):
    """The task store: the SDK's, but a task saved `canceled` also cancels its run (a task
    cancelled while it waits for input has no executor running to hear it)."""

    def __init__(self, server: RunServer) -> None:
        super().__init__()
        self.server = server

    async def save(self, task: Task, context: ServerCallContext) -> None:
        await super().save(task, context)
        if task.status.state == TaskState.TASK_STATE_CANCELED:
            await self.server.cancel(task.id)


def agent_card(name: str, description: str, url: str, skills: Iterable[AgentSkill], version: str,
               bearer: bool = False) -> AgentCard:
    """The card: JSON-RPC at `url`, HTTP+JSON at `url` too (the SDK's REST paths), streaming;
    no push notifications, no extended card. `bearer`: requests need `Authorization: Bearer`."""
    base = url.rstrip("/")
    card = AgentCard(
        name=name, description=description, version=version,
        supported_interfaces=[
            AgentInterface(url=base + "/", protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION),
            AgentInterface(url=base, protocol_binding="HTTP+JSON", protocol_version=PROTOCOL_VERSION),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False, extended_agent_card=False),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=list(skills),
    )
    if bearer:
        card.security_schemes["bearer"].CopyFrom(SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer", description="the server's token")))
        card.security_requirements.append(SecurityRequirement(schemes={"bearer": StringList()}))
    return card


def tool_skills(registry: Tools) -> list[AgentSkill]:
    """One skill per tool: its name, description and side effects."""
    return [AgentSkill(id=t.name, name=t.name, description=t.description or t.name,
                       tags=["tool", str(t.side_effects)]) for t in as_registry(registry)]


def app(policy: Policy, registry: Tools, mode: str = "react", *, name: str = "loopwright",
        description: str | None = None, skills: Iterable[AgentSkill] | None = None,
        url: str = "http://127.0.0.1:8000", version: str = "0.1.0", approval_timeout_s: float = 300.0,
        token: str | None = None, allowed_hosts: Iterable[str] = (), allowed_origins: Iterable[str] = (),
        max_body: int = MAX_BODY, **options: Any) -> Starlette:
    """An ASGI app serving runs of this policy and these tools as A2A tasks (see the
    module's docstring). `options` are the run options of `lw.run` (max_steps, store, ...),
    checked here. `url`: where clients reach the app (the card names it). `skills`: the
    card's skills, by default one per tool. A gated tool waits up to `approval_timeout_s`
    for the client's answer, then is denied. Who may call it is loopwright.httpguard's
    (as `loopwright serve`): loopback only without a `token`, Host and Origin checked, JSON
    bodies of at most `max_body` bytes."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; the modes are {', '.join(sorted(MODES))}")
    for owned in _APP_OWNS:
        if owned in options:
            raise TypeError(f"loopwright.a2a.app sets {owned!r} itself; it is not a run option here")
    try:
        RunSpec("task", mode, **options)
    except TypeError as exc:
        raise TypeError(f"loopwright.a2a.app: {exc} (options are the keywords of lw.run)") from None
    if approval_timeout_s <= 0:
        raise ValueError(f"approval_timeout_s must be positive, got {approval_timeout_s!r}")
    access = Access(token, tuple(allowed_hosts), tuple(allowed_origins), max_body,
                    open_paths=frozenset({CARD_PATH}))  # a client reads the card before it knows the scheme
    registry = as_registry(registry)
    server = RunServer(policy, registry, mode, options, approval_timeout_s)
    server.tasks = _CancellingStore(server)
    card = agent_card(name, description or f"A loopwright {mode} agent with the tools: {', '.join(registry.names)}",
                      url, tool_skills(registry) if skills is None else skills, version, bearer=token is not None)
    handler = DefaultRequestHandler(agent_executor=RunExecutor(server), task_store=server.tasks, agent_card=card)
    routes = [*create_agent_card_routes(card, card_url=CARD_PATH), *create_jsonrpc_routes(handler, rpc_url="/"),
              *create_rest_routes(handler)]

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await server.recover(handler)
        yield
        await server.shutdown()
        await handler.aclose()

    built = Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(Guard, access=access)])
    built.state.runs = server
    built.state.card = card
    return built


__all__ = ["PROTOCOL_VERSION", "LiveRun", "RunExecutor", "RunServer", "agent_card", "app", "decision_of",
           "follow", "tool_skills"]

