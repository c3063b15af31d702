"""Typed tools and the registry: strict validation, schemas, and a dispatch that never raises."""

import asyncio
import dataclasses
import enum
import gc
import json
import sys
import threading
import time
import warnings
from typing import Annotated, Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from loopwright.errors import LoopwrightError, ToolDefinitionError, UntypedParameterWarning
from loopwright.tools.registry import (
    Tool,
    ToolArgumentError,
    ToolError,
    ToolRegistry,
    ToolResult,
    parse_docstring,
    render_observation,
    tool,
)

# --- fixtures: module level, so string annotations resolve --------------------------------


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(BaseModel):
    x: int
    y: int = 0


@dataclasses.dataclass
class Box:
    width: float
    label: str


class Span(TypedDict):
    start: int
    end: int


class Tree(BaseModel):
    value: int
    children: list["Tree"] = []


@tool
def add(x: int, y: int) -> int:
    """Add two integers.

    Args:
        x: The first addend,
            which may be negative.
        y (int): The second addend.
    """
    return x + y


@tool
def scale(value: float, factor: float = 2.0) -> float:
    """Multiply a number."""
    return value * factor


@tool
def divide(a: int, b: int) -> float:
    """Divide a by b."""
    return a / b


@tool
def paint(
    color: Color,
    where: Point,
    box: Box | None = None,
    span: Span | None = None,
    tags: list[str] | None = None,
    mode: Literal["fill", "outline"] = "fill",
) -> dict[str, Any]:
    """Paint a shape.

    :param color: the paint colour
    :param where: the anchor point
    """
    return {"color": color, "where": where, "box": box, "span": span, "tags": tags, "mode": mode}


def registry(*extra: Tool, **limits: Any) -> ToolRegistry:
    return ToolRegistry([add, scale, divide, paint, *extra], **limits)


# --- strict validation -------------------------------------------------------------------


def test_bool_is_not_an_integer() -> None:
    out = registry().dispatch("add", {"x": True, "y": 1})
    assert isinstance(out, ToolError) and out.kind == "invalid_args"
    assert (
        out.as_observation() == "ERROR[add]: invalid args: 'x' must be an integer, got True (bool)"
    )


def test_numeric_string_is_not_an_integer() -> None:
    out = registry().dispatch("add", {"x": "1", "y": 1})
    assert isinstance(out, ToolError)
    assert out.message == "invalid args: 'x' must be an integer, got '1' (str)"


def test_integral_float_is_not_an_integer() -> None:
    out = registry().dispatch("add", {"x": 5.0, "y": 1})
    assert isinstance(out, ToolError)
    assert out.message == "invalid args: 'x' must be an integer, got 5.0 (float)"


def test_number_parameter_takes_int_and_float_but_not_bool() -> None:
    reg = registry()
    assert reg.dispatch("scale", {"value": 3}) == 6.0
    assert reg.dispatch("scale", {"value": 1.5, "factor": 3}) == 4.5
    out = reg.dispatch("scale", {"value": False})
    assert isinstance(out, ToolError)
    assert out.message == "invalid args: 'value' must be a number, got False (bool)"


def test_number_parameters_keep_ints_as_sent() -> None:
    """1 / 0 must stay `ZeroDivisionError: division by zero` (the seed's observation),
    and an exact ReWOO reference keeps its type."""

    @tool
    def fdivide(x: float, y: float) -> float:
        return x / y

    @tool
    def kinds(
        a: float,
        b: list[float],
        c: float | None = None,
        d: Annotated[float, Field(description="dee")] = 0.5,
    ) -> list[str]:
        return [type(v).__name__ for v in (a, *b, c, d)]

    reg = ToolRegistry([fdivide, kinds])
    out = reg.dispatch("fdivide", {"x": 1, "y": 0})
    assert isinstance(out, ToolError)
    assert out.as_observation() == "ERROR[fdivide]: ZeroDivisionError: division by zero"
    assert reg.dispatch("kinds", {"a": 1, "b": [2, 2.5], "c": 3}) == [
        "int",
        "int",
        "float",
        "int",
        "float",
    ]
    props = kinds.parameters["properties"]
    assert props["a"] == {"type": "number"} and props["b"] == {
        "type": "array",
        "items": {"type": "number"},
    }
    assert props["d"] == {"type": "number", "description": "dee", "default": 0.5}
    bad = reg.dispatch("kinds", {"a": 1, "b": [True]})
    assert isinstance(bad, ToolError)
    assert bad.message == "invalid args: 'b[0]' must be a number, got True (bool)"


def test_missing_and_unknown_arguments_are_rejected_before_the_call() -> None:
    calls: list[int] = []

    @tool
    def record(x: int) -> int:
        calls.append(x)
        return x

    reg = ToolRegistry([record])
    missing = reg.dispatch("record", {})
    unknown = reg.dispatch("record", {"x": 1, "z": 2})
    assert isinstance(missing, ToolError) and isinstance(unknown, ToolError)
    assert missing.message == "invalid args: missing required argument 'x'"
    assert unknown.message == "invalid args: unknown argument 'z' (accepted: 'x')"
    assert calls == []


