"""`loopwright mcp serve`: a registry served over MCP, exercised with the mcp SDK's own
client over stdio and streamable HTTP; destructive tools are refused, or asked for by
elicitation when the client supports it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import mcp.types as types
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

import loopwright as lw
from helpers.mcp_servers import free_port, stop, wait_for_port
from loopwright.mcp.server import annotations_for

HELPERS = Path(__file__).parent / "helpers"
TOOLS = "mcp_served_tools:registry"


def test_annotations_follow_our_side_effect_metadata():
    @lw.tool(side_effects="write", idempotency_key="key")
    def put(key: str) -> str:
        """Store."""
        return key

    @lw.tool(side_effects="destructive")
    def wipe() -> str:
        """Wipe."""
        return ""

    @lw.tool
    def pure() -> int:
        """Pure."""
        return 1

    assert annotations_for(pure) == {"readOnlyHint": True, "idempotentHint": True}
    assert annotations_for(put) == {"readOnlyHint": False, "idempotentHint": False, "destructiveHint": False}
    assert annotations_for(wipe) == {"readOnlyHint": False, "idempotentHint": False, "destructiveHint": True}


async def _in_process_calls(registry: lw.ToolRegistry, names: list[str], elicit=None) -> dict[str, tuple[bool, str]]:
    """Call each named tool once through build_server's real MCP server, in this process
    over the SDK's memory streams: (is_error, text) by name."""
    import anyio
    from mcp.shared.memory import create_client_server_memory_streams

    from loopwright.mcp.server import build_server

    server = build_server(registry)
    got: dict[str, tuple[bool, str]] = {}
    async with create_client_server_memory_streams() as (client, served):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(server.run, served[0], served[1], server.create_initialization_options())
            async with ClientSession(client[0], client[1], elicitation_callback=elicit) as session:
                await session.initialize()
                for name in names:
                    result = await session.call_tool(name, {"path": "/data"})
                    got[name] = (bool(result.is_error), _text(result))
            tasks.cancel_scope.cancel()
    return got


def test_a_tool_that_requires_approval_is_asked_for_whatever_its_side_effects():
    """requires_approval, not the side_effects label, decides: each such tool is refused to
    a client that cannot be asked, and runs only after the client approves."""
    ran: list[str] = []

    def gated(side_effects: str) -> lw.Tool:
        def archive(path: str) -> str:
            ran.append(side_effects)
            return f"archived {path}"

        return lw.Tool.from_schema(
            f"archive_{side_effects}", "Archive a path.",
            {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
            archive, side_effects=side_effects, requires_approval=True,
        )  # fmt: skip

    kinds = ["none", "read", "write", "destructive"]
    registry = lw.ToolRegistry([gated(k) for k in kinds])
    names = [f"archive_{k}" for k in kinds]
    refused = asyncio.run(_in_process_calls(registry, names))
    assert ran == []
    assert all(error and "needs approval" in text for error, text in refused.values()), refused

    asked: list[str] = []

    async def accept(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    approved = asyncio.run(_in_process_calls(registry, names, accept))
    assert ran == kinds and len(asked) == 4
    assert approved == {name: (False, "archived /data") for name in names}


def _params() -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "loopwright", "mcp", "serve", "--tools", TOOLS],
        env={"PYTHONPATH": str(HELPERS)}, cwd=str(HELPERS),
    )  # fmt: skip


