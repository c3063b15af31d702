"""A remote A2A agent as a tool of a run: `A2AAgent(url).as_tool()`.

A call sends its task as a message to the remote agent (a2a-sdk's client, over JSON-RPC or
HTTP+JSON as the agent card offers) and follows the remote task to its end. Like an
`lw.Agent` tool, each call is a child of the run that makes it:

- the remote task's progress (each status message and artifact) goes to the parent's
  event stream as the child run `<parent run id>:<call key>`, tagged with the agent's
  name; the task as it ended is kept in `trace.children` (mode "a2a", `meta["a2a"]`), and
  the call's step names it in `meta["child_run_id"]` and the remote task in
  `meta["a2a_task_id"]`;
- cancelling the parent (Ctrl-C, cancelling its task under the async driver, its deadline
  cutting the call) sends CancelTask for the remote task;
- a resumed parent finds the remote task again instead of sending the message again. The
  message's context id is derived from the call's idempotency key, and the task id is
  journaled (a note on the parent's call, the tool-call row `<call key>@a2a`) as soon as the
  first response names it. A resumed call reads that row and follows the task (GetTask, then
  SubscribeToTask, or GetTask again while the server cannot stream). When the crash fell
  between the send and that row, it asks the server for the tasks of the context id
  (ListTasks): one found is followed, none means the message never made a task and it is
  sent. A server that cannot list tasks leaves the call in doubt: nothing is sent, and
  the run stops for a person as for any side effect of unknown outcome;
- a remote task that asks for input (`input-required`; for a loopwright agent, a person's
  approval of a gated tool) is not answered by the calling model, which could approve on a
  person's behalf: the call's result is a tool error with the question and the task id,
  and the task stays open for a person to answer through an A2A client;
- a remote failure (the task failed, was rejected or cancelled; the server unreachable; a
  protocol error) is a tool error the model reads, never a traceback.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import uuid
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.helpers import get_artifact_text, get_data_parts, get_message_text, new_text_part
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError

from loopwright.events import Emitter
from loopwright.modes.machine import Journal
from loopwright.runtime.calls import bound_call, current_call
from loopwright.runtime.context import RunContext
from loopwright.tools.registry import Tool, ToolError
from loopwright.trace import Step, Trace

CARD_PATH = "/.well-known/agent-card.json"
ENDED = frozenset({TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED,
                   TaskState.TASK_STATE_REJECTED})
WAITING = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})
POLL_S = (0.2, 0.5, 1.0, 2.0)  # GetTask while a server cannot stream a task: these waits, then the last
NOTE = "a2a"  # the journal's note on a call that keeps its remote task (the row `<call key>@a2a`)
TRANSPORT_ERRORS = (A2AError, httpx.HTTPError, OSError, ValueError)  # what a remote or the wire can raise


class A2AAgent:
    """A remote agent at `url` that speaks A2A (protocol 1.0): `as_tool()` makes it a tool
    of a run. `name` and `description` default to the agent card's (read once, by
    `as_tool`); `httpx_client`: the HTTP client to use (yours stays open; without one, each
    call makes its own); `timeout_s`: how long a call waits for the remote task to end.
    Read-only once made."""

    __slots__ = ("description", "httpx_client", "name", "timeout_s", "url")

    url: str
    name: str | None
    description: str | None
    httpx_client: httpx.AsyncClient | None
    timeout_s: float

    def __init__(self, url: str, *, name: str | None = None, description: str | None = None,
                 httpx_client: httpx.AsyncClient | None = None, timeout_s: float = 300.0) -> None:
        if not isinstance(url, str) or not re.match(r"https?://[^/\s]+", url):
            raise TypeError(f"url must be an http(s) URL of an A2A agent, got {url!r}")
        if name is not None and not re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", name):
            raise ValueError(f"name must be 1-64 letters, digits, '_', '.' or '-' (a tool name), got {name!r}")
        if httpx_client is not None and not isinstance(httpx_client, httpx.AsyncClient):
            raise TypeError(f"httpx_client must be an httpx.AsyncClient, got {type(httpx_client).__name__}")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not timeout_s > 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        for field, value in (("url", url.rstrip("/")), ("name", name), ("description", description),
                             ("httpx_client", httpx_client), ("timeout_s", float(timeout_s))):
            object.__setattr__(self, field, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"an A2AAgent is read-only; make another (cannot set {name!r})")

    def __repr__(self) -> str:
        return f"A2AAgent({self.url!r}, name={self.name!r})"

    def card(self) -> dict[str, Any]:
        """The agent card, as JSON (a GET of `<url>/.well-known/agent-card.json`)."""
        response = httpx.get(self.url + CARD_PATH, timeout=min(self.timeout_s, 30.0))
        response.raise_for_status()
        card = response.json()
        if not isinstance(card, dict):
            raise ValueError(f"the agent card at {self.url + CARD_PATH} is not a JSON object")
        return card

    def as_tool(self, description: str | None = None, name: str | None = None,
                examples: Sequence[Mapping[str, Any]] | None = None) -> Tool:
        """The remote agent as a tool: it takes a `task` (and optional `context`) and returns
        the remote task's answer (see the module's docstring). Without a name or a
        description, here or on the agent, the agent card is read now for them. `examples`:
        tool examples (`{"question", "args": {"task": ...}, "result"}`), as for
        `lw.Agent.as_tool`, so a small model sees a worked delegation."""
        name, description = name or self.name, description or self.description
        if name is None or description is None:
            card = self.card()
            name = name or _tool_name(str(card.get("name") or "remote_agent"))
            description = description or f"Ask the remote agent {card.get('name', name)!r}: " \
                                         f"{card.get('description') or 'an A2A agent'}"
        return A2ATool(self, name, description, examples)


class A2ATool(Tool):
    """An A2AAgent as a Tool (`A2AAgent.as_tool`). Its calls dedupe on their call key (a
    resumed call follows the remote task it started), so the gate never holds one as in
    doubt unless the remote task cannot be found again."""

    agent: A2AAgent

    def __init__(self, agent: A2AAgent, name: str, description: str,
                 examples: Sequence[Mapping[str, Any]] | None = None) -> None:
        def call(task: str, context: str = "") -> Coroutine[Any, Any, Any]:
            text = task if not context else f"{task}\n\nContext: {context}"
            return Delegation(agent, name, text).run()  # either driver awaits it (the sync one on its own loop)

        call.__doc__ = "Give the remote agent a task.\n\nArgs:\n    task: what to do, in plain words\n" \
                       "    context: anything the agent should know (optional)"
        super().__init__(call, name=name, description=description, side_effects="write",
                         dedupes_on_call_key=True, examples=examples)
        self.agent = agent

    def recorded_child(self, ctx: RunContext, key: str) -> str | None:
        """A resumed parent replays this call's recorded result: keep the remote task's
        record (from the journal) in the parent's trace and the step's meta, as when it ran."""
        record = _recorded(ctx.journal, key)
        if record is None or not isinstance(record.get("task_id"), str):
            return None
        child_id = f"{ctx.call_run_id()[0]}:{key}"
        trace = Trace(str(record.get("message", "")), "a2a", run_id=child_id, meta={"a2a": record})
        ctx.adopt(key, child_id, trace, {"a2a_task_id": record["task_id"]})
        ctx.gate.children.pop(key, None)
        return child_id


class InDoubt(Exception):
    """The remote task of a resumed call may exist, and cannot be found again."""


class Delegation:
    """One call of an A2ATool: the message sent (or the task found again), the task
    followed to its end, its events passed on, its id journaled, its result made."""

    def __init__(self, agent: A2AAgent, tool: str, text: str) -> None:
        self.agent, self.tool, self.text = agent, tool, text
        info, bound = current_call(), bound_call()
        parent = bound[0] if bound is not None and isinstance(bound[0], RunContext) else None
        self.parent = parent
        self.key = None if bound is None else bound[1]
        self.attempt = 1 if info is None else info.attempt
        seed = f"loopwright:{info.key}" if info is not None else f"loopwright:{uuid.uuid4()}"
        self.context_id = str(uuid.uuid5(uuid.NAMESPACE_URL, seed))
        self.message_id = str(uuid.uuid5(uuid.NAMESPACE_URL, seed + ":message"))
        self.child_id = None if info is None else info.key
        self.journal: Journal | None = None if parent is None else parent.journal
        self.events: Emitter | None = None
        if parent is not None and parent.events is not None and self.child_id is not None:
            self.events = parent.events.child(self.child_id, tool)
        self.task_id: str | None = None
        self.reply: str | None = None  # a remote that answers with a message, no task
        self.steps = 0

    async def run(self) -> Any:
        """The remote answer, or a ToolError; cancelling this cancels the remote task."""
        if self.events is not None:
            self.events.started(self.text, "a2a")
        try:
            async with asyncio.timeout(self.agent.timeout_s) as clock:
                try:
                    async with self._client() as client:
                        task = await self._task(client)
                except asyncio.CancelledError:
                    if not clock.expired():  # the parent was cancelled: so is the remote task
                        await self._cancel()
                    raise
        except TimeoutError:  # abandoned, not stopped: in doubt, and a resume follows it
            result: Any = ToolError(self.tool, f"in doubt: the remote task {self.task_id or '(no id yet)'} at "
                                    f"{self.agent.url} did not end within {self.agent.timeout_s:g}s", "timeout")
            task = None
        except InDoubt as exc:
            result, task = ToolError(self.tool, str(exc), "in_doubt"), None
        except TRANSPORT_ERRORS as exc:
            result = ToolError(self.tool, f"the remote agent at {self.agent.url} failed: {type(exc).__name__}: "
                               f"{exc}".rstrip(": "))
            task = None
        else:
            result = self._result(task)
        self._adopt(task, result)
        return result

    # -- the remote task ------------------------------------------------------------------

    @asynccontextmanager
    async def _client(self) -> AsyncIterator[Client]:
        async with AsyncExitStack() as stack:
            http = self.agent.httpx_client
            if http is None:
                http = await stack.enter_async_context(httpx.AsyncClient(timeout=self.agent.timeout_s))
            config = ClientConfig(streaming=True, httpx_client=http,
                                  supported_protocol_bindings=["JSONRPC", "HTTP+JSON"])
            client = await ClientFactory(config).create_from_url(self.agent.url)
            stack.push_async_callback(client.close)  # a shared httpx client is left open
            yield client

    async def _task(self, client: Client) -> Task | None:
        """Send the message, or follow the task a crash cut this call off from; the task
        as it ended (None when the remote answered with a message and made no task)."""
        found = _recorded(self.journal, self.key)
        task_id = None if found is None else found.get("task_id")
        if isinstance(task_id, str):
            self.task_id = task_id
        elif self.attempt > 1:  # the crash may have fallen between the send and the journal
            self._remember(await self._listed(client))
        if self.task_id is None:
            message = Message(message_id=self.message_id, role=Role.ROLE_USER, context_id=self.context_id,
                              parts=[new_text_part(self.text)])
            async for response in client.send_message(SendMessageRequest(message=message)):
                self._see(response)
            if self.task_id is None:
                return None
        return await self._follow(client, self.task_id)

    async def _listed(self, client: Client) -> str | None:
        """The task this call's context id made before a crash, if the server has one."""
        try:
            page = await client.list_tasks(ListTasksRequest(context_id=self.context_id))
        except TRANSPORT_ERRORS as exc:
            raise InDoubt(
                f"this call may have reached the remote agent at {self.agent.url} before the run stopped; its task "
                f"id was not recorded, and the server could not list the tasks of context {self.context_id} "
                f"({type(exc).__name__}: {exc}), so the message was not sent again") from None
        return page.tasks[0].id if page.tasks else None

    async def _follow(self, client: Client, task_id: str) -> Task:
        """The task once it ended or waits for input: its stream while the server streams
        it, GetTask after (a server that cannot stream it is asked again, less often)."""
        for wait in itertools.chain(POLL_S, itertools.repeat(POLL_S[-1])):
            task = await client.get_task(GetTaskRequest(id=task_id))
            if task.status.state in ENDED or task.status.state in WAITING:
                return task
            try:
                async for response in client.subscribe(SubscribeToTaskRequest(id=task_id)):
                    self._see(response)
                continue  # the stream ended: read where the task stands
            except A2AError:
                await asyncio.sleep(wait)  # cannot stream it (ended meanwhile, or unsupported)
        raise AssertionError("unreachable")

    async def _cancel(self) -> None:
        """CancelTask for this call's remote task (found by its context id when no response
        has named it yet)."""
        try:
            async with self._client() as client:
                task_id = self.task_id or await asyncio.wait_for(self._listed(client), 10)
                if task_id is not None:
                    await asyncio.wait_for(client.cancel_task(CancelTaskRequest(id=task_id)), 10)
        except (*TRANSPORT_ERRORS, InDoubt, TimeoutError):
            pass  # best effort: the parent is going away; the task's id is in the journal and the trace

    # -- what comes back ------------------------------------------------------------------

    def _see(self, response: StreamResponse) -> None:
        """Take the task id from a response, and pass its progress on as a child event."""
        kind = response.WhichOneof("payload")
        if kind == "task":
            self._remember(response.task.id)
            self._progress(response.task.status.state, get_message_text(response.task.status.message))
        elif kind == "status_update":
            update = response.status_update
            self._remember(update.task_id)
            self._progress(update.status.state, get_message_text(update.status.message))
        elif kind == "artifact_update":
            self._remember(response.artifact_update.task_id)
            self._progress(None, get_artifact_text(response.artifact_update.artifact))
        elif kind == "message":
            self.reply = _message_text(response.message)
            self._progress(None, self.reply)

    def _remember(self, task_id: str | None) -> None:
        """Journal the remote task's id the first time a response names it."""
        if not task_id or self.task_id is not None:
            return
        self.task_id = task_id
        if self.journal is not None and self.key is not None:
            self.journal.record_note(self.key, NOTE, {"url": self.agent.url, "task_id": task_id,
                                                      "context_id": self.context_id, "message": self.text})

    def _progress(self, state: int | None, text: str) -> None:
        if self.events is None or not text:
            return
        self.steps += 1
        meta: dict[str, Any] = {"a2a_task_id": self.task_id}
        if state is not None:
            meta["state"] = TaskState.Name(state)
        self.events.step(Step(self.steps, "remote", observation=text, meta=meta))

    def _result(self, task: Task | None) -> Any:
        if task is None:
            return self.reply if self.reply is not None else ToolError(
                self.tool, f"the remote agent at {self.agent.url} answered with neither a task nor a message")
        state, said = task.status.state, get_message_text(task.status.message)
        if state == TaskState.TASK_STATE_COMPLETED:
            answer = "\n".join(t for a in task.artifacts if (t := get_artifact_text(a)))
            data = [d for a in task.artifacts for d in get_data_parts(a.parts)]
            return answer or (json.dumps(data, default=str) if data else said)
        if state in WAITING:
            return ToolError(self.tool, f"the remote agent asks for input on task {task.id} "
                             f"({TaskState.Name(state)}): {said or '(no question given)'}. It was not answered "
                             "here; the task stays open for a person to answer through an A2A client")
        return ToolError(self.tool, f"the remote task {task.id} ended {TaskState.Name(state)}"
                         + (f": {said}" if said else ""))

    def _adopt(self, task: Task | None, result: Any) -> None:
        """The remote task in the parent's trace (children, the step's meta), and its end
        as the child run's last event."""
        failed = isinstance(result, ToolError)
        trace = Trace(self.text, "a2a", run_id=self.child_id, final_answer=None if failed else str(result),
                      stopped_reason="error" if failed else "final")
        trace.meta["a2a"] = {"url": self.agent.url, "task_id": self.task_id, "context_id": self.context_id,
                             "state": None if task is None else TaskState.Name(task.status.state)}
        if failed:
            trace.meta["error"] = result.message
        parent, key = self.parent, self.key
        if parent is not None and key is not None and self.child_id is not None and key in parent.in_flight:
            parent.adopt(key, self.child_id, trace, {"a2a_task_id": self.task_id} if self.task_id else None)
        if self.events is not None:
            self.events.end(trace)


def _recorded(journal: Journal | None, key: str | None) -> Mapping[str, Any] | None:
    """The remote task that call `key` started, as its journal note keeps it."""
    if journal is None or key is None:
        return None
    found = journal.recorded_note(key, NOTE)
    return found if isinstance(found, dict) else None


def _message_text(message: Message) -> str:
    text = get_message_text(message)
    data = get_data_parts(message.parts)
    return text or (json.dumps(data, default=str) if data else "")


def _tool_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", name).strip("_")[:64] or "remote_agent"


__all__ = ["A2AAgent", "A2ATool"]
