"""The ASGI app: start a run by POST, watch it as AG-UI events over server-sent events,
answer its approvals by POST.

    POST /runs                        {"task": "..."} -> 201 {"run_id", "thread_id", "events"}
    GET  /runs/{run_id}/events        text/event-stream: every AG-UI event of the run from its
                                      start (a late or second watcher misses nothing), then live;
                                      each has an SSE id, and a reconnect with Last-Event-ID
                                      resumes after it
    POST /runs/{run_id}/approvals/{key}   {"approved": true|false, "reason": "..."} -> 200
    POST /agui                        an AG-UI RunAgentInput (the last user message is the task);
                                      the response is the run's event stream (AG-UI's HttpAgent)
    GET  /                            the page that watches a run (page=True)

Each run is a task on the server's event loop driving `aiter_events`; its events are mapped
(ui/agui.py), encoded once with AG-UI's encoder and kept, so every watcher reads the same
frames. A gated tool asks the run's approver, which the async driver calls in a worker
thread: it announces the request, then waits on a future that the approval POST completes;
no answer within `approval_timeout_s` is a denial. Shutting the app down cancels the runs
still going (they end "interrupted") and denies what they wait for.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Final

from ag_ui.core import BaseEvent, RunAgentInput
from ag_ui.encoder import EventEncoder
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import loopwright as lw
from loopwright.modes import MODES
from loopwright.policy import Policy
from loopwright.safety import ApprovalRequest, Approver, Decision
from loopwright.tools import ToolRegistry
from loopwright.ui.agui import AGUIMapper

PAGE_FILES: Final = {"/": ("serve.html", "text/html; charset=utf-8"),
                     "/serve.js": ("serve.js", "text/javascript; charset=utf-8"),
                     "/serve.css": ("serve.css", "text/css; charset=utf-8")}
"""The page that watches a run: package data in loopwright/interfaces/data/."""

_APP_OWNS: Final = ("task", "policy", "registry", "approver", "run_id")
"""Options of aiter_events the app sets itself for each run."""


@dataclass
class LiveRun:
    """One run the app started: its AG-UI frames so far, who watches, what waits."""

    run_id: str
    thread_id: str
    mapper: AGUIMapper
    frames: list[str] = field(default_factory=list)
    watchers: list[asyncio.Queue[str | None]] = field(default_factory=list)
    pending: dict[str, concurrent.futures.Future[Decision]] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    done: bool = False

    def publish(self, events: Iterable[BaseEvent]) -> None:
        """Encode and keep each event, and hand it to every watcher (on the loop thread)."""
        for event in events:
            frame = f"id: {len(self.frames)}\n{_ENCODER.encode(event)}"  # a reconnect resumes after it
            self.frames.append(frame)
            for queue in self.watchers:
                queue.put_nowait(frame)

    def close(self) -> None:
        self.done = True
        for queue in self.watchers:
            queue.put_nowait(None)

    async def watch(self, start: int = 0) -> AsyncIterator[str]:
        """Every frame from number `start`, then the live ones until the run ends. Frames
        that are ready together go out as one write (a fast stream is not a write per token)."""
        queue: asyncio.Queue[str | None] = asyncio.Queue()
        backlog = "".join(self.frames[start:])  # taken with the subscription, on one thread: no gap
        ended = self.done
        if not ended:
            self.watchers.append(queue)
        try:
            if backlog:
                yield backlog
            while not ended:
                ready = [await queue.get()]
                while not queue.empty():
                    ready.append(queue.get_nowait())
                ended = ready[-1] is None  # close() puts None last
                text = "".join(frame for frame in ready if frame is not None)
                if text:
                    yield text
        finally:
            if queue in self.watchers:
                self.watchers.remove(queue)


_ENCODER: Final = EventEncoder()


class RunServer:
    """The app's state: the runs it started and how it starts one."""

    def __init__(self, policy: Policy, registry: ToolRegistry, mode: str, options: Mapping[str, Any],
                 approval_timeout_s: float, keep_runs: int) -> None:
        self.policy, self.registry, self.mode = policy, registry, mode
        self.options = dict(options)
        self.approval_timeout_s = approval_timeout_s
        self.keep_runs = keep_runs
        self.runs: dict[str, LiveRun] = {}

    def start(self, task: str, thread_id: str | None = None, run_id: str | None = None) -> LiveRun:
        run_id = run_id or uuid.uuid4().hex[:16]
        if run_id in self.runs:
            raise ValueError(f"run id {run_id!r} is already taken on this server")
        live = LiveRun(run_id, thread_id or run_id, AGUIMapper(thread_id or run_id, stream_approvals=False))
        self.runs[run_id] = live
        loop = asyncio.get_running_loop()
        live.task = loop.create_task(self._drive(live, task, self._approver(live, loop)))
        return live

    async def _drive(self, live: LiveRun, task: str, approver: Approver) -> None:
        """Run the task to its end, publishing its events; the one place a run's failure
        becomes RUN_ERROR."""
        try:
            events = lw.aiter_events(task, self.policy, self.registry, self.mode, approver=approver,
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
            for key, future in list(live.pending.items()):
                if future.cancel():  # the approver thread sees a denial
                    live.pending.pop(key, None)
            live.close()
            self._forget_finished()

    def _approver(self, live: LiveRun, loop: asyncio.AbstractEventLoop) -> Approver:
        timeout = self.approval_timeout_s

        def approver(request: ApprovalRequest) -> Decision:
            """Called by the driver in a worker thread: announce the request, wait for a POST."""
            future: concurrent.futures.Future[Decision] = concurrent.futures.Future()
            live.pending[request.key] = future
            agent = request.meta.get("agent")  # a child agent's request names it
            loop.call_soon_threadsafe(lambda: live.publish(live.mapper.approval_requested(request, agent)))
            try:
                decision = future.result(timeout=timeout)
            except concurrent.futures.TimeoutError:
                decision = Decision(False, f"no answer within {timeout:g}s")
            except concurrent.futures.CancelledError:
                decision = Decision(False, "the run ended before an answer")
            finally:
                live.pending.pop(request.key, None)
            try:
                loop.call_soon_threadsafe(
                    lambda: live.publish(live.mapper.approval_decided(request.key, decision)))
            except RuntimeError:  # the loop closed: nobody is left to tell
                pass
            return decision

        return approver

    def _forget_finished(self) -> None:
        """As a run ends: keep the `keep_runs` most recent finished runs, drop older ones."""
        finished = [rid for rid, live in self.runs.items() if live.done]
        for rid in finished[: max(0, len(finished) - self.keep_runs)]:
            del self.runs[rid]

    async def shutdown(self) -> None:
        tasks = [live.task for live in self.runs.values() if live.task is not None and not live.task.done()]
        for task in tasks:
            task.cancel()
        for live in self.runs.values():
            for future in list(live.pending.values()):
                future.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def app(policy: Policy, registry: ToolRegistry, mode: str = "react", *, approval_timeout_s: float = 300.0,
        page: bool = True, keep_runs: int = 100, **options: Any) -> Starlette:
    """An ASGI app that runs tasks with this policy and these tools and streams each run
    as AG-UI events over SSE. `options` are the run options of `lw.run` (max_steps,
    token_budget, timeout_s, store, ...), checked here; the app sets the approver (web
    approvals: a gated tool waits up to `approval_timeout_s` for a POST, then is denied)
    and each run's id. `page`: also serve the page that watches a run at `/`. The
    `keep_runs` most recent finished runs stay readable."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; the modes are {', '.join(sorted(MODES))}")
    for name in _APP_OWNS:
        if name in options:
            raise TypeError(f"loopwright.ui.app sets {name!r} itself; it is not a run option here")
    try:
        inspect.signature(lw.aiter_events).bind("task", policy, registry, mode, **options)
    except TypeError as exc:
        raise TypeError(f"loopwright.ui.app: {exc} (options are the keywords of lw.run)") from None
    if approval_timeout_s <= 0:
        raise ValueError(f"approval_timeout_s must be positive, got {approval_timeout_s!r}")
    server = RunServer(policy, registry, mode, options, approval_timeout_s, keep_runs)

    async def start_run(request: Request) -> Response:
        body = await _json(request)
        task = body.get("task") if isinstance(body, dict) else None
        if not isinstance(task, str) or not task.strip():
            return JSONResponse({"error": 'send {"task": "..."} with a non-empty task'}, status_code=422)
        live = server.start(task)
        return JSONResponse({"run_id": live.run_id, "thread_id": live.thread_id,
                             "events": f"{request.scope.get('root_path', '')}/runs/{live.run_id}/events"},
                            status_code=201)

    async def events(request: Request) -> Response:
        live = server.runs.get(request.path_params["run_id"])
        if live is None:
            return JSONResponse({"error": f"no run {request.path_params['run_id']!r}"}, status_code=404)
        last = request.headers.get("last-event-id", "")  # an EventSource reconnecting
        return _stream(live, int(last) + 1 if last.isdigit() else 0)

    async def answer(request: Request) -> Response:
        live = server.runs.get(request.path_params["run_id"])
        if live is None:
            return JSONResponse({"error": f"no run {request.path_params['run_id']!r}"}, status_code=404)
        key = request.path_params["key"]
        body = await _json(request)
        if not isinstance(body, dict) or not isinstance(body.get("approved"), bool):
            return JSONResponse({"error": 'send {"approved": true} or {"approved": false, "reason": "..."}'},
                                status_code=422)
        future = live.pending.get(key)
        if future is None or future.done():
            return JSONResponse({"error": f"run {live.run_id!r} waits for no approval {key!r}"}, status_code=409)
        decision = Decision(body["approved"], str(body.get("reason") or ("approved" if body["approved"]
                                                                         else "denied in the web page")))
        future.set_result(decision)
        return JSONResponse({"key": key, **decision.to_dict()})

    async def agui(request: Request) -> Response:
        try:
            given = RunAgentInput.model_validate(await _json(request))
        except ValueError as exc:
            return JSONResponse({"error": f"not an AG-UI RunAgentInput: {exc}"}, status_code=422)
        task = next((m.content for m in reversed(given.messages)
                     if m.role == "user" and isinstance(m.content, str) and m.content.strip()), None)
        if task is None:
            return JSONResponse({"error": "the input has no user message with text"}, status_code=422)
        try:
            live = server.start(task, thread_id=given.thread_id, run_id=given.run_id)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=409)
        return _stream(live)

    routes = [
        Route("/runs", start_run, methods=["POST"]),
        Route("/runs/{run_id}/events", events, methods=["GET"]),
        Route("/runs/{run_id}/approvals/{key}", answer, methods=["POST"]),
        Route("/agui", agui, methods=["POST"]),
    ]
    if page:
        routes += [Route(path, _page_file(name, media)) for path, (name, media) in PAGE_FILES.items()]

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await server.shutdown()

    built = Starlette(routes=routes, lifespan=lifespan)
    built.state.runs = server
    return built


def _stream(live: LiveRun, start: int = 0) -> StreamingResponse:
    return StreamingResponse(live.watch(start), media_type=_ENCODER.get_content_type(),
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


async def _json(request: Request) -> Any:
    try:
        return json.loads(await request.body() or b"null")
    except ValueError:
        return None


def _page_file(name: str, media: str) -> Any:
    async def serve(_: Request) -> Response:
        data = resources.files("loopwright.interfaces").joinpath("data", "serve", name).read_bytes()
        return Response(data, media_type=media)

    return serve


__all__ = ["LiveRun", "RunServer", "app"]