def _text(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


async def _session_run(elicit=None):
    async with stdio_client(_params()) as (read, write):
        async with ClientSession(read, write, elicitation_callback=elicit) as session:
            await session.initialize()
            listed = {t.name: t for t in (await session.list_tools()).tools}
            add = await session.call_tool("add", {"x": 2, "y": 3})
            bad = await session.call_tool("add", {"x": "two"})
            wipe = await session.call_tool("wipe", {"path": "/data"})
            return listed, add, bad, wipe


@pytest.mark.slow
def test_stdio_lists_tools_with_annotations_calls_them_and_refuses_a_destructive_one(tmp_path):
    listed, add, bad, wipe = asyncio.run(_session_run())
    assert set(listed) == {"add", "wipe"}
    assert listed["add"].annotations.read_only_hint is True
    assert listed["wipe"].annotations.destructive_hint is True
    assert listed["add"].input_schema["required"] == ["x", "y"]
    assert not add.is_error and _text(add) == "5"
    assert bad.is_error and "invalid args" in _text(bad)
    assert wipe.is_error and "refused" in _text(wipe) and "needs approval" in _text(wipe)


@pytest.mark.slow
def test_a_client_that_supports_elicitation_is_asked_and_its_answer_decides():
    asked: list[str] = []

    async def decline(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": False})

    *_, wipe = asyncio.run(_session_run(decline))
    assert asked and "wipe" in asked[0] and "/data" in asked[0]
    assert wipe.is_error and "did not approve" in _text(wipe)

    async def accept(context, params):
        return types.ElicitResult(action="accept", content={"approve": True})

    *_, wipe = asyncio.run(_session_run(accept))
    assert not wipe.is_error and _text(wipe) == "wiped /data"


@pytest.mark.slow
def test_streamable_http_serves_the_same_registry_to_our_own_mcp_client():
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopwright", "mcp", "serve", "--tools", TOOLS, "--port", str(port)],
        cwd=str(HELPERS), env={"PYTHONPATH": str(HELPERS), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for_port(port, proc, 120)
        from loopwright.mcp import MCPServer

        with MCPServer.http(f"http://127.0.0.1:{port}/mcp", timeout_s=60) as server:
            registry = lw.ToolRegistry(server.tools())
            assert registry["add"].side_effects == "read" and registry["wipe"].requires_approval
            assert registry.execute("add", {"x": 4, "y": 5}).observation == "9"
            trace = lw.run("wipe it", lw.ScriptedPolicy(['Action: wipe\nAction Input: {"path": "/"}', "Final Answer: no"]),
                           registry, approver=lambda request: True)  # fmt: skip
            assert "refused" in trace.steps[0].observation  # approved here, still refused there
    finally:
        stop(proc)


# -- who may call the HTTP server ----------------------------------------------------------

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def _lan_address() -> str | None:
    import socket

    from loopwright.httpguard import is_loopback

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("10.255.255.255", 1))
        except OSError:
            return None
        address = str(sock.getsockname()[0])
    return None if is_loopback(address) else address


def _serve(port: int, *flags: str, token: str | None = None) -> subprocess.Popen[bytes]:
    source = Path(lw.__file__).parents[1]  # the loopwright this test imported
    env = {"PYTHONPATH": os.pathsep.join([str(HELPERS), str(source)]), "PATH": "/usr/bin:/bin"}
    if token is not None:
        env["LOOPWRIGHT_TOKEN"] = token
    return subprocess.Popen(
        [sys.executable, "-m", "loopwright", "mcp", "serve", "--tools", TOOLS, "--port", str(port), *flags],
        cwd=str(HELPERS), env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip


def test_mcp_serve_off_loopback_without_a_token_refuses_to_start(monkeypatch, capsys):
    from loopwright.interfaces.cli import main
    from loopwright.mcp.server import serve_http

    monkeypatch.delenv("LOOPWRIGHT_TOKEN", raising=False)
    for host in ("0.0.0.0", "::", "192.0.2.2", "agent.lan"):
        assert main(["mcp", "serve", "--tools", "loopwright.interfaces.demo_tools:demo_registry",
                     "--port", "1", "--host", host]) == 2
        assert "needs a token" in capsys.readouterr().err
    with pytest.raises(ValueError, match="needs a token"):
        asyncio.run(serve_http(lw.ToolRegistry(), 1, "0.0.0.0"))


@pytest.mark.slow
def test_mcp_serve_off_loopback_takes_only_bearer_requests_for_its_own_host_and_origin():
    import httpx2

    port = free_port()
    proc = _serve(port, "--host", "0.0.0.0", token="s3cret-t0ken")
    try:
        wait_for_port(port, proc, 120)
        url = f"http://127.0.0.1:{port}/mcp"
        bearer = {**MCP_HEADERS, "Authorization": "Bearer s3cret-t0ken"}
        bare = httpx2.post(url, json=INIT, headers=MCP_HEADERS)
        wrong = httpx2.post(url, json=INIT, headers={**MCP_HEADERS, "Authorization": "Bearer nope"})
        rebound = httpx2.post(url, json=INIT, headers={**bearer, "Host": f"attacker.example:{port}"})
        foreign = httpx2.post(url, json=INIT, headers={**bearer, "Origin": "http://evil.example"})
        big = httpx2.post(url, content=b" " * (5 * 1024 * 1024), headers=bearer)
        lan = _lan_address()
        off = None if lan is None else httpx2.post(f"http://{lan}:{port}/mcp", json=INIT, headers=MCP_HEADERS)
        from loopwright.mcp import MCPServer

        with MCPServer.http(url, headers={"Authorization": "Bearer s3cret-t0ken"}, timeout_s=60) as server:
            registry = lw.ToolRegistry(server.tools())
            added = registry.execute("add", {"x": 4, "y": 5}).observation
    finally:
        stop(proc)
    assert (bare.status_code, wrong.status_code) == (401, 401)
    assert rebound.status_code == 421 and foreign.status_code == 403 and big.status_code == 413
    assert off is None or off.status_code == 401
    assert set(registry.names) == {"add", "wipe"} and added == "9"


@pytest.mark.slow
def test_mcp_serve_on_loopback_still_checks_host_and_origin_itself():
    import httpx2

    port = free_port()
    proc = _serve(port)
    try:
        wait_for_port(port, proc, 120)
        url = f"http://127.0.0.1:{port}/mcp"
        rebound = httpx2.post(url, json=INIT, headers={**MCP_HEADERS, "Host": f"attacker.example:{port}"})
        foreign = httpx2.post(url, json=INIT, headers={**MCP_HEADERS, "Origin": "http://evil.example"})
        plain = httpx2.post(url, content=b"{}", headers={**MCP_HEADERS, "Content-Type": "text/plain"})
        fine = httpx2.post(url, json=INIT, headers=MCP_HEADERS)
    finally:
        stop(proc)
    assert (rebound.status_code, foreign.status_code, plain.status_code) == (421, 403, 400)
    assert fine.status_code == 200
