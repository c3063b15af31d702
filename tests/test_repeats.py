"""Loops that end: nudges escalate to `repeated_call`, and where a grammar is in use a
call whose result is already known cannot be generated again. Also the grammar's value
rules (non-empty required strings, numeric bounds)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import loopwright as lw
from loopwright.models.grammar import plan_grammar, react_grammar
from loopwright.prompting import templates

LOOKUP = {"name": "lookup", "description": "Look up a fact.",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}  # fmt: skip
CONVERT = {
    "name": "convert",
    "description": "Convert units.",
    "parameters": {
        "type": "object",
        "properties": {
            "value": {"type": "number"},
            "unit": {"type": "string", "enum": ["km", "mi"]},
            "label": {"type": "string"},
            "note": {"type": "string"},
        },
        "required": ["value", "unit", "label"],
    },
}
BOUNDED = {
    "name": "pick",
    "description": "Pick.",
    "parameters": {
        "type": "object",
        "properties": {
            "month": {"type": "integer", "minimum": 1, "maximum": 12},
            "count": {"type": "integer", "minimum": 0},
            "delta": {"type": "number", "exclusiveMaximum": 0},
            "tag": {"type": "string", "minLength": 0},
            "code": {"type": "string", "minLength": 2, "maxLength": 3},
        },
        "required": ["month", "count", "delta", "tag", "code"],
    },
}
CLOCK = {"name": "now", "description": "The time.", "parameters": {"type": "object", "properties": {}}}


def step(name: str, args: dict[str, Any]) -> str:
    return f" go\nAction: {name}\nAction Input: " + "{" + ", ".join(
        f"{json.dumps(k)}: {json.dumps(v)}" for k, v in args.items()) + "}"  # fmt: skip


def act(query: str) -> str:
    return f'Thought: again\nAction: lookup\nAction Input: {{"query": "{query}"}}'


# --- nudges escalate (scripted, fast) ------------------------------------------------------


def _lookup_registry() -> lw.ToolRegistry:
    @lw.tool
    def lookup(query: str) -> str:
        """Look up a fact."""
        return f"nothing about {query}"

    return lw.ToolRegistry([lookup])


def test_nudges_escalate_to_repeated_call_after_two_by_default() -> None:
    trace = lw.run("q", lw.ScriptedPolicy([act("x")] * 5), _lookup_registry(), max_steps=10)
    assert trace.stopped_reason == "repeated_call"
    assert [s.kind for s in trace.steps] == ["action", "action", "nudge", "nudge", "nudge"]
    assert trace.llm_calls == 5 and trace.tool_calls == 2
    assert trace.steps[-1].error == "repeated call: lookup proposed 5 times in a row, after 2 nudges"
    assert trace.steps[-1].observation is None and trace.steps[2].observation


@pytest.mark.parametrize(("max_nudges", "calls"), [(0, 3), (1, 4), (4, 7)])
def test_max_nudges_bounds_the_nudged_calls(max_nudges: int, calls: int) -> None:
    trace = lw.run("q", lw.ScriptedPolicy([act("x")] * calls), _lookup_registry(), max_steps=20, max_nudges=max_nudges)
    assert trace.stopped_reason == "repeated_call" and trace.llm_calls == calls
    assert sum(s.kind == "nudge" and s.observation is not None for s in trace.steps) == max_nudges


def test_a_different_call_resets_the_nudge_count() -> None:
    script = [act("x")] * 4 + [act("y")] + [act("x")] * 4 + ["Thought: t\nFinal Answer: no"]
    trace = lw.run("q", lw.ScriptedPolicy(script), _lookup_registry(), max_steps=20)
    assert trace.stopped_reason == "final" and trace.final_answer == "no"


def test_max_nudges_is_validated_and_accepted_in_every_mode() -> None:
    with pytest.raises(ValueError, match="max_nudges must be an integer >= 0"):
        lw.run("q", lw.ScriptedPolicy([]), _lookup_registry(), max_nudges=-1)
    plan = '{"plan": [{"id": "E1", "tool": "lookup", "args": {"query": "x"}}]}'
    for mode in ("rewoo", "plan_execute"):
        assert lw.run("q", lw.ScriptedPolicy([plan, "a"][: 2 if mode == "rewoo" else 1]), _lookup_registry(),
                      mode=mode, max_nudges=1).stopped_reason == "final"  # fmt: skip


def test_the_model_request_names_the_latest_known_call_of_each_tool() -> None:
    policy = lw.ScriptedPolicy([act("x"), act("y"), "Thought: t\nFinal Answer: a"])
    lw.run("q", policy, _lookup_registry())
    assert [r.known_calls for r in policy.requests] == [(), (("lookup", {"query": "x"}),), (("lookup", {"query": "y"}),)]


# --- the grammar: text (fast) ------------------------------------------------------------


def test_the_known_call_changes_only_its_own_tool_rule() -> None:
    plain = react_grammar([LOOKUP, CONVERT])
    avoiding = react_grammar([LOOKUP, CONVERT], avoid={"lookup": {"query": "Mountain"}})
    assert "tool0-args-new" in avoiding and "tool0-args-new" not in plain
    assert plain.splitlines()[0] == avoiding.splitlines()[0] == 'root ::= thought "\\n" (action | final)'
    assert react_grammar([CLOCK], avoid={"now": {}}).splitlines()[0] == 'root ::= thought "\\n" final'
    assert "p1-string-nonempty" in plan_grammar([LOOKUP])


# --- the grammar, checked by llama.cpp's own grammar engine (slow) --------------------------


@pytest.fixture(scope="module")
def model() -> Any:
    return lw.models.LlamaCpp()


@pytest.mark.slow
def test_a_required_string_cannot_be_empty_unless_the_schema_allows_it(model: Any) -> None:
    g = react_grammar([LOOKUP, BOUNDED])
    assert not model.grammar_accepts(g, step("lookup", {"query": ""}))
    assert model.grammar_accepts(g, step("lookup", {"query": "Everest"}))
    ok = {"month": 12, "count": 0, "delta": -0.5, "tag": "", "code": "ab"}
    assert model.grammar_accepts(g, step("pick", ok))
    assert not model.grammar_accepts(g, step("pick", {**ok, "code": "a"}))
    assert not model.grammar_accepts(g, step("pick", {**ok, "code": "abcd"}))
    assert not model.grammar_accepts(plan_grammar([LOOKUP]), ' {"plan": [{"id": "E1", "tool": "lookup", "args": {"query": ""}}]}')


@pytest.mark.slow
@pytest.mark.parametrize(
    "bad", [{"month": 13}, {"month": 0}, {"count": -1}, {"delta": 1.5}, {"delta": 2}]
)
def test_numeric_bounds_are_held_where_gbnf_can_say_them(model: Any, bad: dict[str, Any]) -> None:
    ok = {"month": 7, "count": 250, "delta": -3, "tag": "t", "code": "ab"}
    g = react_grammar([BOUNDED])
    assert model.grammar_accepts(g, step("pick", ok))
    assert not model.grammar_accepts(g, step("pick", {**ok, **bad}))


@pytest.mark.slow
def test_the_known_call_is_excluded_and_every_other_call_is_not(model: Any) -> None:
    g = react_grammar([LOOKUP, CONVERT], avoid={"lookup": {"query": "Mountain"}, "convert": {"value": 2, "unit": "km", "label": "x"}})
    assert not model.grammar_accepts(g, step("lookup", {"query": "Mountain"}))
    for other in ("Mountains", "Mountai", "M", "mountain", "Mount Everest", "Nountain"):
        assert model.grammar_accepts(g, step("lookup", {"query": other})), other
    assert not model.grammar_accepts(g, step("convert", {"value": 2, "unit": "km", "label": "x"}))
    assert model.grammar_accepts(g, step("convert", {"value": 2, "unit": "mi", "label": "x"}))
    assert model.grammar_accepts(g, step("convert", {"value": 2, "unit": "km", "label": "y"}))
    assert model.grammar_accepts(g, step("convert", {"value": 2, "unit": "km", "label": "x", "note": "n"}))
    assert model.grammar_accepts(g, " done\nFinal Answer: 3")
    b = react_grammar([LOOKUP], "brackets", avoid={"lookup": {"query": "Mountain"}})
    assert not model.grammar_accepts(b, " go\nAction 2: lookup[Mountain]")
    assert model.grammar_accepts(b, " go\nAction 2: lookup[Mountain range]")
    assert model.grammar_accepts(b, " go\nAction 2: finish[no]")


@pytest.mark.slow
def test_a_greedy_model_stuck_on_a_call_is_made_to_change_it(model: Any) -> None:
    """The real model, sampling under the grammar: a prompt that invites it to repeat the
    call just made cannot get that call back."""
    registry = _lookup_registry()
    policy = model
    repeat = lw.ModelRequest(
        "Answer with the tool.\nQuestion: q\nThought: look\nAction: lookup\nAction Input: "
        '{"query": "Mountain"}\nObservation: nothing\nThought: look again\nAction: lookup\n'
        'Action Input: {"query": "Mountain"}\nObservation: nothing\nThought:',
        templates.STOP_JSON, "react", tools=tuple(registry.schemas()),
    )
    free = lw.parse_react_step(policy.complete(repeat).text)
    constrained = lw.parse_react_step(
        policy.complete(lw.ModelRequest(repeat.prompt, repeat.stop, "react", tools=repeat.tools,
                                        known_calls=(("lookup", {"query": "Mountain"}),))).text  # fmt: skip
    )
    assert isinstance(free, lw.Action) and free.args == {"query": "Mountain"}  # what it does unconstrained
    assert not (isinstance(constrained, lw.Action) and constrained.args == {"query": "Mountain"})
