"""Tool examples: a call a tool is known to answer, shown to the model in worked examples.

An example is `{"args": {...}}` plus an optional `"question"` it answers and the
`"result"` the tool gave. They come from `@tool(examples=[...])`,
`Tool.from_schema(..., examples=[...])` or the schema's own JSON Schema `examples`, from
the docstring (an `Examples:` section of calls, and `e.g. ...` in a parameter's
description when that parses as a valid value), and from `bootstrap_examples`. Each is
checked against the tool's schema when the tool is defined: a bad one is a
ToolDefinitionError naming it, never a worked example the validator would reject.

`synthesise_args` makes plausible arguments from a schema alone (enum values, bounds,
`e.g.` values, a value suggested by the parameter's name) for a tool with no examples.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from loopwright.errors import ToolDefinitionError, describe

__all__ = ["ToolExample", "check_examples", "eg_value", "parse_docstring_examples", "synthesise_args"]

_KEYS: Final = frozenset({"args", "question", "result"})
_EG: Final = re.compile(r"\be\.g\.,?\s*(.+?)(?:[.;)]?\s*$|[.;)](?=\s))", re.IGNORECASE)
_RESULT_ARROW: Final = re.compile(r"\s+(?:->|→|=>)\s+")


@dataclass(frozen=True)
class ToolExample:
    """One known call of a tool: its arguments, and optionally the question it answers
    and the result the tool gave (None: not known)."""

    args: dict[str, Any]
    question: str | None = None
    result: Any = None
    source: str = field(default="declared", compare=False)  # declared | docstring | bootstrap

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"args": self.args}
        if self.question is not None:
            out["question"] = self.question
        if self.result is not None:
            out["result"] = self.result
        return out


def check_examples(
    tool_name: str,
    raw: object,
    validate: Callable[[Mapping[str, Any]], object],
    source: str = "declared",
) -> tuple[ToolExample, ...]:
    """Examples from what a user declared, each validated; ToolDefinitionError otherwise."""
    if raw is None:
        return ()
    if isinstance(raw, (str, bytes, Mapping)) or not isinstance(raw, Sequence):
        raise ToolDefinitionError(
            f"tool {tool_name!r}: examples must be a list of {{'args': {{...}}, 'question': ..., "
            f"'result': ...}}, got {describe(raw)}"
        )
    out = []
    for i, item in enumerate(raw, 1):
        where = f"tool {tool_name!r}: example {i} ({describe(item)})"
        if isinstance(item, ToolExample):
            item = item.to_dict()
        if not isinstance(item, Mapping) or "args" not in item:
            raise ToolDefinitionError(f"{where} must be a dict with 'args' (and optionally 'question', 'result')")
        unknown = sorted(set(map(str, item)) - _KEYS)
        if unknown:
            raise ToolDefinitionError(f"{where} has unknown key(s) {', '.join(unknown)}; accepted: args, question, result")
        args, question = item["args"], item.get("question")
        if not isinstance(args, Mapping):
            raise ToolDefinitionError(f"{where}: 'args' must be a dict of arguments, got {describe(args)}")
        if question is not None and not isinstance(question, str):
            raise ToolDefinitionError(f"{where}: 'question' must be a str, got {describe(question)}")
        try:
            validate(args)
        except Exception as exc:
            raise ToolDefinitionError(f"{where} does not fit the tool's schema: {exc}") from None
        out.append(ToolExample(dict(args), question, item.get("result"), source))
    return tuple(out)


# --- docstrings -------------------------------------------------------------------------


def _literal(text: str) -> Any:
    """A result or argument as written: JSON or a Python literal, else the text itself."""
    text = text.strip()
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return text


def _call_args(text: str, tool_name: str, names: Sequence[str]) -> dict[str, Any] | None:
    """The arguments of `tool_name(...)` written with literal values, or a JSON object;
    None when `text` is neither (prose, or a call of something else). Never evaluates
    anything but literals."""
    if text.startswith("{"):
        value = _literal(text)
        return value if isinstance(value, dict) else None
    try:
        node = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == tool_name):
        return None
    try:
        positional = [ast.literal_eval(a) for a in node.args]
        named = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if len(positional) > len(names) or len(named) != len(node.keywords):
        return None
    return {**dict(zip(names, positional, strict=False)), **named}


def parse_docstring_examples(
    lines: Sequence[str], tool_name: str, names: Sequence[str]
) -> list[dict[str, Any]]:
    """Examples written in a docstring's examples section, as dicts for check_examples.

    Each is a call of the tool with literal arguments (`>>> name(1, unit="km")`, or a
    JSON object of the arguments), its result after `->` on the same line or on the next
    line (doctest style), and optionally a line of prose just before it as the question.
    An example whose result is a traceback is left out: it shows a failure."""
    out: list[dict[str, Any]] = []
    prose: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        code = line[4:].strip() if line.startswith(">>>") else line
        parts = _RESULT_ARROW.split(code, maxsplit=1)
        args = _call_args(parts[0], tool_name, names) if code else None
        if args is None:
            prose = line if line and not line.startswith(">>>") else None
            continue
        result: Any = None
        if len(parts) == 2:
            result = _literal(parts[1])
        elif i < len(lines) and lines[i].strip() and not lines[i].strip().startswith(">>>"):
            following = lines[i].strip()
            if _call_args(following, tool_name, names) is None:
                result = _literal(following)
                i += 1
        if isinstance(result, str) and result.startswith("Traceback"):
            prose = None
            continue
        example: dict[str, Any] = {"args": args}
        if prose and prose.rstrip().endswith("?"):
            example["question"] = prose
        if result is not None:
            example["result"] = result
        out.append(example)
        prose = None
    return out


def eg_value(description: object, spec: Mapping[str, Any]) -> tuple[bool, Any]:
    """The value an `e.g. ...` in a parameter's description gives, if it fits `spec`."""
    if not isinstance(description, str):
        return False, None
    match = _EG.search(description)
    if match is None:
        return False, None
    text = match.group(1).strip().rstrip(",")
    candidates = [_literal(text)]
    if spec.get("type") == "string" and not (text[:1] in "\"'" and text[-1:] == text[:1]):
        candidates.append(text)
    for value in candidates:
        if fits(value, spec):
            return True, value
    return False, None


