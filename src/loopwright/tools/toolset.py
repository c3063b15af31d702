"""Tool sets: what a run is given as its tools (a ToolRegistry, or a list of Tools and
functions made into one by `as_registry`; a `tools=` scope read as names by `tool_names`),
and a registry's tool set as data: each tool's name and a fingerprint of its schema, so a
journaled run can tell whether a resume would run with other tools than it started with.

The fingerprint is the sha256 of the canonical JSON of the tool's name, description and
parameters (sorted keys, no whitespace): the same tool gives the same fingerprint in any
process; any change the model could see (a renamed argument, a new description) changes it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from loopwright.errors import describe
from loopwright.tools.registry import Tool, ToolRegistry


def schema_fingerprint(schema: Mapping[str, Any]) -> str:
    """sha256 (hex) of the canonical JSON of a tool schema's name, description, parameters."""
    canonical = json.dumps(
        {
            "name": schema.get("name"),
            "description": schema.get("description"),
            "parameters": schema.get("parameters"),
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=str,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def tool_set(registry: ToolRegistry) -> dict[str, str]:
    """{tool name: schema fingerprint} for every tool in the registry."""
    return {str(s["name"]): schema_fingerprint(s) for s in registry.schemas()}


@dataclass(frozen=True)
class ToolSetDiff:
    """How a tool set differs from a recorded one: tools added, removed, and changed
    (same name, other schema). Empty when they are the same."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def describe(self) -> str:
        parts = []
        if self.added:
            parts.append("added " + ", ".join(self.added))
        if self.removed:
            parts.append("removed " + ", ".join(self.removed))
        if self.changed:
            parts.append("changed " + ", ".join(self.changed))
        return "; ".join(parts) or "no difference"

    def to_dict(self) -> dict[str, list[str]]:
        return {"added": list(self.added), "removed": list(self.removed), "changed": list(self.changed)}


def diff_tool_sets(recorded: Mapping[str, str], current: Mapping[str, str]) -> ToolSetDiff:
    """What `current` has that `recorded` did not, lacks, or has with another schema."""
    return ToolSetDiff(
        added=tuple(sorted(set(current) - set(recorded))),
        removed=tuple(sorted(set(recorded) - set(current))),
        changed=tuple(sorted(n for n in set(recorded) & set(current) if recorded[n] != current[n])),
    )


Tools = ToolRegistry | Iterable[Tool | Callable[..., Any]]
"""What a run takes as its tools: a ToolRegistry, or a list of Tools and functions."""
Scope = Iterable[str | Tool | Callable[..., Any]]
"""What `tools=` takes: the names of the tools a run may use, or the Tools or functions."""


def as_registry(tools: Tools) -> ToolRegistry:
    """A registry as it is, or a new one holding a list of Tools and functions (each
    function wrapped with `tool()`). TypeError for anything else."""
    if isinstance(tools, ToolRegistry):
        return tools
    if isinstance(tools, str | bytes | Mapping | Tool) or callable(tools) or not isinstance(tools, Iterable):
        hint = " (put a single tool in a list: [tool])" if callable(tools) else ""
        raise TypeError(
            f"registry must be a ToolRegistry or a list of tools and functions, got {describe(tools)}{hint}"
        )
    items = list(tools)
    for i, item in enumerate(items):
        if not callable(item):  # a Tool is callable too
            raise TypeError(
                f"registry must be a ToolRegistry or a list of tools and functions; item {i} is {describe(item)}"
            )
    return ToolRegistry(items)


def tool_names(tools: Scope) -> tuple[str, ...]:
    """A `tools=` scope as names: a name as it is, a Tool by its name, a function by the
    name `tool()` gives it; a single name alone is one name, not its letters."""
    if isinstance(tools, str):
        return (tools,)
    names = []
    for item in tools:
        if isinstance(item, Tool):
            names.append(item.name)
        elif isinstance(item, str):
            names.append(item)
        elif callable(item) and isinstance(getattr(item, "__name__", None), str):
            names.append(item.__name__)
        else:
            raise TypeError(f"tools= takes tool names, Tools or functions, got {describe(item)}")
    return tuple(names)
