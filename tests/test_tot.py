"""Tree-of-Thoughts: proposals, values, BFS with a beam, DFS with backtracking, the node
budget, tool calls in branches through the choke point, and side effects refused."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import loopwright as lw
from conftest import make_registry
from helpers.durable import comparable
from loopwright.durable.resume import resume
from loopwright.durable.sqlite import SQLiteStore
from loopwright.modes.tot import parse_candidates, parse_value

_STEP = re.compile(r"^Step \d+: (.*)$", re.MULTILINE)


def tree_policy(proposals: Mapping[str | None, Sequence[str]], values: Mapping[str, str]) -> Callable[[str], str]:
    """A scripted tree: proposals by the last step of the node's path (None: the
    question), values by the step being scored. Anything unscripted is a KeyError."""

    def policy(prompt: str) -> str:
        steps = _STEP.findall(prompt)
        last = steps[-1] if steps else None
        if prompt.endswith("Evaluation:"):
            assert last is not None
            return values[last]
        return "\n".join(f"{i}. {c}" for i, c in enumerate(proposals[last], 1))

    return policy


def kinds(trace: lw.Trace, kind: str) -> list[lw.Step]:
    return [s for s in trace.steps if s.kind == kind]


def assert_cost_invariant(trace: lw.Trace) -> None:
    assert trace.llm_calls == len(kinds(trace, "propose")) + len(kinds(trace, "value"))


# A greedy chain follows "A" (scored sure) into a dead end; "B" (likely) leads to the answer.
TRAP = {
    None: ["A", "B"],
    "A": ["A1", "A2"],
    "B": ["Final Answer: 24"],
    "A1": ["A11"],
    "A2": ["A21"],
}
TRAP_VALUES = {"A": "sure", "B": "likely", "A1": "impossible", "A2": "impossible",
               "Final Answer: 24": "sure"}


def test_bfs_finds_a_solution_a_greedy_chain_misses():
    greedy = lw.run("make 24", tree_policy(TRAP, TRAP_VALUES), make_registry(), mode="tot",
                    breadth=1, depth=3)
    assert greedy.stopped_reason == "exhausted" and greedy.final_answer is None
    assert [s.meta["node"] for s in kinds(greedy, "propose")] == ["n0", "n1"]  # only A was followed

    trace = lw.run("make 24", tree_policy(TRAP, TRAP_VALUES), make_registry(), mode="tot",
                   breadth=2, depth=3)
    assert (trace.stopped_reason, trace.final_answer) == ("final", "24")
    tot = trace.meta["tot"]
    winner = trace.steps[-1]
    assert winner.kind == "final" and winner.meta["node"] == tot["winner"]
    path_steps = [s.meta["step"] for s in kinds(trace, "value") if s.meta["node"] in tot["path"]]
    assert path_steps == ["B", "Final Answer: 24"]
    assert tot["beams"][0] == ["n1", "n2"]
    for value in kinds(trace, "value"):  # every node knows its parent and its score
        assert {"node", "parent", "depth", "score", "label"} <= set(value.meta)
    assert_cost_invariant(trace)


def test_dfs_backtracks_from_an_impossible_node():
    proposals = {None: ["A", "B"], "A": ["A1"], "B": ["Final Answer: 24"], "A1": ["never"]}
    values = {"A": "sure", "B": "likely", "A1": "impossible", "Final Answer: 24": "sure"}
    trace = lw.run("make 24", tree_policy(proposals, values), make_registry(), mode="tot", search="dfs")
    assert (trace.stopped_reason, trace.final_answer) == ("final", "24")
    node_of = {s.meta["step"]: s.meta["node"] for s in kinds(trace, "value")}
    expanded = [s.meta["node"] for s in kinds(trace, "propose")]
    assert expanded == ["n0", node_of["A"], node_of["B"]]  # A first (best), never A1, then back to B
    assert node_of["A1"] not in expanded
    assert trace.meta["tot"]["path"] == [node_of["B"], node_of["Final Answer: 24"]]
    assert_cost_invariant(trace)


def test_dfs_with_every_branch_impossible_is_exhausted():
    trace = lw.run("t", tree_policy({None: ["A", "B"]}, {"A": "impossible", "B": "2"}), make_registry(),
                   mode="tot", search="dfs")
    assert (trace.stopped_reason, trace.final_answer) == ("exhausted", None)
    assert trace.llm_calls == 3


def test_bfs_keeps_only_the_beam_width_best_nodes_per_level():
    proposals = {None: ["low", "high", "mid"], "high": ["h1"], "mid": ["m1"]}
    values = {"low": "6", "high": "9", "mid": "8", "h1": "5", "m1": "5"}
    trace = lw.run("t", tree_policy(proposals, values), make_registry(), mode="tot",
                   branching=3, breadth=2, depth=2)
    assert trace.stopped_reason == "exhausted"
    by_step = {s.meta["step"]: s.meta["node"] for s in kinds(trace, "value")}
    assert [s.meta["node"] for s in kinds(trace, "propose")] == ["n0", by_step["high"], by_step["mid"]]
    assert trace.meta["tot"]["beams"][0] == [by_step["high"], by_step["mid"]]
    assert [s.meta["score"] for s in kinds(trace, "value")][:3] == [0.6, 0.9, 0.8]


def test_branching_caps_the_candidates_taken_from_a_proposal():
    trace = lw.run("t", tree_policy({None: ["a", "b", "c", "d"]}, dict.fromkeys("abcd", "impossible")),
                   make_registry(), mode="tot", branching=2)
    assert kinds(trace, "propose")[0].meta["candidates"] == ["a", "b"]
    assert len(kinds(trace, "value")) == 2


def test_the_node_budget_holds():
    proposals = {None: ["a", "b", "c"], "a": ["a1", "a2", "a3"], "b": ["b1", "b2", "b3"]}
    values = dict.fromkeys(["a", "b", "c", "a1", "a2", "a3", "b1", "b2", "b3"], "likely")
    trace = lw.run("t", tree_policy(proposals, values), make_registry(), mode="tot",
                   max_nodes=5, branching=3, breadth=3, depth=3)
    assert trace.stopped_reason == "max_nodes"
    assert len(kinds(trace, "value")) == 5 == trace.meta["tot"]["nodes"]
    assert_cost_invariant(trace)


def test_max_steps_caps_the_model_calls_of_the_search():
    values = dict.fromkeys(["a", "b", "c"], "likely")
    trace = lw.run("t", tree_policy({None: ["a", "b", "c"]}, values), make_registry(), mode="tot",
                   max_steps=3)
    assert trace.llm_calls == 3 and trace.stopped_reason == "max_steps"


def test_a_tool_call_in_a_branch_runs_through_the_choke_point(calls, registry):
    proposals = {None: ["search[france]"], "search[france]": ["Final Answer: Paris"]}
    values = {"search[france]": "likely", "Final Answer: Paris": "sure"}
    trace = lw.run("capital of France?", tree_policy(proposals, values), registry, mode="tot")
    assert trace.final_answer == "Paris"
    assert calls == [("search", {"q": "france"})] and trace.tool_calls == 1
    action = kinds(trace, "action")[0]
    assert action.meta["node"] == "n1" and action.observation.startswith("Paris is")
    value_prompt = kinds(trace, "value")[0].prompt
    assert '<untrusted source="search#n1">Paris is' in value_prompt


def _mailer(sent: list[str]) -> lw.ToolRegistry:
    @lw.tool(side_effects="write", idempotent=False)
    def send_email(body: str) -> str:
        """Send an email."""
        sent.append(body)
        return "sent"

    return lw.ToolRegistry([send_email])


def test_a_non_idempotent_tool_is_refused_inside_a_branch():
    sent: list[str] = []
    proposals = {None: ["send_email[hello]", "Final Answer: done"]}
    values = {"Final Answer: done": "sure"}  # the refused branch is never scored
    trace = lw.run("t", tree_policy(proposals, values), _mailer(sent), mode="tot")
    assert sent == [] and trace.tool_calls == 0
    denied = kinds(trace, "denied")[0]
    assert denied.tool == "send_email" and "allow_side_effects=True" in denied.observation
    assert denied.meta["score"] == 0.0
    assert trace.final_answer == "done"

    allowed = lw.run("t", tree_policy({None: ["send_email[hello]"], "send_email[hello]": []},
                                      {"send_email[hello]": "likely"}),
                     _mailer(sent), mode="tot", allow_side_effects=True)
    assert sent == ["hello"] and allowed.tool_calls == 1


@pytest.mark.parametrize("side_effects", ["none", "read"])
def test_a_tool_that_requires_approval_is_refused_inside_a_branch_without_asking(side_effects):
    """An idempotent tool that requires approval is refused in a branch like a side effect:
    the approver, which would approve, is never asked, and the tool never runs."""
    ran: list[str] = []
    asked: list[str] = []

    @lw.tool(side_effects=side_effects, requires_approval=True)
    def lookup(q: str) -> str:
        """Look something up."""
        ran.append(q)
        return "found"

    proposals = {None: ["lookup[x]", "Final Answer: done"]}
    trace = lw.run("t", tree_policy(proposals, {"Final Answer: done": "sure"}), lw.ToolRegistry([lookup]),
                   mode="tot", approver=lambda request: asked.append(request.tool) or True)
    assert ran == [] and asked == [] and trace.tool_calls == 0
    denied = kinds(trace, "denied")[0]
    assert denied.tool == "lookup" and "allow_side_effects=True" in denied.observation
    assert trace.final_answer == "done"


def test_sibling_prompts_share_the_node_state_as_prefix():
    trace = lw.run("make 24", tree_policy(TRAP, TRAP_VALUES), make_registry(), mode="tot")
    props = kinds(trace, "propose")
    values = kinds(trace, "value")
    root_state = props[0].prompt[: props[0].prompt.index("Possible next steps")]
    assert all(v.prompt.startswith(root_state) for v in values)
    first, second = values[0].prompt, values[1].prompt  # siblings: same state, then their own step
    assert first.startswith(root_state + "Step 1: A\n") and second.startswith(root_state + "Step 1: B\n")
    child = next(p for p in props if p.meta["node"] == "n1")  # a node's proposal extends its value prompt's state
    assert child.prompt.startswith(values[0].prompt[: -len(lw.PromptSet().tot_value)])


def test_tot_options_are_checked():
    reg = make_registry()
    for bad in ({"search": "astar"}, {"breadth": 0}, {"depth": 0}, {"max_nodes": 0}, {"threshold": 2},
                {"branching": True}):
        with pytest.raises(ValueError):
            lw.run("t", lambda p: "", reg, mode="tot", **bad)


def test_tot_trace_round_trips_through_json():
    trace = lw.run("t", tree_policy(TRAP, TRAP_VALUES), make_registry(), mode="tot")
    data = trace.to_dict()
    assert lw.Trace.from_dict(json.loads(json.dumps(data))).to_dict() == data


@pytest.mark.parametrize(("reply", "expected"), [
    ("sure", (1.0, "sure")), (" Likely.", (0.5, "likely")), ("IMPOSSIBLE because", (0.0, "impossible")),
    ("7", (0.7, "7")), ("8/10", (0.8, "8")), ("10", (1.0, "10")), ("I think likely, not sure", (0.5, "likely")),
    ("\n\n 6 because", (0.6, "6")), ("24 is impossible.", (0.0, "impossible")),
])
def test_parse_value_reads_labels_and_numbers_leniently(reply, expected):
    assert parse_value(reply) == expected


@pytest.mark.parametrize("reply", ["", "hmm", " 13 + 11 = 24 (", "24", "1.5 maybe", " 10 + 12 = 22 (", "7 * 3"])
def test_a_reply_with_no_label_and_no_leading_score_is_a_parse_error(reply):
    with pytest.raises(lw.ParseError):
        parse_value(reply)


def test_an_unreadable_value_scores_lowest():
    trace = lw.run("t", tree_policy({None: ["a"]}, {"a": "hmm"}), make_registry(), mode="tot", threshold=0.0)
    value = kinds(trace, "value")[0]
    assert value.meta["score"] == 0.0 and value.meta["label"] == "unreadable"
    assert "expected sure, likely, impossible or 1-10" in value.meta["value_error"]


@given(st.text(max_size=300))
def test_parse_value_returns_a_score_in_range_or_raises_parse_error(text):
    try:
        score, label = parse_value(text)
    except lw.ParseError:
        return
    assert 0.0 <= score <= 1.0 and label


@given(st.text(max_size=300), st.integers(1, 5))
def test_parse_candidates_never_returns_more_than_k_non_empty_steps(text, k):
    out = parse_candidates(text, k)
    assert len(out) <= k and all(c and c == c.strip() for c in out)


PROPOSALS = {None: ["search[france]", "B"], "search[france]": ["word_count[Paris is nice]"],
             "B": ["B1"], "word_count[Paris is nice]": ["Final Answer: 3"]}
VALUES = {"search[france]": "sure", "B": "likely", "word_count[Paris is nice]": "likely", "B1": "impossible",
          "Final Answer: 3": "sure"}


def _script() -> list[str]:
    """The tree policy's replies in the order the search asks for them."""
    replies: list[str] = []
    inner = tree_policy(PROPOSALS, VALUES)

    def record(prompt: str) -> str:
        out = inner(prompt)
        replies.append(out)
        return out

    trace = lw.run("t", record, make_registry(), mode="tot")
    assert trace.final_answer == "3" and trace.tool_calls == 2
    return replies


