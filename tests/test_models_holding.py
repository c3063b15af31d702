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
    COMBINE_TEXT,
    HOLD_CALLS,
    HOLD_TEXT,
    Hold,
    combination,
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
    k2 = run_prompt("How high is K2 in metres?", (" I read", "encyclopedia", '{"topic": "K2"}', "K2 is 8611 m high."))
    assert unused_names(k2, ()) == []  # a short name with a digit is a word of its own
    assert unused_names("no question here", INVENTORY) == []


def test_after_the_first_call_a_step_is_held_for_what_the_question_still_names() -> None:
    assert held_step(run_prompt(CHAIN), INVENTORY) is None  # nothing before the first call
    looked_up = run_prompt(CHAIN, (" I need the bolts", "stock_level", '{"item": "bolt"}', "40"))
    assert held_step(looked_up, INVENTORY) == Hold(HOLD_TEXT.format(name="nuts"))


def test_each_reason_holds_once_then_the_step_answers() -> None:
    held = HOLD_TEXT.format(name="nuts")
    bolts = (held, "stock_level", '{"item": "bolt"}', "40")  # held, and used nothing new
    assert held_step(run_prompt(CHAIN, (" I need the bolts", "stock_level", '{"item": "bolt"}', "40"), bolts),
                     INVENTORY) == Hold(held)  # held once more
    restocked = run_prompt(CHAIN, (" I need the bolts", "stock_level", '{"item": "bolt"}', "40"), bolts, bolts)
    assert held_step(restocked, INVENTORY) == Hold(ANSWER_TEXT, act=False)  # not a third time
    failed = run_prompt(CHAIN, (" I need the bolts", "stock_level", '{"item": "bolt"}', "40"),
                        (held, "restock", '{"item": "nuts", "quantity": 40}', "ERROR[restock]: unknown item"))
    assert held_step(failed, INVENTORY) == Hold(held)  # the held call failed: held again
    other = run_prompt(CHAIN, (" I need the bolts", "stock_level", '{"item": "bolt"}', "40"),
                       (held, "restock", '{"item": "nut", "quantity": 40}', "160"),
                       (" I check", "stock_level", '{"item": "nut"}', "ERROR[stock_level]: busy"))
    assert held_step(other, INVENTORY) is None  # a failed call nothing held: the model chooses


def test_a_run_never_held_answers_freely_and_holds_stop_after_hold_calls() -> None:
    done = run_prompt("How many bolts are in stock?", (" I look", "stock_level", '{"item": "bolt"}', "40"))
    assert held_step(done, INVENTORY) is None
    calls = [(" I look", "stock_level", f'{{"item": "washer{k}"}}', "ERROR[stock_level]: unknown") for k in range(HOLD_CALLS)]
    assert held_step(run_prompt(CHAIN, *calls), INVENTORY) is None


def test_the_tool_the_question_spells_out_is_called_last() -> None:
    question = "What day of the week is 5 days after 2024-04-01?"
    weekday = (" I need the weekday", "day_of_week", '{"date": "2024-04-01"}', "Monday")
    shifted = (HOLD_TEXT.format(name="5"), "shift_date", '{"date": "2024-04-01", "days": 5}', "2024-04-06")
    assert held_step(run_prompt(question, weekday), UNITS) == Hold(HOLD_TEXT.format(name="5"), number="5")
    asks = ASKS_TEXT.format(words="day of week", tool="day_of_week")
    assert held_step(run_prompt(question, weekday, shifted), UNITS) == Hold(asks)
    answered = (asks, "day_of_week", '{"date": "2024-04-06"}', "Saturday")
    assert held_step(run_prompt(question, weekday, shifted, answered), UNITS) == Hold(ANSWER_TEXT, act=False)
    plain = run_prompt("What day of the week was 2023-07-04?", (" I look", "day_of_week", '{"date": "2023-07-04"}',
                                                                "Tuesday"))
    assert held_step(plain, UNITS) is None  # the named tool was the last call


def test_a_number_names_the_unit_or_thing_written_after_it() -> None:
    assert question_names("How many metres longer is 1 mi than 1 km?", UNITS) == ["metres", "1 mi", "1 km"]
    assert question_names("Restock 3 hinges. What is the new stock level?", INVENTORY) == ["3 hinges"]
    assert question_names("What date is 10 days after 2024-02-25?", UNITS) == ["10", "2024-02-25"]  # a parameter
    question = "How many metres are 2 km and 3 mi together?"
    two_km = (" I convert", "convert_length", '{"value": 2, "from_unit": "km", "to_unit": "m"}', "2000.0")
    assert unused_names(run_prompt(question, two_km), UNITS) == ["3 mi"]
    three_km = (" I convert", "convert_length", '{"value": 3, "from_unit": "km", "to_unit": "m"}', "3000.0")
    assert unused_names(run_prompt(question, two_km, three_km), UNITS) == ["3 mi"]  # 3, but not in miles


