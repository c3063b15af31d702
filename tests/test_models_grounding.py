"""Grounded numbers: a ReAct call (or a plan's number value) writes only numbers the run
has seen, in its question or an observation; the worked examples' numbers and the
model's own earlier calls do not count."""

from __future__ import annotations

from typing import Any

import pytest

import loopwright as lw
from loopwright.models.grammar import grammar_for, plan_grammar, react_grammar
from loopwright.models.grounding import (
    grounded_numbers,
    prompt_numbers,
    task_part,
)
from loopwright.policy import ModelRequest

RESTOCK = {
    "name": "restock",
    "description": "Add units of an item to the stock.",
    "parameters": {
        "type": "object",
        "properties": {"item": {"type": "string"}, "quantity": {"type": "integer"}},
        "required": ["item", "quantity"],
    },
}
STOCK = {
    "name": "stock_level",
    "description": "How many units of an item are in stock.",
    "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
}
COMPUTE = {
    "name": "compute",
    "description": "Work out a formula.",
    "parameters": {"type": "object", "properties": {"formula": {"type": "string"}}, "required": ["formula"]},
}
TOOLS = (STOCK, RESTOCK, COMPUTE)

PROMPT = """\
Answer the question using the tools below.

Example:
Question: Add 5 gaskets to the stock. How many are there now?
Thought: I need to add units, so I use restock
Action: restock
Action Input: {"item": "gasket", "quantity": 5}
Observation: <untrusted source="restock#1">22</untrusted>
Thought: I know the answer
Final Answer: 22

Question: Restock bolts by as many units as there are hinges in stock.
Thought: I need the hinges, and I guess 30
Action: stock_level
Action Input: {"item": "hinge", "guess": 77}
Observation: <untrusted source="stock_level#1">12</untrusted>
Thought:"""


def step(name: str, args: str) -> str:
    return f" ok\nAction: {name}\nAction Input: {args}\n"


# ----------------------------------------------------------------- the text (fast)


def test_the_task_part_starts_at_the_question_that_opens_no_example() -> None:
    part = task_part(PROMPT)
    assert part is not None and part.startswith("Question: Restock bolts")
    assert task_part("no question here") is None


def test_seen_numbers_are_the_questions_and_the_observations_only() -> None:
    seen = prompt_numbers(PROMPT)
    assert seen == {"12"}  # not the example's 5 and 22, the thought's 30, the call's 77
    assert prompt_numbers("Tools: add 5 and 7") is None  # no question: nothing held


def test_numbers_are_kept_as_written_and_as_json_writes_them() -> None:
    seen = grounded_numbers(["Oslo has 1,418,000 people", "2024-02-25", "2000.0 m", "3.0480 ft"])
    assert {"1418000", "2024", "02", "2", "25", "2000.0", "2000", "3.0480", "3.048"} <= seen
    assert "418" not in seen and "000" not in seen  # a thousands group is no number of its own


def test_number_words_count_as_seen() -> None:
    assert {"3", "2", "7", "12"} <= grounded_numbers(["three times, twice, a week, a dozen"])


def test_grammar_for_grounds_only_when_asked() -> None:
    request = ModelRequest(PROMPT, purpose="react", tools=TOOLS)
    assert "g-num" not in (grammar_for(request) or "")
    grounded = grammar_for(request, ground_numbers=True) or ""
    assert 'g-num ::= "12"' in grounded
    plan = ModelRequest("Question: Restock bolts by 12.\nPlan:", purpose="plan", tools=TOOLS)
    assert "-g ::=" in (grammar_for(plan, ground_numbers=True) or "") and "-g ::=" not in (grammar_for(plan) or "")