def test_several_problems_are_joined() -> None:
    out = registry().dispatch("add", {"x": True, "q": 1})
    assert isinstance(out, ToolError)
    parts = out.message.removeprefix("invalid args: ").split("; ")
    assert set(parts) == {
        "'x' must be an integer, got True (bool)",
        "missing required argument 'y'",
        "unknown argument 'q' (accepted: 'x', 'y')",
    }


@pytest.mark.parametrize("args", [[1, 2], "x=1", None, 3])
def test_arguments_must_be_a_mapping(args: Any) -> None:
    out = registry().dispatch("add", args)
    assert isinstance(out, ToolError) and out.kind == "invalid_args"
    assert "arguments must be an object" in out.message


def test_validate_raises_a_value_error_that_is_a_loopwright_error() -> None:
    with pytest.raises(ToolArgumentError) as caught:
        add.validate({"x": 1})
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, LoopwrightError)
    assert add.validate({"x": 1, "y": 2}) == {"x": 1, "y": 2}


def test_nested_json_arrives_as_typed_objects() -> None:
    args = {
        "color": "blue",
        "where": {"x": 3},
        "box": {"width": 2, "label": "b"},
        "span": {"start": 1, "end": 4},
        "tags": ["a"],
        "mode": "outline",
    }
    out = registry().dispatch("paint", args)
    assert out["color"] is Color.BLUE
    assert out["where"] == Point(x=3, y=0)
    assert out["box"] == Box(width=2.0, label="b")
    assert out["span"] == {"start": 1, "end": 4}
    assert (out["tags"], out["mode"]) == (["a"], "outline")


def test_live_values_pass_as_they_are() -> None:
    """A ReWOO exact reference hands over the evidence value itself, not its JSON form."""
    box = Box(1.0, "live")
    out = registry().dispatch("paint", {"color": Color.RED, "where": Point(x=1), "box": box})
    assert out["color"] is Color.RED and out["box"] is box


def test_optional_parameters_take_null_and_defaults_stay_the_functions() -> None:
    out = registry().dispatch("paint", {"color": "red", "where": {"x": 0}, "box": None})
    assert out["box"] is None and out["mode"] == "fill" and out["tags"] is None


def test_nested_errors_name_the_path() -> None:
    out = registry().dispatch(
        "paint",
        {"color": "green", "where": {"x": "1"}, "tags": ["ok", 2], "mode": "dots"},
    )
    assert isinstance(out, ToolError)
    assert out.message.split("; ") == [
        "invalid args: 'color' must be 'red' or 'blue', got 'green' (str)",
        "'where.x' must be an integer, got '1' (str)",
        "'tags[1]' must be a string, got 2 (int)",
        "'mode' must be 'fill' or 'outline', got 'dots' (str)",
    ]


def test_nested_missing_and_unknown_fields() -> None:
    out = registry().dispatch(
        "paint", {"color": "red", "where": {"x": 1}, "span": {"start": 1, "stop": 2}}
    )
    assert isinstance(out, ToolError)
    assert "missing required field 'span.end'" in out.message
    assert "unknown field 'span.stop'" in out.message


def test_union_failures_merge_into_one_message() -> None:
    @tool
    def pick(key: int | str) -> str:
        return str(key)

    out = ToolRegistry([pick]).dispatch("pick", {"key": 1.5})
    assert isinstance(out, ToolError)
    assert out.message == "invalid args: 'key' must be an integer or a string, got 1.5 (float)"


def test_unannotated_parameters_accept_any_value() -> None:
    def echo(value):  # type: ignore[no-untyped-def]
        return value

    with pytest.warns(UntypedParameterWarning):
        reg = ToolRegistry([echo])
    assert reg["echo"].parameters["properties"] == {"value": {}}
    assert reg.dispatch("echo", {"value": [1, {"a": None}]}) == [1, {"a": None}]


