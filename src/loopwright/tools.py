"""Typed tools and the registry that dispatches them.

A Tool wraps a callable with a JSON Schema and a strict validator built once. The
registry is the second trust boundary: `dispatch`/`execute` never raise for anything a
tool or the model does. Unknown tool, bad arguments, an exception, a timeout or an
unrenderable result all come back as a ToolError whose observation the model reads next
step; only KeyboardInterrupt, SystemExit and other non-Exception BaseExceptions propagate.

Python-typed tools (`@tool`) take their schema from type hints and the docstring and are
validated with a pydantic TypeAdapter in strict mode; tools declared by JSON Schema
(`Tool.from_schema`) are validated with jsonschema (Draft 2020-12) under the same rules:
missing, unknown and wrong-typed arguments are rejected before the callable runs, `True`,
`"1"` and `5.0` are not integers, and a number parameter takes ints and floats.

Signatures: an unannotated parameter accepts any value; `**kwargs` makes the schema's
`additionalProperties` its annotation (or `true`); `*args` cannot be filled from named
arguments and is a ToolDefinitionError; positional-only parameters are passed by position.

Timeouts: a tool's own `timeout_s`, else the registry's `tool_timeout_s`; a per-call
`timeout_s` caps either (the loops pass the run's remaining wall clock). When one applies,
a sync tool runs in a daemon worker thread that is abandoned, not killed, at the deadline:
Python cannot kill a thread, so the tool runs on in the background until it returns. Async
tools are cancelled with `asyncio.wait_for`. With no timeout a sync tool runs inline.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import inspect
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial, update_wrapper
from types import CoroutineType, UnionType
from typing import (
    Annotated,
    Any,
    Final,
    Literal,
    NotRequired,
    Required,
    Union,
    get_args,
    get_origin,
    overload,
)

import jsonschema
import pydantic_core
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, WithJsonSchema
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema
from typing_extensions import TypedDict

from loopwright.errors import LoopwrightError, ToolDefinitionError, describe

ToolErrorKind = Literal[
    "unknown_tool", "invalid_args", "exception", "timeout", "unrenderable", "denied"
]  # "denied": refused by an approval gate (the loops build it; dispatch never does)
SideEffects = Literal["none", "read", "write", "destructive"]
# The argument that carries a side effect's idempotency key, or a function of the arguments.
IdempotencyKey = str | Callable[[Mapping[str, Any]], object] | None

_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_SIDE_EFFECTS: Final = ("none", "read", "write", "destructive")
_MAX_PROBLEMS: Final = 6


class ToolArgumentError(ValueError, LoopwrightError):
    """Arguments that do not fit a tool's schema; the message names each argument and why."""


@dataclass(frozen=True, slots=True)
class ToolError:
    """A failed tool call, returned (never raised) so the model can read it and recover."""

    tool: str
    message: str
    kind: ToolErrorKind = "exception"

    def as_observation(self) -> str:
        return f"ERROR[{self.tool}]: {self.message}"


@dataclass(frozen=True, slots=True)
class ToolResult:
    """One executed call as the loops consume it: the value (None on failure), the
    rendered observation the model sees, the error if any, and wall time."""

    name: str
    args: dict[str, Any]
    value: Any
    observation: str
    error: ToolError | None
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.error is None


# --- docstrings -----------------------------------------------------------------------

