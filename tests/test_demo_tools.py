"""The built-in demo tools: the fact table and the arithmetic evaluator."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopwright as lw
from loopwright.interfaces.demo_tools import (
    DEMO_TASKS,
    calculate,
    demo_registry,
    evaluate,
    find_facts,
    is_correct,
    lookup,
)


def test_lookup_returns_the_fact_the_query_asks_about() -> None:
    assert lookup("population of Paris") == "The population of Paris is about 2100000."
    assert lookup("When was Alan Turing born?") == "Alan Turing was born in 1912."
    assert lookup("capital of Japan") == "The capital of Japan is Tokyo."


def test_lookup_prefers_the_longer_subject_name() -> None:
    assert find_facts("when did the Berlin Wall fall") == ["The Berlin Wall fell on 9 November 1989."]


def test_lookup_without_an_attribute_gives_every_fact_of_the_subject() -> None:
    facts = find_facts("Ada Lovelace")
    assert len(facts) == 3 and all("Ada Lovelace" in f for f in facts)


def test_lookup_answers_for_each_subject_named() -> None:
    out = lookup("population of Lyon and Nice")
    assert "520000" in out and "340000" in out


def test_lookup_of_an_unknown_subject_fails_naming_the_known_ones() -> None:
    result = demo_registry().execute("lookup", {"query": "17 * 23"})
    assert result.error is not None and result.value is None
    assert "no fact found for '17 * 23'" in result.observation and "Paris" in result.observation
    assert result.observation.startswith("ERROR")


def test_plan_execute_never_answers_with_a_lookup_miss() -> None:
    # the plan's only step misses; the replanned one finds the fact and is the answer
    miss = json.dumps({"plan": [{"id": "E1", "tool": "lookup", "args": {"query": "17 * 23"}}]})
    hit = json.dumps({"plan": [{"id": "E1", "tool": "lookup", "args": {"query": "capital of Japan"}}]})
    trace = lw.run("What is the capital of Japan?", lw.ScriptedPolicy([miss, hit]), demo_registry(),
                   mode="plan_execute")
    assert trace.stopped_reason == "final" and trace.replans == 1
    assert trace.final_answer == "The capital of Japan is Tokyo."


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("17 * 23", 391),
        ("(2 + 3) ** 2", 25),
        ("2^10", 1024),
        ("2,100,000 x 2", 4200000),
        ("7 / 2", 3.5),
        ("144 / 12", 12),
        ("-3 + +4", 1),
        ("sqrt(16) + abs(-2)", 6),
        ("17 * 23 =", 391),
        ("10 % 4 + 9 // 2", 6),
    ],
)
def test_evaluate_computes_arithmetic(expression: str, value: float) -> None:
    result = evaluate(expression)
    assert result == value and type(result) is type(value)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os').system('true')", "not allowed"),
        ("x + 1", "not allowed"),
        ("(1).real", "not allowed"),
        ("'a' * 3", "only numbers"),
        ("True + 1", "only numbers"),
        ("9 ** 9 ** 9", "exponent"),
        ("10 ** 400", "too large"),
        ("1 / 0", "division by zero"),
        ("(-8) ** 0.5", "not a real number"),
        ("17 *", "not an arithmetic expression"),
        ("1" * 400, "longer than"),
    ],
)
def test_evaluate_refuses_everything_but_arithmetic(expression: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        evaluate(expression)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_evaluate_returns_a_number_or_raises_value_error_for_any_text(text: str) -> None:
    try:
        out = evaluate(text)
    except ValueError:
        return
    assert isinstance(out, (int, float)) and not isinstance(out, bool)


def test_calculate_failures_come_back_as_observations_through_the_registry() -> None:
    registry = demo_registry()
    result = registry.dispatch("calculate", {"expression": "open('x')"})
    assert isinstance(result, lw.ToolError)
    assert "not allowed" in result.as_observation()
    assert registry.dispatch("calculate", {"expression": "17 * 23"}) == 391
    assert calculate.name == "calculate" and lookup.name == "lookup"


def test_demo_tools_declare_examples_that_become_the_default_worked_examples() -> None:
    policy = lw.ScriptedPolicy(["Thought: t\nFinal Answer: 4"])
    lw.run("What is 2 + 2?", policy, demo_registry())
    text = policy.prompts[0]
    assert 'Action: calculate\nAction Input: {"expression": "12 * 34"}' in text
    assert 'Action: lookup\nAction Input: {"query": "capital of Italy"}' in text
    assert text.endswith('Action Input: {"expression": "100 - 58"}\nObservation: <untrusted source="calculate#1">42'
                         '</untrusted>\nThought: I know the answer\nFinal Answer: 42\n\nQuestion: What is 2 + 2?\nThought:')
    assert 'Final Answer: Rome\n' in text and 'Final Answer: The capital' not in text
    assert [e.question for e in calculate.examples][-1] == "What is the population of Rome times 3?"


def test_demo_tasks_are_twenty_and_each_answerable_from_the_tools() -> None:
    assert len(DEMO_TASKS) == 20 and len({q for q, _ in DEMO_TASKS}) == 20


@pytest.mark.parametrize(
    ("answer", "expected", "correct"),
    [
        ("391", "391", True),
        ("The answer is 4,200,000.", "4200000", True),
        ("12.0", "12", True),
        ("1391", "391", False),
        ("144 / 12", "12", False),
        ("144 / 12 = 12", "12", True),
        ("17 * 23 = 387.", "391", False),
        ("391 or 400", "391", False),
        ("Isaac Newton died in 1727.", "1727", True),
        ("Tokyo.", "Tokyo", True),
        ("tokyo", "Tokyo", True),
        ("Kyoto", "Tokyo", False),
        (None, "1", False),
    ],
)
def test_is_correct_takes_the_last_number_and_refuses_unevaluated_expressions(answer: str | None, expected: str, correct: bool) -> None:
    assert is_correct(answer, expected) is correct