def test_a_tool_with_an_unannotated_parameter_warns_naming_the_tool_and_parameter() -> None:
    def greet(name, greeting: str = "hi"):  # type: ignore[no-untyped-def]
        return f"{greeting} {name}"

    with pytest.warns(UntypedParameterWarning) as caught:
        tool(greet)
    assert len(caught) == 1 and issubclass(caught[0].category, UserWarning)
    assert str(caught[0].message).startswith("tool 'greet': parameter 'name' has no type annotation")
    assert caught[0].filename == __file__  # points at the line that made the tool
    with pytest.warns(UntypedParameterWarning) as caught:
        ToolRegistry([greet])
    with pytest.warns(UntypedParameterWarning) as through_a_run:
        import loopwright as lw

        lw.run("t", lambda prompt: "Final Answer: hi", [greet])
    assert caught[0].filename == through_a_run[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tool(add)  # fully typed: no warning
        Tool(lambda _i=3: _i, name="bound")  # nothing the model fills in


def test_strict_warning_settings_refuse_an_untyped_tool() -> None:
    def greet(name):  # type: ignore[no-untyped-def]
        return f"hi {name}"

    with warnings.catch_warnings():
        warnings.simplefilter("error", UntypedParameterWarning)
        with pytest.raises(UntypedParameterWarning, match="'name'"):
            ToolRegistry([greet])


def test_underscore_parameters_are_the_tools_own_not_the_models() -> None:
    with pytest.warns(UntypedParameterWarning, match="'x'"):  # `x` untyped; `_i` is no parameter
        made = [Tool(lambda x, _i=i: x * _i, name=f"times{i}") for i in (2, 3)]  # type: ignore[misc]

    @tool
    def fetch(url: str, _retries: int = 2, **headers: str) -> str:
        """Fetch a URL."""
        return f"{url} {_retries} {sorted(headers)}"

    def scaled(_base: int = 10, /, x: int = 1) -> int:
        return _base * x

    reg = ToolRegistry([*made, fetch, tool(scaled)])
    assert made[0].parameters["properties"] == {"x": {}} and made[0].parameters["required"] == ["x"]
    assert set(fetch.parameters["properties"]) == {"url"} and set(reg["scaled"].parameters["properties"]) == {"x"}
    assert reg.dispatch("times2", {"x": 5}) == 10 and reg.dispatch("times3", {"x": 5}) == 15
    for name, args in (("times2", {"x": 5, "_i": 100}), ("fetch", {"url": "u", "_retries": 99}),
                       ("scaled", {"x": 2, "_base": 0})):
        out = reg.dispatch(name, args)
        assert isinstance(out, ToolError) and out.kind == "invalid_args", (name, out)
    assert reg.dispatch("fetch", {"url": "u", "h": "v"}) == "u 2 ['h']"
    assert reg.dispatch("scaled", {"x": 2}) == 20


def test_an_underscore_parameter_without_a_default_is_a_definition_error() -> None:
    def secret(x: int, _key: str) -> str:
        return _key

    with pytest.raises(ToolDefinitionError, match="'_key' starts with '_'.*no default"):
        tool(secret)


class Opaque:
    pass


def test_parameters_of_arbitrary_classes_take_live_objects_only() -> None:
    def use(thing: Opaque) -> str:
        return type(thing).__name__

    reg = ToolRegistry([use])
    assert reg["use"].parameters["properties"] == {"thing": {}}
    assert reg.dispatch("use", {"thing": Opaque()}) == "Opaque"
    out = reg.dispatch("use", {"thing": {"a": 1}})
    assert isinstance(out, ToolError)
    assert out.message == "invalid args: 'thing' must be an instance of Opaque, got {'a': 1} (dict)"


def test_unsupported_annotations_are_definition_errors() -> None:
    def unresolved(v: "NoSuchType") -> None:  # type: ignore[name-defined]  # noqa: F821
        pass

    with pytest.raises(ToolDefinitionError, match="tool 'unresolved'"):
        tool(unresolved)


def test_typing_typeddict_is_a_definition_error_only_where_pydantic_refuses_it() -> None:
    import typing

    class Legacy(typing.TypedDict):  # pydantic needs typing_extensions' on Python < 3.12
        a: int

    def old(v: Legacy) -> int:
        return v["a"]

    if sys.version_info < (3, 12):
        with pytest.raises(ToolDefinitionError, match="tool 'old'"):
            tool(old)
        return
    made = tool(old)
    assert made.parameters["properties"]["v"]["properties"] == {"a": {"type": "integer"}}
    assert ToolRegistry([made]).dispatch("old", {"v": {"a": 3}}) == 3
    assert isinstance(ToolRegistry([made]).dispatch("old", {"v": {"a": "3"}}), ToolError)


def test_var_keyword_opens_the_schema_with_its_annotation() -> None:
    @tool
    def tagged(name: str, **labels: int) -> dict[str, int]:
        return labels

    assert tagged.parameters["additionalProperties"] == {"type": "integer"}
    reg = ToolRegistry([tagged])
    assert reg.dispatch("tagged", {"name": "n", "a": 1, "b": 2}) == {"a": 1, "b": 2}
    bad = reg.dispatch("tagged", {"name": "n", "a": "1"})
    assert isinstance(bad, ToolError) and "'a' must be an integer" in bad.message


def test_var_positional_is_a_definition_error() -> None:
    def total(*values: int) -> int:
        return sum(values)

    with pytest.raises(ToolDefinitionError, match=r"\*values"):
        tool(total)


def test_positional_only_parameters_are_passed_by_position() -> None:
    def power(base: int, exp: int = 2, /) -> int:
        return int(base**exp)

    reg = ToolRegistry([power])
    assert reg.dispatch("power", {"base": 3}) == 9
    assert reg.dispatch("power", {"base": 2, "exp": 5}) == 32


# --- schemas -----------------------------------------------------------------------------


def test_schema_comes_from_hints_and_google_docstring() -> None:
    assert add.schema() == {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {
                "x": {"type": "integer", "description": "The first addend, which may be negative."},
                "y": {"type": "integer", "description": "The second addend."},
            },
            "required": ["x", "y"],
            "additionalProperties": False,
        },
    }


def test_schema_is_clean_inlined_and_carries_defaults() -> None:
    params = paint.parameters
    assert "$defs" not in params and "title" not in str(params)
    props = params["properties"]
    assert props["color"] == {
        "type": "string",
        "enum": ["red", "blue"],
        "description": "the paint colour",
    }
    assert props["where"]["properties"]["y"] == {"type": "integer", "default": 0}
    assert props["where"]["description"] == "the anchor point"
    assert props["mode"] == {"type": "string", "enum": ["fill", "outline"], "default": "fill"}
    assert params["required"] == ["color", "where"]