@pytest.mark.parametrize("k", range(1, 10))
def test_tot_interrupted_at_any_model_call_resumes_to_the_uninterrupted_trace(tmp_path: Path, k):
    script = _script()
    assert len(script) == 9
    expected_calls: list = []
    reference = lw.ScriptedPolicy(script)
    expected = lw.run("t", reference, make_registry(expected_calls), mode="tot")
    with SQLiteStore(tmp_path / "runs.db") as store:
        calls: list = []
        first = lw.ScriptedPolicy([*script[: k - 1], KeyboardInterrupt()])
        with pytest.raises(lw.RunInterrupted):
            lw.run("t", first, make_registry(calls), mode="tot", store=store, run_id="r")
        rest = lw.ScriptedPolicy(script[k - 1:])
        trace = resume("r", rest, make_registry(calls), store=store)
        rest.assert_consumed()
        assert rest.prompts == reference.prompts[k - 1:]
        assert calls == expected_calls  # each branch's tool ran once across both runs
        assert comparable(trace) == comparable(expected)
        assert comparable(store.trace("r")) == comparable(expected)


def test_the_viewer_draws_the_search_tree_and_the_winning_path():
    from loopwright.interfaces.viewer import render_html

    trace = lw.run("make 24", tree_policy(TRAP, {**TRAP_VALUES, "A1": "<b>impossible</b>"}), make_registry(),
                   mode="tot")
    page = render_html(lw.Trace.from_dict(json.loads(json.dumps(trace.to_dict()))))
    tree = page[page.index('id="tot-tree"'):page.index("</section>", page.index('id="tot-tree"'))]
    for step in kinds(trace, "value"):
        assert f'data-node="{step.meta["node"]}"' in tree
    for node in trace.meta["tot"]["path"]:
        assert 'class="node won' in tree.split(f'data-node="{node}"')[0].rsplit("<span", 1)[-1]
    assert "<b>impossible</b>" not in page  # model text is escaped
    # nested: the final answer sits inside B's list
    b = next(s.meta["node"] for s in kinds(trace, "value") if s.meta["step"] == "B")
    after_b = tree.split(f'data-node="{b}"', 1)[1]
    assert after_b.index("Final Answer: 24") < after_b.index("</ul>")