_GOOGLE_HEADER = re.compile(
    r"(?:args|arguments|parameters|params|keyword args|keyword arguments|other parameters)\s*:",
    re.IGNORECASE,
)
_GOOGLE_ANY_HEADER = re.compile(
    r"(?:args|arguments|parameters|params|keyword args|keyword arguments|other parameters|"
    r"returns?|yields?|raises|examples?|notes?|attributes|warnings?|see also|todo)\s*:",
    re.IGNORECASE,
)
_GOOGLE_ENTRY = re.compile(r"\**(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)")
_NUMPY_RULE = re.compile(r"\s*-{3,}\s*")
_NUMPY_ENTRY = re.compile(r"\**(\w+(?:\s*,\s*\**\w+)*)\s*(?::.*)?")
_REST_PARAM = re.compile(r":param\s+(?:[^:]*?\s)?\**(\w+)\s*:\s*(.*)")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a docstring into its first paragraph and per-parameter descriptions.

    Understands Google (`Args:`), reST (`:param x:`) and numpy (`Parameters` + rule)."""
    lines = inspect.cleandoc(doc or "").splitlines()
    params: dict[str, str] = {}
    summary: list[str] = []
    for line in lines:
        text = line.strip()
        if not text or text.startswith(":") or _GOOGLE_ANY_HEADER.fullmatch(text):
            break
        summary.append(text)
    i = 0
    while i < len(lines):
        text = lines[i].strip()
        if _GOOGLE_HEADER.fullmatch(text):
            i = _google_section(lines, i, params)
        elif (
            i + 1 < len(lines)
            and text.lower() in ("parameters", "other parameters")
            and (_NUMPY_RULE.fullmatch(lines[i + 1]))
        ):
            i = _numpy_section(lines, i + 2, params)
        elif match := _REST_PARAM.fullmatch(text):
            body = [match.group(2).strip()]
            while i + 1 < len(lines) and lines[i + 1][:1].isspace() and lines[i + 1].strip():
                i += 1
                body.append(lines[i].strip())
            params[match.group(1)] = " ".join(b for b in body if b)
            i += 1
        else:
            i += 1
    return " ".join(summary), params


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _google_section(lines: list[str], header: int, params: dict[str, str]) -> int:
    base = _indent(lines[header])
    entry_indent: int | None = None
    current: str | None = None
    i = header + 1
    while i < len(lines):
        line = lines[i]
        if line.strip():
            indent = _indent(line)
            if indent <= base:
                break
            entry_indent = indent if entry_indent is None else entry_indent
            match = _GOOGLE_ENTRY.fullmatch(line.strip())
            if indent == entry_indent and match:
                current = match.group(1)
                params[current] = match.group(2).strip()
            elif current is not None:
                params[current] = f"{params[current]} {line.strip()}".strip()
        i += 1
    return i


def _numpy_section(lines: list[str], start: int, params: dict[str, str]) -> int:
    names: list[str] = []
    i = start
    while i < len(lines):
        line = lines[i]
        if i + 1 < len(lines) and line.strip() and _NUMPY_RULE.fullmatch(lines[i + 1]):
            break  # the next section's title
        if line.strip() and not line[:1].isspace():
            match = _NUMPY_ENTRY.fullmatch(line.strip())
            names = [n.strip().lstrip("*") for n in match.group(1).split(",")] if match else []
            for name in names:
                params[name] = ""
        elif line.strip():
            for name in names:
                params[name] = f"{params[name]} {line.strip()}".strip()
        i += 1
    return i


# --- JSON Schema helpers ----------------------------------------------------------------

_SUBSCHEMA = frozenset(
    {"items", "additionalProperties", "not", "if", "then", "else", "contains",
     "propertyNames", "unevaluatedItems", "unevaluatedProperties", "additionalItems"}
)  # fmt: skip
_SUBSCHEMA_LIST = frozenset({"anyOf", "allOf", "oneOf", "prefixItems", "items"})
_SUBSCHEMA_MAP = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
_BFCL_TYPES: Final = {"dict": "object", "float": "number", "tuple": "array"}


def _map_schema(node: Any, fn: Callable[[dict[str, Any]], Any]) -> Any:
    """Rebuild a schema bottom-up, applying `fn` to every schema node (never to data such
    as `enum`, `default` or the names in `properties`)."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _SUBSCHEMA and isinstance(value, dict):
            out[key] = _map_schema(value, fn)
        elif key in _SUBSCHEMA_LIST and isinstance(value, list):
            out[key] = [_map_schema(v, fn) for v in value]
        elif key in _SUBSCHEMA_MAP and isinstance(value, dict):
            out[key] = {name: _map_schema(v, fn) for name, v in value.items()}
        else:
            out[key] = value
    return fn(out)


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"][8:]} if str(node.get("$ref", "")).startswith("#/$defs/") else set()
        return found.union(*(_refs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node))
    return set()


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's `title` noise and inline `$defs` that are not recursive."""
    defs: dict[str, Any] = schema.pop("$defs", {})
    graph = {key: _refs(value) for key, value in defs.items()}

    def reaches(start: str, target: str) -> bool:
        seen: set[str] = set()
        todo = list(graph.get(start, ()))
        while todo:
            key = todo.pop()
            if key == target:
                return True
            if key not in seen:
                seen.add(key)
                todo.extend(graph.get(key, ()))
        return False

    recursive = {key for key in defs if reaches(key, key)}
    inlined: dict[str, Any] = {}

    def clean(node: dict[str, Any]) -> dict[str, Any]:
        if isinstance(node.get("title"), str):
            del node["title"]
        ref = node.get("$ref")
        if isinstance(ref, str) and ref[8:] in defs and ref[8:] not in recursive:
            key = ref[8:]
            if key not in inlined:
                inlined[key] = _map_schema(defs[key], clean)
            siblings = {k: v for k, v in node.items() if k != "$ref"}
            return {**copy.deepcopy(inlined[key]), **siblings}
        return node

    out: dict[str, Any] = _map_schema(schema, clean)
    if recursive:
        out["$defs"] = {key: _map_schema(defs[key], clean) for key in sorted(recursive)}
    return out


class _LenientJsonSchema(GenerateJsonSchema):
    """A parameter whose type has no JSON Schema (an arbitrary class) is shown as `{}`;
    it can still be passed as a live value (a ReWOO evidence reference)."""

    def handle_invalid_for_json_schema(
        self, schema: core_schema.CoreSchema, error_info: str
    ) -> JsonSchemaValue:
        return {}


_STRICT_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
    {
        "integer": lambda _, v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda _, v: isinstance(v, (int, float)) and not isinstance(v, bool),
    }
)
_StrictValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, type_checker=_STRICT_TYPES
)


# --- error messages ---------------------------------------------------------------------

_EXPECTED: Final = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "string_type": "a string",
    "bool_type": "a boolean", "bool_parsing": "a boolean", "none_required": "null",
    "list_type": "a list", "tuple_type": "a list", "set_type": "a list",
    "frozen_set_type": "a list", "dict_type": "an object", "model_type": "an object",
    "model_attributes_type": "an object", "dataclass_type": "an object",
    "dataclass_exact_type": "an object",
}  # fmt: skip
_JSON_TYPES: Final = {
    "integer": "an integer", "number": "a number", "string": "a string",
    "boolean": "a boolean", "object": "an object", "array": "a list", "null": "null",
}  # fmt: skip