def test_a_call_that_needs_an_unseen_number_is_not_offered() -> None:
    request = ModelRequest("Question: Restock bolts by the hinges.\nThought:", purpose="react", tools=TOOLS)
    grounded = grammar_for(request, ground_numbers=True) or ""
    assert "restock" not in grounded and "stock_level" in grounded
    assert "restock" in (grammar_for(request) or "")
    optional = {**RESTOCK, "parameters": {**RESTOCK["parameters"], "required": ["item"]}}
    assert '"quantity"' not in react_grammar((optional,), grounded=frozenset())  # an optional key is left out
    plan = plan_grammar(TOOLS, grounded=frozenset())
    assert '"restock", \\"args\\": "' not in plan.split("step2 ::=")[0].split("step1 ::=")[1]
    only = plan_grammar((RESTOCK,), grounded=frozenset())
    assert only == plan_grammar((RESTOCK,))  # no step 1 at all: not held


def test_a_prompt_without_a_question_is_not_grounded() -> None:
    request = ModelRequest("Use the tools.\nThought:", purpose="react", tools=TOOLS)
    assert grammar_for(request, ground_numbers=True) == grammar_for(request)


# --------------------------------------------- what llama.cpp accepts (real vocab)


@pytest.fixture(scope="module")
def model() -> Any:
    return lw.models.LlamaCpp(n_ctx=256)


@pytest.mark.slow
def test_a_call_writes_seen_numbers_and_no_others(model: Any) -> None:
    seen = grounded_numbers(["Iron has atomic number 26.", "What is it times 3, on 2024-02-25?"])
    g = react_grammar(TOOLS, grounded=seen)
    assert model.grammar_accepts(g, step("compute", '{"formula": "26 * 3"}'))
    assert model.grammar_accepts(g, step("compute", '{"formula": "2024-02-25"}'))
    assert model.grammar_accepts(g, step("restock", '{"item": "bolt", "quantity": -26}'))
    assert model.grammar_accepts(g, step("stock_level", '{"item": "bolt"}'))
    assert model.grammar_accepts(g, " I know it\nFinal Answer: 795\n")  # the answer is free
    assert not model.grammar_accepts(g, step("compute", '{"formula": "27 * 3"}'))
    assert not model.grammar_accepts(g, step("compute", '{"formula": "263"}'))  # "26" then a digit
    assert not model.grammar_accepts(g, step("compute", '{"formula": "2024-03-25"}'))
    assert not model.grammar_accepts(g, step("restock", '{"item": "bolt", "quantity": 5}'))
    free = react_grammar(TOOLS)
    assert model.grammar_accepts(free, step("restock", '{"item": "bolt", "quantity": 5}'))


@pytest.mark.slow
def test_a_plan_passes_a_result_on_instead_of_an_unseen_number(model: Any) -> None:
    g = plan_grammar(TOOLS, grounded=frozenset())
    chained = (' {"plan": [{"id": "E1", "tool": "stock_level", "args": {"item": "hinge"}}, '
               '{"id": "E2", "tool": "restock", "args": {"item": "bolt", "quantity": "#E1"}}]}')
    invented = ' {"plan": [{"id": "E1", "tool": "restock", "args": {"item": "bolt", "quantity": 12}}]}'
    assert model.grammar_accepts(g, chained)
    assert not model.grammar_accepts(g, invented)
    assert model.grammar_accepts(plan_grammar(TOOLS), invented)


@pytest.mark.slow
def test_with_no_number_seen_the_step_looks_one_up(model: Any) -> None:
    g = react_grammar(TOOLS, grounded=frozenset())
    assert model.grammar_accepts(g, step("stock_level", '{"item": "hinge"}'))
    assert not model.grammar_accepts(g, step("restock", '{"item": "bolt", "quantity": 1}'))


@pytest.mark.slow
def test_the_embedded_model_grounds_its_steps_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def spy(self: Any, text: str) -> Any:
        seen.append(text)
        raise StopIteration  # the grammar is what is checked: no tokens generated

    monkeypatch.setattr(lw.models.LlamaCpp, "compiled_grammar", spy)
    request = ModelRequest(PROMPT, purpose="react", tools=TOOLS)
    for ground in (False, True):
        with pytest.raises(StopIteration):
            lw.models.LlamaCpp(n_ctx=1024, ground_numbers=ground).complete(request)
    assert "g-num" not in seen[0] and 'g-num ::= "12"' in seen[1]
