"""MCP servers' tools as loopwright Tools.

    time = MCPServer.stdio("mcp-server-time", ["--local-timezone", "UTC"])
    registry = lw.ToolRegistry(time.tools())

One background event-loop thread owns every server's session (the SDK's sessions are
anyio contexts that must be entered and left in one task); a tool call, sync or async,
submits a coroutine to that loop and waits for it. A session starts on first use and is
reused by every later call, run and tool. A server that crashes, hangs or fails to start
gives the call a ToolError within the tool's timeout (the registry holds it to one) and
drops the session, so the next call starts a fresh one.

Safety: MCP tool annotations are hints with defaults (readOnlyHint false, destructiveHint
true, idempotentHint false, openWorldHint true), so a tool that declares nothing is
treated as the spec says: destructive, not idempotent, and approval-gated. Pass
`overrides={"name": {"side_effects": "read"}}` for a tool you trust more (or less).
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import binascii
import concurrent.futures
import json
import re
import tempfile
import threading
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import IO, Any, Final, TypeVar

from mcp import ClientSession, StdioServerParameters, stdio_client

from loopwright.errors import LoopwrightError
from loopwright.tools.registry import SideEffects, Tool

__all__ = ["MCPError", "MCPServer", "MCPToolError", "safety_from_annotations"]

_T = TypeVar("_T")
_OVERRIDABLE: Final = frozenset({"side_effects", "idempotent", "requires_approval", "timeout_s", "name"})
_BAD_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.\-]")


class MCPError(LoopwrightError):
    """An MCP server could not be reached, started or listed (at set-up, not in a run:
    inside a run every failure is a ToolError observation)."""


class MCPToolError(Exception):
    """A tool call the server answered with `isError: true`; the registry turns it into
    a ToolError whose observation is the server's text."""


# --- the background loop -----------------------------------------------------------------


class _Loop:
    """One daemon thread running one event loop, shared by every server."""

    _lock = threading.Lock()
    _instance: _Loop | None = None

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="loopwright-mcp", daemon=True)
        self.thread.start()

    @classmethod
    def get(cls) -> _Loop:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def submit(self, coro: Awaitable[_T]) -> concurrent.futures.Future[_T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]


# --- annotations -> safety -------------------------------------------------------------


def safety_from_annotations(annotations: Mapping[str, Any] | None) -> dict[str, Any]:
    """Our safety metadata for MCP tool annotations, with the spec's defaults for what is
    missing: readOnlyHint false, destructiveHint true, idempotentHint false, openWorldHint
    true. Read-only means side_effects "read"; else destructive (approval-gated) unless
    destructiveHint is false, which means "write"."""
    a = dict(annotations or {})
    read_only = a.get("readOnlyHint") is True
    destructive = a.get("destructiveHint") is not False
    idempotent = a.get("idempotentHint") is True
    side_effects: SideEffects = "read" if read_only else ("destructive" if destructive else "write")
    return {
        "side_effects": side_effects,
        "idempotent": True if read_only else idempotent,
        "requires_approval": side_effects == "destructive",
        "open_world": a.get("openWorldHint") is not False,
    }


# --- results -> observations -----------------------------------------------------------


def _size(data: str) -> str:
    try:
        n = len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        n = len(data)
    return f"{n} bytes"