def test_a_property_named_title_survives_cleaning() -> None:
    @tool
    def book(title: str) -> str:
        return title

    assert book.parameters["properties"] == {"title": {"type": "string"}}


def test_recursive_types_keep_their_defs() -> None:
    @tool
    def walk(tree: Tree) -> int:
        return tree.value + sum(walk(c) for c in tree.children)

    assert walk.parameters["$defs"]["Tree"]["properties"]["children"]["items"] == {
        "$ref": "#/$defs/Tree"
    }
    assert (
        ToolRegistry([walk]).dispatch("walk", {"tree": {"value": 1, "children": [{"value": 2}]}})
        == 3
    )


def test_explicit_field_description_wins_over_docstring() -> None:
    @tool
    def greet(name: Annotated[str, Field(description="from Field")]) -> str:
        """Greet.

        Args:
            name: from docstring
        """
        return name

    assert greet.parameters["properties"]["name"]["description"] == "from Field"


def test_rest_and_numpy_docstrings_describe_parameters() -> None:
    rest = """Search the index.

    Longer text that is not the summary.

    :param query: what to look for,
        in plain words
    :param int limit: how many
    :returns: hits
    """
    numpy = """Search the index
    across two lines.

    Parameters
    ----------
    query : str
        what to look for
    limit, offset : int
        paging

    Returns
    -------
    list
        hits
    """
    assert parse_docstring(rest) == (
        "Search the index.",
        {"query": "what to look for, in plain words", "limit": "how many"},
    )
    assert parse_docstring(numpy) == (
        "Search the index across two lines.",
        {"query": "what to look for", "limit": "paging", "offset": "paging"},
    )
    assert parse_docstring(None) == ("", {})
    assert parse_docstring("Sum these:\n\nReturns:\n    the sum") == ("Sum these:", {})


def test_input_param_is_the_only_or_only_required_parameter() -> None:
    assert scale.input_param() == "value"
    assert add.input_param() is None

    @tool
    def lookup(q: str) -> str:
        return q

    assert lookup.input_param() == "q"


def test_tool_stays_callable_and_keeps_metadata() -> None:
    assert add(2, 3) == 5 and add.__name__ == "add" and add.__doc__
    assert (add.side_effects, add.idempotent, add.requires_approval) == ("none", True, False)

    @tool(name="fs.delete", side_effects="destructive", timeout_s=3)
    def delete(path: str) -> None:
        """Delete a file."""

    assert (delete.name, delete.idempotent, delete.requires_approval) == ("fs.delete", False, True)
    assert delete.timeout_s == 3 and delete.description == "Delete a file."
    write = Tool(lambda p: None, name="w", side_effects="write", requires_approval=True)
    assert (write.idempotent, write.requires_approval) == (False, True)
    assert add.idempotency_key is None


def test_idempotency_key_must_name_a_parameter_or_be_a_function() -> None:
    @tool(side_effects="write", idempotency_key="request_id")
    def pay(cents: int, request_id: str) -> None:
        """Pay."""

    assert pay.idempotency_key == "request_id"
    keyed = Tool.from_schema("w", "", WEATHER, print, idempotency_key=lambda a: a["city"])
    assert callable(keyed.idempotency_key)
    with pytest.raises(ToolDefinitionError, match="idempotency_key"):
        tool(name="pay2", idempotency_key="nope")(lambda cents: None)


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "<lambda>", "naïve", "a/b"])
def test_invalid_tool_names_are_definition_errors(name: str) -> None:
    with pytest.raises(ToolDefinitionError, match="invalid tool name"):
        Tool(lambda: None, name=name)


def test_valid_names_and_bad_metadata() -> None:
    assert Tool(lambda: None, name="a.b-c_9" + "x" * 57).name.startswith("a.b-c_9")
    with pytest.raises(ToolDefinitionError, match="side_effects"):
        Tool(lambda: None, name="t", side_effects="maybe")  # type: ignore[arg-type]
    with pytest.raises(ToolDefinitionError, match="timeout_s"):
        Tool(lambda: None, name="t", timeout_s=0)
    with pytest.raises(ToolDefinitionError, match="callable"):
        Tool(42, name="t")  # type: ignore[arg-type]


# --- tools declared by JSON Schema ------------------------------------------------------------

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "temp": {"type": "number"},
        "unit": {"type": "string", "enum": ["c", "f"]},
    },
    "required": ["city"],
}


def weather_tool(**meta: Any) -> Tool:
    return Tool.from_schema("weather", "Forecast.", WEATHER, lambda **kw: kw, **meta)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"city": "Oslo", "days": True}, "'days' must be an integer, got True (bool)"),
        ({"city": "Oslo", "days": "1"}, "'days' must be an integer, got '1' (str)"),
        ({"city": "Oslo", "days": 5.0}, "'days' must be an integer, got 5.0 (float)"),
        ({"city": "Oslo", "temp": False}, "'temp' must be a number, got False (bool)"),
        ({}, "missing required argument 'city'"),
        (
            {"city": "Oslo", "zip": 1},
            "unknown argument 'zip' (accepted: 'city', 'days', 'temp', 'unit')",
        ),
        ({"city": "Oslo", "unit": "k"}, "'unit' must be one of 'c', 'f', got 'k' (str)"),
    ],
)
def test_from_schema_validation_is_strict(args: dict[str, Any], message: str) -> None:
    out = ToolRegistry([weather_tool()]).dispatch("weather", args)
    assert isinstance(out, ToolError) and out.message == f"invalid args: {message}"


