"""A registry's tool set as data: each tool's name and a fingerprint of its schema, so a
journaled run can tell whether a resume would run with other tools than it started with.

The fingerprint is the sha256 of the canonical JSON of the tool's name, description and
parameters (sorted keys, no whitespace): the same tool gives the same fingerprint in any
process; any change the model could see (a renamed argument, a new description) changes it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loopwright.tools.registry import ToolRegistry


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
