"""The ASGI app: start a run by POST, watch it as AG-UI events over server-sent events,
answer its approvals by POST.

    POST /runs                        {"task": "..."} -> 201 {"run_id", "thread_id", "events"}
    GET  /runs                        {"runs": [...]}: the runs the server holds, newest first
    GET  /runs/{run_id}               one run: its task, state, outcome and open approvals
    GET  /runs/{run_id}/events        text/event-stream: every AG-UI event of the run from its
                                      start (a late or second watcher misses nothing), then live;
                                      each has an SSE id, and a reconnect with Last-Event-ID
                                      resumes after it
    POST /runs/{run_id}/approvals/{key}   {"approved": true|false, "reason": "..."} -> 200
    POST /agui                        an AG-UI RunAgentInput (the last user message is the task);
                                      the response is the run's event stream (AG-UI's HttpAgent)
    GET  /                            the page that watches a run (page=True)

Every request passes loopwright.httpguard first: Host, token, Origin, JSON-only mutations,
the body limit. Run ids are the server's own, random; an AG-UI client's runId only labels
its stream. An approval is answered by a random key made for that one request, never by
anything a page could work out from the call.

Each run is a task on the server's event loop driving `aiter_events`; its events are mapped
(ui/agui.py), encoded once with AG-UI's encoder and kept, so every watcher reads the same
frames. A gated tool asks the run's approver, which the async driver calls on a thread of
its own (not the shared pool): it announces the request, then waits on a future that the
approval POST completes; no answer within `approval_timeout_s` is a denial. At most
`max_runs` runs go at once (429 past that). Finished runs are kept in the order they
finished, at most `keep_runs` of them and `keep_bytes` of frames. Shutting the app down
cancels the runs still going (they end "interrupted") and denies what they wait for.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
import secrets
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Final

from ag_ui.core import BaseEvent, RunAgentInput, RunErrorEvent, RunFinishedEvent
from ag_ui.encoder import EventEncoder
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import loopwright as lw
from loopwright.httpguard import MAX_BODY, Access, Guard
from loopwright.policy import Policy
from loopwright.runtime import MODES
from loopwright.safety import ApprovalRequest, Approver, Decision
from loopwright.tools import ToolRegistry
from loopwright.tools.toolset import Tools, as_registry
from loopwright.ui.agui import AGUIMapper

PAGE_FILES: Final = {"/": ("serve.html", "text/html; charset=utf-8"),
                     "/serve.js": ("serve.js", "text/javascript; charset=utf-8"),
                     "/serve.css": ("serve.css", "text/css; charset=utf-8")}
"""The page that watches a run: package data in loopwright/interfaces/data/."""

_APP_OWNS: Final = ("task", "policy", "registry", "approver", "run_id")
"""Options of aiter_events the app sets itself for each run."""

_CHUNK: Final = 64 * 1024
"""Kept frames go to a watcher in writes of at most this many bytes: a slow reader of a
long run holds one such piece, not a copy of the run or of its longest event."""
_EVENT_ID: Final = re.compile(r"[0-9]{1,18}")
_NO_STORE: Final = {"Cache-Control": "no-store"}


@dataclass
class Approval:
    """A request a run waits on, and the future its answer completes."""

    request: ApprovalRequest
    agent: str | None
    future: concurrent.futures.Future[Decision]

    def describe(self, key: str) -> dict[str, Any]:
        return {**self.request.to_dict(), "key": key, "agent": self.agent}


@dataclass
class LiveRun:
    """One run the app started: its AG-UI frames so far, its outcome, what it waits for.
    Touched only on the event loop's thread."""

    run_id: str
    thread_id: str
    task: str
    mapper: AGUIMapper
    started_at: float = field(default_factory=time.time)
    frames: list[bytes] = field(default_factory=list)
    size: int = 0
    pending: dict[str, Approval] = field(default_factory=dict)
    driver: asyncio.Task[None] | None = None
    done: bool = False
    finished_at: float | None = None
    result: dict[str, Any] | None = None  # RUN_FINISHED's result
    error: str | None = None  # RUN_ERROR's message
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def publish(self, events: Iterable[BaseEvent]) -> None:
        """Encode and keep each event, and wake every watcher."""
        for event in events:
            frame = f"id: {len(self.frames)}\n{_ENCODER.encode(event)}".encode()  # a reconnect resumes after it
            self.frames.append(frame)
            self.size += len(frame)
            if isinstance(event, RunFinishedEvent):
                self.result = dict(event.result or {})
            elif isinstance(event, RunErrorEvent):
                self.error = event.message
        self._wake()

    def close(self) -> None:
        self.done = True
        self.finished_at = time.time()
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def watch(self, start: int = 0) -> AsyncIterator[bytes]:
        """Every frame from number `start`, then the live ones until the run ends. Frames
        ready together go out as one write, a long one in several: no write is over
        `_CHUNK` bytes."""
        frame, offset = start, 0
        while True:
            changed = self._changed  # taken before looking: a frame published after is seen
            if frame < len(self.frames):
                pieces, size = [], 0
                while frame < len(self.frames) and size < _CHUNK:
                    data = self.frames[frame]
                    piece = data[offset:offset + _CHUNK - size]
                    pieces.append(piece)
                    size += len(piece)
                    offset += len(piece)
                    if offset == len(data):
                        frame, offset = frame + 1, 0
                yield b"".join(pieces)
            elif self.done:
                return
            else:
                await changed.wait()

    @property
    def state(self) -> str:
        if self.done:
            return "error" if self.error is not None else "finished"
        return "waiting" if self.pending else "running"

    def describe(self, root: str = "") -> dict[str, Any]:
        result = self.result or {}
        return {"run_id": self.run_id, "thread_id": self.thread_id, "task": self.task, "state": self.state,
                "stopped_reason": result.get("stopped_reason"), "answer": result.get("answer"),
                "error": self.error, "started_at": self.started_at, "finished_at": self.finished_at,
                "events": f"{root}/runs/{self.run_id}/events", "bytes": self.size,
                "approvals": [approval.describe(key) for key, approval in self.pending.items()]}