def test_from_schema_accepts_good_args_and_ints_for_numbers() -> None:
    reg = ToolRegistry([weather_tool()])
    assert reg.dispatch("weather", {"city": "Oslo", "temp": 3}) == {"city": "Oslo", "temp": 3}
    assert reg["weather"].parameters["additionalProperties"] is False
    assert WEATHER.get("additionalProperties") is None  # the caller's schema is not mutated


def test_from_schema_additional_properties_opens_it() -> None:
    schema = {**WEATHER, "additionalProperties": True}
    reg = ToolRegistry([Tool.from_schema("weather", "", schema, lambda **kw: kw)])
    assert reg.dispatch("weather", {"city": "Oslo", "zip": 1}) == {"city": "Oslo", "zip": 1}


def test_from_schema_maps_bfcl_types_and_rejects_bad_schemas() -> None:
    bfcl = {"type": "dict", "properties": {"x": {"type": "float"}, "p": {"type": "tuple"}}}
    made = Tool.from_schema("calc", "", bfcl, lambda **kw: kw)
    assert made.parameters["type"] == "object"
    assert made.parameters["properties"] == {"x": {"type": "number"}, "p": {"type": "array"}}
    with pytest.raises(ToolDefinitionError, match="invalid JSON Schema"):
        Tool.from_schema("bad", "", {"type": "object", "properties": {"x": {"type": 3}}}, print)
    with pytest.raises(ToolDefinitionError, match="type 'object'"):
        Tool.from_schema("bad", "", {"type": "string"}, print)
    with pytest.raises(ToolDefinitionError, match="invalid tool name"):
        Tool.from_schema("bad name", "", WEATHER, print)


def test_from_schema_metadata_and_input_param() -> None:
    made = weather_tool(side_effects="read", timeout_s=1.5)
    assert (made.side_effects, made.idempotent, made.timeout_s) == ("read", True, 1.5)
    assert made.input_param() == "city" and made.is_async is False


# --- dispatch: every failure is an observation -------------------------------------------


def test_tool_exception_becomes_the_seed_observation() -> None:
    out = registry().dispatch("divide", {"a": 1, "b": 0})
    assert isinstance(out, ToolError) and out.kind == "exception"
    assert out.as_observation() == "ERROR[divide]: ZeroDivisionError: division by zero"


PRICES = {"tea": 31}


def _price_of(item: str) -> int:
    return PRICES[item]


@tool
def price(item: str) -> int:
    """The price of an item in cents."""
    return _price_of(item) + 0


@tool
async def aprice(item: str) -> int:
    """The price of an item in cents."""
    await asyncio.sleep(0)
    return _price_of(item)


@pytest.mark.parametrize("timeout_s", [None, 5.0], ids=["inline", "in-a-thread"])
@pytest.mark.parametrize("made", [price, aprice], ids=["sync", "async"])
def test_a_tool_exception_keeps_the_tools_own_traceback(made: Tool, timeout_s: float | None) -> None:
    reg = ToolRegistry([made], tool_timeout_s=timeout_s)
    for result in (reg.execute(made.name, {"item": "zz"}),
                   asyncio.run(reg.aexecute(made.name, {"item": "zz"}))):
        assert result.observation == f"ERROR[{made.name}]: KeyError: 'zz'"  # what the model reads: short
        tb = result.error.traceback
        assert tb.startswith("Traceback (most recent call last):") and tb.rstrip().endswith("KeyError: 'zz'")
        assert f"in {made.name}" in tb and "in _price_of" in tb and "return PRICES[item]" in tb
        assert "registry.py" not in tb and "offload.py" not in tb  # the tool's frames, not the caller's


def test_a_tool_exception_traceback_is_on_the_step_and_in_the_journal(tmp_path) -> None:
    import loopwright as lw

    calls = ['Thought: t\nAction: price\nAction Input: {"item": "zz"}', "Thought: t\nFinal Answer: ?"]
    with lw.SQLiteStore(tmp_path / "runs.db") as store:
        trace = lw.run("t", lw.ScriptedPolicy(calls), ToolRegistry([price]), store=store, run_id="r")
        journaled = store.trace("r")
    step = trace.steps[0]
    assert step.observation == "ERROR[price]: KeyError: 'zz'" and step.error == "KeyError: 'zz'"
    assert "in _price_of" in step.meta["traceback"]
    assert journaled.steps[0].meta["traceback"] == step.meta["traceback"]


def test_a_tool_that_raises_tool_error_reports_that_error() -> None:
    @tool
    def lookup(item: str) -> str:
        """Look an item up."""
        raise ToolError("lookup", f"no item {item!r}; try 'tea'", "invalid_args")

    @tool
    def misnamed(item: str) -> str:
        """Raise an error naming another tool."""
        raise ToolError("other", "not here")

    reg = ToolRegistry([lookup, misnamed])
    out = reg.dispatch("lookup", {"item": "zz"})
    assert out == ToolError("lookup", "no item 'zz'; try 'tea'", "invalid_args")
    assert out.as_observation() == "ERROR[lookup]: no item 'zz'; try 'tea'"
    assert reg.dispatch("misnamed", {"item": "x"}) == ToolError("misnamed", "not here")  # named for its tool
    assert asyncio.run(reg.aexecute("lookup", {"item": "zz"})).error == out
    assert isinstance(out, Exception) and str(out) == out.as_observation()
    with pytest.raises(ToolError, match="no item"):
        raise out


