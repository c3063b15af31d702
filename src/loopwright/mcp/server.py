"""A loopwright ToolRegistry served as an MCP server, so other agents and IDEs can use it.

    loopwright mcp serve --tools mypkg.tools:registry            # stdio
    loopwright mcp serve --tools mypkg.tools:registry --port 8765  # streamable HTTP, /mcp
    LOOPWRIGHT_TOKEN=... loopwright mcp serve --tools ... --port 8765 --host 0.0.0.0  # off loopback: a token

Each tool's MCP annotations come from its side-effect metadata: "none"/"read" are
readOnlyHint true; "write" is destructiveHint false; "destructive" is destructiveHint true;
idempotentHint is the tool's `idempotent`. A tool that needs approval is never run
unapproved: when the client supports elicitation the server asks it (the exact call,
accept or decline), otherwise the call is refused with an error result.
Calls go through `ToolRegistry.aexecute`, so validation, timeouts and error observations
are the same as inside a run.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import mcp.types as types
from mcp.server.lowlevel.server import Server

from loopwright.httpguard import Access, Guard, is_loopback
from loopwright.tools.registry import Tool, ToolRegistry

__all__ = ["annotations_for", "build_server", "serve_http", "serve_stdio"]


def annotations_for(tool: Tool) -> dict[str, Any]:
    """The MCP annotations (wire names) our side-effect metadata implies."""
    read_only = tool.side_effects in ("none", "read")
    out: dict[str, Any] = {"readOnlyHint": read_only, "idempotentHint": bool(tool.idempotent)}
    if not read_only:
        out["destructiveHint"] = tool.side_effects == "destructive"
    open_world = getattr(tool, "open_world", None)
    if isinstance(open_world, bool):
        out["openWorldHint"] = open_world
    return out


def _listing(tool: Tool) -> types.Tool:
    return types.Tool.model_validate(
        {
            "name": tool.name,
            "description": tool.description,
            "inputSchema": tool.parameters,
            "annotations": annotations_for(tool),
        }
    )


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


_APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Run this call?"}},
    "required": ["approve"],
}


async def _approved(ctx: Any, tool: Tool, args: dict[str, Any]) -> str | None:
    """None when the call may run; else why not."""
    session = ctx.session
    can_elicit = session.check_client_capability(
        types.ClientCapabilities(elicitation=types.ElicitationCapability())
    )
    if not can_elicit:
        return (
            f"refused: {tool.name} is {tool.side_effects} and needs approval, and this client "
            "cannot be asked (no elicitation support)"
        )
    call = json.dumps(args, ensure_ascii=False, default=str)
    answer = await session.elicit_form(
        f"Approve {tool.name}({call}) [{tool.side_effects}]?",
        _APPROVAL_SCHEMA,
        related_request_id=ctx.request_id,
    )
    if answer.action == "accept" and (answer.content or {}).get("approve") is True:
        return None
    return f"refused: the client did not approve {tool.name} ({answer.action})"


def build_server(registry: ToolRegistry, name: str = "loopwright") -> Server[Any]:
    """An MCP server (the SDK's low-level Server) listing and calling `registry`'s tools."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[_listing(t) for t in registry])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = registry.get(params.name)
        args = dict(params.arguments or {})
        if tool is None:
            return _error(f"unknown tool {params.name!r} (available: {', '.join(registry.names)})")
        if tool.requires_approval:
            refusal = await _approved(ctx, tool, args)
            if refusal is not None:
                return _error(refusal)
        result = await registry.aexecute(tool.name, args)
        if result.error is not None:
            return _error(result.observation)
        structured = result.value if isinstance(result.value, dict) else None
        try:
            json.dumps(structured)
        except (TypeError, ValueError):
            structured = None
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=result.observation)],
            structured_content=structured,
        )

    return Server(name, on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(registry: ToolRegistry) -> None:
    """Serve over this process's stdin/stdout until the client closes it."""
    from mcp.server.stdio import stdio_server

    server = build_server(registry)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def serve_http(registry: ToolRegistry, port: int, host: str = "127.0.0.1",
                     access: Access | None = None) -> None:
    """Serve streamable HTTP at http://HOST:PORT/mcp until cancelled.

    On loopback the SDK checks Host and Origin itself. Off loopback it checks neither, so
    there the app goes behind loopwright.httpguard, which needs a token in `access` (the
    clients send it as `Authorization: Bearer TOKEN`) and checks Host, Origin and the body
    size; with a token on loopback too. ValueError off loopback with no token."""
    import uvicorn
    from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE

    access = access or Access()
    if not is_loopback(host) and access.token is None:
        raise ValueError(f"serving MCP on {host!r}, off loopback, needs a token (Access(token=...))")
    app: Any = build_server(registry).streamable_http_app(host=host)
    if access.token is not None:  # the SDK checks content types itself (and DELETE has no body)
        app = Guard(app, replace(access, json_only=False, max_body=DEFAULT_MAX_REQUEST_BODY_SIZE))
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    await uvicorn.Server(config).serve()
