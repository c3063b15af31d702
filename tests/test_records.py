"""The records made at every step and run (Step, Usage, ModelRequest, RunSpec, Action,
FinalAnswer, ToolResult) are plain frozen slots dataclasses: built from their fields,
positionally up to the third and by keyword past it, frozen, replaceable, equal by value,
and they survive copy and pickle."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from loopwright.parsing.steps import Action, FinalAnswer
from loopwright.policy import ModelRequest
from loopwright.runtime.spec import RunSpec
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
ids = [cls.__name__ for cls, _ in SAMPLES]


@pytest.mark.parametrize(("cls", "values"), SAMPLES, ids=ids)
def test_every_field_is_set_from_its_own_argument(cls: type, values: dict[str, Any]) -> None:
    names = [f.name for f in dataclasses.fields(cls)]
    assert names == list(values)  # the sample covers every field, in order
    assert list(inspect.signature(cls).parameters) == names
    record = cls(**values)
    for name, value in values.items():
        assert getattr(record, name) is value
    positional = list(values.values())[:3]
    assert cls(*positional, **dict(list(values.items())[3:])) == record


@pytest.mark.parametrize(("cls", "values"), SAMPLES, ids=ids)
def test_fields_past_the_third_are_keyword_only(cls: type, values: dict[str, Any]) -> None:
    kinds = [p.kind for p in inspect.signature(cls).parameters.values()]
    assert all(kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for kind in kinds[:3])
    assert all(kind is inspect.Parameter.KEYWORD_ONLY for kind in kinds[3:])
    if len(values) > 3:
        with pytest.raises(TypeError):
            cls(*values.values())


def test_a_run_spec_takes_the_task_and_mode_by_position_and_the_rest_by_keyword() -> None:
    spec = RunSpec("t", "rewoo", max_steps=3)
    assert (spec.task, spec.mode, spec.max_steps) == ("t", "rewoo", 3)
    with pytest.raises(TypeError):
        RunSpec("t", "react", 3)  # type: ignore[misc]


@pytest.mark.parametrize(("cls", "values"), SAMPLES, ids=ids)
def test_records_stay_frozen_and_replaceable(cls: type, values: dict[str, Any]) -> None:
    record = cls(**values)
    first = next(iter(values))
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(record, first, values[first])
    with pytest.raises((AttributeError, TypeError)):
        object.__setattr__(record, "extra", 1)  # slots: no instance dict to grow
    other = values[first] + 1 if isinstance(values[first], int) else values[first] + "-other"
    changed = dataclasses.replace(record, **{first: other})
    assert getattr(changed, first) == other and getattr(record, first) == values[first]
    assert changed != record
    for name in list(values)[1:]:  # every other field carried over as the same object
        assert getattr(changed, name) is getattr(record, name)
    assert dataclasses.replace(record) == record and dataclasses.replace(record) is not record
    assert repr(record).startswith(cls.__name__ + "(")


@pytest.mark.parametrize(("cls", "values"), SAMPLES, ids=ids)
def test_records_survive_copy_and_pickle_as_their_own_class(cls: type, values: dict[str, Any]) -> None:
    record = cls(**values)
    for other in (copy.copy(record), copy.deepcopy(record), pickle.loads(pickle.dumps(record))):
        assert type(other) is cls and other == record
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(other, next(iter(values)), None)


def test_step_defaults_match_its_fields() -> None:
    a, b = Step(1, "final"), Step(1, "final")
    assert a.usage == Usage() and a.meta == {} and a.raw == "" and a.prompt_chars is None
    assert a.meta is not b.meta  # a fresh dict each, as default_factory would give
    assert Step(1, "final", usage=None).usage == Usage()  # type: ignore[arg-type]


def test_a_run_spec_checks_itself_when_made() -> None:
    assert RunSpec("t", tools=["a", "b"]).tools == ("a", "b")
    with pytest.raises(ValueError, match="mode must be one of"):
        RunSpec("t", "nope")
    with pytest.raises(TypeError, match="unknown run option"):
        RunSpec("t", "react", depth=2)


def test_action_equality_ignores_the_argument_text() -> None:
    assert Action("t", "add", {"x": 1}, args_text='{"x":1}') == Action("t", "add", {"x": 1})
    assert "args_text" not in repr(Action("t", "add", {"x": 1}, args_text="{}"))
    assert Usage(1, 2, 3) + Usage(1, 1, 1, estimated=True) == Usage(2, 3, 4, estimated=True)


def test_a_bad_construction_is_the_usual_type_error_naming_the_record() -> None:
    with pytest.raises(TypeError, match="index"):
        Step()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="bogus"):
        Step(1, "final", bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"Usage\.__init__\(\) got an unexpected keyword argument 'tokens'"):
        Usage(tokens=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"Action\.__init__\(\) missing"):
        Action("t")  # type: ignore[call-arg]


def test_a_subclass_of_a_record_is_still_a_frozen_record() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Tagged(Step):
        tag: str = "t"

    tagged = Tagged(2, "final", tag="x")
    assert (type(tagged), tagged.tag, tagged.index, tagged.usage) == (Tagged, "x", 2, Usage())
    with pytest.raises(dataclasses.FrozenInstanceError):
        tagged.tag = "y"  # type: ignore[misc]
