"""Holding the answer: a ReAct step may not answer while its question names something no
call has used; the held step's thought says what is left, and once every reason was met
the step answers."""

from __future__ import annotations

from typing import Any

import pytest

import loopwright as lw
from loopwright.models.grammar import grammar_for, react_grammar
from loopwright.models.holding import (
    ANSWER_TEXT,
    ASKS_TEXT,
    HOLD_CALLS,
    HOLD_TEXT,
    Hold,
    held_step,
    question_names,
    unused_names,
)
from loopwright.policy import ModelRequest


def _tool(name: str, **params: str) -> dict[str, Any]:
    return {"name": name, "description": "", "parameters": {
        "type": "object", "properties": {k: {"type": v} for k, v in params.items()}, "required": list(params)}}


STOCK = _tool("stock_level", item="string")
RESTOCK = _tool("restock", item="string", quantity="integer")
SHIFT = _tool("shift_date", date="string", days="integer")
WEEKDAY = _tool("day_of_week", date="string")
CONVERT = _tool("convert_length", value="number", from_unit="string", to_unit="string")
INVENTORY = (STOCK, RESTOCK)
UNITS = (CONVERT, WEEKDAY, SHIFT)

HEAD = """\
Answer the question using the tools below.

Example:
Question: Add 5 gaskets to the stock. How many are there now?
Thought: I need to add units, so I use restock
Action: restock
Action Input: {"item": "gasket", "quantity": 5}
Observation: <untrusted source="restock#1">22</untrusted>
Thought: I know the answer
Final Answer: 22

"""


def run_prompt(question: str, *steps: tuple[str, str, str, str]) -> str:
    """A ReAct prompt: the head, the question, and (thought, tool, args, observation) steps."""
    text = HEAD + f"Question: {question}\nThought:"
    for k, (thought, tool, args, observation) in enumerate(steps, 1):
        text += (f"{thought}\nAction: {tool}\nAction Input: {args}\n"
                 f'Observation: <untrusted source="{tool}#{k}">{observation}</untrusted>\nThought:')
    return text


CHAIN = "Add as many nuts as there are bolts in stock. How many nuts are there now?"


# ----------------------------------------------------------------- what is held (fast)


def test_the_question_names_its_things_not_its_question_words_nor_the_tools() -> None:
    assert question_names(CHAIN, INVENTORY) == ["nuts", "bolts"]
    assert question_names("What day of the week is 5 days after 2024-04-01?", UNITS) == ["5", "2024-04-01"]
    assert question_names("How much higher is Mount Everest than K2?", ()) == ["Mount", "Everest", "K2"]


def test_a_thing_is_used_by_a_call_an_observation_or_an_abbreviation() -> None:
    looked_up = run_prompt(CHAIN, (" I need the bolts", "stock_level", '{"item": "bolt"}', "40"))
    assert unused_names(looked_up, INVENTORY) == ["nuts"]
    metres = run_prompt("How many metres is 3 km?",
                        (" I convert", "convert_length", '{"value": 3, "from_unit": "km", "to_unit": "m"}', "3000.0"))
    assert unused_names(metres, UNITS) == []  # "m" abbreviates metres: a one-call question is not held
    moons = run_prompt("How many moons does Mars have?", (" I read", "encyclopedia", '{"topic": "Mars"}',
                                                          "Mars has 2 moons."))
    assert unused_names(moons, ()) == []  # "moons" is in the observation
    assert unused_names("no question here", INVENTORY) == []


def test_after_the_first_call_a_step_is_held_for_what_the_question_still_names() -> None:
    assert held_step(run_prompt(CHAIN), INVENTORY) is None  # nothing before the first call
    looked_up = run_prompt(CHAIN, (" I need the bolts", "stock_level", '{"item": "bolt"}', "40"))
    assert held_step(looked_up, INVENTORY) == Hold(HOLD_TEXT.format(name="nuts"))


def test_each_reason_holds_once_then_the_step_answers() -> None:
    held = HOLD_TEXT.format(name="nuts")
    restocked = run_prompt(CHAIN, (" I need the bolts", "stock_level", '{"item": "bolt"}', "40"),
                           (held, "stock_level", '{"item": "bolt"}', "40"))  # held, and used nothing new
    assert held_step(restocked, INVENTORY) == Hold(ANSWER_TEXT, act=False)
    failed = run_prompt(CHAIN, (" I need the bolts", "stock_level", '{"item": "bolt"}', "40"),
                        (held, "restock", '{"item": "nuts", "quantity": 40}', "ERROR[restock]: unknown item"))
    assert held_step(failed, INVENTORY) is None  # after a failed call the model chooses


