"""Tool results past the cap: kept whole under a handle, shown as head and tail, read back
with the built-in `read_output` tool.

A result longer than the registry's `max_observation_chars` is not cut and lost. The gate
keeps its full text in `trace.outputs[handle]` (the journal keeps it too, with the tool
call, so a resumed or forked run replays the same result and rebuilds the same handle),
and the model sees the result's head, its tail and one line naming the handle and the
size. `read_output(handle, offset, length)` pages through the text: it is read-only,
needs no approval, answers from the trace (no I/O), and its own result is at most the cap
and never gets a handle of its own. ReAct's compaction also files short results it folds
away under a handle (a `Record` its machine yields), so every folded result stays readable.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import replace
from typing import Any, Final

from loopwright.tools.results import ToolError, ToolResult

READ_OUTPUT: Final = "read_output"
READ_OUTPUT_SCHEMA: Final[dict[str, Any]] = {
    "name": READ_OUTPUT,
    "description": "Read part of a long tool result kept under a handle (out-N): `length` characters "
    "from `offset`. Read-only.",
    "parameters": {
        "type": "object",
        "properties": {
            "handle": {"type": "string", "description": "the handle named in the result, e.g. out-3"},
            "offset": {"type": "integer", "minimum": 0, "description": "first character to read (default 0)"},
            "length": {"type": "integer", "minimum": 1, "description": "characters to read (default and most: the cap)"},
        },
        "required": ["handle"],
        "additionalProperties": False,
    },
}


def handle_for(key: str) -> str:
    """The handle of the result of tool call `key` (ReAct step "3" gives "out-3"): derived
    from the call's key, so a replay of the run names it the same."""
    return f"out-{key}"


def view(text: str, handle: str, cap: int) -> str:
    """What the prompt shows of a long result: the first three quarters of the cap, one line
    naming the handle, the size and how to read on, and the last quarter."""
    head = cap - cap // 4
    tail = cap // 4
    end = text[len(text) - tail:]  # "" when tail is 0
    return (
        f"{text[:head]}\n…[output {handle}: {len(text)} chars in all, shown: the first {head} and the last "
        f"{tail}; read the rest with read_output(handle=\"{handle}\", offset={head}, length={cap})]…\n{end}"
    )


def keep_output(
    outputs: MutableMapping[str, str], key: str, result: ToolResult, cap: int
) -> tuple[ToolResult, dict[str, Any] | None]:
    """The result as the run places it, and notes for the step's meta. A result within
    `cap` characters (or any result with a negative cap) is unchanged; a longer one is kept
    whole in `outputs` and replaced by its `view`."""
    text = result.observation
    if cap < 0 or len(text) <= cap:
        return result, None
    handle = handle_for(key)
    outputs[handle] = text
    shown = replace(result, observation=view(text, handle, cap))
    return shown, {"output": handle, "output_chars": len(text)}


def stub(handle: str, chars: int, offset: int = 0) -> str:
    """The one line an old result (or a page read from `offset`) is folded to in a
    compacted prompt."""
    at = f", offset={offset}" if offset else ""
    return f"[result folded away ({chars} chars): read_output(handle=\"{handle}\"{at}) reads it back]"


def read_output(outputs: Mapping[str, str], args: Any, cap: int) -> ToolResult:
    """The built-in tool: `length` characters of the kept text `handle` from `offset`, at
    most `cap` (the slice exactly, so pages read in turn join to the original). A bad call
    is a ToolError the model reads, like any tool's."""
    given = dict(args) if isinstance(args, Mapping) else {}
    if set(given) == {"input"}:  # the bracket dialect's read_output[out-3]
        given = {"handle": given["input"]}
    problem = _check(given)
    if problem is None:
        handle = given["handle"]
        text = outputs.get(handle)
        offset = given.get("offset", 0)
        length = min(given.get("length", cap), cap) if cap >= 0 else given.get("length", len(text or ""))
        if text is None:
            known = ", ".join(list(outputs)[:8]) or "none yet"
            problem = f"unknown handle {handle!r} (this run's handles: {known})"
        elif offset >= len(text) and text:
            problem = f"offset {offset} is past the end of {handle} ({len(text)} chars)"
        else:
            return ToolResult(READ_OUTPUT, given, None, observation=text[offset:offset + length], error=None, duration_s=0.0)
    error = ToolError(READ_OUTPUT, f"invalid args: {problem}", "invalid_args")
    return ToolResult(READ_OUTPUT, given, None, observation=error.as_observation(), error=error, duration_s=0.0)


def _check(args: dict[str, Any]) -> str | None:
    unknown = sorted(set(args) - {"handle", "offset", "length"})
    if unknown:
        return f"unknown argument(s) {', '.join(unknown)}; read_output takes handle, offset, length"
    if not isinstance(args.get("handle"), str):
        return "handle must be a string such as \"out-3\""
    for name, least in (("offset", 0), ("length", 1)):
        value = args.get(name, least)
        if type(value) is not int or value < least:
            return f"{name} must be an integer >= {least}, got {value!r}"
    return None


__all__ = ["READ_OUTPUT", "READ_OUTPUT_SCHEMA", "handle_for", "keep_output", "read_output", "stub",
           "view"]
