"""MCP on the command line: `loopwright run --mcp "COMMAND ARGS" / --mcp-url URL` adds a
server's tools to a run, and `loopwright mcp serve --tools MODULE:ATTR [--port N]` serves a
registry to other agents (stdio, or streamable HTTP at http://127.0.0.1:N/mcp; another --host
needs --token).

The MCP SDK is imported only when one of these is used (`pip install 'loopwright[mcp]'`)."""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from collections.abc import Sequence
from typing import Any

import loopwright as lw
from loopwright.errors import LoopwrightError
from loopwright.interfaces.common import (
    EXIT_ANSWERED,
    UsageError,
    add_access_args,
    add_subcommand,
    load_tools,
    serve_access,
)

MCP_HELP = "serve loopwright tools to other agents over the Model Context Protocol"


def add_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--mcp",
        action="append",
        metavar='"COMMAND ARGS"',
        help="add the tools of an MCP server started as this command (stdio); repeatable",
    )
    p.add_argument(
        "--mcp-url",
        action="append",
        metavar="URL",
        help="add the tools of an MCP server at this streamable HTTP URL; repeatable",
    )


def _sdk() -> Any:
    try:
        import loopwright.mcp as mcp
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    return mcp


def mcp_servers(commands: Sequence[str] | None, urls: Sequence[str] | None) -> list[Any]:
    """The MCPServer objects for `--mcp` commands and `--mcp-url` URLs (not yet started)."""
    if not commands and not urls:
        return []
    mcp = _sdk()
    servers = []
    for command in commands or ():
        words = shlex.split(command)
        if not words:
            raise UsageError("--mcp needs a command")
        servers.append(mcp.MCPServer.stdio(words[0], words[1:]))
    for url in urls or ():
        servers.append(mcp.MCPServer.http(url))
    return servers


def add_mcp_tools(registry: lw.ToolRegistry, servers: Sequence[Any]) -> lw.ToolRegistry:
    """Register every server's tools; a server that cannot be reached is a usage error."""
    for server in servers:
        try:
            for tool in server.tools():
                registry.register(tool)
        except LoopwrightError as exc:
            raise UsageError(str(exc)) from None
    return registry


def _setup(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="mcp_command", metavar="COMMAND", required=True)
    serve = sub.add_parser("serve", help="serve a tool registry as an MCP server")
    serve.add_argument(
        "--tools", nargs="+", metavar="MODULE:ATTR",
        help="tools to serve: a Tool, a function, a list of them or a ToolRegistry "
        "(default: the demo tools)",
    )
    serve.add_argument("--port", type=int, help="serve streamable HTTP on 127.0.0.1:PORT/mcp (default: stdio)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="the address to bind with --port (default 127.0.0.1; any other needs --token)")
    add_access_args(serve)


def _handle(args: argparse.Namespace) -> int:
    _sdk()
    from loopwright.mcp.server import serve_http, serve_stdio

    access = serve_access(args) if args.port is not None else None  # (stdio has no callers to check)
    registry = load_tools(args.tools)
    if access is None:
        asyncio.run(serve_stdio(registry))
    else:
        where = f"[{args.host}]" if ":" in args.host else args.host
        print(f"serving {len(registry)} tools at http://{where}:{args.port}/mcp"
              f"{' (clients send the token as Authorization: Bearer)' if access.token else ''}", file=sys.stderr)
        try:
            asyncio.run(serve_http(registry, args.port, args.host, access))
        except KeyboardInterrupt:
            pass
    return EXIT_ANSWERED


def register() -> None:
    add_subcommand("mcp", MCP_HELP, _setup, _handle)