def test_unknown_tool_names_the_available_ones() -> None:
    out = registry().dispatch("x", {})
    assert isinstance(out, ToolError) and out.kind == "unknown_tool"
    assert (
        out.as_observation() == "ERROR[x]: unknown tool 'x' (available: add, scale, divide, paint)"
    )


@pytest.mark.parametrize("name", [None, ["add"], 3, ""])
def test_non_string_or_empty_names_are_unknown_tools(name: Any) -> None:
    out = registry().dispatch(name, {})
    assert isinstance(out, ToolError) and out.kind == "unknown_tool"


def slow_sync(seconds: float = 5.0) -> str:
    threading.Event().wait(seconds)
    return "late"


async def slow_async(seconds: float = 5.0) -> str:
    await asyncio.sleep(seconds)
    return "late"


@pytest.mark.parametrize("func", [slow_sync, slow_async])
def test_timeout_returns_promptly(func: Any) -> None:
    reg = ToolRegistry([Tool(func, name="slow", timeout_s=0.2)])
    start = time.perf_counter()
    out = reg.dispatch("slow", {"seconds": 1.0})
    elapsed = time.perf_counter() - start
    assert isinstance(out, ToolError) and out.kind == "timeout"
    assert out.as_observation() == "ERROR[slow]: timeout after 0.2s"
    assert elapsed < 0.7


def test_timeout_precedence_tool_over_registry_and_call_caps_both() -> None:
    reg = ToolRegistry([Tool(slow_sync, name="slow", timeout_s=0.1)], tool_timeout_s=30)
    assert reg.execute("slow", {"seconds": 1.0}).observation == "ERROR[slow]: timeout after 0.1s"
    assert reg.execute("slow", {"seconds": 1.0}, timeout_s=0.05).observation.endswith("0.05s")
    assert reg.execute("slow", {"seconds": 1.0}, timeout_s=60).observation.endswith("0.1s")
    loose = ToolRegistry([Tool(slow_sync, name="slow")], tool_timeout_s=0.05)
    assert loose.execute("slow", {"seconds": 1.0}).observation.endswith("timeout after 0.05s")
    assert loose.dispatch("slow", {"seconds": 0.0}, timeout_s=1) == "late"


def test_a_tools_own_timeout_error_is_an_exception_not_a_deadline() -> None:
    def flaky() -> None:
        raise TimeoutError("upstream took too long")

    async def aflaky() -> None:
        raise TimeoutError("upstream took too long")

    reg = ToolRegistry([flaky, aflaky], tool_timeout_s=5)
    for name in ("flaky", "aflaky"):
        out = reg.dispatch(name, {})
        assert isinstance(out, ToolError) and out.kind == "exception"
        assert out.message == "TimeoutError: upstream took too long"


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("timeout", [None, 5.0])
def test_interrupts_propagate(exc: type[BaseException], timeout: float | None) -> None:
    def stop() -> None:
        raise exc()

    async def astop() -> None:
        raise exc()

    reg = ToolRegistry([stop, astop])
    for name in ("stop", "astop"):
        with pytest.raises(exc):
            reg.dispatch(name, {}, timeout_s=timeout)
    # The event loop's task for astop keeps the interrupt it never handed on; collected at
    # some later allocation, asyncio logs it with a formatted traceback (which parses
    # source with `ast`), and on CPython 3.11 an `ast` parse nested in another one (a
    # later test's import) fails with "AST constructor recursion depth mismatch".
    # Collect it here, where nothing is being parsed.
    gc.collect()


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_unrenderable_result_is_a_tool_error() -> None:
    reg = ToolRegistry([Tool(lambda: Unprintable(), name="weird")])
    out = reg.dispatch("weird", {})
    assert isinstance(out, ToolError) and out.kind == "unrenderable"
    result = reg.execute("weird", {})
    assert not result.ok and result.value is None
    assert result.observation == (
        "ERROR[weird]: unrenderable result of type Unprintable (RuntimeError: no text)"
    )


def test_exception_with_broken_str_still_reports() -> None:
    class Odd(Exception):
        def __str__(self) -> str:
            raise ValueError("nope")

    def odd() -> None:
        raise Odd

    out = ToolRegistry([odd]).dispatch("odd", {})
    assert isinstance(out, ToolError) and out.message.startswith("Odd: <exception text unavailable")


def test_rendering_rules() -> None:
    assert render_observation("plain\ntext") == "plain\ntext"
    assert render_observation({"k": "é", "n": [1, None]}) == '{"k": "é", "n": [1, null]}'
    assert render_observation([Color.RED]) == '["Color.RED"]'
    assert render_observation(3.5) == "3.5" and render_observation(None) == "None"
    assert render_observation({(1, 2): 3}) == "{(1, 2): 3}"  # JSON cannot: falls back to str
    with pytest.raises(RuntimeError):
        render_observation(Unprintable())


