"""Grammars generated from tool schemas: the GBNF text, and (with the real model's
vocabulary) what llama.cpp's grammar engine accepts and rejects."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loopwright as lw
from loopwright.models.grammar import (
    STRING_MAX_CHARS,
    answer_grammar,
    gbnf_literal,
    grammar_for,
    plan_grammar,
    react_grammar,
)

LOOKUP = {
    "name": "lookup",
    "description": "Look up a fact.",
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    },
}
ADD = {
    "name": "add",
    "description": "Add.",
    "parameters": {
        "type": "object",
        "properties": {
            "x": {"type": "integer"},
            "y": {"type": "integer"},
            "note": {"type": "string"},
        },
        "required": ["x", "y"],
    },
}
MIXED = {
    "name": "mixed.tool-v2",
    "description": "Every modelled type, and one that is not.",
    "parameters": {
        "type": "object",
        "properties": {
            "unit": {"enum": ["m", "km"]},
            "scale": {"type": "number"},
            "flag": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "where": {"type": "object", "properties": {"lat": {"type": "number"}}},
            "anything": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        },
    },
}
TOOLS = (LOOKUP, ADD, MIXED)


def _dumps(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates travel as JSON escapes
        text = json.dumps(value, ensure_ascii=True)
    return text


def _dumps_args(args: dict[str, Any]) -> str:
    """Arguments as the grammar writes them: json.dumps layout, each key on its own."""
    return "{" + ", ".join(f"{_dumps(k)}: {_dumps(v)}" for k, v in args.items()) + "}"


def step_json(thought: str, name: str, args: dict[str, Any]) -> str:
    return f" {thought}\nAction: {name}\nAction Input: {_dumps_args(args)}\n"


def plan_json(*steps: tuple[str, dict[str, Any]]) -> str:
    body = [
        f'{{"id": "E{k}", "tool": {_dumps(t)}, "args": {_dumps_args(a)}}}'
        for k, (t, a) in enumerate(steps, 1)
    ]
    return ' {"plan": [' + ", ".join(body) + "]}"


# ----------------------------------------------------------------- the text (fast)


def test_gbnf_literal_escapes_quotes_backslashes_and_control_characters() -> None:
    assert gbnf_literal('a"b\\c\nd\x01') == '"a\\"b\\\\c\\nd\\x01"'


def test_react_grammar_names_every_tool_and_only_those() -> None:
    text = react_grammar(TOOLS)
    assert '"lookup\\nAction Input: "' in text
    assert '"add\\nAction Input: "' in text
    assert '"mixed.tool-v2\\nAction Input: "' in text
    assert "Final Answer: " in text
    assert text.startswith("root ::= thought")


def test_react_grammar_writes_the_thought_label_only_when_the_prompt_lacks_it() -> None:
    assert react_grammar(TOOLS, with_thought_label=True).startswith('root ::= "Thought: "')
    assert 'root ::= "Thought " [0-9]' in react_grammar(TOOLS, "brackets", with_thought_label=True)


def test_react_grammar_rejects_an_unknown_dialect_and_an_empty_tool_list() -> None:
    with pytest.raises(ValueError, match="dialect"):
        react_grammar(TOOLS, "yaml")
    with pytest.raises(ValueError, match="at least one tool"):
        react_grammar(())


def test_plan_grammar_fixes_ids_in_order_up_to_max_steps() -> None:
    text = plan_grammar(TOOLS, max_steps=3)
    for k in (1, 2, 3):
        assert f'{{\\"id\\": \\"E{k}\\", \\"tool\\": ' in text
    assert "E4" not in text
    with pytest.raises(ValueError, match="between 1 and 9"):
        plan_grammar(TOOLS, max_steps=10)


def test_grammar_for_picks_the_grammar_by_purpose_and_dialect() -> None:
    react = lw.ModelRequest("Question: q\nThought:", purpose="react", tools=TOOLS)
    assert grammar_for(react) == react_grammar(TOOLS)
    unlabelled = lw.ModelRequest("Question: q\n", purpose="react", tools=TOOLS)
    assert grammar_for(unlabelled) == react_grammar(TOOLS, with_thought_label=True)
    brackets = lw.ModelRequest("Thought 3:", purpose="react", tools=TOOLS, dialect="brackets")
    assert grammar_for(brackets) == react_grammar(TOOLS, "brackets")
    plan = lw.ModelRequest("Plan:", purpose="replan", tools=TOOLS)
    assert grammar_for(plan, plan_max_steps=2) == plan_grammar(TOOLS, max_steps=2)
    assert grammar_for(lw.ModelRequest("x", purpose="solve")) == answer_grammar()
    assert grammar_for(lw.ModelRequest("x", purpose="summarize", tools=TOOLS)) is None
    assert grammar_for(lw.ModelRequest("x", purpose="react")) is None
    native = lw.ModelRequest("x", purpose="react", tools=TOOLS, dialect="native")
    assert grammar_for(native) is None


# --------------------------------------------- what llama.cpp accepts (real vocab)


@pytest.fixture(scope="module")
def model() -> Any:
    return lw.models.LlamaCpp(n_ctx=256)


@pytest.mark.slow
@pytest.mark.parametrize(
    "text",
    [
        step_json("I look it up", "lookup", {"query": "population of Paris"}),
        step_json("add them", "add", {"x": 1, "y": -2}),
        step_json("add them", "add", {"x": 1, "y": 2, "note": "sum"}),
        step_json("all", "mixed.tool-v2", {}),
        step_json(
            "all",
            "mixed.tool-v2",
            {"unit": "km", "scale": 2.5e3, "flag": True, "tags": ["a", "b"], "where": {"lat": 1}},
        ),
        step_json("anything", "mixed.tool-v2", {"anything": {"free": [1, None]}}),
        " I know it\nFinal Answer: 391",
        " I know it\nFinal Answer: 391\n",
    ],
)
def test_react_grammar_accepts_valid_steps(model: Any, text: str) -> None:
    assert model.grammar_accepts(react_grammar(TOOLS), text)


@pytest.mark.slow
@pytest.mark.parametrize(
    "text",
    [
        step_json("x", "search", {"query": "q"}),  # unknown tool
        step_json("x", "add", {"x": 1}),  # missing required key
        step_json("x", "add", {"x": "1", "y": 2}),  # wrong type
        step_json("x", "add", {"x": True, "y": 2}),  # bool is not an integer
        step_json("x", "add", {"x": 1, "y": 2, "z": 3}),  # unknown key
        step_json("x", "add", {"y": 2, "x": 1}),  # keys out of schema order
        step_json("x", "mixed.tool-v2", {"unit": "mm"}),  # not in the enum
        step_json("x: y", "lookup", {"query": "q"}),  # a colon could start a new anchor
        " x\nAction: lookup\nAction Input: {'query': 'q'}",  # not JSON
        " x\nAction: lookup",  # no input
        " x\nFinal Answer: 1\nQuestion: invented",  # run-on transcript
        " x\nAction: lookup\nAction Input: " + json.dumps({"query": "q" * (STRING_MAX_CHARS + 1)}),
        "",
    ],
)
def test_react_grammar_rejects_invalid_steps(model: Any, text: str) -> None:
    assert not model.grammar_accepts(react_grammar(TOOLS), text)


@pytest.mark.slow
def test_brackets_grammar_takes_text_for_one_string_argument_and_json_otherwise(model: Any) -> None:
    g = react_grammar(TOOLS, "brackets")
    assert model.grammar_accepts(g, " look\nAction 1: lookup[population of Paris]")
    assert model.grammar_accepts(g, ' add\nAction 2: add[{"x": 1, "y": 2}]')
    assert model.grammar_accepts(g, " done\nAction 3: finish[391]\n")
    assert not model.grammar_accepts(g, " add\nAction 2: add[1, 2]")
    assert not model.grammar_accepts(g, " look\nAction 1: search[x]")


@pytest.mark.slow
def test_plan_grammar_allows_only_references_to_earlier_steps(model: Any) -> None:
    g = plan_grammar(TOOLS)
    ok = [
        plan_json(("lookup", {"query": "population of Paris"})),
        plan_json(("lookup", {"query": "x"}), ("add", {"x": "#E1", "y": 2})),
        plan_json(("lookup", {"query": "x"}), ("lookup", {"query": "a #E1 b"})),
        plan_json(("lookup", {"query": "x"}), ("lookup", {"query": "y"}), ("lookup", {"query": "#E2"})),
        plan_json(("lookup", {"query": "C# or F#!"})),
    ]
    bad = [
        plan_json(("lookup", {"query": "#E1"})),  # self reference
        plan_json(("lookup", {"query": "x"}), ("lookup", {"query": "#E3"})),  # forward
        plan_json(("lookup", {"query": "x"}), ("lookup", {"query": "#E12"})),  # dangling
        plan_json(("lookup", {"query": "x"}), ("add", {"x": "#E1x", "y": 1})),  # not a ref
        plan_json(("search", {"q": "x"})),  # unknown tool
        ' {"plan": [{"id": "E2", "tool": "lookup", "args": {"query": "x"}}]}',  # id out of order
        ' {"plan": []}',  # empty
        plan_json(*[("lookup", {"query": "x"})] * 5),  # longer than max_steps=4
    ]
    g4 = plan_grammar(TOOLS, max_steps=4)
    for text in ok:
        assert model.grammar_accepts(g, text), text
    for text in bad:
        assert not model.grammar_accepts(g4, text), text
    for text in ok:
        lw.parse_plan(text)  # what the grammar accepts, the parser takes


@pytest.mark.slow
def test_answer_grammar_holds_a_solver_to_one_line(model: Any) -> None:
    assert model.grammar_accepts(answer_grammar(), " 391\n")
    assert not model.grammar_accepts(answer_grammar(), " 391\nand more")


_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,20}", fullmatch=True)
# Beyond the BMP the model's tokenizer drops bytes (U+40000 tokenizes as three 0x80s), so
# no grammar could be checked there.
_keys = st.text(st.characters(max_codepoint=0xFFFF), min_size=1, max_size=12)
_leaf = st.sampled_from(
    [
        {"type": "string"},
        {"type": "integer"},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "null"},
        {"enum": ["a", 'b"q', 3]},
        {"anyOf": [{"type": "string"}]},
        {},
        {"type": "array", "items": {"type": "integer"}},
    ]
)
_schemas = st.fixed_dictionaries(
    {
        "name": _names,
        "description": st.text(max_size=20),
        "parameters": st.dictionaries(_keys, _leaf, max_size=4).flatmap(
            lambda props: st.fixed_dictionaries(
                {
                    "type": st.just("object"),
                    "properties": st.just(props),
                    "required": st.lists(st.sampled_from(sorted(props)), unique=True)
                    if props
                    else st.just([]),
                }
            )
        ),
    }
)


def _sample(schema: dict[str, Any]) -> Any:
    kind = schema.get("type")
    if "enum" in schema:
        return schema["enum"][0]
    return {
        "string": 'a "quoted" \\ value',
        "integer": -12,
        "number": 2.5,
        "boolean": False,
        "null": None,
        "array": [1, 2],
    }.get(kind, "free text")


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tools=st.lists(_schemas, min_size=1, max_size=3, unique_by=lambda t: t["name"]))
def test_any_tool_schemas_give_grammars_that_compile_and_accept_valid_calls(
    model: Any, tools: list[dict[str, Any]]
) -> None:
    first = tools[0]
    props = first["parameters"]["properties"]
    required = set(first["parameters"]["required"])
    args = {k: _sample(v) for k, v in props.items() if k in required}
    for dialect in ("json", "brackets"):
        model.compiled_grammar(react_grammar(tools, dialect))
    assert model.grammar_accepts(react_grammar(tools), step_json("go", first["name"], args))
    assert model.grammar_accepts(plan_grammar(tools), plan_json((first["name"], args)))
