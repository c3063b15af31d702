"""The parse boundary: every rule of parse_react_step, parse_plan, parse_tool_calls,
substitute and find_refs, the seeds' examples, and properties over untrusted text."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import loopwright.parsing.steps as parsing_module
from loopwright.errors import ParseError
from loopwright.parsing.steps import (
    FORMAT_HELP_BRACKETS,
    FORMAT_HELP_JSON,
    REF_PATTERN,
    TOOL_NAME_PATTERN,
    Action,
    FinalAnswer,
    PlanStep,
    _parse_react_general,
    find_refs,
    parse_plan,
    parse_react_step,
    parse_tool_calls,
    substitute,
)
from loopwright.policy import Completion, ToolCall

CANONICAL = 'Thought: I should look up France.\nAction: search\nAction Input: {"q": "france"}'


def error_of(text: Any) -> str:
    with pytest.raises(ParseError) as info:
        parse_react_step(text)
    return str(info.value)


# ------------------------------------------------------------ seeds' examples


def test_seed_react_step_parses_to_action() -> None:
    assert parse_react_step(CANONICAL) == Action("I should look up France.", "search", {"q": "france"})


def test_seed_final_answer_parses() -> None:
    step = parse_react_step("Thought: Now I can answer.\nFinal Answer: Paris")
    assert step == FinalAnswer("Now I can answer.", "Paris")


def test_seed_divide_example_keeps_json_types() -> None:
    step = parse_react_step('Action: divide\nAction Input: {"x": 10, "y": 0}')
    assert isinstance(step, Action) and step.args == {"x": 10, "y": 0}
    assert type(step.args["x"]) is int


def test_seed_bracket_dialect_action_and_finish() -> None:
    step = parse_react_step("Thought 1: I need the height.\nAction 1: lookup[Eiffel Tower]")
    assert step == Action("I need the height.", "lookup", {"input": "Eiffel Tower"})
    assert parse_react_step("Thought 4: done\nAction 4: finish[20]") == FinalAnswer("done", "20")


def test_seed_plan_parses_with_refs() -> None:
    plan = parse_plan(
        '{"plan": [\n  {"id": "E1", "tool": "search", "args": {"q": "france"}},\n'
        '  {"id": "E2", "tool": "word_count", "args": {"text": "#E1"}},\n'
        '  {"id": "E3", "tool": "multiply", "args": {"x": "#E2", "y": 2}}\n]}'
    )
    assert [s.id for s in plan] == ["E1", "E2", "E3"]
    assert [s.tool for s in plan] == ["search", "word_count", "multiply"]
    assert [s.refs for s in plan] == [frozenset(), {"E1"}, {"E2"}]
    assert plan[2].args == {"x": "#E2", "y": 2}


def test_seed_substitute_exact_reference_keeps_int() -> None:
    out = substitute({"x": "#E2", "y": 2}, {"E2": 8})
    assert out == {"x": 8, "y": 2} and type(out["x"]) is int


# ------------------------------------------------------------ ReAct: tolerance


@pytest.mark.parametrize(
    "text",
    [
        'Action: search\nAction Input: {"q": "france"}',  # missing Thought
        '   Thought:   I should look up France.  \n  Action:   search  \n'
        '  Action Input:   {"q": "france"}   \n\n',  # extra whitespace
        'THOUGHT: I should look up France.\nACTION: search\nACTION INPUT: {"q": "france"}',
        'thought: I should look up France.\naction: search\naction input: {"q": "france"}',
        '```\nThought: I should look up France.\nAction: search\nAction Input: {"q": "france"}\n```',
        'Thought: I should look up France.\nAction: search\nAction Input: ```json\n{"q": "france"}\n```',
        'Thought: I should look up France.\nAction: search\nAction Input:\n```json\n{"q": "france"}\n```',
        'Thought: I should look up France.\nAction: search\nAction Input: `{"q": "france"}`',
        'Thought: I should look up France.\nAction: search\nAction Input: {\n  "q":\n    "france"\n}',
        'Thought: I should look up France.\nAction: search\nAction Input: {"q": "france"} I hope.',
        'Thought: I should look up France.\nAction: search\nAction Input: {"q": "france"}}',
        'Thought: I should look up France.\nAction: search\nAction Input: {"q": "france"',
        'Thought: I should look up France.\nAction: search\n{"q": "france"}',
        'Thought: I should look up France.\nAction: search {"q": "france"}',
        '**Thought:** I should look up France.\n**Action:** search\n**Action Input:** {"q": "france"}',
        'Thought: I should look up France.\nAction: `search`\nAction Input: {"q": "france"}',
        'Thought: I should look up France. Action: search\nAction Input: {"q": "france"}',
    ],
)
def test_cosmetic_variations_parse_to_the_canonical_action(text: str) -> None:
    step = parse_react_step(text)
    assert isinstance(step, Action)
    assert (step.name, step.args) == ("search", {"q": "france"})
    assert step.thought in ("", "I should look up France.")


def test_opening_brace_cut_short_is_not_an_empty_call() -> None:
    assert "not valid JSON" in error_of("Action: now\nAction Input: {")
    assert "not valid JSON" in error_of("Action: now\nAction Input: {\n")


def test_entities_are_decoded_once() -> None:
    step = parse_react_step('Action: a\nAction Input: {&quot;q&quot;: "&amp;quot;"')
    assert isinstance(step, Action) and step.args == {"q": "&quot;"}


def test_every_repair_of_the_arguments_is_recorded_on_the_action() -> None:
    cut = parse_react_step('Thought: buy\nAction: buy\nAction Input: {"item": "tea", "cents": 31')
    assert isinstance(cut, Action) and cut.args == {"item": "tea", "cents": 31}
    assert cut.repaired == ("added a missing closing '}': the arguments may have been cut short",)
    entities = parse_react_step("Action: search\nAction Input: {&quot;q&quot;: &quot;x&quot;}")
    assert isinstance(entities, Action) and entities.repaired == ("decoded HTML entities in the JSON syntax",)
    both = parse_react_step('Action: a\nAction Input: {&quot;q&quot;: "&amp;quot;"')
    assert isinstance(both, Action) and len(both.repaired) == 2
    for clean in ('Thought: t\nAction: buy\nAction Input: {"item": "tea", "cents": 31}',  # the fast path
                  'Action: search\nAction Input: ```json\n{"q": "it&#39;s"}\n```\nmore text',
                  "Action: lookup[it&#39;s]"):
        step = parse_react_step(clean)
        assert isinstance(step, Action) and step.repaired == (), clean
    [native] = parse_tool_calls([ToolCall("buy", '{"item": "tea", "cents": 31', id="c1")])
    assert native.args == {"item": "tea", "cents": 31} and native.repaired == cut.repaired
    [whole] = parse_tool_calls([ToolCall("buy", '{"item": "tea"}', id="c2")])
    assert whole.repaired == ()


def test_only_first_line_of_action_name_is_the_name() -> None:
    step = parse_react_step('Action: search\nto find it\nAction Input: {"q": 1}')
    assert isinstance(step, Action) and step.name == "search"


def test_thought_without_anchor_is_the_text_before_the_first_anchor() -> None:
    step = parse_react_step(' I need the capital.\nAction: search\nAction Input: {"q": "x"}')
    assert isinstance(step, Action) and step.thought == "I need the capital."


def test_raw_newline_inside_json_string_is_kept() -> None:
    step = parse_react_step('Action: write\nAction Input: {"text": "line one\nline two"}')
    assert isinstance(step, Action) and step.args == {"text": "line one\nline two"}


def test_html_entities_in_argument_values_are_decoded() -> None:
    step = parse_react_step('Action: search\nAction Input: {"q": "it&#39;s &quot;big&quot;"}')
    assert isinstance(step, Action) and step.args == {"q": 'it\'s "big"'}


def test_html_entities_around_json_syntax_are_decoded_when_raw_json_fails() -> None:
    step = parse_react_step("Action: search\nAction Input: {&quot;q&quot;: &quot;x&quot;}")
    assert isinstance(step, Action) and step.args == {"q": "x"}


def test_incomplete_entity_without_semicolon_is_left_alone() -> None:
    # html.unescape would turn "&not" into "¬"; arguments keep it.
    step = parse_react_step('Action: search\nAction Input: {"q": "a&notb &amp"}')
    assert isinstance(step, Action) and step.args == {"q": "a&notb &amp"}


def test_entities_in_bracket_argument_are_decoded() -> None:
    assert parse_react_step("Action: lookup[it&#39;s]") == Action("", "lookup", {"input": "it's"})


def test_final_answer_spanning_lines_is_stripped() -> None:
    step = parse_react_step("Thought: done\nFinal Answer:\n  Paris is the capital.\n  It is large.\n\n")
    assert step == FinalAnswer("done", "Paris is the capital.\n  It is large.")


def test_final_answer_mid_line_after_sentence_is_found() -> None:
    assert parse_react_step("Thought: I know it. Final Answer: 42") == FinalAnswer("I know it.", "42")


def test_anchor_words_inside_a_sentence_are_not_anchors() -> None:
    text = "I cannot give the final answer: yet\nAction: search\nAction Input: {}"
    assert parse_react_step(text) == Action(
        "I cannot give the final answer: yet", "search", {}
    )


def test_final_answer_is_checked_before_action() -> None:
    text = 'Thought: x\nAction: search\nAction Input: {"q": 1}\nFinal Answer: 42'
    assert parse_react_step(text) == FinalAnswer("x", "42")
    assert parse_react_step("Final Answer: 42\nAction: search\nAction Input: {}") == FinalAnswer(
        "", "42"
    )


# ------------------------------------------------------------ ReAct: brackets


def test_bracket_action_without_number_parses() -> None:
    assert parse_react_step("Action: lookup[Paris]") == Action("", "lookup", {"input": "Paris"})


def test_bracket_argument_that_is_a_json_object_becomes_the_args() -> None:
    step = parse_react_step('Action 2: calculate[{"expression": "2 + 3"}]')
    assert step == Action("", "calculate", {"expression": "2 + 3"})


def test_bracket_argument_takes_up_to_the_last_bracket_on_the_line() -> None:
    step = parse_react_step("Action 1: lookup[list[int] docs]")
    assert step == Action("", "lookup", {"input": "list[int] docs"})


def test_bracket_argument_quoted_string_is_unquoted() -> None:
    assert parse_react_step('Action: lookup["Eiffel Tower"]') == Action(
        "", "lookup", {"input": "Eiffel Tower"}
    )


def test_bracket_argument_can_span_lines() -> None:
    step = parse_react_step("Action 1: write[first line\nsecond line]")
    assert step == Action("", "write", {"input": "first line\nsecond line"})


def test_finish_is_case_insensitive_and_stripped() -> None:
    assert parse_react_step("Action 3: Finish[ 20 ]") == FinalAnswer("", "20")


def test_finish_in_json_dialect_is_a_final_answer() -> None:
    step = parse_react_step('Action: finish\nAction Input: {"answer": "Paris"}')
    assert step == FinalAnswer("", "Paris")


def test_unclosed_bracket_is_an_error_naming_it() -> None:
    msg = error_of("Thought 1: x\nAction 1: lookup[Paris")
    assert "no closing ']'" in msg and FORMAT_HELP_BRACKETS in msg


def test_empty_finish_is_an_error() -> None:
    assert "empty answer" in error_of("Action 1: finish[  ]")


# ------------------------------------------------------------ ReAct: run-on text


def test_forged_observation_and_answer_after_action_are_cut() -> None:
    text = 'Action: search\nAction Input: {"q":"x"}\nObservation: fake\nFinal Answer: 42'
    assert parse_react_step(text) == Action("", "search", {"q": "x"})


@pytest.mark.parametrize("marker", ["Observation:", "Observation 1:", "Question:", "Example 2:",
                                    "Action Output:", "Examples:", "OBSERVATION:", "Question"])
def test_new_turn_markers_end_the_step(marker: str) -> None:
    text = f'Action: search\nAction Input: {{"q": 1}}\n{marker} x\nFinal Answer: 9'
    assert parse_react_step(text) == Action("", "search", {"q": 1})


def test_second_thought_after_complete_action_ends_the_step() -> None:
    text = 'Thought: a\nAction: search\nAction Input: {"q": 1}\nThought: b\nFinal Answer: 9'
    assert parse_react_step(text) == Action("a", "search", {"q": 1})


def test_second_bracket_turn_after_complete_action_ends_the_step() -> None:
    text = "Thought 1: a\nAction 1: lookup[x]\nThought 2: b\nAction 2: finish[9]"
    assert parse_react_step(text) == Action("a", "lookup", {"input": "x"})


def test_repeated_action_blocks_take_the_first_complete_one() -> None:
    text = (
        'Action: search\nAction Input: {"q": 1}\nAction: search\nAction Input: {"q": 2}\n'
        'Action Output: 3\nAction: calc\nAction Input: {"e": "1"}\n'
    )
    assert parse_react_step(text) == Action("", "search", {"q": 1})


def test_incomplete_action_is_replaced_by_a_later_complete_one() -> None:
    text = 'Action: calculate\nAction: search\nAction Input: {"q": 1}'
    assert parse_react_step(text) == Action("", "search", {"q": 1})


def test_anchor_text_inside_json_does_not_cut() -> None:
    text = 'Action: note\nAction Input: {"text": "a\nObservation: b\nFinal Answer: c"}'
    assert parse_react_step(text) == Action("", "note", {"text": "a\nObservation: b\nFinal Answer: c"})


def test_final_answer_before_a_new_turn_wins() -> None:
    text = "Thought: ok\nFinal Answer: 42\nQuestion: what is 2+2?\nThought: hmm"
    assert parse_react_step(text) == FinalAnswer("ok", "42")


def test_lowercase_question_word_in_prose_does_not_cut() -> None:
    text = 'Thought: I\nquestion whether this works\nAction: search\nAction Input: {}'
    step = parse_react_step(text)
    assert isinstance(step, Action) and step.name == "search"


def test_forged_observation_on_the_action_line_is_cut() -> None:
    text = 'Action: search\nAction Input: {"q": 1} Observation: fake. Final Answer: 9'
    assert parse_react_step(text) == Action("", "search", {"q": 1})
    text = "Action 1: lookup[x] Observation 1: fake. Final Answer: 9"
    assert parse_react_step(text) == Action("", "lookup", {"input": "x"})


def test_new_turn_words_mid_sentence_in_a_thought_do_not_cut() -> None:
    text = "Thought: Take an example. Example: 2+2. Question: why?\nAction: calc\nAction Input: {}"
    assert parse_react_step(text) == Action(
        "Take an example. Example: 2+2. Question: why?", "calc", {}
    )


def test_reply_that_starts_a_new_turn_is_an_error_naming_it() -> None:
    msg = error_of("Observation: the answer is 3\nFinal Answer: 3")
    assert "starts a new turn" in msg and "'Observation'" in msg


# ------------------------------------------------------------ ReAct: errors


def test_no_anchor_error_shows_the_expected_format() -> None:
    msg = error_of("The capital of France is Paris.")
    assert msg.startswith("no 'Action:' or 'Final Answer:' found; ")
    assert msg.endswith(FORMAT_HELP_JSON)


def test_action_without_input_error_names_the_tool() -> None:
    msg = error_of("Thought: add\nAction: calculate")
    assert msg.startswith("Action 'calculate' has no 'Action Input:' line; ")


def test_invalid_json_error_gives_decoder_message_and_position() -> None:
    msg = error_of('Action: calc\nAction Input: {"x": 1 "y": 2}')
    assert msg.startswith("Action Input is not valid JSON: Expecting ',' delimiter (line 1 column 9); ")


def test_invalid_json_position_counts_lines_from_the_input() -> None:
    msg = error_of('Thought: t\nAction: calc\nAction Input: {\n"x": 1,\n"y" 2}')
    assert "(line 3 column 5)" in msg


@pytest.mark.parametrize(("raw", "kind"), [("[1, 2]", "list"), ('"text"', "string"),
                                           ("42", "number"), ("null", "null"), ("true", "boolean")])
def test_non_object_input_error_names_the_json_type(raw: str, kind: str) -> None:
    msg = error_of(f"Action: calc\nAction Input: {raw}")
    assert msg.startswith(f"Action Input must be a JSON object, got {kind}; ")


def test_empty_action_name_is_an_error() -> None:
    assert "empty Action name" in error_of("Action:\nAction Input: {}")
    assert "empty Action name" in error_of("Action: []")


def test_numeric_action_name_is_rejected_as_a_number() -> None:
    assert "'1889' is a number, not a tool name" in error_of("Action: 1889\nAction Input: {}")


def test_any_name_the_registry_accepts_parses_unless_it_is_a_bare_number() -> None:
    for name in ["3d_render", "-dash", "v1.search", "a" * 64]:
        assert parse_react_step(f"Action: {name}\nAction Input: {{}}") == Action("", name, {})
    assert "is a number" in error_of("Action: 3.5\nAction Input: {}")


@pytest.mark.parametrize("name", ["search the web", "search(q=1)", "x" * 65, "naïve"])
def test_names_outside_the_tool_charset_are_rejected(name: str) -> None:
    assert "is not a tool name" in error_of(f"Action: {name}\nAction Input: {{}}")


@pytest.mark.parametrize("name", ["_private", "web.search", "get-page", "a" * 64, "Tool9"])
def test_names_inside_the_tool_charset_are_accepted(name: str) -> None:
    step = parse_react_step(f"Action: {name}\nAction Input: {{}}")
    assert isinstance(step, Action) and step.name == name


def test_empty_action_input_error_suggests_empty_object() -> None:
    assert "use {} for a tool that takes no arguments" in error_of("Action: now\nAction Input:   ")


def test_input_without_action_is_an_error() -> None:
    assert "without an 'Action:' line" in error_of('Action Input: {"q": 1}')


def test_empty_final_answer_is_an_error() -> None:
    assert error_of("Thought: x\nFinal Answer:   ").startswith("Final Answer is empty; ")


def test_bracket_dialect_errors_show_the_bracket_format() -> None:
    assert error_of("Thought 1: hmm\nAction 1: 1889[3]").endswith(FORMAT_HELP_BRACKETS)


def test_dialect_keyword_chooses_the_format_help() -> None:
    with pytest.raises(ParseError, match=r"\[<argument>\]"):
        parse_react_step("just words", dialect="brackets")


@pytest.mark.parametrize("value", [None, 42, b"Action: x", ["Action: x"]])
def test_non_str_input_is_a_parse_error(value: Any) -> None:
    assert "expected the model's text (str)" in error_of(value)


def test_parse_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_react_step("nothing here")


def test_deeply_nested_input_is_a_parse_error() -> None:
    error_of("Action: x\nAction Input: {\"a\": " + "[" * 100_000)
    error_of("Action: x\nAction Input: " + "[" * 100_000 + "]" * 100_000)


def test_huge_integer_input_is_a_parse_error() -> None:
    assert "not valid JSON" in error_of('Action: x\nAction Input: {"n": ' + "1" * 5000 + "}")


# ------------------------------------------------------------ ReAct: properties

ANCHORS = ["Thought:", "Thought 1:", "Action:", "Action 2:", "Action Input:", "action input:",
           "Final Answer:", "Observation:", "Question:", "Example:", "Action Output:",
           "finish[", "lookup[", "search", "1889", "```json", "```", "**", "\n", " ", ". "]
FRAGMENTS = ["{", "}", "[", "]", '"q"', ":", ",", '"x', "1e999", "NaN", "[[[[", "&quot;",
             "&#39;", "&amp", "#E1", "\\", '\\"', "null", "{}", '{"q": 1}', "\t", "\r\n"]

near_miss = st.lists(
    st.one_of(st.sampled_from(ANCHORS), st.sampled_from(FRAGMENTS), st.text(max_size=6)),
    max_size=30,
).map("".join)


def check_react_outcome(text: str) -> None:
    try:
        step = parse_react_step(text)
    except ParseError as err:
        assert 0 < len(str(err)) < 300, str(err)
        return
    if isinstance(step, Action):
        assert TOOL_NAME_PATTERN.fullmatch(step.name)
        assert isinstance(step.args, dict) and isinstance(step.thought, str)
        assert all(isinstance(k, str) for k in step.args)
    else:
        assert isinstance(step, FinalAnswer)
        assert step.answer == step.answer.strip() and step.answer
        assert isinstance(step.thought, str)


@settings(max_examples=400)
@given(st.text())
def test_any_text_gives_a_step_or_parse_error(text: str) -> None:
    check_react_outcome(text)


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(near_miss)
@example("Action: x\nAction Input: " + "[" * 5000)
@example("Action 1: lookup[" + "]" * 50)
@example("```\n```json\nFinal Answer: ```")
def test_near_miss_text_gives_a_step_or_parse_error(text: str) -> None:
    check_react_outcome(text)


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10),
                         st.floats(allow_nan=False))
json_objects = st.dictionaries(st.text(max_size=6), st.one_of(
    json_scalars, st.lists(json_scalars, max_size=3)), max_size=4)


one_line = st.text(alphabet=st.characters(blacklist_characters="\n\r:\x0b\x0c\x1c\x1d\x1e"
                                          "\x85\u2028\u2029"), max_size=30)
one_line_or_fence = st.one_of(one_line, st.sampled_from(["```", "```json", " ``` ", "`x`"]))


def assert_fast_path_agrees(text: str) -> None:
    """parse_react_step (fast path first) gives what the general parser alone gives: the
    same Action or FinalAnswer, or the same error message."""
    try:
        general: Any = _parse_react_general(text, None)
    except Exception as err:  # the internal error type; parse_react_step re-raises its text
        general = str(err)
    try:
        fast: Any = parse_react_step(text)
    except ParseError as err:
        fast = str(err)
    assert fast == general


# how models decorate the anchors: markdown right after the colon, or none of it
anchor_heads = st.sampled_from(["", "Thought:", "Thought: ", "Thought:** ", "Thought:_ ", "Thought:**"])
colon_tails = st.sampled_from([" ", "", "** ", "_ ", "**", "__"])


@settings(max_examples=300)
@given(
    thought=one_line_or_fence,
    name=st.from_regex(TOOL_NAME_PATTERN, fullmatch=True),
    args=json_objects,
    head=anchor_heads,
    after_action=colon_tails,
)
@example(thought="```", name="add", args={"x": 1}, head="", after_action=" ")
@example(thought="x", name="add", args={"x": 1}, head="Thought:** ", after_action=" ")
@example(thought="x", name="add", args={"x": 1}, head="Thought: ", after_action="_ ")
def test_fast_path_agrees_with_general_parser(
    thought: str, name: str, args: dict[str, Any], head: str, after_action: str
) -> None:
    text = f"{head}{thought}\nAction:{after_action}{name}\nAction Input: {json.dumps(args)}"
    assert_fast_path_agrees(text)


@settings(max_examples=300)
@given(
    thought=one_line_or_fence,
    answer=st.one_of(one_line, st.sampled_from(["", "  ", "a: b", "```", "42. Observation"])),
    head=anchor_heads,
    after_colon=colon_tails,
    tail=st.sampled_from(["", "\n", "\n\n  ", " "]),
)
@example(thought="```", answer="3", head="", after_colon=" ", tail="")
@example(thought="x", answer="3", head="Thought: ", after_colon="** ", tail="")
def test_final_answer_fast_path_agrees_with_general_parser(
    thought: str, answer: str, head: str, after_colon: str, tail: str
) -> None:
    text = f"{head}{thought}\nFinal Answer:{after_colon}{answer}{tail}"
    assert_fast_path_agrees(text)


def test_canonical_final_answer_takes_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def general_path(*args: Any) -> None:
        raise AssertionError("took the general path")

    monkeypatch.setattr(parsing_module, "_parse_react_general", general_path)
    assert parse_react_step("Thought: done\nFinal Answer: 50\n") == FinalAnswer("done", "50")
    assert parse_react_step("Final Answer: 50") == FinalAnswer("", "50")


@settings(max_examples=200)
@given(name=st.from_regex(TOOL_NAME_PATTERN, fullmatch=True), args=json_objects)
def test_any_tool_name_and_object_round_trip(name: str, args: dict[str, Any]) -> None:
    # HTML entities in argument values are decoded on purpose (a measured model habit),
    # so values that contain one do not round-trip; everything else must.
    assume(re.search(r"&#?\w+;", json.dumps(args)) is None)
    step = parse_react_step(f"Thought: t\nAction: {name}\nAction Input: {json.dumps(args)}")
    if name.lower() == "finish":
        return
    assert step == Action("t", name, json.loads(json.dumps(args)))


# ------------------------------------------------------------ speed


@pytest.mark.parametrize("text", [
    CANONICAL,
    ' I should look up France.\nAction: search\nAction Input: {"q": "it&#39;s"}\n',
    "\n  Thought: t\nAction: web.search-2\nAction Input: {}",
])
def test_canonical_steps_take_the_fast_path(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def general_path(*args: Any) -> None:
        raise AssertionError("took the general path")

    monkeypatch.setattr(parsing_module, "_parse_react_general", general_path)
    assert isinstance(parse_react_step(text), Action)


# ------------------------------------------------------------ plans


def plan_error(text: Any) -> str:
    with pytest.raises(ParseError) as info:
        parse_plan(text)
    return str(info.value)


def test_bare_list_plan_is_accepted() -> None:
    plan = parse_plan('[{"id": "E1", "tool": "search", "args": {"q": "x"}}]')
    assert plan == [PlanStep("E1", "search", {"q": "x"})]


def test_plan_in_fence_with_prose_is_found() -> None:
    text = (
        "Here is my plan [draft]:\n```json\n"
        '{"plan": [{"id": "E1", "tool": "search", "args": {"q": "x"}},\n'
        '          {"id": "E2", "tool": "count", "args": {"text": "#E1"}}]}\n```\nDone.'
    )
    assert [s.id for s in parse_plan(text)] == ["E1", "E2"]


def test_plan_skips_earlier_json_that_is_not_a_plan() -> None:
    text = 'Steps [1] and {"note": 1} then {"plan": [{"id": "E1", "tool": "t", "args": {}}]}'
    assert parse_plan(text) == [PlanStep("E1", "t", {})]


def test_plan_missing_args_defaults_to_empty_object() -> None:
    assert parse_plan('{"plan": [{"id": "E1", "tool": "now"}]}') == [PlanStep("E1", "now", {})]


def test_plan_with_truncated_wrapper_still_reads_the_step_list() -> None:
    text = '{"plan": [{"id": "E1", "tool": "t", "args": {}}]'
    assert parse_plan(text) == [PlanStep("E1", "t", {})]


def test_plan_nested_references_are_checked() -> None:
    plan = parse_plan(
        '{"plan": [{"id": "E1", "tool": "a", "args": {}},'
        '{"id": "E2", "tool": "b", "args": {"xs": [{"v": "see #E1"}]}}]}'
    )
    assert plan[1].refs == {"E1"}
    msg = plan_error(
        '{"plan": [{"id": "E1", "tool": "a", "args": {"deep": {"list": ["#E2"]}}},'
        '{"id": "E2", "tool": "b", "args": {}}]}'
    )
    assert "step E1 references #E2, which comes later" in msg


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("I will search for it.", "no JSON plan found"),
        ("{plan: [}", "plan is not valid JSON"),
        ('{"steps": []}', "no 'plan' key"),
        ('{"plan": {"id": "E1"}}', "'plan' must be a list of steps, got dict"),
        ('{"plan": []}', "plan is empty"),
        ('{"plan": ["search"]}', "step 1 is not an object"),
        ('{"plan": [{"tool": "t", "args": {}}]}', "step 1 has no string 'id'"),
        ('{"plan": [{"id": 1, "tool": "t", "args": {}}]}', "step 1 has no string 'id'"),
        ('{"plan": [{"id": "step1", "tool": "t", "args": {}}]}', "is not of the form E1"),
        ('{"plan": [{"id": "E1", "args": {}}]}', "step E1 has no string 'tool'"),
        ('{"plan": [{"id": "E1", "tool": 5, "args": {}}]}', "step E1 has no string 'tool'"),
        ('{"plan": [{"id": "E1", "tool": "1889", "args": {}}]}', "is not a tool name"),
        ('{"plan": [{"id": "E1", "tool": "t", "args": [1]}]}', "'args' must be an object, got list"),
        ('{"plan": [{"id": "E1", "tool": "t", "args": {}}, {"id": "E1", "tool": "t"}]}',
         "step E1: duplicate id"),
        ('{"plan": [{"id": "E1", "tool": "t", "args": {"x": "#E2"}},'
         ' {"id": "E2", "tool": "t", "args": {}}]}', "step E1 references #E2, which comes later"),
        ('{"plan": [{"id": "E1", "tool": "t", "args": {"x": "#E9"}}]}',
         "step E1 references #E9, which no step defines"),
        ('{"plan": [{"id": "E1", "tool": "t", "args": {"x": "#E1"}}]}',
         "step E1 references itself"),
    ],
)
def test_plan_rejections_name_the_problem(text: str, phrase: str) -> None:
    msg = plan_error(text)
    assert phrase in msg, msg
    assert '{"plan": [{"id": "E1"' in msg  # the expected format is shown
    assert len(msg) < 300


def test_plan_non_str_is_a_parse_error() -> None:
    assert "expected the planner's text" in plan_error({"plan": []})


plan_fragments = ['{"plan": [', "]}", "{", "}", "[", "]", '"id": "E1"', '"id": "E2"',
                  '"tool": "t"', '"args": {', '"#E1"', '"#E2"', '"#E9"', ",", ":", "```json",
                  "\n", "null", '"x"', "[[[[[[", "1e999"]


@settings(max_examples=1000, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(), st.lists(st.one_of(st.sampled_from(plan_fragments),
                                               st.text(max_size=4)), max_size=40).map("".join)))
@example('{"plan": [{"id": "E1", "tool": "t", "args": ' + "[" * 3000 + "]" * 3000 + "}]}")
def test_any_text_gives_a_valid_plan_or_parse_error(text: str) -> None:
    try:
        plan = parse_plan(text)
    except ParseError as err:
        assert len(str(err)) < 300
        return
    seen: set[str] = set()
    assert plan
    for step in plan:
        assert step.id not in seen and step.refs <= seen
        assert TOOL_NAME_PATTERN.fullmatch(step.tool) and isinstance(step.args, dict)
        seen.add(step.id)


# ------------------------------------------------------------ native tool calls


def test_tool_calls_from_dict_message() -> None:
    message = {
        "role": "assistant",
        "content": "Looking it up.",
        "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "search", "arguments": '{"q": "france"}'}},
            {"id": "call_2", "type": "function",
             "function": {"name": "now", "arguments": ""}},
        ],
    }
    assert parse_tool_calls(message) == [
        Action("Looking it up.", "search", {"q": "france"}, call_id="call_1"),
        Action("Looking it up.", "now", {}, call_id="call_2"),
    ]


def test_tool_calls_from_sdk_object_via_getattr() -> None:
    message = SimpleNamespace(content=None, tool_calls=[SimpleNamespace(
        id="c9", type="function",
        function=SimpleNamespace(name="search", arguments='{"q": "it&#39;s"}'))])
    assert parse_tool_calls(message) == [Action("", "search", {"q": "it's"}, call_id="c9")]


def test_tool_calls_from_real_openai_sdk_message() -> None:
    chat = pytest.importorskip("openai.types.chat")
    message = chat.ChatCompletionMessage.model_validate({
        "role": "assistant", "content": None,
        "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "calc", "arguments": '{"e": "1 +\n 2"}'}}],
    })
    assert parse_tool_calls(message) == [Action("", "calc", {"e": "1 +\n 2"}, call_id="c1")]


def test_tool_calls_from_toolcall_sequence_and_completion() -> None:
    calls = (ToolCall("search", '{"q": 1}', "a"), ToolCall("now", "  "))
    expected = [Action("", "search", {"q": 1}, call_id="a"), Action("", "now", {}, call_id=None)]
    assert parse_tool_calls(list(calls)) == expected
    done = parse_tool_calls(Completion("thinking", tool_calls=calls))
    assert [a.thought for a in done] == ["thinking", "thinking"]


def test_tool_call_arguments_tolerate_newlines_entities_and_dicts() -> None:
    message = {"tool_calls": [
        {"function": {"name": "write", "arguments": '{"text": "a\nb &quot;c&quot;"}'}},
        {"function": {"name": "write", "arguments": {"text": "d&amp;e"}}},
        {"function": {"name": "write", "arguments": "```json\n{\"text\": 1}\n```"}},
        {"function": {"name": "write", "arguments": None}},
    ]}
    assert [a.args for a in parse_tool_calls(message)] == [
        {"text": 'a\nb "c"'}, {"text": "d&e"}, {"text": 1}, {}]


def test_message_without_tool_calls_gives_no_actions() -> None:
    assert parse_tool_calls({"role": "assistant", "content": "Paris"}) == []
    assert parse_tool_calls(SimpleNamespace(content="Paris", tool_calls=None)) == []


@pytest.mark.parametrize(
    ("message", "phrase"),
    [
        ({"tool_calls": [{"function": {"name": "a", "arguments": "[1]"}}]}, "must be a JSON object, got list"),
        ({"tool_calls": [{"function": {"name": "a", "arguments": "{bad"}}]}, "not valid JSON"),
        ({"tool_calls": [{"function": {"name": "a", "arguments": 5}}]}, "must be a JSON object string"),
        ({"tool_calls": [{"function": {"name": "", "arguments": "{}"}}]}, "has no function name"),
        ({"tool_calls": [{"function": {"name": "1889", "arguments": "{}"}}]}, "not a tool name"),
        ({"tool_calls": [{"type": "code", "function": {"name": "a"}}]}, "only 'function' calls"),
        ({"tool_calls": ["search"]}, "is not a call object"),
        ({"tool_calls": "search"}, "tool_calls must be a list"),
        ("Action: search", "expected a message with tool calls"),
        (None, "expected a message with tool calls"),
        (42, "expected a message with tool calls"),
    ],
)
def test_malformed_tool_calls_raise_parse_error(message: Any, phrase: str) -> None:
    with pytest.raises(ParseError, match=phrase.replace("[", r"\[")):
        parse_tool_calls(message)


# ------------------------------------------------------------ substitute / find_refs


def test_substitute_exact_reference_passes_value_with_its_type() -> None:
    evidence = {"E1": [1, 2], "E2": {"k": "v"}, "E3": None, "E4": 2.5}
    out = substitute({"a": "#E1", "b": "#E2", "c": "#E3", "d": "#E4"}, evidence)
    assert out == {"a": [1, 2], "b": {"k": "v"}, "c": None, "d": 2.5}
    assert out["a"] is evidence["E1"]


def test_substitute_embedded_reference_interpolates_text() -> None:
    evidence = {"E1": 8, "E2": "Paris", "E3": {"k": [1]}, "E4": [1, "a"]}
    out = substitute({"s": "n=#E1 in #E2; d=#E3 l=#E4"}, evidence)
    assert out == {"s": 'n=8 in Paris; d={"k": [1]} l=[1, "a"]'}


def test_substitute_recurses_into_nested_values_but_not_keys() -> None:
    args = {"#E1": {"inner": ["#E1", {"deep": "x #E1"}]}, "t": ("#E1",)}
    out = substitute(args, {"E1": 3})
    assert out == {"#E1": {"inner": [3, {"deep": "x 3"}]}, "t": (3,)}


def test_substitute_does_not_mutate_its_input() -> None:
    args = {"a": ["#E1"], "b": {"c": "#E1"}}
    snapshot = json.dumps(args)
    substitute(args, {"E1": 1})
    assert json.dumps(args) == snapshot


@pytest.mark.parametrize("args", [{"x": "#E9"}, {"x": "see #E9"}, {"x": [{"y": "#E9"}]}])
def test_substitute_unresolved_reference_raises_value_error(args: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"^unresolved reference #E9$"):
        substitute(args, {"E1": 1})


def test_substitute_distinguishes_e1_from_e12() -> None:
    assert substitute({"x": "#E12 #E1"}, {"E1": "a", "E12": "b"}) == {"x": "b a"}


def test_substitute_leaves_non_reference_values_alone() -> None:
    args = {"n": 5, "f": True, "s": "# not a ref E1", "none": None}
    assert substitute(args, {}) == args


def test_find_refs_collects_nested_ids_and_ignores_keys() -> None:
    value = {"#E7": "x", "a": ["#E1", {"b": "#E2 and #E12"}], "c": ("#E3",), "d": 5}
    assert find_refs(value) == {"E1", "E2", "E12", "E3"}
    assert find_refs("plain") == frozenset() and find_refs(None) == frozenset()


def test_ref_pattern_captures_the_id() -> None:
    assert REF_PATTERN.findall("#E1, #E23 and #e4 and E5") == ["E1", "E23"]


@given(st.recursive(json_scalars | st.sampled_from(["#E1", "x #E2 y", "#E3"]),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=15))
def test_substitute_resolves_every_found_reference(value: Any) -> None:
    args = {"v": value}
    evidence = {ref: f"<{ref}>" for ref in find_refs(args)}
    out = substitute(args, evidence)
    assert find_refs(out) == frozenset()