def _got(value: Any) -> str:
    return f"got {describe(value)} ({type(value).__name__})"


def _path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return repr(text) if text else "arguments"


def _real_path(loc: tuple[Any, ...], root: Any, last_is_key: bool) -> list[Any]:
    """The argument path of a pydantic error: loc minus the union-member tags, found by
    walking the input alongside it."""
    parts: list[Any] = []
    current = root
    for i, element in enumerate(loc):
        if isinstance(current, Mapping) and element in current:
            current = current[element]
        elif (
            isinstance(current, list | tuple)
            and isinstance(element, int)
            and (-len(current) <= element < len(current))
        ):
            current = current[element]
        elif not (last_is_key and i == len(loc) - 1):
            continue
        parts.append(element)
    return parts


def _join(problems: list[str]) -> str:
    unique = list(dict.fromkeys(problems))
    shown = unique[:_MAX_PROBLEMS]
    more = len(unique) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def _pydantic_message(exc: ValidationError, root: Any, accepted: tuple[str, ...]) -> str:
    problems: list[str] = []
    wanted: dict[str, tuple[list[str], Any]] = {}  # path -> (expected kinds, offending value)
    for err in exc.errors(include_url=False):
        kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
        parts = _real_path(err["loc"], root, kind in ("missing", "extra_forbidden"))
        where = _path(parts)
        if kind == "missing":
            noun = "argument" if len(parts) == 1 else "field"
            problems.append(f"missing required {noun} {where}")
        elif kind == "extra_forbidden":
            if len(parts) == 1:
                names = ", ".join(repr(n) for n in accepted) or "none"
                problems.append(f"unknown argument {where} (accepted: {names})")
            else:
                problems.append(f"unknown field {where}")
        elif kind in _EXPECTED or kind in ("enum", "literal_error", "is_instance_of"):
            expected = _EXPECTED.get(kind) or (
                f"an instance of {ctx.get('class')}"
                if kind == "is_instance_of"
                else str(ctx.get("expected"))
            )
            if where not in wanted:
                wanted[where] = ([], value)
                problems.append(where)  # placeholder, filled below (unions merge here)
            wanted[where][0].append(expected)
        else:
            problems.append(f"{where}: {err['msg']}, {_got(value)}")
    for where, (kinds, value) in wanted.items():
        if "a number" in kinds:  # int | float is how a number parameter is checked
            kinds = [k for k in kinds if k != "an integer"]
        text = f"{where} must be {' or '.join(dict.fromkeys(kinds))}, {_got(value)}"
        problems[problems.index(where)] = text
    return _join(problems)


def _jsonschema_message(
    errors: Iterable[Any], args: Mapping[str, Any], accepted: tuple[str, ...]
) -> str:
    problems: list[str] = []
    for err in errors:
        parts = list(err.absolute_path)
        where, value, rule, schema = _path(parts), err.instance, err.validator, err.schema
        if rule == "type":
            types = (
                [rule_value] if isinstance(rule_value := err.validator_value, str) else rule_value
            )
            expected = " or ".join(_JSON_TYPES.get(t, repr(t)) for t in types)
            problems.append(f"{where} must be {expected}, {_got(value)}")
        elif rule == "required" and isinstance(value, Mapping):
            noun = "argument" if not parts else "field"
            for name in err.validator_value:
                if name not in value:
                    problems.append(f"missing required {noun} {_path([*parts, name])}")
        elif rule == "additionalProperties" and isinstance(value, Mapping):
            patterns = list(schema.get("patternProperties", {}))
            for name in value:
                if name in schema.get("properties", {}) or any(
                    re.search(p, str(name)) for p in patterns
                ):
                    continue
                if parts:
                    problems.append(f"unknown field {_path([*parts, name])}")
                else:
                    names = ", ".join(repr(n) for n in accepted) or "none"
                    problems.append(f"unknown argument {_path([name])} (accepted: {names})")
        elif rule == "enum":
            options = ", ".join(describe(v, 40) for v in err.validator_value)
            problems.append(f"{where} must be one of {options}, {_got(value)}")
        elif rule == "const":
            problems.append(f"{where} must be {describe(err.validator_value)}, {_got(value)}")
        else:
            text = err.message if len(err.message) <= 200 else err.message[:197] + "..."
            problems.append(f"{where}: {text}")
    return _join(problems) or "arguments do not match the schema"


# --- Tool -------------------------------------------------------------------------------


# A float parameter takes an int as it was sent (1 / 0 stays ZeroDivisionError: division by
# zero, and a ReWOO reference keeps its type), shown to the model as a JSON number.
_NUMBER: Final[Any] = Annotated[int | float, WithJsonSchema({"type": "number"})]


