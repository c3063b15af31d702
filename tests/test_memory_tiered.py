import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopwright.memory import (
    BufferMemory,
    HashingEmbedder,
    HybridMemory,
    SemanticMemory,
    SummaryMemory,
    TieredMemory,
    context_within,
)
from loopwright.memory.tiered import TRIM_MARKER, trim_turn
from loopwright.policy import ScriptedPolicy
from loopwright.trace import estimate_tokens

_TURN = re.compile(r'<untrusted source="turn#\d+">(.*?)</untrusted>', re.S)


def concat_summarizer(prompt: str) -> str:
    previous = prompt.split("Summary so far:\n", 1)[1].split("\n\nNew turns:", 1)[0]
    parts = [] if previous == "(none)" else [previous]
    return " | ".join(parts + _TURN.findall(prompt))


def tiered(max_turns: int = 2, recall_k: int = 2) -> TieredMemory:
    return TieredMemory(
        BufferMemory(max_turns),
        SummaryMemory(concat_summarizer),
        SemanticMemory(HashingEmbedder()),
        recall_k=recall_k,
    )


def sections(context: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = ""
    for line in context.split("\n"):
        if line in ("Summary:", "Recalled:", "Recent:"):
            current = line[:-1]
            out[current] = []
        else:
            out[current].append(line)
    return out


def test_add_folds_evicted_turns_into_the_summary_and_files_every_turn() -> None:
    memory = tiered(max_turns=2)
    for turn in ["t1", "t2", "t3", "t4"]:
        memory.add(turn, {"n": turn})
    assert memory.buffer.turns == ["t3", "t4"]
    assert memory.summary is not None and memory.summary.summary == "t1 | t2"
    assert memory.semantic is not None and memory.semantic.texts == ["t1", "t2", "t3", "t4"]
    assert memory.semantic.get(0).metadata == {"n": "t1"}


def test_context_assembles_summary_recalled_and_recent_in_that_order() -> None:
    memory = tiered(max_turns=2, recall_k=1)
    memory.add("user: my account ID is 80-4417")
    for i in range(6):
        memory.add(f"user: small talk about the weather, day {i}")
    context = memory.context("what was my account ID?", budget_tokens=400)
    parts = sections(context)
    assert list(parts) == ["Summary", "Recalled", "Recent"]
    assert parts["Summary"][0].startswith("user: my account ID is 80-4417 | user: small talk")
    assert parts["Recalled"] == ["- user: my account ID is 80-4417"]
    assert parts["Recent"] == [
        "user: small talk about the weather, day 4",
        "user: small talk about the weather, day 5",
    ]


def test_recall_never_repeats_a_turn_shown_among_recent_turns() -> None:
    memory = tiered(max_turns=3, recall_k=3)
    for turn in ["the account id is 7", "the account id is 8", "unrelated", "account id"]:
        memory.add(turn)
    parts = sections(memory.context("account id", budget_tokens=500))
    recent = set(parts["Recent"])
    assert recent == {"the account id is 8", "unrelated", "account id"}
    assert parts["Recalled"] == ["- the account id is 7"]


def test_recent_turns_win_over_recall_and_summary_when_the_budget_is_tight() -> None:
    memory = tiered(max_turns=2, recall_k=2)
    for i in range(5):
        memory.add(f"turn number {i} with a little padding text")
    budget = estimate_tokens(
        "Recent:\nturn number 3 with a little padding text\nturn number 4 with a little padding text"
    )
    parts = sections(memory.context("turn number 0", budget_tokens=budget))
    assert list(parts) == ["Recent"]
    assert len(parts["Recent"]) == 2


def test_newest_turn_is_trimmed_rather_than_overflowing() -> None:
    memory = tiered(max_turns=2)
    memory.add("x" * 3000)
    context = memory.context("x", budget_tokens=100)
    assert estimate_tokens(context) <= 100
    assert context.startswith("Recent:\nxxx") and context.endswith(TRIM_MARKER)


def _step_turn(k: int, thought: str, result: str) -> str:
    """A step as a ReAct run files it in memory."""
    return f'Step {k}. Thought: {thought}\nAction: read_page\nAction Input: {{"n": {k}}}\nObservation: {result}\n'


RESULT = "Page 4. routine notes about the billing module. The vault code is QX-77, said Ada."


def test_a_recalled_step_keeps_its_result_whole_and_loses_its_thought_and_action_first() -> None:
    memory = TieredMemory(BufferMemory(1), None, HybridMemory(), recall_k=1)
    memory.add(_step_turn(4, "I will read page four now, " * 6, RESULT))
    memory.add("a later turn about something else")
    whole = memory.context("vault code", 10_000)
    budget = estimate_tokens(whole) - 30  # too small for the step whole
    context = memory.context("vault code", budget)
    assert estimate_tokens(context) <= budget
    recalled = sections(context)["Recalled"]
    assert recalled[0].startswith("- Step 4. Thought: I will read") and recalled[0].endswith(TRIM_MARKER)
    assert recalled[-2:] == [f"  Observation: {RESULT}", "  "]  # the result, whole and last


def test_a_step_is_shortened_to_its_label_before_its_result_is_cut() -> None:
    turn = _step_turn(4, "reading " * 40, "x" * 200 + " QX-77 " + "y" * 200)

    def fits(text: str) -> bool:
        return len(text) <= 200

    short = trim_turn(turn, fits)
    assert short.startswith("Step 4. Thought: reading") and "\nObservation: xxx" in short
    assert len(short) <= 200 and short.endswith(TRIM_MARKER)
    assert trim_turn(turn, lambda t: len(t) <= len(turn)) == turn
    assert trim_turn("plain text " * 40, fits) == ("plain text " * 40)[: 200 - len(TRIM_MARKER)] + TRIM_MARKER
    assert trim_turn(turn, lambda t: len(t) <= 40) == ""  # not even some of the result


def test_turns_the_prompt_holds_are_neither_recent_nor_recalled() -> None:
    memory = TieredMemory(BufferMemory(3), None, HybridMemory(), recall_k=2)
    for turn in ["the vault code is QX-77", "filler one", "the vault code moved", "filler two"]:
        memory.add(turn)
    held = {"filler two", "the vault code moved"}
    context = memory.context("vault code", 400, exclude=held)
    assert not any(turn in context for turn in held)
    assert sections(context) == {"Recalled": ["- the vault code is QX-77"], "Recent": ["filler one"]}
    assert "filler two" in memory.context("vault code", 400)  # without the list, as before
    shown = context_within(memory, "vault code", 400, lambda t: t, exclude=held)
    assert shown == context


def test_recall_first_gives_the_room_to_recalled_turns_before_recent_ones() -> None:
    def memory(recall_first: bool) -> TieredMemory:
        m = TieredMemory(BufferMemory(2), None, HybridMemory(), recall_k=1, recall_first=recall_first)
        m.add("the vault code is QX-77")
        for i in range(4):
            m.add(f"routine turn number {i} with some padding words")
        return m

    recent = [f"routine turn number {i} with some padding words" for i in (2, 3)]
    budget = estimate_tokens("\n".join(["Recent:", *recent]))  # room for the two recent turns only
    assert sections(memory(True).context("vault code", budget)) == {
        "Recalled": ["- the vault code is QX-77"],
        "Recent": recent[1:],
    }
    assert sections(memory(False).context("vault code", budget)) == {"Recent": recent}  # the default


def test_summary_is_trimmed_to_the_room_left() -> None:
    memory = TieredMemory(BufferMemory(1), SummaryMemory(lambda p: "gist " * 400))
    memory.add("a")
    memory.add("b")
    context = memory.context("q", budget_tokens=60)
    parts = sections(context)
    assert parts["Recent"] == ["b"]
    assert parts["Summary"][0].endswith(TRIM_MARKER)
    assert estimate_tokens(context) <= 60


def test_zero_budget_gives_an_empty_context_and_negative_is_an_error() -> None:
    memory = tiered()
    memory.add("something")
    assert memory.context("something", 0) == ""
    with pytest.raises(ValueError, match="budget_tokens"):
        memory.context("something", -1)


def test_tiers_may_be_left_out() -> None:
    memory = TieredMemory(BufferMemory(1))
    memory.add("old")
    memory.add("new")
    assert memory.context("old", 100) == "Recent:\nnew"


def test_add_many_folds_a_batch_of_evictions_with_one_summarizer_call() -> None:
    policy = ScriptedPolicy(["folded"])
    memory = TieredMemory(BufferMemory(2), SummaryMemory(policy), SemanticMemory())
    memory.add_many(["a", "b", "c", "d", "e"])
    policy.assert_consumed()
    assert memory.summary is not None and memory.summary.summary == "folded"
    assert all(t in policy.prompts[0] for t in ("a", "b", "c"))


def test_min_score_keeps_weak_matches_out() -> None:
    memory = TieredMemory(BufferMemory(1), None, SemanticMemory(), recall_k=3, min_score=0.5)
    memory.add("the account id is 7")
    memory.add("unrelated chatter about lunch")
    memory.add("latest")
    parts = sections(memory.context("the account id", 200))
    assert parts["Recalled"] == ["- the account id is 7"]


@settings(max_examples=150, deadline=None)
@given(
    turns=st.lists(st.text(min_size=0, max_size=300), max_size=12),
    budget=st.integers(0, 400),
    max_turns=st.integers(1, 5),
    query=st.text(max_size=50),
)
def test_context_never_exceeds_the_budget(
    turns: list[str], budget: int, max_turns: int, query: str
) -> None:
    memory = tiered(max_turns=max_turns, recall_k=3)
    memory.add_many(turns)
    context = memory.context(query, budget)
    assert estimate_tokens(context) <= budget
    if any("\n" in t for t in turns) or not context:
        return  # the structure below is read line by line: single-line turns only
    parts = sections(context)
    recent = parts.get("Recent", [])
    if recent and not recent[-1].endswith(TRIM_MARKER):
        assert recent == memory.buffer.turns[-len(recent) :]  # the newest turns, in order
    for item in parts.get("Recalled", []):
        assert item[2:] not in recent  # never repeats a recent turn


@settings(max_examples=60, deadline=None)
@given(
    turns=st.lists(st.text(alphabet="ab \n", max_size=40), min_size=1, max_size=8),
    budget=st.integers(0, 200),
)
def test_context_never_exceeds_the_budget_with_multiline_turns(
    turns: list[str], budget: int
) -> None:
    memory = tiered(max_turns=2, recall_k=3)
    memory.add_many(turns)
    assert estimate_tokens(memory.context("a b", budget)) <= budget


def test_context_within_keeps_a_wrapped_context_inside_the_budget() -> None:
    from loopwright.memory import context_within
    from loopwright.untrusted import fence

    memory = tiered(max_turns=3)
    for i in range(6):
        memory.add(f"<b>&amp; {i}</b> " * 10)
    wrap = lambda text: f"Memory:\n{fence(text, 'memory')}"  # noqa: E731
    assert estimate_tokens(wrap(memory.context("b", 200))) > 200  # escaping expands it
    shown = context_within(memory, "b", 200, wrap)
    assert shown.startswith("Memory:\n<untrusted") and estimate_tokens(shown) <= 200
    assert context_within(memory, "b", 5, wrap) == ""


def test_context_within_shows_a_section_of_exactly_the_budget_whole() -> None:
    """The budget is the most the section may take: one that renders to exactly the budget
    is shown as it is, not shrunk."""
    from loopwright.memory import context_within
    from loopwright.untrusted import fence

    memory = tiered(max_turns=3)
    for i in range(6):
        memory.add(f"<b>&amp; {i}</b> " * 10)
    wrap = lambda text: f"Memory:\n{fence(text, 'memory')}"  # noqa: E731
    whole = context_within(memory, "b", 10_000, wrap)
    exact = estimate_tokens(whole)
    assert context_within(memory, "b", exact, wrap) == whole
    assert estimate_tokens(context_within(memory, "b", exact - 1, wrap)) <= exact - 1


def test_a_failing_summarizer_still_leaves_the_turn_recallable() -> None:
    def broken(prompt: str) -> str:
        raise ConnectionError("summarizer down")

    memory = TieredMemory(BufferMemory(1), SummaryMemory(broken), SemanticMemory())
    memory.add("the account id is 7")
    with pytest.raises(ConnectionError):
        memory.add("later turn")
    assert memory.semantic is not None
    assert memory.semantic.recall("account id", k=1)[0].text == "the account id is 7"
