"""The Model Context Protocol, both ways: MCP servers' tools as loopwright Tools (`MCPServer`,
`client`), and a loopwright registry served to other agents (`server`).

The `mcp` SDK is imported here and nowhere else (`pip install 'loopwright[mcp]'`);
`import loopwright` never loads it.
"""

from __future__ import annotations

try:
    import mcp as _sdk  # noqa: F401 - only to say clearly what is missing
except ImportError as exc:  # pragma: no cover - the dev install has it
    raise ImportError(
        "loopwright.mcp needs the MCP SDK: pip install 'loopwright[mcp]'"
    ) from exc

from loopwright.mcp.client import MCPError, MCPServer, MCPToolError, safety_from_annotations

__all__ = ["MCPError", "MCPServer", "MCPToolError", "safety_from_annotations"]