def test_the_command_runs_tot_with_its_flags(monkeypatch, capsys):
    from loopwright.interfaces import cli

    policy = lw.ScriptedPolicy(["1. Final Answer: 391\n2. calculate[17 * 23]", "sure", "likely"])
    monkeypatch.setattr(cli, "make_model", lambda args: policy)
    code = cli.main(["run", "What is 17 * 23?", "--mode", "tot", "--search", "dfs", "--depth", "1",
                     "--breadth", "1", "--max-nodes", "2", "--json", "--quiet"])
    out, _ = capsys.readouterr()
    trace = lw.Trace.from_json(out)
    assert code == 0 and trace.mode == "tot" and trace.final_answer == "391"
    assert [s.kind for s in trace.steps] == ["propose", "value", "action", "value", "final"]
    assert trace.steps[2].observation == "391"  # the demo calculate tool ran in its branch
    assert trace.meta["tot"]["search"] == "dfs" and trace.meta["tot"]["nodes"] == 2
    policy.assert_consumed()


class _ScriptedProposals:
    """Proposals from a script, values from the real model: the siblings' value prompts
    are what the measurement is about."""

    def __init__(self, model: lw.models.LlamaCpp, proposal: str) -> None:
        self.model = model
        self.proposal = proposal

    def complete(self, request: lw.ModelRequest) -> lw.Completion | str:
        return self.proposal if request.purpose == "propose" else self.model.complete(request)


