"""Tool argument schemas: derived from a signature and docstring, or given as JSON Schema.

One idea: what a tool's arguments are, as the model is shown them (a JSON Schema) and as
they are checked before the callable runs (a strict validator), and what the model reads
when they are rejected (a message naming each bad argument and why).

Python-typed tools take their schema from type hints and the docstring and are validated
with a pydantic TypeAdapter in strict mode; tools declared by JSON Schema are validated
with jsonschema (Draft 2020-12), imported on first use, under the same rules: missing,
unknown and wrong-typed arguments are rejected, `True`, `"1"` and `5.0` are not integers,
and a number parameter takes ints and floats.

Signatures: an unannotated parameter accepts any value, and a tool built with one warns
(UntypedParameterWarning, which a warnings filter can make an error); a parameter whose
name starts with `_` is the tool's own (a value bound as a default, `_i=i`): it needs a
default, the model is not shown it and cannot pass it. `**kwargs` makes the schema's
`additionalProperties` its annotation (or `true`); `*args` cannot be filled from named
arguments and is a ToolDefinitionError; positional-only parameters are passed by position.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import UnionType
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
)

import pydantic_core
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, WithJsonSchema
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema
from typing_extensions import TypedDict

from loopwright.errors import (
    LoopwrightError,
    ToolDefinitionError,
    UntypedParameterWarning,
    describe,
)
from loopwright.tools.docstrings import parse_docstring as parse_docstring  # re-exported

_MAX_PROBLEMS: Final = 6


class ToolArgumentError(ValueError, LoopwrightError):
    """Arguments that do not fit a tool's schema; the message names each argument and why."""


# --- JSON Schema helpers ----------------------------------------------------------------

_SUBSCHEMA = frozenset(
    {"items", "additionalProperties", "not", "if", "then", "else", "contains",
     "propertyNames", "unevaluatedItems", "unevaluatedProperties", "additionalItems"}
)
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


@functools.cache
def _strict_validator() -> Any:
    """The Draft 2020-12 validator class with strict numbers, built on first use: jsonschema
    costs tens of milliseconds to import and only `Tool.from_schema` tools need it."""
    import jsonschema

    strict_types = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
        {
            "integer": lambda _, v: isinstance(v, int) and not isinstance(v, bool),
            "number": lambda _, v: isinstance(v, (int, float)) and not isinstance(v, bool),
        }
    )
    return jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=strict_types)


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


# --- Python-typed arguments -------------------------------------------------------------


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


# --- argument specs ---------------------------------------------------------------------

Check = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class ArgumentSpec:
    """A tool's arguments: the schema the model sees, the names it takes, and `check`, which
    returns the arguments to call with or raises ToolArgumentError."""

    parameters: dict[str, Any]
    names: tuple[str, ...]
    required: tuple[str, ...]
    open: bool  # takes arguments beyond `names`
    check: Check
    positional: tuple[str, ...] = ()  # positional-only parameters, passed by position
    defaults: dict[str, Any] = field(default_factory=dict)


def argument_dict(args: object) -> dict[str, Any]:
    """`args` as the dict a check takes; ToolArgumentError when it is not a mapping."""
    if type(args) is dict:
        return args
    if not isinstance(args, Mapping):
        raise ToolArgumentError(f"arguments must be an object of named values, {_got(args)}")
    return dict(args)


def typed_arguments(
    func: Callable[..., Any], tool_name: str, param_docs: Mapping[str, str]
) -> ArgumentSpec:
    """The spec of a Python function's parameters, from its type hints and `param_docs`."""
    try:
        signature = inspect.signature(func, eval_str=True)
    except Exception as exc:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: cannot read its signature ({type(exc).__name__}: {exc})"
        ) from exc
    fields: dict[str, Any] = {}
    extra: Any = None
    positional: list[str] = []
    required: list[str] = []
    defaults: dict[str, Any] = {}
    hidden: list[str] = []
    untyped: list[str] = []
    for param in signature.parameters.values():
        annotation = Any if param.annotation is param.empty else _keep_ints(param.annotation)
        if param.kind is param.VAR_POSITIONAL:
            raise ToolDefinitionError(
                f"tool {tool_name!r}: *{param.name} cannot be filled from named arguments; "
                f"take a list parameter instead (e.g. {param.name}: list[...])"
            )
        if param.kind is param.VAR_KEYWORD:
            extra = annotation
            continue
        if param.name.startswith("_"):  # the tool's own: never shown to the model or taken from it
            if param.default is param.empty:
                raise ToolDefinitionError(
                    f"tool {tool_name!r}: parameter {param.name!r} starts with '_', so the model is "
                    f"not shown it and cannot fill it, but it has no default; give it one "
                    f"({param.name}=...) or rename it"
                )
            hidden.append(param.name)
            if param.kind is param.POSITIONAL_ONLY:
                positional.append(param.name)
                defaults[param.name] = param.default
            continue
        if param.annotation is param.empty:
            untyped.append(param.name)
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
            defaults[param.name] = param.default
    adapter, schema = _validator(tool_name, fields, extra)
    for key, default in defaults.items():
        ok, value = _jsonable(default)
        if ok and key in fields:
            schema["properties"][key]["default"] = value
    if extra is not None and schema.get("additionalProperties") == {}:
        schema["additionalProperties"] = True
    schema.setdefault("properties", {})
    names = tuple(fields)
    if untyped:
        _warn_untyped(tool_name, untyped)
    check = _typed_check(adapter, names)
    if hidden and extra is not None:  # **kwargs takes any name: refuse the tool's own ones
        check = _refusing(check, frozenset(hidden))
    return ArgumentSpec(
        parameters=schema, names=names, required=tuple(required), open=extra is not None,
        check=check, positional=tuple(positional),
        defaults=defaults,
    )