def _keep_ints(annotation: Any) -> Any:
    """`float` -> `int | float` throughout an annotation (unions, containers, Annotated);
    types it cannot rebuild (user classes, models) keep their own rules."""
    if annotation is float:
        return _NUMBER
    origin, args = get_origin(annotation), get_args(annotation)
    if not args or origin is Literal:
        return annotation
    try:
        if origin is Annotated:
            return Annotated[(_keep_ints(args[0]), *annotation.__metadata__)]
        rebuilt = tuple(_keep_ints(a) for a in args)
        if rebuilt == args:
            return annotation
        if origin in (Union, UnionType):
            return Union[rebuilt]  # noqa: UP007 - built from a tuple
        return origin[rebuilt]
    except TypeError:
        return annotation


def _has_description(annotation: Any) -> bool:
    if get_origin(annotation) is not Annotated:
        return False
    return any(isinstance(m, FieldInfo) and m.description for m in get_args(annotation)[1:])


def _jsonable(value: Any) -> tuple[bool, Any]:
    try:
        out = pydantic_core.to_jsonable_python(value)
        json.dumps(out)
    except Exception:
        return False, None
    return True, out


class Tool:
    """A callable with a name, a description, a JSON Schema for its arguments and a strict
    validator. Still callable like the function it wraps. For a method, wrap the bound
    method (`tool(obj.method)`), so `self` is not a parameter."""

    name: str
    description: str
    parameters: dict[str, Any]
    func: Callable[..., Any]
    is_async: bool
    timeout_s: float | None
    side_effects: SideEffects
    idempotent: bool
    requires_approval: bool
    idempotency_key: IdempotencyKey

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout_s: float | None = None,
        side_effects: SideEffects = "none",
        idempotent: bool | None = None,
        requires_approval: bool | None = None,
        idempotency_key: IdempotencyKey = None,
    ) -> None:
        if not callable(func):
            raise ToolDefinitionError(f"a tool needs a callable, got {describe(func)}")
        tool_name = name if name is not None else getattr(func, "__name__", "")
        summary, param_docs = parse_docstring(inspect.getdoc(func))
        self._setup(
            tool_name, description if description is not None else summary, func,
            timeout_s, side_effects, idempotent, requires_approval, idempotency_key,
        )  # fmt: skip
        self._build_typed(param_docs)
        self._check_key()
        try:
            update_wrapper(self, func, updated=())
        except (AttributeError, TypeError):  # e.g. a callable object without __name__
            pass

    @classmethod
    def from_schema(
        cls,
        name: str,
        description: str,
        parameters: Mapping[str, Any],
        func: Callable[..., Any],
        *,
        timeout_s: float | None = None,
        side_effects: SideEffects = "none",
        idempotent: bool | None = None,
        requires_approval: bool | None = None,
        idempotency_key: IdempotencyKey = None,
    ) -> Tool:
        """A tool declared by a JSON Schema object (MCP, OpenAPI, BFCL function docs).

        BFCL's type aliases (`dict`, `float`, `tuple`, `any`) are mapped to JSON Schema.
        Strict: unless the schema says otherwise (`additionalProperties`,
        `patternProperties`, `unevaluatedProperties`, or a top-level composition), unknown
        top-level arguments are rejected, and `additionalProperties: false` is written
        into `parameters` so grammars and native tool calls see the same rule."""
        if not callable(func):
            raise ToolDefinitionError(f"tool {name!r} needs a callable, got {describe(func)}")
        self = cls.__new__(cls)
        self._setup(
            name, description, func, timeout_s, side_effects, idempotent, requires_approval,
            idempotency_key,
        )  # fmt: skip
        self._build_schema(parameters)
        self._check_key()
        return self

    def _setup(
        self,
        name: str,
        description: str,
        func: Callable[..., Any],
        timeout_s: float | None,
        side_effects: SideEffects,
        idempotent: bool | None,
        requires_approval: bool | None,
        idempotency_key: IdempotencyKey,
    ) -> None:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ToolDefinitionError(
                f"invalid tool name {describe(name)}: use 1-64 letters, digits, '_', '-' "
                "or '.' (pass name=... to rename)"
            )
        if side_effects not in _SIDE_EFFECTS:
            raise ToolDefinitionError(
                f"tool {name!r}: side_effects must be one of {_SIDE_EFFECTS}, "
                f"got {describe(side_effects)}"
            )
        if timeout_s is not None and (
            isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0
        ):
            raise ToolDefinitionError(
                f"tool {name!r}: timeout_s must be a positive number of seconds or None, "
                f"got {describe(timeout_s)}"
            )
        self.name = name
        self.description = description
        self.func = func
        call = getattr(func, "__call__", None)  # noqa: B004 - async __call__ on an object
        self.is_async = inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(call)
        self.timeout_s = timeout_s
        self.side_effects = side_effects
        self.idempotent = side_effects in ("none", "read") if idempotent is None else idempotent
        self.requires_approval = (
            side_effects == "destructive" if requires_approval is None else requires_approval
        )
        self.idempotency_key = idempotency_key
        self._positional: tuple[str, ...] = ()
        self._defaults: dict[str, Any] = {}

    def _check_key(self) -> None:
        key = self.idempotency_key
        if key is None or callable(key) or (isinstance(key, str) and key in self._names):
            return
        raise ToolDefinitionError(
            f"tool {self.name!r}: idempotency_key must name one of its parameters "
            f"({', '.join(self._names) or 'none'}) or be a function of the arguments, "
            f"got {describe(key)}"
        )

    def _build_typed(self, param_docs: Mapping[str, str]) -> None:
        try:
            signature = inspect.signature(self.func, eval_str=True)
        except Exception as exc:
            raise ToolDefinitionError(
                f"tool {self.name!r}: cannot read its signature ({type(exc).__name__}: {exc})"
            ) from exc
        fields: dict[str, Any] = {}
        extra: Any = None
        positional: list[str] = []
        required: list[str] = []
        for param in signature.parameters.values():
            annotation = Any if param.annotation is param.empty else _keep_ints(param.annotation)
            if param.kind is param.VAR_POSITIONAL:
                raise ToolDefinitionError(
                    f"tool {self.name!r}: *{param.name} cannot be filled from named arguments; "
                    f"take a list parameter instead (e.g. {param.name}: list[...])"
                )
            if param.kind is param.VAR_KEYWORD:
                extra = annotation
                continue
            if param.kind is param.POSITIONAL_ONLY:
                positional.append(param.name)
            doc = param_docs.get(param.name)
            if doc and not _has_description(annotation):
                annotation = Annotated[annotation, Field(description=doc)]
            if param.default is param.empty:
                fields[param.name] = Required[annotation]
                required.append(param.name)
            else:
                fields[param.name] = NotRequired[annotation]
                self._defaults[param.name] = param.default
        self._positional = tuple(positional)
        self._names = tuple(fields)
        self._required = tuple(required)
        self._open = extra is not None
        try:
            typed: Any = (
                TypedDict(f"{self.name}_args", fields, extra_items=extra)  # type: ignore[operator]
                if extra is not None
                else TypedDict(f"{self.name}_args", fields)  # type: ignore[operator]
            )
            typed.__pydantic_config__ = ConfigDict(strict=True, arbitrary_types_allowed=True)
            if extra is None:
                typed.__pydantic_config__["extra"] = "forbid"
            adapter = TypeAdapter(typed)
            schema = adapter.json_schema(schema_generator=_LenientJsonSchema)
        except Exception as exc:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise ToolDefinitionError(
                f"tool {self.name!r}: cannot build a validator for its parameters "
                f"({type(exc).__name__}: {first_line})"
            ) from exc
        schema = _clean_schema(schema)
        for key, default in self._defaults.items():
            ok, value = _jsonable(default)
            if ok:
                schema["properties"][key]["default"] = value
        if extra is not None and schema.get("additionalProperties") == {}:
            schema["additionalProperties"] = True
        schema.setdefault("properties", {})
        self.parameters = schema
        self._typed_validator = adapter.validator
        self._check = self._check_typed

    def _build_schema(self, parameters: Mapping[str, Any]) -> None:
        if not isinstance(parameters, Mapping):
            raise ToolDefinitionError(
                f"tool {self.name!r}: parameters must be a JSON Schema object, "
                f"got {describe(parameters)}"
            )

        def normalise(node: dict[str, Any]) -> dict[str, Any]:
            kind = node.get("type")
            if kind == "any":
                del node["type"]
            elif isinstance(kind, str) and kind in _BFCL_TYPES:
                node["type"] = _BFCL_TYPES[kind]
            return node

        schema: dict[str, Any] = _map_schema(copy.deepcopy(dict(parameters)), normalise)
        if schema.setdefault("type", "object") != "object":
            raise ToolDefinitionError(
                f"tool {self.name!r}: parameters must have type 'object', "
                f"got {describe(schema['type'])}"
            )
        open_keys = ("additionalProperties", "patternProperties", "unevaluatedProperties",
                     "allOf", "anyOf", "oneOf", "$ref", "if", "not")  # fmt: skip
        if not any(key in schema for key in open_keys):
            schema["additionalProperties"] = False
        try:
            _StrictValidator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ToolDefinitionError(
                f"tool {self.name!r}: invalid JSON Schema: {exc.message}"
            ) from exc
        properties = schema.get("properties", {})
        required = schema.get("required", [])
        self._names = tuple(properties) if isinstance(properties, Mapping) else ()
        self._required = tuple(r for r in required if isinstance(r, str))
        self._open = schema.get("additionalProperties", True) is not False
        self.parameters = schema
        self._schema_validator = _StrictValidator(schema)
        self._check = self._check_schema

    # The validators. Both take a dict and return the dict of arguments to call with.

    def _check_typed(self, args: dict[str, Any]) -> dict[str, Any]:
        try:
            return self._typed_validator.validate_python(args, strict=True)  # type: ignore[no-any-return]
        except ValidationError as python_error:
            failure = python_error
        # Strict Python mode wants an Enum member, a dataclass instance, a datetime; a
        # model sends their JSON forms. Retry under strict JSON rules, which accept those
        # and still reject True, "1" and 5.0 for an integer.
        try:
            payload = pydantic_core.to_json(args)
        except Exception:
            raise ToolArgumentError(_pydantic_message(failure, args, self._names)) from None
        try:
            return self._typed_validator.validate_json(payload, strict=True)  # type: ignore[no-any-return]
        except ValidationError as json_error:
            if any(e["type"] == "needs_python_object" for e in json_error.errors()):
                # a parameter that only takes a live object: the Python error says which
                raise ToolArgumentError(_pydantic_message(failure, args, self._names)) from None
            root = pydantic_core.from_json(payload)
            raise ToolArgumentError(_pydantic_message(json_error, root, self._names)) from None

    def _check_schema(self, args: dict[str, Any]) -> dict[str, Any]:
        validator = self._schema_validator
        if validator.is_valid(args):
            return args
        message = _jsonschema_message(validator.iter_errors(args), args, self._names)
        raise ToolArgumentError(message)

    def validate(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Check arguments against the schema; return the arguments to call with.

        Raises ToolArgumentError (a ValueError) naming each bad argument and why."""
        if type(args) is not dict:
            if not isinstance(args, Mapping):
                raise ToolArgumentError(
                    f"arguments must be an object of named values, {_got(args)}"
                )
            args = dict(args)
        return self._check(args)

    def _invoke(self, args: dict[str, Any]) -> Any:
        if not self._positional:
            return self.func(**args)
        rest = dict(args)
        leading = [rest.pop(n) if n in rest else self._defaults[n] for n in self._positional]
        return self.func(*leading, **rest)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def schema(self) -> dict[str, Any]:
        """The OpenAI function shape, for grammars and native tool calls."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": copy.deepcopy(self.parameters),
        }

    def input_param(self) -> str | None:
        """The parameter a bare `name[text]` action binds to: the only parameter, or the
        only required one; None when that is ambiguous."""
        if len(self._names) == 1:
            return self._names[0]
        return self._required[0] if len(self._required) == 1 else None

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r}, side_effects={self.side_effects!r})"


