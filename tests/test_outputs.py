"""Typed outputs: `run(..., output_type=T)` validates the final answer in every mode, sends
a misfit back to the model, keeps the value as `trace.output`, and constrains the local
model's answer by grammar."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import BaseModel
from typing_extensions import TypedDict

import loopwright as lw
from loopwright.models.grammar import answer_grammar, grammar_for


class City(BaseModel):
    name: str
    population: int


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Span(TypedDict):
    start: int
    end: int


SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


@lw.tool
def population(city: str) -> str:
    """The population of a city."""
    return '{"name": "Lyon", "population": 522000}'


REGISTRY = lw.ToolRegistry([population])
ACT = 'Thought: look\nAction: population\nAction Input: {"city": "Lyon"}'


def final(text: str) -> str:
    return f"Thought: done\nFinal Answer: {text}"


@pytest.mark.parametrize(
    ("output_type", "answer", "value"),
    [
        (City, '{"name": "Lyon", "population": 522000}', City(name="Lyon", population=522000)),
        (Point, '```json\n{"x": 1, "y": 2}\n```', Point(1, 2)),
        (Span, 'The span is {"start": 3, "end": 9}.', {"start": 3, "end": 9}),
        (SCHEMA, '{"ok": true}', {"ok": True}),
    ],
)
def test_react_accepts_a_fitting_answer_and_keeps_the_typed_value(output_type: Any, answer: str, value: Any) -> None:
    policy = lw.ScriptedPolicy([ACT, final(answer)])
    trace = lw.run("Population of Lyon?", policy, REGISTRY, output_type=output_type)
    assert trace.stopped_reason == "final" and trace.output == value
    assert "must be one line of JSON matching this JSON Schema" in policy.prompts[0]
    assert policy.requests[0].output_schema is not None
    restored = lw.Trace.from_dict(trace.to_dict())
    assert restored.to_dict() == trace.to_dict() and restored.output == trace.to_dict()["output"]


def test_react_sends_a_misfit_back_as_an_observation_and_takes_the_correction() -> None:
    policy = lw.ScriptedPolicy([ACT, final("Lyon has 522000 people"), final('{"name": "Lyon", "population": "many"}'),
                                final('{"name": "Lyon", "population": 522000}')])  # fmt: skip
    trace = lw.run("Population of Lyon?", policy, REGISTRY, output_type=City)
    assert [s.kind for s in trace.steps] == ["action", "parse_error", "parse_error", "final"]
    assert trace.steps[1].error == f"the final answer does not fit the output type: the final answer is not JSON: {'Lyon has 522000 people'!r}"
    assert "population: Input should be a valid integer" in trace.steps[2].error
    assert "does not fit the output type" in policy.prompts[2] and policy.prompts[2].startswith(policy.prompts[1])
    assert trace.output == City(name="Lyon", population=522000) and trace.llm_calls == len(trace.steps) == 4


def test_react_stops_with_error_after_max_parse_errors_misfits() -> None:
    trace = lw.run("q", lw.ScriptedPolicy([final("no")] * 3), REGISTRY, output_type=City)
    assert trace.stopped_reason == "error" and trace.output is None and trace.llm_calls == 3


PLAN = '{"plan": [{"id": "E1", "tool": "population", "args": {"city": "Lyon"}}]}'


def test_rewoo_accepts_a_fitting_answer_in_two_calls() -> None:
    policy = lw.ScriptedPolicy([PLAN, '{"name": "Lyon", "population": 522000}'])
    trace = lw.run("Population of Lyon?", policy, REGISTRY, mode="rewoo", output_type=City)
    assert trace.output == City(name="Lyon", population=522000) and trace.llm_calls == 2
    assert policy.requests[1].output_schema == lw.outputs.output_spec(City).schema  # type: ignore[union-attr]


def test_rewoo_retries_the_solve_call_once_with_the_reason() -> None:
    policy = lw.ScriptedPolicy([PLAN, "522000", '{"name": "Lyon", "population": 522000}'])
    trace = lw.run("Population of Lyon?", policy, REGISTRY, mode="rewoo", output_type=City)
    assert trace.stopped_reason == "final" and trace.llm_calls == 3
    assert [s.kind for s in trace.steps][-2:] == ["solve", "solve"] and trace.steps[-2].error
    assert policy.prompts[2].startswith(policy.prompts[1]) and "does not fit the output type" in policy.prompts[2]
    failing = lw.run("q", lw.ScriptedPolicy([PLAN, "no", "still no"]), REGISTRY, mode="rewoo", output_type=City)
    assert failing.stopped_reason == "error" and failing.llm_calls == 3 and failing.output is None


def test_plan_execute_takes_a_fitting_last_result_and_replans_on_a_misfit() -> None:
    trace = lw.run("Population of Lyon?", lw.ScriptedPolicy([PLAN]), REGISTRY, mode="plan_execute", output_type=City)
    assert trace.output == City(name="Lyon", population=522000) and trace.llm_calls == 1

    @lw.tool
    def count(city: str) -> int:
        """How many people."""
        return 522000

    registry = lw.ToolRegistry([population, count])
    bad = '{"plan": [{"id": "E1", "tool": "count", "args": {"city": "Lyon"}}]}'
    policy = lw.ScriptedPolicy([bad, PLAN])
    trace = lw.run("Population of Lyon?", policy, registry, mode="plan_execute", output_type=City)
    assert trace.replans == 1 and trace.llm_calls == 2 and trace.output.population == 522000
    assert "does not fit the output type" in policy.prompts[1]


def test_an_output_type_neither_pydantic_nor_json_schema_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="output_type"):
        lw.run("q", lw.ScriptedPolicy([]), REGISTRY, output_type=object())
    with pytest.raises(TypeError, match="not a valid JSON Schema"):
        lw.run("q", lw.ScriptedPolicy([]), REGISTRY, output_type={"type": 12})


def test_the_local_model_grammar_holds_the_answer_to_the_schema() -> None:
    schema = lw.outputs.output_spec(City).schema  # type: ignore[union-attr]
    tools = tuple(REGISTRY.schemas())
    react = grammar_for(lw.ModelRequest("q\nThought:", (), "react", tools=tools, output_schema=schema))
    solve = grammar_for(lw.ModelRequest("q", (), "solve", tools=tools, output_schema=schema))
    out_rule = 'out ::= "{" "\\"name\\"" ": " json-string-1-80 ", " "\\"population\\"" ": " json-integer "}"'
    assert react is not None and 'answer ::= out' in react and out_rule in react
    assert solve == answer_grammar(schema) and out_rule in solve


@pytest.fixture(scope="module")
def model() -> Any:
    return lw.models.LlamaCpp()


@pytest.mark.slow
def test_the_react_step_grammar_admits_only_an_answer_in_the_schema(model: Any) -> None:
    schema = lw.outputs.output_spec(City).schema  # type: ignore[union-attr]
    grammar = grammar_for(lw.ModelRequest("q\nThought:", (), "react", tools=tuple(REGISTRY.schemas()), output_schema=schema))
    assert grammar is not None
    assert model.grammar_accepts(grammar, ' done\nFinal Answer: {"name": "Lyon", "population": 522000}')
    assert not model.grammar_accepts(grammar, " done\nFinal Answer: Lyon has 522000 people")
    assert not model.grammar_accepts(grammar, ' done\nFinal Answer: {"name": "Lyon"}')
    assert model.grammar_accepts(grammar, ' look\nAction: population\nAction Input: {"city": "Lyon"}')


@pytest.mark.slow
def test_the_real_model_solves_in_the_schema_under_the_grammar(model: Any) -> None:
    trace = lw.run("What is the population of Lyon?", model, REGISTRY, mode="rewoo", output_type=City, max_steps=4)
    solves = [s for s in trace.steps if s.kind == "solve"]
    assert len(solves) == 1 and solves[0].error is None  # the first answer it gave fit
    assert isinstance(trace.output, City) and trace.llm_calls == 2