def test_truncation_marker_and_bound() -> None:
    text = render_observation("a" * 12345, 8000)
    marker = "\n…[truncated: 12345 chars total, showing first 8000]"
    assert text == "a" * 8000 + marker
    assert render_observation("a" * 8000, 8000) == "a" * 8000
    assert render_observation("a" * 12345, -1) == "a" * 12345


def test_execute_renders_a_result_past_the_cap_whole() -> None:
    """The registry never cuts: a run keeps a result past max_observation_chars under a
    handle and shows head and tail (tools/handles.py); cutting here would lose the rest."""
    reg = ToolRegistry([Tool(lambda: list(range(5000)), name="big")], max_observation_chars=100)
    result = reg.execute("big", {})
    assert result.ok and len(result.value) == 5000
    assert result.observation == json.dumps(list(range(5000)))


def test_execute_result_records_call() -> None:
    args = {"x": 1, "y": 2}
    result = registry().execute("add", args)
    assert isinstance(result, ToolResult) and result.ok
    assert (result.name, result.value, result.observation, result.error) == ("add", 3, "3", None)
    assert result.args == args and result.args is not args and result.duration_s >= 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.value = 4  # type: ignore[misc]


# --- async and threads --------------------------------------------------------------------


async def fetch(key: str) -> str:
    await asyncio.sleep(0)
    return key.upper()


def test_async_tool_runs_from_sync_dispatch() -> None:
    assert ToolRegistry([fetch]).dispatch("fetch", {"key": "ab"}) == "AB"


def test_async_tool_runs_from_dispatch_inside_a_running_loop() -> None:
    reg = ToolRegistry([fetch])

    async def main() -> Any:
        return reg.dispatch("fetch", {"key": "cd"})

    assert asyncio.run(main()) == "CD"


def test_sync_def_returning_a_coroutine_is_awaited() -> None:
    def indirect(key: str) -> Any:
        return fetch(key)

    reg = ToolRegistry([indirect])
    assert reg.dispatch("indirect", {"key": "ef"}) == "EF"
    assert reg.dispatch("indirect", {"key": "gh"}, timeout_s=5) == "GH"
    assert asyncio.run(reg.aexecute("indirect", {"key": "ij"})).value == "IJ"


def test_aexecute_overlaps_independent_sync_and_async_tools() -> None:
    def nap(s: float) -> float:
        time.sleep(s)
        return s

    async def anap(s: float) -> float:
        await asyncio.sleep(s)
        return s

    reg = ToolRegistry([nap, anap])

    async def fan_out() -> list[ToolResult]:
        calls = [reg.aexecute(n, {"s": 0.2}) for n in ("nap", "nap", "anap", "anap")]
        return await asyncio.gather(*calls)

    start = time.perf_counter()
    results = asyncio.run(fan_out())
    assert time.perf_counter() - start < 0.6
    assert [r.value for r in results] == [0.2] * 4


def test_aexecute_reports_failures_and_timeouts() -> None:
    reg = ToolRegistry([slow_sync, slow_async, divide], tool_timeout_s=0.1)

    async def run_all() -> list[ToolResult]:
        return await asyncio.gather(
            reg.aexecute("slow_sync", {"seconds": 1.0}),
            reg.aexecute("slow_async", {"seconds": 1.0}),
            reg.aexecute("divide", {"a": 1, "b": 0}),
            reg.aexecute("nope", {}),
            reg.aexecute("divide", {"a": "1", "b": 2}),
        )

    start = time.perf_counter()
    results = asyncio.run(run_all())
    assert time.perf_counter() - start < 0.6
    assert [r.error.kind for r in results if r.error] == [
        "timeout", "timeout", "exception", "unknown_tool", "invalid_args",
    ]  # fmt: skip


# --- the registry ------------------------------------------------------------------------


def test_register_wraps_functions_and_rejects_duplicates() -> None:
    def shout(text: str) -> str:
        return text.upper()

    reg = ToolRegistry()
    made = reg.register(shout)
    assert isinstance(made, Tool) and "shout" in reg and made in reg and len(reg) == 1
    assert reg.names == ("shout",) and reg["shout"] is made and reg.get("nope") is None
    assert list(reg) == [made] and reg.schemas() == [made.schema()]
    with pytest.raises(ToolDefinitionError, match="duplicate"):
        reg.register(shout)


def test_subset_is_least_privilege() -> None:
    full = registry(tool_timeout_s=2.0, max_observation_chars=50)
    small = full.subset(["add"])
    assert small.names == ("add",) and "divide" not in small
    assert (small.tool_timeout_s, small.max_observation_chars) == (2.0, 50)
    denied = small.dispatch("divide", {"a": 1, "b": 1})
    assert isinstance(denied, ToolError) and denied.kind == "unknown_tool"
    with pytest.raises(ToolDefinitionError, match="'rm'"):
        full.subset(["add", "rm"])