def fits(value: Any, spec: Mapping[str, Any]) -> bool:
    """Whether `value` is valid for the JSON Schema `spec` (strict numbers: True is no
    integer)."""
    from loopwright.wire.toolschema import _strict_validator

    try:
        return bool(_strict_validator()(dict(spec)).is_valid(value))
    except Exception:  # a schema jsonschema cannot use: no opinion, so no value
        return False


# --- synthesised arguments ----------------------------------------------------------------

_NAME_HINTS: Final[tuple[tuple[tuple[str, ...], str], ...]] = (
    (("email",), "ada@example.com"),
    (("url", "link", "website"), "https://example.com"),
    (("date", "day", "when"), "2024-03-15"),
    (("time", "hour"), "09:30"),
    (("city", "town"), "Lyon"),
    (("country", "nation"), "Japan"),
    (("currency",), "EUR"),
    (("lang",), "en"),
    (("unit",), "km"),
    (("expression", "expr", "formula", "equation"), "12 * 34"),
    (("path", "file", "filename"), "notes.txt"),
    (("sku", "item", "product"), "widget"),
    (("color", "colour"), "blue"),
    (("first_name", "last_name", "username", "name", "person", "author"), "Ada Lovelace"),
    (("id", "code", "key"), "A-100"),
    (("query", "topic", "search", "term", "keyword", "question", "subject"), ""),
    (("text", "message", "content", "body", "note", "sentence"), "hello world"),
)


