"""The registry the `loopwright mcp serve` tests serve: a pure tool and a destructive one."""

from __future__ import annotations

import loopwright as lw


@lw.tool
def add(x: int, y: int) -> int:
    """Add two integers."""
    return x + y


@lw.tool(side_effects="destructive")
def wipe(path: str) -> str:
    """Delete everything under a path (here: only says so)."""
    return f"wiped {path}"


registry = lw.ToolRegistry([add, wipe])
