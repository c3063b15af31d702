"""The records made at every step and run are built faster than a frozen dataclass's own
__init__ (loopwright._slots.fast_frozen: allocated as a writable subclass, filled by a
generated __init__, handed their own class before anyone sees them): Step, Usage,
ModelRequest, RunSpec, Action, FinalAnswer and ToolResult. They must still behave exactly
like frozen dataclasses."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from loopwright._slots import fast_frozen
from loopwright.modes.spec import RunSpec
from loopwright.parsing.steps import Action, FinalAnswer
from loopwright.policy import ModelRequest
from loopwright.tools.registry import ToolError, ToolResult
from loopwright.trace import Step, Usage

SAMPLES: list[tuple[type, dict[str, Any]]] = [
    (Usage, {"prompt_tokens": 1, "evaluated_tokens": 2, "completion_tokens": 3, "estimated": True}),
    (Step, {"index": 4, "kind": "action", "raw": "r", "thought": "t", "tool": "add",
            "args": {"x": 1}, "observation": "2", "error": None, "duration_s": 0.5,
            "usage": Usage(1, 1, 1), "prompt": "p", "step_id": "E1", "meta": {"m": 1},
            "prompt_chars": 9}),
    (ModelRequest, {"prompt": "p", "stop": ("\nObservation:",), "purpose": "react", "tools": ({"name": "add"},),
                    "messages": ({"role": "user", "content": "q"},), "max_tokens": 64, "dialect": "json",
                    "known_calls": (("add", {"x": 1}),), "output_schema": {"type": "string"}}),
    (Action, {"thought": "t", "name": "add", "args": {"x": 1}, "call_id": "c1", "args_text": '{"x": 1}',
              "repaired": ("added a missing closing '}'",)}),
    (ToolResult, {"name": "div", "args": {"a": 1}, "value": None, "observation": "ERROR[div]: boom",
                  "error": ToolError("div", "boom", "exception"), "duration_s": 0.1}),
    (FinalAnswer, {"thought": "t", "answer": "42"}),
]


@pytest.mark.parametrize(("cls", "values"), SAMPLES, ids=lambda v: getattr(v, "__name__", ""))
def test_every_field_is_set_from_its_own_argument(cls: type, values: dict[str, Any]) -> None:
    names = [f.name for f in dataclasses.fields(cls)]
    assert names == list(values)  # the sample covers every field, in order
    assert list(inspect.signature(cls).parameters) == names
    by_keyword = cls(**values)
    by_position = cls(*values.values())
    for name, value in values.items():
        assert getattr(by_keyword, name) is value
        assert getattr(by_position, name) is value
    assert by_keyword == by_position


@pytest.mark.parametrize(("cls", "values"), SAMPLES, ids=lambda v: getattr(v, "__name__", ""))
def test_records_stay_frozen_and_replaceable(cls: type, values: dict[str, Any]) -> None:
    record = cls(**values)
    first = next(iter(values))
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(record, first, values[first])
    with pytest.raises(AttributeError):
        object.__setattr__(record, "extra", 1)  # slots: no instance dict to grow
    other = values[first] + 1 if isinstance(values[first], int) else values[first] + "-other"
    changed = dataclasses.replace(record, **{first: other})
    assert getattr(changed, first) == other and getattr(record, first) == values[first]
    assert changed != record
    for name in list(values)[1:]:  # every other field carried over as the same object
        assert getattr(changed, name) is getattr(record, name)
    assert dataclasses.replace(record) == record and dataclasses.replace(record) is not record
    assert repr(record).startswith(cls.__name__ + "(")


def test_step_defaults_match_its_fields() -> None:
    a, b = Step(1, "final"), Step(1, "final")
    assert a.usage == Usage() and a.meta == {} and a.raw == "" and a.prompt_chars is None
    assert a.meta is not b.meta  # a fresh dict each, as default_factory would give
    assert Step(1, "final", usage=None).usage == Usage()


def test_action_equality_ignores_the_argument_text() -> None:
    assert Action("t", "add", {"x": 1}, args_text='{"x":1}') == Action("t", "add", {"x": 1})
    assert "args_text" not in repr(Action("t", "add", {"x": 1}, args_text="{}"))
    assert Usage(1, 2, 3) + Usage(1, 1, 1, True) == Usage(2, 3, 4, True)


FAST = [Step(2, "action", tool="add", args={"x": 1}, meta={"m": 1}), ModelRequest("p", ("x",)),
        RunSpec("t", "react", max_steps=3, tools=["add"])]


@pytest.mark.parametrize("record", FAST, ids=lambda r: type(r).__name__)
def test_a_fast_frozen_record_is_its_own_class_and_stays_frozen(record: Any) -> None:
    cls = type(record)
    assert record.__class__ is cls and cls.__name__ in ("Step", "ModelRequest", "RunSpec")
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(record, dataclasses.fields(record)[0].name, "x")
    assert pickle.loads(pickle.dumps(record)) == record
    assert copy.deepcopy(record) == record and copy.copy(record) == record
    assert dataclasses.replace(record) == record


def test_fast_frozen_runs_post_init_and_default_factories() -> None:
    assert RunSpec("t", tools=["a", "b"]).tools == ("a", "b")  # __post_init__ ran
    with pytest.raises(ValueError, match="mode must be one of"):
        RunSpec("t", "nope")
    with pytest.raises(TypeError, match="unknown run option"):
        RunSpec("t", "react", depth=2)
    assert Step(1, "final").meta is not Step(1, "final").meta


def test_a_bad_construction_is_the_usual_type_error() -> None:
    with pytest.raises(TypeError, match="index"):
        Step()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="bogus"):
        Step(1, "final", bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        ModelRequest("p", (), "react", (), (), None, "json", (), None, "extra")  # type: ignore[call-arg]
    assert type(Step(1, "final")) is Step  # a failed construction left nothing behind


def test_a_subclass_is_built_by_the_dataclass_init() -> None:
    class Marked(Step):
        __slots__ = ()

    step = Marked(1, "final", raw="r")
    assert type(step) is Marked and step.raw == "r" and step.usage == Usage()
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.raw = "x"  # type: ignore[misc]


@pytest.mark.parametrize(("cls", "values"), SAMPLES, ids=lambda v: getattr(v, "__name__", ""))
def test_no_way_of_making_a_record_hands_out_its_writer(cls: type, values: dict[str, Any]) -> None:
    record = cls(**values)
    made = [record, cls(*values.values()), copy.copy(record), copy.deepcopy(record),
            pickle.loads(pickle.dumps(record)), dataclasses.replace(record)]
    for other in made:
        assert type(other) is cls and other == record
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(other, next(iter(values)), None)


def test_a_bad_call_names_the_record_and_leaves_it_usable() -> None:
    with pytest.raises(TypeError, match=r"^Usage\.__init__\(\) got an unexpected keyword argument 'tokens'"):
        Usage(tokens=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^Action\.__init__\(\) missing"):
        Action("t")  # type: ignore[call-arg]
    assert type(Action("t", "add", {})) is Action


def test_the_first_constructions_are_the_dataclasses_own_and_then_the_writer_takes_over() -> None:
    @fast_frozen
    @dataclasses.dataclass(frozen=True, slots=True)
    class Point:
        x: int
        y: int = 0
        seen: list[int] = dataclasses.field(default_factory=list)

        def __post_init__(self) -> None:
            self.seen.append(self.x)

    first = Point(1)  # a class built once (a module's constant) makes no writer
    assert not isinstance(Point.__dict__.get("__new__"), staticmethod)
    second, third = Point(2, y=3), Point(3, 4, [9])  # the second makes it; the third is built by it
    assert isinstance(Point.__dict__["__new__"], staticmethod)
    for point, values in ((first, (1, 0, [1])), (second, (2, 3, [2])), (third, (3, 4, [9, 3]))):
        assert type(point) is Point and (point.x, point.y, point.seen) == values
        with pytest.raises(dataclasses.FrozenInstanceError):
            point.y = 5  # type: ignore[misc]


def test_subclasses_at_any_depth_and_dataclass_subclasses_are_built_plainly() -> None:
    class Marked(Step):
        __slots__ = ()

    class Deeper(Marked):
        __slots__ = ()

    @dataclasses.dataclass(frozen=True, slots=True)
    class Tagged(Step):
        tag: str = "t"

    deeper, tagged = Deeper(1, "final", raw="r"), Tagged(2, "final", tag="x")
    assert (type(deeper), deeper.raw, deeper.meta) == (Deeper, "r", {})
    assert (type(tagged), tagged.tag, tagged.index, tagged.usage) == (Tagged, "x", 2, Usage())
    assert type(copy.copy(deeper)) is Deeper and copy.copy(deeper) == deeper
    with pytest.raises(dataclasses.FrozenInstanceError):
        tagged.tag = "y"  # type: ignore[misc]


def test_fast_frozen_refuses_what_it_cannot_build() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        x: int

    @dataclasses.dataclass(slots=True)
    class Mutable:
        x: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class KeywordOnly:
        x: int = dataclasses.field(kw_only=True)

    for cls in (NoSlots, Mutable):
        with pytest.raises(TypeError, match="not a frozen slots dataclass"):
            fast_frozen(cls)
    with pytest.raises(TypeError, match="plain init field"):
        fast_frozen(KeywordOnly)