def _string_for(name: str, spec: Mapping[str, Any]) -> str:
    fmt = spec.get("format")
    if fmt == "date":
        return "2024-03-15"
    if fmt == "date-time":
        return "2024-03-15T09:30:00Z"
    if fmt == "email":
        return "ada@example.com"
    if fmt in ("uri", "url"):
        return "https://example.com"
    lowered = name.lower()
    words = set(re.split(r"[^a-z0-9]+", lowered))
    for keys, sample in _NAME_HINTS:
        if any(k in words or lowered.endswith(k) for k in keys):
            if sample:
                return sample
            break
    description = str(spec.get("description") or "").strip().rstrip(".")
    if description:  # a phrase from the description, e.g. "the city to look up" -> "city"
        words_in = [w for w in re.findall(r"[A-Za-z][A-Za-z-]+", description) if w.lower() not in _FILLER]
        if words_in:
            return " ".join(words_in[:3]).lower()
    return name.replace("_", " ")


_FILLER: Final = frozenset(
    "a an the of to for in on at by with from and or is are be this that which what "
    "name value string text look up find get".split()
)


def _number_for(spec: Mapping[str, Any], integer: bool) -> int | float:
    low = spec.get("minimum")
    high = spec.get("maximum")
    if isinstance(spec.get("exclusiveMinimum"), (int, float)):
        low = spec["exclusiveMinimum"] + (1 if integer else 0.5)
    if isinstance(spec.get("exclusiveMaximum"), (int, float)):
        high = spec["exclusiveMaximum"] - (1 if integer else 0.5)
    value: int | float = 3 if integer else 2.5
    if isinstance(low, (int, float)) and not isinstance(low, bool):
        value = max(value, low)
    if isinstance(high, (int, float)) and not isinstance(high, bool):
        value = min(value, high)
    return int(value) if integer else value


def synthesise_value(name: str, spec: Any, depth: int = 0) -> tuple[bool, Any]:
    """A plausible value for one parameter, or (False, None) when none can be made."""
    if not isinstance(spec, Mapping) or depth > 4:
        return False, None
    for key in ("examples",):
        found = spec.get(key)
        if isinstance(found, list) and found and fits(found[0], spec):
            return True, found[0]
    if "const" in spec:
        return True, spec["const"]
    if isinstance(spec.get("enum"), list) and spec["enum"]:
        return True, spec["enum"][0]
    ok, value = eg_value(spec.get("description"), spec)
    if ok:
        return True, value
    if "default" in spec and fits(spec["default"], spec):
        return True, spec["default"]
    kind = spec.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    for key in ("anyOf", "oneOf"):
        if kind is None and isinstance(spec.get(key), list):
            for branch in spec[key]:
                if isinstance(branch, Mapping) and branch.get("type") != "null":
                    return synthesise_value(name, {"description": spec.get("description"), **branch}, depth + 1)
    if kind == "string":
        text = _string_for(name, spec)
        low, high = spec.get("minLength"), spec.get("maxLength")
        if isinstance(low, int) and len(text) < low:
            text = text + "x" * (low - len(text))
        if isinstance(high, int) and len(text) > high:
            text = text[:high]
        return True, text
    if kind in ("integer", "number"):
        return True, _number_for(spec, kind == "integer")
    if kind == "boolean":
        return True, True
    if kind == "array":
        ok, item = synthesise_value(name.rstrip("s"), spec.get("items"), depth + 1)
        return True, [item] if ok else []
    if kind == "object":
        return True, synthesise_args(spec, depth + 1)
    return False, None


def synthesise_args(parameters: Mapping[str, Any], depth: int = 0) -> dict[str, Any]:
    """Arguments for an object schema: every required property, from its own schema."""
    props = parameters.get("properties") or {}
    if not isinstance(props, Mapping):
        return {}
    required = [k for k in parameters.get("required") or () if k in props]
    out: dict[str, Any] = {}
    for key in required:
        ok, value = synthesise_value(str(key), props[key], depth)
        if ok:
            out[str(key)] = value
    return out
