"""What every reader of model text shares: the tool-name rule, the lenient JSON decoder
(raw newlines, HTML entities, one missing brace), and the Action and FinalAnswer records
the parsers return. `parsing` (ReAct steps), `plans` (ReWOO plans) and `toolcalls`
(native tool calls) all build on it, so none of them imports another's internals."""

from __future__ import annotations

import html
import json
import re
from dataclasses import KW_ONLY, dataclass, field
from json.scanner import make_scanner
from typing import Any, Final

from loopwright.errors import describe

# The registry's rule (1-64 letters, digits, _ - .), less names that are only a number
# ("Action: 1889", "Action: 3.5"): a model writing one means an answer, not a tool.
TOOL_NAME_PATTERN: Final = re.compile(r"(?![0-9.+-]+$)[A-Za-z0-9_.-]{1,64}")
"""A tool name the parsers accept (use fullmatch); digits-only names are not tool names."""
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_FENCE_LINE = re.compile(r"^[ \t]*```[\w+.-]*[ \t]*(?:\n|\Z)", re.MULTILINE)
_DECODER = json.JSONDecoder(strict=False)  # strict=False: raw newlines inside strings
# (value, end) from an index: decode() without its wrapper (typeshed types the argument oddly)
_SCAN_JSON = make_scanner(_DECODER)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Action:
    """A tool call proposed by the model. args is always a dict.

    args_text: the arguments exactly as the model wrote them, when they were one clean
    JSON object; the ReAct loop writes that back into the prompt, so the prompt stays
    byte-identical to what the model generated (a KV cache keeps it) and nothing is
    re-encoded. Not part of equality.
    repaired: what the decoder fixed to read arguments that were not valid JSON as written
    (a missing closing brace, entities in the JSON syntax); empty when none. The loop
    records it on the step and runs no repaired call to a tool that changes things."""

    thought: str
    name: str
    args: dict[str, Any]
    _: KW_ONLY
    call_id: str | None = None
    args_text: str | None = field(default=None, compare=False, repr=False)
    repaired: tuple[str, ...] = field(default=(), compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class FinalAnswer:
    """The model's answer; the run ends."""

    thought: str
    answer: str


class _Bad(Exception):
    """Internal: what was wrong, before the format help is appended."""


def _decode_json_at(text: str, start: int, seg_end: int) -> tuple[Any, int, tuple[str, ...]]:
    """Decode the JSON value starting at text[start] (after whitespace, a fence opener or a
    backtick); tolerates trailing text, raw newlines in strings, HTML entities around the
    syntax and one missing closing brace. Returns (value, end position in text, the
    repairs it took to read it: empty when the text was JSON as written)."""
    n = len(text)
    i = start
    while i < n and text[i] in " \t\r\n":
        i += 1
    if text.startswith("```", i):
        i += 3
        while i < n and (text[i].isalnum() or text[i] in "_+-."):
            i += 1
    while i < n and text[i] in " \t\r\n`":
        i += 1
    if i >= n or i >= seg_end:
        raise _Bad("Action Input is empty; use {} for a tool that takes no arguments")
    try:
        value, end = _DECODER.raw_decode(text, i)
    except json.JSONDecodeError as first:
        segment = text[i:max(seg_end, i)].rstrip().rstrip("`").rstrip()
        for attempt, closed, decoded in _repairs(segment):
            try:
                value, _ = _DECODER.raw_decode(attempt)
            except ValueError:
                continue
            if closed and not (isinstance(value, dict) and value):
                continue  # "{" cut short is no call with no arguments
            repairs = (*((_ENTITIES_REPAIRED,) if decoded else ()), *((_BRACE_REPAIRED,) if closed else ()))
            return (value if decoded else _unescape_deep(value)), seg_end, repairs
        raise _Bad(f"Action Input is not valid JSON: {_where(first, text, i)}") from None
    except ValueError as err:  # e.g. an integer past the digit limit
        raise _Bad(f"Action Input is not valid JSON: {describe(str(err), 60)}") from None
    if "&" in text[i:end]:
        value = _unescape_deep(value)
    return value, end, ()


_BRACE_REPAIRED: Final = "added a missing closing '}': the arguments may have been cut short"
_ENTITIES_REPAIRED: Final = "decoded HTML entities in the JSON syntax"


def _where(err: json.JSONDecodeError, text: str, start: int) -> str:
    """The decoder's message with line and column counted from where the value starts."""
    pos = max(err.pos, start)
    line = text.count("\n", start, pos) + 1
    line_start = text.rfind("\n", start, pos) + 1 if line > 1 else start
    return f"{err.msg} (line {line} column {pos - line_start + 1})"


def _repairs(segment: str) -> list[tuple[str, bool, bool]]:
    """Cheap fixes tried only after the raw text failed, as (text, closed, entities
    decoded): entities around the JSON syntax, then one missing closing brace."""
    out = [(_unescape(segment), False, True)] if "&" in segment else []
    if segment.startswith("{") and not segment.endswith("}"):
        out += [(t + "}", True, d) for t, _, d in [*out, (segment, False, False)]]
    return out


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return {list: "list", str: "string", int: "number", float: "number"}.get(
        type(value), type(value).__name__
    )


def _unescape(text: str) -> str:
    if "&" not in text:
        return text
    return _ENTITY.sub(lambda m: html.unescape(m.group(0)), text)


def _unescape_deep(value: Any) -> Any:
    """Decode complete HTML entities in every string value (not keys) of parsed JSON."""
    if isinstance(value, str):
        return _unescape(value)
    if isinstance(value, dict):
        return {k: _unescape_deep(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unescape_deep(v) for v in value]
    return value
