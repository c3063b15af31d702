"""A corpus of what the embedded local model (SmolLM2-135M) actually emits, one group per
behaviour in shared/notes/local-model.md. Each case is the text and what the parse
boundary must make of it: the intended Action / FinalAnswer, or a ParseError whose
message carries the hint the model needs to fix its next reply.

The prompts end in "Thought:", so most replies begin with the thought's text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

import loopwright as lw
from loopwright.errors import ParseError
from loopwright.parsing.steps import (
    FORMAT_HELP_BRACKETS,
    FORMAT_HELP_JSON,
    Action,
    FinalAnswer,
    parse_react_step,
    parse_tool_calls,
)


@dataclass(frozen=True)
class Err:
    """Expect a ParseError whose message contains every phrase."""

    phrases: tuple[str, ...]

    def __init__(self, *phrases: str) -> None:
        object.__setattr__(self, "phrases", phrases)


Expected = Action | FinalAnswer | Err

# (behaviour, model text, expected)
CORPUS: list[tuple[str, str, Expected]] = [
    # 1. run-on transcripts that invent new Question: / Example: blocks after the action
    (
        "1-runon-question",
        ' I need to find the capital of France.\nAction: search\nAction Input: {"query": '
        '"capital of France"}\nQuestion: What is the capital of Germany?\nThought: I need to '
        'find the capital of Germany.\nAction: search\nAction Input: {"query": "Germany"}',
        Action("I need to find the capital of France.", "search", {"query": "capital of France"}),
    ),
    (
        "1-runon-example",
        ' I should use the calculator.\nAction: calculate\nAction Input: {"expression": "17 * 23"}'
        '\n\nExample 2:\nQuestion: How old is the Eiffel Tower?\nThought: I should look it up.\n'
        "Action: lookup\nFinal Answer: 134 years",
        Action("I should use the calculator.", "calculate", {"expression": "17 * 23"}),
    ),
    (
        "1-runon-forged-observation-and-answer",
        ' Let me search.\nAction: search\nAction Input: {"query": "Lyon population"}\n'
        "Observation: Lyon has 516,092 inhabitants.\nThought: I now know the answer.\n"
        "Final Answer: 516,092",
        Action("Let me search.", "search", {"query": "Lyon population"}),
    ),
    (
        "1-runon-brackets-dialect",
        " I need to look up the tower.\nAction 1: lookup[Eiffel Tower]\nObservation 1: The "
        "Eiffel Tower is 330 m tall.\nThought 2: So the answer is 330.\nAction 2: finish[330]",
        Action("I need to look up the tower.", "lookup", {"input": "Eiffel Tower"}),
    ),
    (
        "1-runon-starts-with-question",
        "\nQuestion: What is the population of Nice?\nThought: I need to search.\n"
        'Action: search\nAction Input: {"query": "Nice"}',
        Err("starts a new turn", "'Question'", "Final Answer:"),
    ),
    (
        "1-answer-then-new-question",
        " The capital of France is Paris.\nFinal Answer: Paris\n\nQuestion: What is the capital "
        "of Italy?\nThought: The capital of Italy is Rome.\nFinal Answer: Rome",
        FinalAnswer("The capital of France is Paris.", "Paris"),
    ),
    # 2. non-tool actions, empty Action: lines
    (
        "2-numeric-action",
        " The year the tower was built.\nAction: 1889\nAction Input: {}",
        Err("'1889' is a number, not a tool name", "Action: <tool>"),
    ),
    (
        "2-numeric-action-no-input",
        " The answer is a year.\nAction: 1889",
        Err("'1889' is a number, not a tool name"),
    ),
    (
        "2-empty-action",
        ' I will look it up.\nAction:\nAction Input: {"query": "Eiffel Tower"}',
        Err("empty Action name", "Action: <tool>"),
    ),
    (
        "2-empty-action-then-real-one",
        " I will look it up.\nAction:\nAction: lookup\nAction Input: {\"topic\": \"Eiffel Tower\"}",
        Action("I will look it up.", "lookup", {"topic": "Eiffel Tower"}),
    ),
    (
        "2-sentence-as-action",
        " I will search.\nAction: Search for the population of Paris\nAction Input: {}",
        Err("is not a tool name", "starts with a letter"),
    ),
    # 3. Action / Action Input / Action Output repeated until the token limit
    (
        "3-repeated-blocks",
        ' I need to calculate.\nAction: calculate\nAction Input: {"expression": "2 + 2"}\n'
        'Action Output: 4\nAction: calculate\nAction Input: {"expression": "2 + 2"}\n'
        'Action Output: 4\nAction: calculate\nAction Input: {"expression": "2 + 2"}\n'
        "Action Output: 4\nAction: calculate\nAction Input: {\"expre",
        Action("I need to calculate.", "calculate", {"expression": "2 + 2"}),
    ),
    (
        "3-repeated-without-output",
        ' search it\nAction: search\nAction Input: {"query": "Nice"}\nAction: search\n'
        'Action Input: {"query": "Nice"}\nAction: search\nAction Input: {"query": "Nice"}\n'
        "Action: sea",
        Action("search it", "search", {"query": "Nice"}),
    ),
    (
        "3-repeated-names-only",
        " I will use a tool.\nAction: lookup\nAction: lookup\nAction: lookup\nAction: lookup",
        Err("Action 'lookup' has no 'Action Input:' line"),
    ),
    # 4. no action at all: a direct answer, or a bullet list of every tool
    (
        "4-direct-answer",
        " The capital of France is Paris. It is also the largest city in France.",
        Err("no 'Action:' or 'Final Answer:' found", "Final Answer: <answer>"),
    ),
    (
        "4-bullet-list-of-tools",
        " I can use the following tools:\n- search: search the web\n- calculate: evaluate an "
        "arithmetic expression\n- lookup: look up a topic in the encyclopedia\n"
        "- finish: give the final answer",
        Err("no 'Action:' or 'Final Answer:' found"),
    ),
    (
        "4-numbered-tool-list-with-calls",
        " Here are the tools:\n1. search(query)\n2. calculate(expression)\n3. lookup(topic)",
        Err("no 'Action:' or 'Final Answer:' found"),
    ),
    (
        "4-empty-reply",
        "",
        Err("no 'Action:' or 'Final Answer:' found"),
    ),
    # 5. Action: calculate with no input line
    (
        "5-no-input-line",
        " I need to multiply 17 by 23.\nAction: calculate",
        Err("Action 'calculate' has no 'Action Input:' line", "Action Input: {\"arg\": value}"),
    ),
    (
        "5-no-input-then-prose",
        " I need to multiply 17 by 23.\nAction: calculate\nThe result will be 391.",
        Err("Action 'calculate' has no 'Action Input:' line"),
    ),
    (
        "5-input-is-prose",
        " I need to multiply.\nAction: calculate\nAction Input: seventeen times 23",
        Err("Action Input is not valid JSON: Expecting value (line 1 column 1)"),
    ),
    (
        "5-input-is-a-bare-expression",
        " I need to multiply.\nAction: calculate\nAction Input: 17 * 23",
        Err("Action Input must be a JSON object, got number"),
    ),
    # 6. wrong JSON keys: parses; the registry's validation rejects it later
    (
        "6-wrong-keys",
        ' I will look up the topic.\nAction: lookup\nAction Input: {"age": 32.5}',
        Action("I will look up the topic.", "lookup", {"age": 32.5}),
    ),
    (
        "6-extra-keys",
        ' Search.\nAction: search\nAction Input: {"query": "Nice", "limit": 5, "lang": "en"}',
        Action("Search.", "search", {"query": "Nice", "limit": 5, "lang": "en"}),
    ),
    # 7. nonsense arguments: parses; the tool will fail
    (
        "7-calculate-cities",
        " Add the two cities.\nAction: calculate[Lyon + Nice]",
        Action("Add the two cities.", "calculate", {"input": "Lyon + Nice"}),
    ),
    (
        "7-lookup-arithmetic",
        "Thought 1: I need the product.\nAction 1: lookup[17 * 23]",
        Action("I need the product.", "lookup", {"input": "17 * 23"}),
    ),
    (
        "7-json-nonsense-value",
        ' Compute.\nAction: calculate\nAction Input: {"expression": "Lyon + Nice"}',
        Action("Compute.", "calculate", {"expression": "Lyon + Nice"}),
    ),
    # 8. greedy loops: the same reply, also right after an "invalid format" observation
    (
        "8-echoes-the-format-help",
        " " + FORMAT_HELP_JSON,
        Err("no 'Action:' or 'Final Answer:' found"),
    ),
    (
        "8-echoes-the-bracket-help",
        "Thought 2: " + FORMAT_HELP_BRACKETS,
        Err("no 'Action:' or 'Final Answer:' found", "finish[<answer>]"),
    ),
    (
        "8-echoes-the-error-observation",
        " Observation: Invalid format: no 'Action:' or 'Final Answer:' found\nAction: search\n"
        'Action Input: {"query": "Nice"}',
        Err("starts a new turn", "'Observation'"),  # what follows an Observation is forged
    ),
    # 9. never stopping until max_tokens
    (
        "9-truncated-json",
        ' I need to search for the population.\nAction: search\nAction Input: {"query": '
        '"population of Fr',
        Err("Action Input is not valid JSON", "Unterminated string"),
    ),
    (
        "9-truncated-closing-brace",
        ' Search.\nAction: search\nAction Input: {"query": "population of France"',
        Action("Search.", "search", {"query": "population of France"}),
    ),
    (
        "9-truncated-bracket",
        "Thought 1: I need to look up the tower.\nAction 1: lookup[Eiffel Tow",
        Err("no closing ']'", "Action: <tool>[<argument>]"),
    ),
    (
        "9-endless-thought",
        " I need to think about this. " * 40,
        Err("no 'Action:' or 'Final Answer:' found"),
    ),
    (
        "9-endless-transcript",
        ' First.\nAction: search\nAction Input: {"query": "a"}\n'
        + 'Observation: x\nThought: again\nAction: search\nAction Input: {"query": "a"}\n' * 30,
        Action("First.", "search", {"query": "a"}),
    ),
    # 10. copying the worked example's shape regardless of the question
    (
        "10-copied-example-action",
        ' I should look up France.\nAction: search\nAction Input: {"q": "france"}',
        Action("I should look up France.", "search", {"q": "france"}),
    ),
    (
        "10-copied-whole-example",
        "Example:\nQuestion: What is the capital of France?\nThought: I should look up "
        'France.\nAction: search\nAction Input: {"q": "france"}\nObservation: Paris is the '
        "capital of France\nThought: Now I can answer.\nFinal Answer: Paris",
        Err("starts a new turn", "'Example'"),
    ),
    (
        "10-copied-example-answer",
        " Now I can answer.\nFinal Answer: Paris",
        FinalAnswer("Now I can answer.", "Paris"),
    ),
    # 11. HTML entities and raw newlines inside arguments (text dialect)
    (
        "11-entity-apostrophe",
        ' Look it up.\nAction: lookup\nAction Input: {"topic": "Eiffel&#39;s tower"}',
        Action("Look it up.", "lookup", {"topic": "Eiffel's tower"}),
    ),
    (
        "11-entity-quotes-around-syntax",
        " Search.\nAction: search\nAction Input: {&quot;query&quot;: &quot;Nice&quot;}",
        Action("Search.", "search", {"query": "Nice"}),
    ),
    (
        "11-raw-newline-in-string",
        ' Write it.\nAction: write_note\nAction Input: {"text": "Paris\nLyon\nNice"}',
        Action("Write it.", "write_note", {"text": "Paris\nLyon\nNice"}),
    ),
]


def test_corpus_covers_every_behaviour_with_enough_cases() -> None:
    behaviours = {case_id.split("-", 1)[0] for case_id, _, _ in CORPUS}
    assert behaviours == {str(n) for n in range(1, 12)}
    assert len(CORPUS) >= 30
    assert len({case_id for case_id, _, _ in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CORPUS], ids=[c[0] for c in CORPUS])
def test_corpus_case(text: str, expected: Expected) -> None:
    if isinstance(expected, Err):
        with pytest.raises(ParseError) as info:
            parse_react_step(text)
        message = str(info.value)
        for phrase in expected.phrases:
            assert phrase in message, message
        assert len(message) < 300
    else:
        assert parse_react_step(text) == expected


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CORPUS], ids=[c[0] for c in CORPUS])
def test_a_reply_a_greedy_model_repeats_gets_the_same_treatment_each_time(text: str, expected: Any) -> None:
    # Behaviour 8: a greedy model sends the same reply again and again, also after an
    # "invalid format" message. Each copy must parse the same way, so the loop's guards
    # (the parse-error streak, the repeat nudge) are what end it.
    trace = lw.run("t", lw.ScriptedPolicy([text] * 3), lw.ToolRegistry([]), max_steps=3)
    kinds = [s.kind for s in trace.steps]
    if isinstance(expected, Err):
        assert kinds == ["parse_error"] * 3 and trace.stopped_reason == "error"
        assert len({s.error for s in trace.steps}) == 1
    elif isinstance(expected, FinalAnswer):
        assert kinds == ["final"] and trace.final_answer == expected.answer
    else:
        assert kinds == ["action", "action", "nudge"] and trace.stopped_reason == "max_steps"
        assert all((s.tool, s.args) == (expected.name, expected.args) for s in trace.steps)


# 11. through the OpenAI-compatible server's function calling
SERVER_MESSAGES: list[tuple[str, dict[str, Any], list[Action] | str]] = [
    (
        "entity-in-value",
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_0", "type": "function",
             "function": {"name": "lookup", "arguments": '{"topic": "Eiffel&#39;s tower"}'}}]},
        [Action("", "lookup", {"topic": "Eiffel's tower"}, call_id="call_0")],
    ),
    (
        "entities-around-syntax",
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "search",
                          "arguments": "{&quot;query&quot;: &quot;it&#39;s Nice&quot;}"}}]},
        [Action("", "search", {"query": "it's Nice"}, call_id="call_1")],
    ),
    (
        "raw-newline",
        {"role": "assistant", "content": "Let me write it.", "tool_calls": [
            {"id": "call_2", "type": "function",
             "function": {"name": "write_note", "arguments": '{"text": "a\nb"}'}}]},
        [Action("Let me write it.", "write_note", {"text": "a\nb"}, call_id="call_2")],
    ),
    (
        "empty-arguments",
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_3", "type": "function", "function": {"name": "now", "arguments": ""}}]},
        [Action("", "now", {}, call_id="call_3")],
    ),
    (
        "arguments-not-an-object",
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_4", "type": "function",
             "function": {"name": "calculate", "arguments": '"17 * 23"'}}]},
        "must be a JSON object, got string",
    ),
]


@pytest.mark.parametrize(("message", "expected"), [c[1:] for c in SERVER_MESSAGES],
                         ids=[c[0] for c in SERVER_MESSAGES])
def test_server_tool_call_case(message: dict[str, Any], expected: list[Action] | str) -> None:
    if isinstance(expected, str):
        with pytest.raises(ParseError, match=expected):
            parse_tool_calls(message)
    else:
        assert parse_tool_calls(message) == expected