_ENCODER: Final = EventEncoder()


class TooManyRuns(Exception):
    """The server runs as many runs as it may."""


class RunServer:
    """The app's state: the runs it holds and how it starts one."""

    def __init__(self, policy: Policy, registry: ToolRegistry, mode: str, options: Mapping[str, Any],
                 approval_timeout_s: float, keep_runs: int, keep_bytes: int, max_runs: int) -> None:
        self.policy, self.registry, self.mode = policy, registry, mode
        self.options = dict(options)
        self.approval_timeout_s = approval_timeout_s
        self.keep_runs, self.keep_bytes, self.max_runs = keep_runs, keep_bytes, max_runs
        self.runs: dict[str, LiveRun] = {}
        self.finished: OrderedDict[str, int] = OrderedDict()  # run id -> its bytes, oldest finished first
        self.kept_bytes = 0

    @property
    def going(self) -> int:
        return sum(not live.done for live in self.runs.values())

    def start(self, task: str, thread_id: str | None = None, agui_run_id: str | None = None) -> LiveRun:
        """Start a run under a new random id; TooManyRuns past `max_runs` runs going."""
        if self.going >= self.max_runs:
            raise TooManyRuns(f"{self.max_runs} runs are going, the most this server runs at once")
        run_id = uuid.uuid4().hex
        mapper = AGUIMapper(thread_id or run_id, run_id=agui_run_id, stream_approvals=False)
        live = self.runs[run_id] = LiveRun(run_id, thread_id or run_id, task, mapper)
        loop = asyncio.get_running_loop()
        live.driver = loop.create_task(self._drive(live, self._approver(live, loop)))
        return live

    async def _drive(self, live: LiveRun, approver: Approver) -> None:
        """Run the task to its end, publishing its events; the one place a run's failure
        becomes RUN_ERROR."""
        try:
            events = lw.aiter_events(live.task, self.policy, self.registry, self.mode, approver=approver,
                                     run_id=live.run_id, **self.options)
            async for event in events:
                live.publish(live.mapper.map(event))
        except asyncio.CancelledError:
            if not live.mapper.finished:
                live.publish(live.mapper.fail(RuntimeError("the server stopped the run")))
            raise
        except Exception as exc:
            live.publish(live.mapper.fail(exc))
        finally:
            for approval in live.pending.values():
                approval.future.cancel()  # the approver's thread sees a denial
            live.pending.clear()  # an ended run waits for nothing, whether or not its loop runs on to hear the denial
            live.close()
            self._keep(live)

    def _approver(self, live: LiveRun, loop: asyncio.AbstractEventLoop) -> Approver:
        timeout = self.approval_timeout_s

        def ask(key: str, approval: Approval) -> None:  # on the loop
            if live.done:  # the run ended before its question got here
                approval.future.cancel()
                return
            live.pending[key] = approval
            live.publish(live.mapper.approval_requested(approval.request, approval.agent, key))

        def told(key: str, decision: Decision) -> None:  # on the loop
            live.pending.pop(key, None)
            if not live.done:  # an ended run's stream ends with its RUN_FINISHED or RUN_ERROR
                live.publish(live.mapper.approval_decided(key, decision))

        def approver(request: ApprovalRequest) -> Decision:
            """Called by the driver on a thread of its own: announce the request under a
            random key, wait for the POST that answers it."""
            key = secrets.token_urlsafe(24)
            approval = Approval(request, request.meta.get("agent"), concurrent.futures.Future())
            try:
                loop.call_soon_threadsafe(ask, key, approval)
                decision = approval.future.result(timeout=timeout)
            except concurrent.futures.TimeoutError:
                decision = Decision(False, f"no answer within {timeout:g}s")
            except (concurrent.futures.CancelledError, RuntimeError):  # the run or the loop ended
                decision = Decision(False, "the run ended before an answer")
            try:
                loop.call_soon_threadsafe(told, key, decision)
            except RuntimeError:  # the loop closed: nobody is left to tell
                pass
            return decision

        return approver

    def _keep(self, live: LiveRun) -> None:
        """As a run ends: keep the runs that finished last, at most `keep_runs` of them and
        `keep_bytes` of frames; forget the ones that finished first (runs still going are
        never forgotten)."""
        self.finished[live.run_id] = live.size
        self.kept_bytes += live.size
        while self.finished and (len(self.finished) > self.keep_runs or self.kept_bytes > self.keep_bytes):
            run_id, size = self.finished.popitem(last=False)
            self.kept_bytes -= size
            self.runs.pop(run_id, None)

    async def shutdown(self) -> None:
        drivers = [live.driver for live in self.runs.values() if live.driver is not None and not live.driver.done()]
        for driver in drivers:
            driver.cancel()
        for live in self.runs.values():
            for approval in live.pending.values():
                approval.future.cancel()
        await asyncio.gather(*drivers, return_exceptions=True)