def _validator(tool_name: str, fields: dict[str, Any], extra: Any) -> tuple[TypeAdapter[Any], dict[str, Any]]:
    """The strict validator of these parameters (a TypedDict of them) and its JSON Schema."""
    try:
        typed: Any = (
            TypedDict(f"{tool_name}_args", fields, extra_items=extra)  # type: ignore[operator]
            if extra is not None
            else TypedDict(f"{tool_name}_args", fields)  # type: ignore[operator]
        )
        typed.__pydantic_config__ = ConfigDict(strict=True, arbitrary_types_allowed=True)
        if extra is None:
            typed.__pydantic_config__["extra"] = "forbid"
        adapter: TypeAdapter[Any] = TypeAdapter(typed)
        schema = adapter.json_schema(schema_generator=_LenientJsonSchema)
    except Exception as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ToolDefinitionError(
            f"tool {tool_name!r}: cannot build a validator for its parameters "
            f"({type(exc).__name__}: {first_line})"
        ) from exc
    return adapter, _clean_schema(schema)


def _warn_untyped(tool_name: str, untyped: list[str]) -> None:
    """Warn, at the user's line that made the tool (the first frame outside loopwright),
    that these parameters have no type."""
    names = ", ".join(map(repr, untyped))
    example = f"{untyped[0]}: str or {untyped[0]}: int"
    level, frame = 1, sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    warnings.warn(
        f"tool {tool_name!r}: parameter{'s' if len(untyped) > 1 else ''} {names} "
        f"{'have' if len(untyped) > 1 else 'has'} no type annotation, so the model is shown no type "
        f"and any value is accepted; annotate {'them' if len(untyped) > 1 else 'it'} (e.g. {example})",
        UntypedParameterWarning,
        stacklevel=level + 1,
    )


_PACKAGE_DIR: Final = os.path.dirname(os.path.dirname(__file__)) + os.sep  # loopwright's own frames


def _refusing(check: Check, hidden: frozenset[str]) -> Check:
    """`check`, refusing arguments named for the tool's own parameters."""

    def refuse(args: dict[str, Any]) -> dict[str, Any]:
        given = sorted(hidden.intersection(args))
        if given:
            raise ToolArgumentError(f"unknown argument {given[0]!r}: it is the tool's own, not an argument")
        return check(args)

    return refuse


def _typed_check(adapter: TypeAdapter[Any], names: tuple[str, ...]) -> Check:
    validator = adapter.validator  # the core validator: the adapter's methods add a layer

    def check(args: dict[str, Any]) -> dict[str, Any]:
        try:
            return validator.validate_python(args, strict=True)  # type: ignore[no-any-return]
        except ValidationError as python_error:
            failure = python_error
        # Strict Python mode wants an Enum member, a dataclass instance, a datetime; a
        # model sends their JSON forms. Retry under strict JSON rules, which accept those
        # and still reject True, "1" and 5.0 for an integer.
        try:
            payload = pydantic_core.to_json(args)
        except Exception:
            raise ToolArgumentError(_pydantic_message(failure, args, names)) from None
        try:
            return validator.validate_json(payload, strict=True)  # type: ignore[no-any-return]
        except ValidationError as json_error:
            if any(e["type"] == "needs_python_object" for e in json_error.errors()):
                # a parameter that only takes a live object: the Python error says which
                raise ToolArgumentError(_pydantic_message(failure, args, names)) from None
            root = pydantic_core.from_json(payload)
            raise ToolArgumentError(_pydantic_message(json_error, root, names)) from None

    return check


def schema_arguments(parameters: Mapping[str, Any], tool_name: str) -> ArgumentSpec:
    """The spec of a JSON Schema object, with BFCL's type aliases mapped and unknown
    top-level arguments closed off unless the schema says otherwise."""
    import jsonschema  # here, not at module level: only JSON Schema tools pay its import

    if not isinstance(parameters, Mapping):
        raise ToolDefinitionError(
            f"tool {tool_name!r}: parameters must be a JSON Schema object, "
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
            f"tool {tool_name!r}: parameters must have type 'object', "
            f"got {describe(schema['type'])}"
        )
    open_keys = ("additionalProperties", "patternProperties", "unevaluatedProperties",
                 "allOf", "anyOf", "oneOf", "$ref", "if", "not")  # fmt: skip
    if not any(key in schema for key in open_keys):
        schema["additionalProperties"] = False
    strict_validator = _strict_validator()
    try:
        strict_validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: invalid JSON Schema: {exc.message}"
        ) from exc
    properties = schema.get("properties", {})
    names = tuple(properties) if isinstance(properties, Mapping) else ()
    validator = strict_validator(schema)

    def check(args: dict[str, Any]) -> dict[str, Any]:
        if validator.is_valid(args):
            return args
        raise ToolArgumentError(_jsonschema_message(validator.iter_errors(args), args, names))

    return ArgumentSpec(
        parameters=schema,
        names=names,
        required=tuple(r for r in schema.get("required", []) if isinstance(r, str)),
        open=schema.get("additionalProperties", True) is not False,
        check=check,
    )