@pytest.mark.slow
def test_sibling_value_calls_on_the_embedded_model_evaluate_only_past_the_shared_state():
    policy = _ScriptedProposals(lw.models.LlamaCpp(), "1. 17 * 23 = 391\n2. 17 * 20 = 340\n3. 23 * 10 = 230")
    trace = lw.run("What is 17 * 23?", policy, make_registry(), mode="tot", depth=1, branching=3)
    values = kinds(trace, "value")
    assert len(values) == 3
    state = len(values[0].prompt) - len(lw.PromptSet().tot_value)
    for sibling in values[1:]:  # the node's whole state came from the cache
        usage = sibling.usage
        assert usage.evaluated_tokens < usage.prompt_tokens / 2, usage
        assert sibling.prompt[: state - 20] == values[0].prompt[: state - 20]


def test_tot_runs_through_the_async_api_with_an_async_policy():
    import asyncio

    sync = tree_policy(TRAP, TRAP_VALUES)

    async def policy(prompt: str) -> str:
        await asyncio.sleep(0)
        return sync(prompt)

    trace = asyncio.run(lw.arun("make 24", policy, make_registry(), mode="tot"))
    expected = lw.run("make 24", sync, make_registry(), mode="tot")
    assert (trace.stopped_reason, trace.final_answer) == ("final", "24")
    assert [s.kind for s in trace.steps] == [s.kind for s in expected.steps]