@overload
def tool(func: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    func: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    side_effects: SideEffects = "none",
    idempotent: bool | None = None,
    requires_approval: bool | None = None,
    idempotency_key: IdempotencyKey = None,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    func: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    side_effects: SideEffects = "none",
    idempotent: bool | None = None,
    requires_approval: bool | None = None,
    idempotency_key: IdempotencyKey = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a Tool from a typed function; usable as `@tool` and `@tool(...)`."""

    def make(f: Callable[..., Any]) -> Tool:
        return Tool(
            f, name=name, description=description, timeout_s=timeout_s,
            side_effects=side_effects, idempotent=idempotent,
            requires_approval=requires_approval, idempotency_key=idempotency_key,
        )  # fmt: skip

    return make if func is None else make(func)


# --- rendering --------------------------------------------------------------------------


def render_observation(value: Any, max_chars: int = 8000) -> str:
    """The text the model sees for a tool result: a str as is, a dict or list as JSON,
    anything else as str(value); truncated past max_chars with a marker.

    Raises whatever rendering raises (the registry reports it as "unrenderable"). A dict
    or list that JSON cannot encode (a tuple key, a cycle) falls back to str(value)."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, (dict, list)):
        try:
            text = json.dumps(value, default=str, ensure_ascii=False)
        except (TypeError, ValueError):
            text = str(value)
    else:
        text = str(value)
    if len(text) > max_chars >= 0:
        return (
            f"{text[:max_chars]}\n…[truncated: {len(text)} chars total, showing first {max_chars}]"
        )
    return text


# --- execution --------------------------------------------------------------------------

_Outcome = tuple[bool, Any]  # (True, value) or (False, exception)


class _ToolTimeout(Exception):
    """Private marker for a deadline we enforced (a tool's own TimeoutError stays its own)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.seconds = seconds


def _exception_text(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:
        text = f"<exception text unavailable: {type(exc).__name__}.__str__ failed>"
    return f"{type(exc).__name__}: {text}"


def _invalid(name: str, exc: Exception) -> ToolError:
    if isinstance(exc, ToolArgumentError):
        return ToolError(name, f"invalid args: {exc}", "invalid_args")
    # e.g. a user's validator inside a pydantic model raising something else
    return ToolError(name, f"invalid args: {_exception_text(exc)}", "invalid_args")


def _unrenderable(name: str, value: Any, exc: Exception) -> ToolError:
    text = f"unrenderable result of type {type(value).__name__} ({_exception_text(exc)})"
    return ToolError(name, text, "unrenderable")


def _failure(name: str, exc: Exception) -> ToolError:
    if isinstance(exc, _ToolTimeout):
        return ToolError(name, f"timeout after {exc.seconds:g}s", "timeout")
    return ToolError(name, _exception_text(exc), "exception")


async def _guard(awaitable: Any, timeout: float | None) -> _Outcome:
    """Await a tool coroutine and capture its outcome, with an optional deadline."""

    async def capture() -> _Outcome:
        try:
            return True, await awaitable
        except Exception as exc:
            return False, exc

    if timeout is None:
        return await capture()
    try:
        return await asyncio.wait_for(capture(), max(timeout, 0.0))
    except TimeoutError:  # capture() swallows the tool's own, so this one is ours
        return False, _ToolTimeout(timeout)


def _run_coroutine(awaitable: Any, timeout: float | None) -> _Outcome:
    # A private loop; a given loop_factory keeps asyncio's current-loop setting untouched.
    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        return runner.run(_guard(awaitable, timeout))


def _job(tool: Tool, args: dict[str, Any], timeout: float | None) -> _Outcome:
    try:
        value = tool._invoke(args)
    except Exception as exc:
        return False, exc
    if inspect.iscoroutine(value):
        return _run_coroutine(value, timeout)
    return True, value


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _run_job(job: Callable[[], _Outcome], timeout: float | None, label: str) -> _Outcome:
    """Run a job inline when that is safe and unbounded; otherwise in a daemon thread that
    is abandoned at the deadline. BaseExceptions from the job re-raise here."""
    if timeout is None and not _loop_running():
        return job()
    box: list[tuple[bool | None, Any]] = []
    done = threading.Event()

    def target() -> None:
        try:
            box.append(job())
        except BaseException as exc:
            box.append((None, exc))
        finally:
            done.set()

    threading.Thread(target=target, name=f"loopwright-tool:{label}", daemon=True).start()
    if not done.wait(None if timeout is None else max(timeout, 0.0)):
        return False, _ToolTimeout(timeout if timeout is not None else 0.0)
    ok, value = box[0]
    if ok is None:
        raise value
    return ok, value


async def _in_thread(job: Callable[[], _Outcome], timeout: float | None, label: str) -> _Outcome:
    future: concurrent.futures.Future[_Outcome] = concurrent.futures.Future()

    def target() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(job())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=target, name=f"loopwright-tool:{label}", daemon=True).start()
    waiting = asyncio.wrap_future(future)
    if timeout is None:
        return await waiting
    try:
        return await asyncio.wait_for(waiting, max(timeout, 0.0))
    except TimeoutError:  # the job captures the tool's own exceptions, so this one is ours
        return False, _ToolTimeout(timeout)


class ToolRegistry:
    """The tools an agent may call, and the one place they are called from."""

    def __init__(
        self,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        *,
        tool_timeout_s: float | None = None,
        max_observation_chars: int = 8000,
    ) -> None:
        self._tools: dict[str, Tool] = {}
        self._names: tuple[str, ...] = ()
        self.tool_timeout_s = tool_timeout_s
        self.max_observation_chars = max_observation_chars
        for item in tools:
            self.register(item)

    def register(self, tool: Tool | Callable[..., Any]) -> Tool:
        """Add a tool (a plain function is wrapped with `tool()`); names must be unique."""
        made = tool if isinstance(tool, Tool) else Tool(tool)
        if made.name in self._tools:
            raise ToolDefinitionError(f"duplicate tool name {made.name!r}")
        self._tools[made.name] = made
        self._names = (*self._names, made.name)
        return made

    @property
    def names(self) -> tuple[str, ...]:
        return self._names

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name) if isinstance(name, str) else None

    def __contains__(self, item: object) -> bool:
        if isinstance(item, Tool):
            return self._tools.get(item.name) is item
        return isinstance(item, str) and item in self._tools

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __iter__(self) -> Iterator[Tool]:
        return iter(tuple(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolRegistry({list(self._names)!r})"

    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema() for t in self._tools.values()]

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        """Least privilege: a new registry holding only these tools, same limits."""
        wanted = list(dict.fromkeys(names))
        unknown = [n for n in wanted if n not in self._tools]
        if unknown:
            raise ToolDefinitionError(
                f"unknown tool(s) {', '.join(map(repr, unknown))}; registered: "
                f"{', '.join(self._names) or 'none'}"
            )
        return ToolRegistry(
            [self._tools[n] for n in wanted],
            tool_timeout_s=self.tool_timeout_s,
            max_observation_chars=self.max_observation_chars,
        )

    def bind(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """Bind a bare `name[text]` action (`{"input": text}`) to the tool's input parameter.

        Unchanged when the tool is unknown, has its own `input` parameter, or has no single
        input parameter; a parameterless tool called as `name[]` gets no arguments."""
        if type(args) is not dict and not isinstance(args, Mapping):
            return args
        if len(args) != 1 or "input" not in args:
            return args
        found = self.get(name)
        if found is None or "input" in found._names:
            return args
        target = found.input_param()
        if target is not None:
            return {target: args["input"]}
        if not found._names and not found._open and args["input"] in ("", None):
            return {}
        return args

    def _unknown(self, name: object) -> ToolError:
        listed = ", ".join(self._names[:8])
        if len(self._names) > 8:
            listed += f", … {len(self._names) - 8} more"
        hint = f"available: {listed}" if listed else "no tools are registered"
        return ToolError(str(name), f"unknown tool {describe(name)} ({hint})", "unknown_tool")

    def _prepare(
        self, name: str, args: Mapping[str, Any]
    ) -> tuple[Tool, dict[str, Any]] | ToolError:
        found = self._tools.get(name) if isinstance(name, str) else None
        if found is None:
            return self._unknown(name)
        try:
            return found, found._check(args) if type(args) is dict else found.validate(args)
        except Exception as exc:
            return _invalid(found.name, exc)

    def _call(self, name: str, args: Mapping[str, Any], timeout_s: float | None) -> Any:
        """The tool's value, or a ToolError. `_prepare` and `_timeout` are inlined here:
        this is every step's cost, and a sync tool with no timeout runs with no thread."""
        found = self._tools.get(name) if isinstance(name, str) else None
        if found is None:
            return self._unknown(name)
        try:
            call_args = found._check(args) if type(args) is dict else found.validate(args)
        except Exception as exc:
            return _invalid(found.name, exc)
        timeout = found.timeout_s if found.timeout_s is not None else self.tool_timeout_s
        if timeout_s is not None:
            timeout = timeout_s if timeout is None else min(timeout_s, timeout)
        if timeout is None and not found.is_async:
            try:
                value = found._invoke(call_args) if found._positional else found.func(**call_args)
            except Exception as exc:
                return _failure(found.name, exc)
            if not isinstance(value, CoroutineType):
                return value
            job: Callable[[], _Outcome] = partial(_run_coroutine, value, None)
        else:
            job = partial(_job, found, call_args, timeout)
        ok, value = _run_job(job, timeout, found.name)
        return value if ok else _failure(found.name, value)

    def _render(self, name: str, outcome: Any) -> tuple[str, ToolError | None]:
        """The observation for an outcome, and the ToolError if it is (or became) one."""
        if type(outcome) is not ToolError:
            try:
                return render_observation(outcome, self.max_observation_chars), None
            except Exception as exc:
                outcome = _unrenderable(name, outcome, exc)
        return render_observation(outcome.as_observation(), self.max_observation_chars), outcome

    def _result(self, name: str, args: Any, outcome: Any, start: float) -> ToolResult:
        error: ToolError | None = None
        if type(outcome) is ToolError:
            error = outcome
        else:
            try:  # the common case, inline: this runs on every step
                observation = render_observation(outcome, self.max_observation_chars)
            except Exception as exc:
                error = _unrenderable(name, outcome, exc)
        if error is not None:
            observation = render_observation(error.as_observation(), self.max_observation_chars)
            outcome = None
        if type(args) is dict:
            args = args.copy()
        else:
            args = dict(args) if isinstance(args, Mapping) else {}
        return _new_result(name, args, outcome, observation, error, time.perf_counter() - start)

    def dispatch(
        self, name: str, args: Mapping[str, Any], *, timeout_s: float | None = None
    ) -> Any:
        """Call a tool: its value, or a ToolError. Never raises for anything a tool or the
        model does; a value that cannot be rendered as an observation is a ToolError too."""
        outcome = self._call(name, args, timeout_s)
        if type(outcome) in _PLAIN:
            return outcome
        return self._render(str(name), outcome)[1] or outcome

    def execute(
        self, name: str, args: Mapping[str, Any], *, timeout_s: float | None = None
    ) -> ToolResult:
        """Call a tool and render its observation; what the loops use."""
        start = time.perf_counter()
        return self._result(name, args, self._call(name, args, timeout_s), start)

    async def aexecute(
        self, name: str, args: Mapping[str, Any], *, timeout_s: float | None = None
    ) -> ToolResult:
        """`execute` for concurrent schedulers: async tools are awaited on the running loop,
        sync tools run in a daemon thread, so independent calls overlap."""
        start = time.perf_counter()
        prepared = self._prepare(name, args)
        if isinstance(prepared, ToolError):
            return self._result(name, args, prepared, start)
        found, call_args = prepared
        timeout = self._timeout(found, timeout_s)
        if found.is_async:
            try:
                value = found._invoke(call_args)
            except Exception as exc:
                return self._result(name, args, _failure(found.name, exc), start)
            ok, value = (
                await _guard(value, timeout) if inspect.isawaitable(value) else (True, value)
            )
        else:
            ok, value = await _in_thread(partial(_job_sync, found, call_args), timeout, found.name)
            if ok and isinstance(value, CoroutineType):
                left = None if timeout is None else timeout - (time.perf_counter() - start)
                ok, value = await _guard(value, left)
                if not ok and isinstance(value, _ToolTimeout):
                    value = _ToolTimeout(timeout if timeout is not None else 0.0)
        return self._result(name, args, value if ok else _failure(found.name, value), start)

    def _timeout(self, tool: Tool, timeout_s: float | None) -> float | None:
        """The tool's own timeout, else the registry's; a per-call timeout caps it (the
        loops pass the run's remaining wall clock, which must not lift a tighter limit)."""
        own = tool.timeout_s if tool.timeout_s is not None else self.tool_timeout_s
        if timeout_s is None:
            return own
        return timeout_s if own is None else min(timeout_s, own)


_PLAIN: Final = frozenset({str, int, float, bool, type(None)})  # always renderable

_SET_NAME, _SET_ARGS, _SET_VALUE, _SET_OBSERVATION, _SET_ERROR, _SET_DURATION = (
    ToolResult.__dict__[field].__set__ for field in ToolResult.__slots__
)


def _new_result(
    name: str, args: dict[str, Any], value: Any, observation: str, error: ToolError | None,
    duration_s: float,
) -> ToolResult:  # fmt: skip
    """Build a ToolResult without the frozen dataclass __init__, which routes each field
    through object.__setattr__: half the cost on the per-step hot path, same object."""
    result = object.__new__(ToolResult)
    _SET_NAME(result, name)
    _SET_ARGS(result, args)
    _SET_VALUE(result, value)
    _SET_OBSERVATION(result, observation)
    _SET_ERROR(result, error)
    _SET_DURATION(result, duration_s)
    return result


def _job_sync(tool: Tool, args: dict[str, Any]) -> _Outcome:
    """A sync tool's call in a worker thread; a coroutine it returns is awaited by the caller."""
    try:
        return True, tool._invoke(args)
    except Exception as exc:
        return False, exc