def test_an_argument_listing_several_things_uses_the_first_and_a_failed_call_nothing() -> None:
    question = "How many washers and hinges are in stock together?"
    listed = (" I look", "stock_level", '{"item": "washer, hinge"}', "75")
    assert unused_names(run_prompt(question, listed), INVENTORY) == ["hinges"]
    both = (" I look", "stock_level", '{"item": "washer and hinge"}', "75")
    assert unused_names(run_prompt(question, both), INVENTORY) == ["hinges"]
    failed = (" I look", "stock_level", '{"item": "washers"}', "ERROR[stock_level]: unknown item; known: washer, hinge")
    assert unused_names(run_prompt(question, failed), INVENTORY) == ["washers", "hinges"]
    metres = (" I convert", "convert_length", '{"value": 2, "from_unit": "km", "to_unit": "m, 3 mi"}', "2000.0")
    assert unused_names(run_prompt("How many metres are 2 km and 3 mi together?", metres), UNITS) == ["3 mi"]


def test_a_question_asks_for_a_total_or_a_difference_in_its_words() -> None:
    assert combination("How many washers and hinges are in stock together?") == "+"
    assert combination("How many moons do Mars, Earth and Jupiter have in total?") == "+"
    assert combination("What is the sum of the atomic numbers of carbon and iron?") == "+"
    assert combination("How many more nuts than brackets are in stock?") == "-"
    assert combination("What is the atomic number of gold minus that of oxygen?") == "-"
    assert combination("How many moons does Jupiter have, minus 5?") is None
    assert combination(CHAIN) is None


def test_a_total_looks_each_thing_up_with_the_same_tool_then_answers_from_the_values() -> None:
    question = "How many hinges, brackets and bolts are in stock in total?"
    assert held_step(run_prompt(question), INVENTORY) == Hold("", one_thing=True)  # a call, of one thing
    assert held_step(run_prompt(CHAIN), INVENTORY) is None
    hinges = (" I look", "stock_level", '{"item": "hinge"}', "12")
    assert held_step(run_prompt(question, hinges), INVENTORY) == Hold(HOLD_TEXT.format(name="brackets"),
                                                                       tool="stock_level", one_thing=True)
    brackets = (HOLD_TEXT.format(name="brackets"), "stock_level", '{"item": "bracket"}', "8")
    bolts = (HOLD_TEXT.format(name="bolts"), "stock_level", '{"item": "bolt"}', "40")
    assert held_step(run_prompt(question, hinges, brackets), INVENTORY) == Hold(HOLD_TEXT.format(name="bolts"),
                                                                                 tool="stock_level", one_thing=True)
    total = Hold(COMBINE_TEXT.format(formula="12 + 8 + 40"), act=False)
    assert held_step(run_prompt(question, hinges, brackets, bolts), INVENTORY) == total
    assert held_step(run_prompt(CHAIN, hinges, brackets), INVENTORY) != total  # no total asked for
    failed = (" I look", "stock_level", '{"item": "bolts"}', "ERROR[stock_level]: unknown item")
    assert held_step(run_prompt(question, hinges, brackets, failed), INVENTORY) is None


def test_a_difference_is_the_larger_value_less_the_other_from_sentences() -> None:
    question = "What is the atomic number of gold minus that of oxygen?"
    oxygen = (" I read", "encyclopedia", '{"topic": "oxygen"}', "Oxygen has atomic number 8.")
    gold = (HOLD_TEXT.format(name="gold"), "encyclopedia", '{"topic": "gold"}', "Gold has atomic number 79.")
    encyclopedia = _tool("encyclopedia", topic="string")
    assert held_step(run_prompt(question, oxygen, gold), (encyclopedia,)) == Hold(
        COMBINE_TEXT.format(formula="79 - 8"), act=False)
    metres = (" I convert", "convert_length", '{"value": 1, "from_unit": "mi", "to_unit": "m"}', "1609.344")
    km = (" I convert", "convert_length", '{"value": 1, "from_unit": "km", "to_unit": "m"}', "1000.0")
    assert held_step(run_prompt("How many metres longer is 1 mi than 1 km?", metres, km), UNITS) == Hold(
        COMBINE_TEXT.format(formula="1609.344 - 1000"), act=False)