def test_a_run_never_held_answers_freely_and_holds_stop_after_hold_calls() -> None:
    done = run_prompt("How many bolts are in stock?", (" I look", "stock_level", '{"item": "bolt"}', "40"))
    assert held_step(done, INVENTORY) is None
    calls = [(" I look", "stock_level", f'{{"item": "washer{k}"}}', "ERROR[stock_level]: unknown") for k in range(HOLD_CALLS)]
    assert held_step(run_prompt(CHAIN, *calls), INVENTORY) is None


def test_the_tool_the_question_spells_out_is_called_last() -> None:
    question = "What day of the week is 5 days after 2024-04-01?"
    weekday = (" I need the weekday", "day_of_week", '{"date": "2024-04-01"}', "Monday")
    shifted = (HOLD_TEXT.format(name="5"), "shift_date", '{"date": "2024-04-01", "days": 5}', "2024-04-06")
    assert held_step(run_prompt(question, weekday), UNITS) == Hold(HOLD_TEXT.format(name="5"))
    asks = ASKS_TEXT.format(words="day of week", tool="day_of_week")
    assert held_step(run_prompt(question, weekday, shifted), UNITS) == Hold(asks)
    answered = (asks, "day_of_week", '{"date": "2024-04-06"}', "Saturday")
    assert held_step(run_prompt(question, weekday, shifted, answered), UNITS) == Hold(ANSWER_TEXT, act=False)
    plain = run_prompt("What day of the week was 2023-07-04?", (" I look", "day_of_week", '{"date": "2023-07-04"}',
                                                                "Tuesday"))
    assert held_step(plain, UNITS) is None  # the named tool was the last call


def test_a_held_grammar_calls_with_the_reason_or_answers_with_it() -> None:
    free = react_grammar(INVENTORY)
    act = react_grammar(INVENTORY, hold=Hold(HOLD_TEXT.format(name="nuts")))
    answer = react_grammar(INVENTORY, hold=Hold(ANSWER_TEXT, act=False))
    assert "final" in free.split("root ::=")[1].splitlines()[0]
    root = act.split("root ::=")[1].splitlines()[0]
    assert "action" in root and "final" not in root and "names nuts, which no call has used" in act
    root = answer.split("root ::=")[1].splitlines()[0]
    assert "final" in root and "action" not in root and '" I know the answer"' in answer


def test_grammar_for_holds_only_when_asked() -> None:
    request = ModelRequest(run_prompt(CHAIN, (" I need the bolts", "stock_level", '{"item": "bolt"}', "40")),
                           purpose="react", tools=INVENTORY)
    assert "no call has used" not in (grammar_for(request) or "")
    assert "names nuts, which no call has used" in (grammar_for(request, hold_answer=True) or "")


# --------------------------------------------- what llama.cpp accepts (real vocab)


@pytest.fixture(scope="module")
def model() -> Any:
    return lw.models.LlamaCpp(n_ctx=256)


@pytest.mark.slow
def test_a_held_step_writes_its_reason_then_a_call(model: Any) -> None:
    g = react_grammar(INVENTORY, hold=Hold(HOLD_TEXT.format(name="nuts")))
    reason = HOLD_TEXT.format(name="nuts")
    assert model.grammar_accepts(g, f'{reason}, so I restock\nAction: restock\nAction Input: {{"item": "nut", "quantity": 40}}\n')
    assert not model.grammar_accepts(g, f"{reason}\nFinal Answer: 40\n")
    assert not model.grammar_accepts(g, ' I know the answer\nAction: stock_level\nAction Input: {"item": "nut"}\n')
    answer = react_grammar(INVENTORY, hold=Hold(ANSWER_TEXT, act=False))
    assert model.grammar_accepts(answer, " I know the answer\nFinal Answer: 160\n")
    assert not model.grammar_accepts(answer, ' I know the answer\nAction: stock_level\nAction Input: {"item": "nut"}\n')


@pytest.mark.slow
def test_the_embedded_model_holds_its_steps_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def spy(self: Any, text: str) -> Any:
        seen.append(text)
        raise StopIteration  # the grammar is what is checked: no tokens generated

    monkeypatch.setattr(lw.models.LlamaCpp, "compiled_grammar", spy)
    request = ModelRequest(run_prompt(CHAIN, (" I need the bolts", "stock_level", '{"item": "bolt"}', "40")),
                           purpose="react", tools=INVENTORY)
    for hold in (False, True):
        with pytest.raises(StopIteration):
            lw.models.LlamaCpp(n_ctx=1024, hold_answer=hold).complete(request)
    assert "no call has used" not in seen[0] and "names nuts, which no call has used" in seen[1]