def test_bind_maps_bare_input_to_the_input_parameter() -> None:
    @tool
    def search(query: str, limit: int = 5) -> str:
        return query

    @tool
    def needs_input(input: str) -> str:
        return input

    @tool
    def now() -> str:
        return "noon"

    reg = ToolRegistry([search, needs_input, now, add])
    assert reg.bind("search", {"input": "cats"}) == {"query": "cats"}
    assert reg.bind("search", {"input": {"a": 1}}) == {"query": {"a": 1}}
    assert reg.bind("needs_input", {"input": "x"}) == {"input": "x"}
    assert reg.bind("add", {"input": "1"}) == {"input": "1"}  # ambiguous: unchanged
    assert reg.bind("nope", {"input": "x"}) == {"input": "x"}
    assert reg.bind("search", {"query": "q", "limit": 1}) == {"query": "q", "limit": 1}
    assert reg.bind("now", {"input": ""}) == {}
    assert reg.dispatch("search", reg.bind("search", {"input": "dogs"})) == "dogs"


# --- properties: dispatch never raises -------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
json_args = st.dictionaries(st.text(max_size=6), json_values, max_size=4)
exception_bases = st.sampled_from(
    [Exception, ValueError, KeyError, OSError, RuntimeError, TypeError, TimeoutError, LookupError,
     ArithmeticError, UnicodeError, ConnectionError, StopIteration, asyncio.TimeoutError]
)  # fmt: skip


@st.composite
def raising_calls(draw: st.DrawFn) -> tuple[Tool, dict[str, Any], bool]:
    """A tool that raises, and arguments for it: half the time arguments that pass
    validation (so the tool really runs and raises), else arbitrary ones."""
    base = draw(exception_bases)
    broken_str = draw(st.booleans())
    namespace = {"__str__": lambda self: 1 / 0} if broken_str else {}
    exc_type = type(draw(st.from_regex(r"[A-Z][A-Za-z]{0,12}", fullmatch=True)), (base,), namespace)
    message = draw(st.text(max_size=30))
    kind = draw(st.sampled_from(["sync", "async", "typed"]))

    def boom(**kwargs: Any) -> None:
        raise exc_type(message)

    async def aboom(**kwargs: Any) -> None:
        raise exc_type(message)

    def typed_boom(x: int, tags: list[str] | None = None) -> None:
        raise exc_type(message)

    func = {"sync": boom, "async": aboom, "typed": typed_boom}[kind]
    valid = draw(st.booleans())
    if not valid:
        args = draw(json_args)
    elif kind == "typed":
        args = draw(st.fixed_dictionaries({"x": st.integers()},
                                          optional={"tags": st.lists(st.text(max_size=5), max_size=3)}))
    else:
        args = draw(json_args)  # **kwargs takes any object of arguments
    return Tool(func, name="boom"), args, valid


@settings(max_examples=60, deadline=None)
@given(raising_calls())
def test_dispatch_never_raises_for_raising_tools(made: tuple[Tool, dict[str, Any], bool]) -> None:
    tool_, args, valid = made
    result = ToolRegistry([tool_]).execute("boom", args)
    assert result.error is not None and result.observation.startswith("ERROR[boom]: ")
    if valid:  # validated, called, raised: the exception is the observation
        assert result.error.kind == "exception"
    else:
        assert result.error.kind in ("exception", "invalid_args")


strict_args = st.fixed_dictionaries(
    {"x": st.integers(), "box": st.fixed_dictionaries({"width": st.floats(allow_nan=False), "label": st.text(max_size=5)})},
    optional={"color": st.sampled_from(["red", "blue"])},
)


@settings(max_examples=60, deadline=None)
@given(st.one_of(json_args.map(lambda a: (a, False)), strict_args.map(lambda a: (a, True))),
       st.sampled_from(["echo", "strict", "unknown"]))
def test_dispatch_never_raises_for_arbitrary_args(made: tuple[dict[str, Any], bool], name: str) -> None:
    args, valid_for_strict = made

    def echo(**kwargs: Any) -> Any:
        return kwargs

    def strict(x: int, box: Box, color: Color = Color.RED) -> Any:
        assert isinstance(box, Box) and isinstance(color, Color)  # converted before the call
        return x

    reg = ToolRegistry([echo, strict])
    out = reg.dispatch(name, args)
    if name == "echo":
        assert out == args
    elif name == "unknown":
        assert isinstance(out, ToolError) and out.kind == "unknown_tool"
    elif valid_for_strict:
        assert out == args["x"]
    else:  # arbitrary arguments: rejected before the call, unless valid by chance
        assert out.kind == "invalid_args" if isinstance(out, ToolError) else out == args["x"]


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([Unprintable(), float("nan"), b"\xff", object()]), json_args)
def test_dispatch_never_raises_for_odd_results(value: Any, args: dict[str, Any]) -> None:
    reg = ToolRegistry([Tool(lambda **kw: value, name="odd")])
    result = reg.execute("odd", args)
    assert result.ok or result.error is not None and result.error.kind == "unrenderable"
    assert isinstance(result.observation, str)


@settings(max_examples=4, deadline=None)
@given(st.sampled_from(["sync", "async"]), json_args)
def test_dispatch_never_raises_for_hanging_tools(kind: str, args: dict[str, Any]) -> None:
    def hang(**kwargs: Any) -> None:
        threading.Event().wait(0.5)

    async def ahang(**kwargs: Any) -> None:
        await asyncio.sleep(0.5)

    reg = ToolRegistry([Tool(hang if kind == "sync" else ahang, name="hang")], tool_timeout_s=0.02)
    result = reg.execute("hang", args)
    assert result.error is not None and result.error.kind == "timeout"
    assert result.duration_s < 0.3