def test_a_hold_with_a_tool_calls_only_that_tool() -> None:
    held = react_grammar(INVENTORY, hold=Hold(HOLD_TEXT.format(name="nuts"), tool="stock_level"))
    action = held.split("action ::=")[1].splitlines()[0]
    assert "tool0" in action and "tool1" not in action
    assert "tool1" in react_grammar(INVENTORY, hold=Hold(HOLD_TEXT.format(name="nuts"))).split("action ::=")[1]


def test_a_held_number_is_the_only_number_its_call_may_write() -> None:
    held = react_grammar((CONVERT,), hold=Hold(HOLD_TEXT.format(name="3 mi"), number="3"))
    assert 'tool0-args-p0-g ::= "-3" | "3"' in held
    assert "tool0-args-p0-g" not in react_grammar((CONVERT,), hold=Hold(HOLD_TEXT.format(name="3 mi")))
    known = {"convert_length": {"value": 2, "from_unit": "km", "to_unit": "m"}}
    pinned = react_grammar((CONVERT,), avoid=known)  # the known call's number stays: only its strings differ
    assert "tool0-args-new" in pinned and '"\\"value\\"" ": " "2"' in pinned
    held = react_grammar((CONVERT,), avoid=known, hold=Hold(HOLD_TEXT.format(name="3 mi"), number="3"))
    assert "tool0-args-new" not in held and 'tool0-args-p0-g ::= "-3" | "3"' in held
    same = react_grammar((CONVERT,), avoid=known, hold=Hold(HOLD_TEXT.format(name="2 mi"), number="2"))
    assert "tool0-args-new" in same  # the held number is the known call's: its strings must differ
    topic = react_grammar((_tool("encyclopedia", topic="string"),), avoid={"encyclopedia": {"topic": "Oxygen"}},
                          hold=Hold(HOLD_TEXT.format(name="5"), number="5"))
    assert "tool0-args-x0" in topic  # a known call with no number stays excluded


def test_a_thing_a_formula_could_not_take_is_looked_up_with_another_tool() -> None:
    encyclopedia, compute = _tool("encyclopedia", topic="string"), _tool("compute", formula="string")
    question = "What is the atomic number of oxygen times 5?"
    formula = (" I compute", "compute", '{"formula": "Oxygen * 5"}', "ERROR[compute]: Name is not allowed")
    assert held_step(run_prompt(question, formula), (encyclopedia, compute)) == Hold(
        HOLD_TEXT.format(name="atomic"), not_tools=frozenset({"compute"}))
    typo = (" I look", "encyclopedia", '{"topic": "Oxygn"}', "ERROR[encyclopedia]: no entry")
    assert held_step(run_prompt(question, typo), (encyclopedia, compute)) == Hold(HOLD_TEXT.format(name="atomic"))
    grammar = react_grammar((encyclopedia, compute), hold=Hold(HOLD_TEXT.format(name="oxygen"),
                                                               not_tools=frozenset({"compute"})))
    assert "tool0" in grammar.split("action ::=")[1].splitlines()[0]
    assert "tool1" not in grammar.split("action ::=")[1].splitlines()[0]


def test_one_thing_at_a_time_writes_strings_without_a_comma() -> None:
    one = react_grammar(INVENTORY, hold=Hold("", one_thing=True))
    assert r'one-char ::= [^"\\,\x00-\x1f]' in one and "json-string-1-80" not in one.split("tool0-args ::=")[1].splitlines()[0]
    assert "thought ::= [^\\n:]{1," in one  # no words of its own
    grounded = react_grammar(INVENTORY, grounded=frozenset({"3"}), hold=Hold("", one_thing=True))
    assert r'g-char-x ::= [^"\\0-9\x00-\x1f,]' in grounded


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
def test_a_call_of_one_thing_cannot_list_two_and_a_held_number_is_written(model: Any) -> None:
    one = react_grammar(INVENTORY, hold=Hold("", one_thing=True))
    assert model.grammar_accepts(one, ' I look up the washers\nAction: stock_level\nAction Input: {"item": "washer"}\n')
    assert not model.grammar_accepts(one, ' I look\nAction: stock_level\nAction Input: {"item": "washer, hinge"}\n')
    assert not model.grammar_accepts(one, " I know\nFinal Answer: 87\n")
    three = react_grammar((CONVERT,), grounded=frozenset({"2", "3"}), hold=Hold(HOLD_TEXT.format(name="3 mi"), number="3"))
    reason = HOLD_TEXT.format(name="3 mi")
    call = '\nAction: convert_length\nAction Input: {{"value": {v}, "from_unit": "mi", "to_unit": "m"}}\n'
    assert model.grammar_accepts(three, reason + call.format(v=3))
    assert not model.grammar_accepts(three, reason + call.format(v=2))


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