def _describe(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        return f"[{kind} {block.mime_type}, {_size(block.data)}]"
    if kind == "resource_link":
        extra = ", ".join(str(x) for x in (getattr(block, "name", None), getattr(block, "mime_type", None)) if x)
        return f"[resource link {block.uri}{' (' + extra + ')' if extra else ''}]"
    if kind == "resource":
        res = block.resource
        mime = getattr(res, "mime_type", None) or "unknown type"
        text = getattr(res, "text", None)
        if text is not None:
            return f"[resource {res.uri} ({mime})]\n{text}"
        return f"[resource {res.uri} ({mime}, {_size(getattr(res, 'blob', ''))})]"
    return f"[{kind or type(block).__name__} content]"


def result_value(result: Any) -> Any:
    """A CallToolResult as a tool's value: the text (images, audio and resources described
    in brackets), or the structured content when it says the same or there is no text;
    `isError` raises MCPToolError."""
    parts = [_describe(b) for b in (getattr(result, "content", None) or [])]
    text = "\n".join(parts)
    if getattr(result, "is_error", False):
        raise MCPToolError(text or "the server reported an error with no text")
    structured = getattr(result, "structured_content", None)
    if structured is None:
        return text
    if not parts:
        return structured
    try:
        if json.loads(text) == structured:
            return structured
    except ValueError:
        pass
    return text + "\n" + json.dumps(structured, ensure_ascii=False, default=str)


# --- failures ----------------------------------------------------------------------------

_STDERR_LINES: Final = 8
_ERROR_LINE_CHARS: Final = 500
# A line that reads as an error: an exception's name and message (Python's
# `ModuleNotFoundError: ...`, Node's `Error: Cannot find module ...` or
# `TypeError [ERR_X]: ...`, Java's `java.io.IOException: ...`), or a line that starts by
# saying so (`error: ...`, `FATAL: ...`, `panic: ...`, `[ERROR] ...`), not a line that
# merely has the word (`error handling is on`).
_ERROR_LINE: Final = re.compile(
    r"^\s*(?:(?:[A-Za-z_][\w$]*\.)*[A-Z]?\w*(?:Error|Exception)(?:\s*\[[^\]\n]*\])?:\s*\S"
    r"|Exception in thread\b"
    r"|\[(?i:error|fatal|panic|critical)\]\s*\S"
    r"|(?i:error|fatal|panic|critical)(?::|\s+-)\s*\S)"
)


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups; an exception that is no group is
    its own leaf."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def error_line(log: str) -> str | None:
    """The first line of a server's stderr that reads as an error (stripped, at most
    _ERROR_LINE_CHARS), or None."""
    for line in log.splitlines():
        if _ERROR_LINE.match(line):
            line = line.strip()
            return line if len(line) <= _ERROR_LINE_CHARS else line[:_ERROR_LINE_CHARS] + "…"
    return None


def _describe_exception(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


# --- a server ----------------------------------------------------------------------------

_OPEN: weakref.WeakSet[MCPServer] = weakref.WeakSet()


class MCPServer:
    """One MCP server: its transport, its session (started on first use, reused), and its
    tools as loopwright Tools. Build with `MCPServer.stdio(...)` or `MCPServer.http(...)`."""

    def __init__(
        self,
        connect: Callable[[AsyncExitStack], Awaitable[tuple[Any, Any]]],
        label: str,
        *,
        timeout_s: float = 30.0,
        prefix: str = "",
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
        stderr: Callable[[], str] | None = None,
    ) -> None:
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        for name, spec in (overrides or {}).items():
            unknown = set(spec) - _OVERRIDABLE
            if unknown:
                raise ValueError(
                    f"override for {name!r}: unknown key(s) {sorted(unknown)}; use {sorted(_OVERRIDABLE)}"
                )
        self._connect = connect
        self.label = label
        self.timeout_s = float(timeout_s)
        self.prefix = prefix
        self.overrides = {k: dict(v) for k, v in (overrides or {}).items()}
        self._stderr = stderr
        self._loop = _Loop.get()
        self._session: Any = None
        self._owner: asyncio.Task[None] | None = None
        self._closing: asyncio.Event | None = None
        self._connecting: asyncio.Lock | None = None
        self._tools: list[Tool] | None = None
        self.connects = 0  # sessions started so far (a reconnect adds one)
        _OPEN.add(self)

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        timeout_s: float = 30.0,
        prefix: str = "",
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> MCPServer:
        """A server we start as a subprocess and talk to over its stdin/stdout. `env` is
        added to the SDK's minimal default environment (PATH, HOME, ...)."""
        params = StdioServerParameters(
            command=command, args=list(args), env=None if env is None else dict(env),
            cwd=None if cwd is None else str(cwd),
        )
        log: list[IO[str]] = []
        seen = [""]  # the last text read: what is left to tell once the file is closed

        def stderr() -> str:
            if log:
                try:
                    log[0].seek(0)
                    seen[0] = log[0].read()[-4000:].strip()
                except (OSError, ValueError):  # closed: the snapshot taken at exit stands
                    pass
            return seen[0]

        async def connect(stack: AsyncExitStack) -> tuple[Any, Any]:
            errlog = stack.enter_context(tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace"))
            log[:] = [errlog]
            # Unwound after the server's process has ended and before the file closes, so a
            # server that dies at start still has its last words read.
            stack.callback(stderr)
            streams: tuple[Any, Any] = await stack.enter_async_context(stdio_client(params, errlog=errlog))
            return streams

        label = " ".join([command, *args])
        return cls(connect, label, timeout_s=timeout_s, prefix=prefix, overrides=overrides, stderr=stderr)

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
        prefix: str = "",
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> MCPServer:
        """A server already listening on a streamable HTTP endpoint (e.g. .../mcp)."""
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        async def connect(stack: AsyncExitStack) -> tuple[Any, Any]:
            client = await stack.enter_async_context(create_mcp_http_client(headers=dict(headers or {})))
            streams = await stack.enter_async_context(streamable_http_client(url, http_client=client))
            return streams[0], streams[1]

        return cls(connect, url, timeout_s=timeout_s, prefix=prefix, overrides=overrides)

    def __repr__(self) -> str:
        return f"MCPServer({self.label!r})"

    # -- the session, on the background loop ------------------------------------------

    async def _own(self, ready: asyncio.Future[Any], closing: asyncio.Event) -> None:
        """The task that holds the session open until asked to close (or it breaks)."""
        try:
            async with AsyncExitStack() as stack:
                read, write = await self._connect(stack)
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                ready.set_result(session)
                await closing.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else MCPError(f"{self.label}: cancelled"))
            if not isinstance(exc, Exception):
                raise

    async def _ensure(self) -> Any:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._session is not None:
                return self._session
            loop = asyncio.get_running_loop()
            ready: asyncio.Future[Any] = loop.create_future()
            ready.add_done_callback(lambda f: f.cancelled() or f.exception())  # always retrieved
            closing = asyncio.Event()
            owner = loop.create_task(self._own(ready, closing))
            try:
                session = await asyncio.shield(ready)
            except BaseException:
                closing.set()
                owner.cancel()
                raise
            self._session, self._owner, self._closing = session, owner, closing
            self.connects += 1
            return session

    def _drop(self) -> None:
        """Forget the session (it broke or hung); the next call starts a fresh one."""
        closing, owner = self._closing, self._owner
        self._session = self._owner = self._closing = None
        if closing is not None:
            closing.set()
        if owner is not None:
            owner.cancel()

    async def _request(self, op: Callable[[Any], Awaitable[_T]], retry: bool = False) -> _T:
        """Run `op` on the session. A failure drops the session (crashed, hung: cancelled
        at the timeout, broken). A call caught by a drop it did not cause (another call on
        the same session timed out first) is tried once more on a fresh session when
        `retry` (the tool is idempotent); otherwise it is an error like the others."""
        session = None
        try:
            session = await self._ensure()
            return await op(session)
        except MCPToolError:
            raise
        except BaseException as exc:
            if session is not None and self._session is not session and retry and isinstance(exc, Exception):
                return await self._request(op)
            if session is None or self._session is session:
                self._drop()
            if isinstance(exc, Exception):
                raise self._failed(exc) from exc
            raise

    def _failed(self, exc: Exception) -> MCPError:
        """The one message for a server that failed: the first line of its stderr that
        reads as an error, if any, then the root causes the client saw (the SDK nests them
        in exception groups); with no such line, the causes and then the last lines the
        server wrote to stderr (a stack's tail says where, its error line says what)."""
        causes = "; ".join(dict.fromkeys(_describe_exception(e) for e in _leaves(exc)))
        log = self._stderr() if self._stderr is not None else ""
        said = error_line(log)
        if said is not None:
            return MCPError(f"MCP server {self.label!r} failed: {said}; {causes}")
        tail = "\n".join(log.splitlines()[-_STDERR_LINES:])
        ending = f"; server stderr (last lines):\n{tail}" if tail else ""
        return MCPError(f"MCP server {self.label!r} failed: {causes}{ending}")

    async def _call(self, name: str, arguments: dict[str, Any], retry: bool = False) -> Any:
        async def op(session: Any) -> Any:
            return await session.call_tool(name, arguments, read_timeout_seconds=self.timeout_s)

        return result_value(await self._request(op, retry))

    async def _list(self) -> list[dict[str, Any]]:
        async def op(session: Any) -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            cursor: str | None = None
            while True:
                if cursor is None:
                    page = await session.list_tools()
                else:
                    from mcp.types import PaginatedRequestParams

                    page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
                out += [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in page.tools]
                cursor = getattr(page, "next_cursor", None)
                if not cursor:
                    return out

        return await self._request(op)

    def _wait(self, coro: Awaitable[_T], timeout: float | None = None) -> _T:
        future = self._loop.submit(coro)
        try:
            return future.result(self.timeout_s if timeout is None else timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise MCPError(f"MCP server {self.label!r} did not answer within {self.timeout_s:g}s") from None

    # -- public -------------------------------------------------------------------------

    def connect(self) -> MCPServer:
        """Start the session now (it also starts on first use). Raises MCPError."""
        self._wait(self._request(lambda session: asyncio.sleep(0, session)))
        return self

    def tools(self, include: Sequence[str] | None = None) -> list[Tool]:
        """The server's tools as loopwright Tools (listed once, then cached). Raises MCPError
        when the server cannot be started or listed."""
        if self._tools is None:
            self._tools = [self._tool(spec) for spec in self._wait(self._list())]
        if include is None:
            return list(self._tools)
        wanted = set(include)
        return [t for t in self._tools if t.name in wanted or getattr(t, "mcp_name", None) in wanted]

    async def atools(self, include: Sequence[str] | None = None) -> list[Tool]:
        """`tools()` without blocking the caller's event loop."""
        if self._tools is None:
            specs = await asyncio.wrap_future(self._loop.submit(self._list()))
            self._tools = [self._tool(spec) for spec in specs]
        return self.tools(include)

    def _idempotent(self, name: str) -> bool:
        return any(getattr(t, "mcp_name", None) == name and t.idempotent for t in self._tools or ())

    def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> Any:
        """Call a tool by its MCP name, directly (no validation, no registry), within the
        server's timeout_s: its value; raises MCPToolError or MCPError."""
        return self._wait(self._call(name, dict(arguments or {}), self._idempotent(name)))

    async def acall(self, name: str, arguments: Mapping[str, Any] | None = None) -> Any:
        job = self._call(name, dict(arguments or {}), self._idempotent(name))
        return await asyncio.wrap_future(self._loop.submit(job))

    def close(self) -> None:
        """End the session (a stdio server's process is stopped). A later call reconnects."""
        if self._session is None and self._owner is None:
            return
        owner = self._owner
        self._loop.loop.call_soon_threadsafe(self._drop)
        if owner is not None:
            done = threading.Event()
            self._loop.loop.call_soon_threadsafe(lambda: owner.add_done_callback(lambda _: done.set()))
            done.wait(5.0)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> MCPServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- tools ----------------------------------------------------------------------------

    def _tool(self, spec: Mapping[str, Any]) -> Tool:
        mcp_name = str(spec["name"])
        override = self.overrides.get(mcp_name, {})
        safety = safety_from_annotations(spec.get("annotations"))
        name = override.get("name") or self.prefix + _BAD_NAME_CHARS.sub("_", mcp_name)[: 64 - len(self.prefix)]
        server = self
        retry: list[bool] = [False]

        async def call(**arguments: Any) -> Any:
            future = server._loop.submit(server._call(mcp_name, arguments, retry[0]))
            return await asyncio.wrap_future(future)

        call.__name__ = name
        side_effects = override.get("side_effects", safety["side_effects"])
        made = Tool.from_schema(
            name,
            str(spec.get("description") or spec.get("title") or mcp_name),
            spec.get("inputSchema") or {"type": "object", "properties": {}},
            call,
            timeout_s=override.get("timeout_s", self.timeout_s),
            side_effects=side_effects,
            idempotent=override.get("idempotent", safety["idempotent"] if "side_effects" not in override else None),
            requires_approval=override.get(
                "requires_approval", safety["requires_approval"] if "side_effects" not in override else None
            ),
        )
        retry[0] = made.idempotent
        made.mcp_name = mcp_name  # type: ignore[attr-defined]
        made.mcp_server = self  # type: ignore[attr-defined]
        made.mcp_annotations = dict(spec.get("annotations") or {})  # type: ignore[attr-defined]
        made.open_world = safety["open_world"]  # type: ignore[attr-defined]
        return made


@atexit.register
def _close_all() -> None:  # stop the stdio servers we started
    for server in list(_OPEN):
        try:
            server.close()
        except Exception:  # pragma: no cover - best effort at exit
            pass
