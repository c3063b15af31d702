"""Tool examples: a call a tool is known to answer, shown to the model in worked examples.

An example is `{"args": {...}}` plus an optional `"question"` it answers and the
`"result"` the tool gave. They come from `@tool(examples=[...])`,
`Tool.from_schema(..., examples=[...])` or the schema's own JSON Schema `examples`, from
the docstring (an `Examples:` section of calls, and `e.g. ...` in a parameter's
description when that parses as a valid value), and from `bootstrap_examples`. Each is
checked against the tool's schema when the tool is defined: a bad one is a
ToolDefinitionError naming it, never a worked example the validator would reject.

`synthesise_args` takes arguments from a schema alone, only from values written in it
(JSON Schema examples, enums, `e.g.` values, defaults, bounds). A worked example needs
more than arguments: the result the call gave, and an answer; a call without them is
never shown (see loopwright/prompting/templates.py).

`RunExample` is a worked example of a whole run: a question, the calls made with their
results in order, and the answer (`ToolRegistry(tools, examples=[...])`, checked by
`check_run_examples` against the tools' schemas when the registry is made).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from loopwright.errors import ToolDefinitionError, describe
from loopwright.tools.results import render_observation

__all__ = [
    "CallExample",
    "RunExample",
    "ToolExample",
    "check_examples",
    "check_run_examples",
    "eg_value",
    "parse_docstring_examples",
    "real_value",
    "short_answer",
    "synthesise_args",
]

_KEYS: Final = frozenset({"args", "question", "result"})
_EG: Final = re.compile(r"\be\.g\.,?\s*(.+?)(?:[.;)]?\s*$|[.;)](?=\s))", re.IGNORECASE)
_RESULT_ARROW: Final = re.compile(r"\s+(?:->|→|=>)\s+")
_QUOTED: Final = re.compile(r"""(['"])([^'"\n]+)\1""")


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


@dataclass(frozen=True)
class CallExample:
    """One call of a whole-run example: the tool, its arguments, and the result it gave."""

    tool: str
    args: dict[str, Any]
    result: Any

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "args": self.args, "result": self.result}


@dataclass(frozen=True)
class RunExample:
    """A worked example of a whole run: the question, the calls in order (a later call
    may use an earlier result), and the answer the run gave."""

    question: str
    calls: tuple[CallExample, ...]
    answer: Any
    source: str = field(default="declared", compare=False)  # declared | bootstrap

    def to_dict(self) -> dict[str, Any]:
        return {"question": self.question, "calls": [c.to_dict() for c in self.calls], "answer": self.answer}


_RUN_KEYS: Final = frozenset({"question", "calls", "answer"})
_CALL_KEYS: Final = frozenset({"tool", "args", "result"})


class _Validating(Protocol):
    def validate(self, args: Mapping[str, Any]) -> object: ...


def check_run_examples(
    raw: object, tools: Mapping[str, _Validating], source: str = "declared"
) -> tuple[RunExample, ...]:
    """Whole-run examples from what a user declared, each call checked against its
    tool's schema; ToolDefinitionError naming the example (its number and question)
    and what is wrong otherwise."""
    if raw is None:
        return ()
    if isinstance(raw, (str, bytes, Mapping)) or not isinstance(raw, Sequence):
        raise ToolDefinitionError(
            "examples must be a list of {'question': ..., 'calls': [{'tool': ..., 'args': {...}, "
            f"'result': ...}}, ...], 'answer': ...}}, got {describe(raw)}"
        )
    out = []
    for i, item in enumerate(raw, 1):
        kept_source = item.source if isinstance(item, RunExample) else source
        if isinstance(item, RunExample):
            item = item.to_dict()
        label = repr(item.get("question"))[:70] if isinstance(item, Mapping) else describe(item)
        where = f"run example {i} ({label})"
        if not isinstance(item, Mapping):
            raise ToolDefinitionError(f"{where} must be a dict with 'question', 'calls' and 'answer'")
        missing = sorted(_RUN_KEYS - set(map(str, item)))
        unknown = sorted(set(map(str, item)) - _RUN_KEYS)
        if missing or unknown:
            wrong = f"lacks {', '.join(missing)}" if missing else f"has unknown key(s) {', '.join(unknown)}"
            raise ToolDefinitionError(f"{where} {wrong}; a run example has exactly: answer, calls, question")
        question, calls, answer = item["question"], item["calls"], item["answer"]
        if not isinstance(question, str) or not question.strip():
            raise ToolDefinitionError(f"{where}: 'question' must be a non-empty str, got {describe(question)}")
        if answer is None or (isinstance(answer, str) and not answer.strip()):
            raise ToolDefinitionError(f"{where}: 'answer' must be the run's answer, got {describe(answer)}")
        if isinstance(calls, (str, bytes, Mapping)) or not isinstance(calls, Sequence) or not calls:
            raise ToolDefinitionError(f"{where}: 'calls' must be a non-empty list of calls, got {describe(calls)}")
        made = []
        for k, call in enumerate(calls, 1):
            at = f"{where}: call {k}"
            if isinstance(call, CallExample):
                call = call.to_dict()
            if not isinstance(call, Mapping) or set(map(str, call)) != _CALL_KEYS:
                raise ToolDefinitionError(
                    f"{at} must be a dict with exactly 'tool', 'args' and 'result', got {describe(call)}"
                )
            name, args = call["tool"], call["args"]
            tool = tools.get(name) if isinstance(name, str) else None
            if tool is None:
                raise ToolDefinitionError(
                    f"{at} names unknown tool {describe(name)}; registered: {', '.join(tools) or 'none'}"
                )
            if not isinstance(args, Mapping):
                raise ToolDefinitionError(f"{at}: 'args' must be a dict of arguments, got {describe(args)}")
            try:
                tool.validate(args)
            except Exception as exc:
                raise ToolDefinitionError(f"{at} does not fit the schema of {name!r}: {exc}") from None
            made.append(CallExample(name, dict(args), call["result"]))
        out.append(RunExample(question, tuple(made), answer, kept_source))
    return tuple(out)