def app(policy: Policy, registry: Tools, mode: str = "react", *, approval_timeout_s: float = 300.0,
        page: bool = True, keep_runs: int = 100, keep_bytes: int = 64 * 1024 * 1024, max_runs: int = 16,
        token: str | None = None, allowed_hosts: Iterable[str] = (), allowed_origins: Iterable[str] = (),
        max_body: int = MAX_BODY, **options: Any) -> Starlette:
    """An ASGI app that runs tasks with this policy and these tools and streams each run
    as AG-UI events over SSE. `options` are the run options of `lw.run` (max_steps,
    token_budget, timeout_s, store, ...), checked here; the app sets the approver (web
    approvals: a gated tool waits up to `approval_timeout_s` for a POST, then is denied)
    and each run's id. `page`: also serve the page that watches a run at `/`.

    Who may call it (loopwright.httpguard): with no `token`, only connections to a
    loopback address; with one, every request but the page's files must carry it as
    `Authorization: Bearer TOKEN`. Host must be a loopback name on the server's port, the
    address connected to, or one of `allowed_hosts`; a page's Origin the server's own or
    one of `allowed_origins`; a POST is JSON of at most `max_body` bytes. At most
    `max_runs` runs go at once; the `keep_runs` runs that finished last stay readable, up
    to `keep_bytes` of events in all."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; the modes are {', '.join(sorted(MODES))}")
    for name in _APP_OWNS:
        if name in options:
            raise TypeError(f"loopwright.ui.app sets {name!r} itself; it is not a run option here")
    try:
        lw.RunSpec("task", mode, **options)  # an unknown option, or one for another mode, fails now
    except TypeError as exc:
        raise TypeError(f"loopwright.ui.app: {exc} (options are the keywords of lw.run)") from None
    if approval_timeout_s <= 0:
        raise ValueError(f"approval_timeout_s must be positive, got {approval_timeout_s!r}")
    for name, value in (("keep_runs", keep_runs), ("keep_bytes", keep_bytes), ("max_runs", max_runs)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value!r}")
    access = Access(token, tuple(allowed_hosts), tuple(allowed_origins), max_body,
                    open_paths=frozenset(PAGE_FILES) if page else frozenset())
    server = RunServer(policy, as_registry(registry), mode, options, approval_timeout_s, keep_runs, keep_bytes, max_runs)
    routes = _routes(server)
    if page:
        routes += [Route(path, _page_file(name, media), methods=["GET"]) for path, (name, media) in PAGE_FILES.items()]

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await server.shutdown()

    built = Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(Guard, access=access)])
    built.state.runs = server
    return built


class _Refused(Exception):
    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status, self.why = status, why


def _routes(server: RunServer) -> list[Route]:
    async def start_run(request: Request) -> Response:
        body = await _json(request)
        task = body.get("task") if isinstance(body, dict) else None
        if not isinstance(task, str) or not task.strip():
            return _error(422, 'send {"task": "..."} with a non-empty task')
        live = server.start(task)
        return JSONResponse({"run_id": live.run_id, "thread_id": live.thread_id,
                             "events": f"{_root(request)}/runs/{live.run_id}/events"},
                            status_code=201, headers=_NO_STORE)

    async def list_runs(request: Request) -> Response:
        newest = sorted(server.runs.values(), key=lambda live: live.started_at, reverse=True)
        return JSONResponse({"runs": [live.describe(_root(request)) for live in newest]}, headers=_NO_STORE)

    async def one_run(request: Request) -> Response:
        return JSONResponse(_run(server, request).describe(_root(request)), headers=_NO_STORE)

    async def events(request: Request) -> Response:
        live = _run(server, request)
        last = request.headers.get("last-event-id")  # an EventSource reconnecting
        if last is not None and not _EVENT_ID.fullmatch(last):
            return _error(400, "Last-Event-ID is not an event id of this stream")
        return _stream(live, int(last) + 1 if last is not None else 0)

    async def answer(request: Request) -> Response:
        live = _run(server, request)
        key = request.path_params["key"]
        body = await _json(request)
        if (not isinstance(body, dict) or not isinstance(body.get("approved"), bool)
                or not isinstance(body.get("reason", ""), str | None)):
            return _error(422, 'send {"approved": true} or {"approved": false, "reason": "..."}')
        approval = live.pending.get(key)
        if approval is None or approval.future.done():
            return _error(409, f"run {live.run_id!r} waits for no approval under that key")
        approved: bool = body["approved"]
        decision = Decision(approved, body.get("reason") or ("approved" if approved else "denied in the web page"))
        approval.future.set_result(decision)
        return JSONResponse({"key": key, **decision.to_dict()}, headers=_NO_STORE)

    async def agui(request: Request) -> Response:
        try:
            given = RunAgentInput.model_validate(await _json(request))
        except (ValueError, RecursionError) as exc:
            return _error(422, f"not an AG-UI RunAgentInput: {str(exc)[:500]}")
        task = next((m.content for m in reversed(given.messages)
                     if m.role == "user" and isinstance(m.content, str) and m.content.strip()), None)
        if task is None:
            return _error(422, "the input has no user message with text")
        return _stream(server.start(task, thread_id=given.thread_id, agui_run_id=given.run_id))

    def guarded(handler: Any) -> Any:
        async def handle(request: Request) -> Response:
            try:
                return await handler(request)  # type: ignore[no-any-return]
            except _Refused as refused:
                return _error(refused.status, refused.why)
            except TooManyRuns as exc:
                return JSONResponse({"error": str(exc)}, status_code=429, headers={**_NO_STORE, "Retry-After": "5"})

        return handle

    return [
        Route("/runs", guarded(start_run), methods=["POST"]),
        Route("/runs", guarded(list_runs), methods=["GET"]),
        Route("/runs/{run_id}", guarded(one_run), methods=["GET"]),
        Route("/runs/{run_id}/events", guarded(events), methods=["GET"]),
        Route("/runs/{run_id}/approvals/{key}", guarded(answer), methods=["POST"]),
        Route("/agui", guarded(agui), methods=["POST"]),
    ]


def _run(server: RunServer, request: Request) -> LiveRun:
    live = server.runs.get(request.path_params["run_id"])
    if live is None:
        raise _Refused(404, f"no run {request.path_params['run_id'][:100]!r}")
    return live


def _root(request: Request) -> str:
    return str(request.scope.get("root_path", ""))


def _error(status: int, why: str) -> Response:
    return JSONResponse({"error": why}, status_code=status, headers=_NO_STORE)


def _stream(live: LiveRun, start: int = 0) -> StreamingResponse:
    return StreamingResponse(live.watch(start), media_type=_ENCODER.get_content_type(),
                             headers={**_NO_STORE, "X-Accel-Buffering": "no"})


async def _json(request: Request) -> Any:
    """The body as JSON (400 when it is not JSON; the guard has checked its type and size)."""
    try:
        return json.loads(await request.body())
    except (ValueError, RecursionError):  # RecursionError: nesting past what the parser takes
        raise _Refused(400, "the body is not JSON") from None


def _page_file(name: str, media: str) -> Any:
    async def serve(_: Request) -> Response:
        data = resources.files("loopwright.interfaces").joinpath("data", "serve", name).read_bytes()
        return Response(data, media_type=media, headers={"Cache-Control": "no-cache"})

    return serve


__all__ = ["Approval", "LiveRun", "RunServer", "TooManyRuns", "app"]
