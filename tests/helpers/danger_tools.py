"""Tools for CLI tests: one destructive, one harmless."""

from __future__ import annotations

import loopwright as lw

DELETED: list[str] = []


@lw.tool(side_effects="destructive")
def delete_file(path: str) -> str:
    """Delete a file."""
    DELETED.append(path)
    return f"deleted {path}"


TOOLS = [delete_file]