# --- the answer a worked example ends with ------------------------------------------------

_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w])")
_WORD = re.compile(r"[A-Za-z][\w'-]*|\d+(?:\.\d+)?")
_STOP_WORDS = frozenset(
    "a an the of to for in on at by with from and or is are was were be been it its this that "
    "about around approximately some".split()
)


def short_answer(question: str, result: Any) -> str | None:
    """The answer a worked example ends with: what the question asks, taken from the
    result, never the observation pasted whole (a small model copies what it is shown,
    and answers with copied sentences). A number or a short text is the answer as it
    is; from a sentence, the one number (or the one to three words) it adds to the
    question; None when no such answer can be told apart."""
    if isinstance(result, bool):
        return "yes" if result else "no"
    if isinstance(result, (int, float)):
        return str(render_observation(result, 100))
    if not isinstance(result, str):
        return None
    text = " ".join(result.split()).rstrip(".")
    if not text:
        return None
    if len(_WORD.findall(text)) <= 3:
        return text
    asked = {w.lower() for w in _WORD.findall(question)}
    numbers: list[str] = list(dict.fromkeys(n for n in _NUMBER.findall(text) if n not in asked))
    if len(numbers) == 1:
        return numbers[0]
    if numbers:
        return None
    new = [w for w in _WORD.findall(text) if w.lower() not in asked and w.lower() not in _STOP_WORDS]
    return " ".join(new) if 1 <= len(new) <= 3 else None


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
    if text.count("(") > text.count(")") and description[match.end(1) :].startswith(")"):
        text += ")"  # the closing parenthesis is the value's own, not the sentence's
    candidates = [_literal(text)]
    quoted = _QUOTED.match(text)
    if quoted is not None and quoted.end() < len(text):  # several quoted values: the first
        candidates.insert(0, quoted.group(2))
    if spec.get("type") == "string" and not (text[:1] in "\"'" and text[-1:] == text[:1]):
        candidates.append(text)
    for value in candidates:
        if fits(value, spec):
            return True, value
    return False, None


def fits(value: Any, spec: Mapping[str, Any]) -> bool:
    """Whether `value` is valid for the JSON Schema `spec` (strict numbers: True is no
    integer)."""
    from loopwright.tools.schema import _strict_validator

    try:
        return bool(_strict_validator()(dict(spec)).is_valid(value))
    except Exception:  # a schema jsonschema cannot use: no opinion, so no value
        return False


# --- arguments from the schema alone ------------------------------------------------------


def real_value(spec: Any, depth: int = 0) -> tuple[bool, Any]:
    """A value the schema itself gives for one parameter, or (False, None).

    Only what is written down counts: JSON Schema `examples`, `const`, an `enum`'s first
    value, an `e.g.` value in the description, `default`, an inclusive `minimum` or
    `maximum`. Nothing is made up from a parameter's name: a small model copies a worked
    example's values, so an invented one ("topic" for a `topic`) becomes its answer."""
    if not isinstance(spec, Mapping) or depth > 4:
        return False, None
    found = spec.get("examples")
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
    for bound in ("minimum", "maximum"):
        value = spec.get(bound)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and fits(value, spec):
            return True, value
    for key in ("anyOf", "oneOf"):
        if isinstance(spec.get(key), list) and "type" not in spec:
            for branch in spec[key]:
                if isinstance(branch, Mapping) and branch.get("type") != "null":
                    ok, value = real_value({"description": spec.get("description"), **branch}, depth + 1)
                    if ok:
                        return True, value
    kind = spec.get("type")
    if kind == "array" or (isinstance(kind, list) and "array" in kind):
        ok, item = real_value(spec.get("items"), depth + 1)
        if ok and fits([item], spec):
            return True, [item]
    if kind == "object" or (isinstance(kind, list) and "object" in kind):
        args = synthesise_args(spec, depth + 1)
        if args is not None and fits(args, spec):
            return True, args
    return False, None


def synthesise_args(parameters: Mapping[str, Any], depth: int = 0) -> dict[str, Any] | None:
    """Arguments for an object schema from its own values (`real_value`): every required
    property, or None when one has nothing real to show (the tool is then listed by its
    signature and description only)."""
    props = parameters.get("properties") or {}
    if not isinstance(props, Mapping):
        return None
    out: dict[str, Any] = {}
    for key in parameters.get("required") or ():
        if key not in props:
            continue
        ok, value = real_value(props[key], depth)
        if not ok:
            return None
        out[str(key)] = value
    return out
