"""The long-run check with the default memory (BM25, no torch): a 170-step ReAct run in a
900-token window, five facts noted at steps 4 to 140 (or read in a tool's results), then
asked for one of them. The scenario is tests/longrun_suite.py; benchmarks/recall.py
reports the same runs."""

from __future__ import annotations

import re

import pytest

from longrun_suite import FACTS, PAGE_NOTES, PLANTED_AT, STEPS, WINDOW, run_all, run_long
from loopwright.memory import BufferMemory, HashingEmbedder, SemanticMemory, TieredMemory
from loopwright.trace import estimate_tokens


def test_default_memory_recalls_at_least_4_of_5_facts_asked_in_their_own_words() -> None:
    outcomes = run_all(paraphrased=False)
    for o in outcomes:
        assert o.trace.stopped_reason == "final" and o.trace.llm_calls == STEPS
        worst = max(estimate_tokens(p) for p in o.prompts)
        assert worst <= WINDOW, f"a prompt of {worst} tokens in a {WINDOW}-token window"
        folded = {k for fold in o.trace.meta["folds"] for k in fold["folded_steps"]}
        assert set(PLANTED_AT) <= folded  # every fact left the scratchpad long before
        recent = o.prompts[-1].split("Question:")[-1]
        assert o.fact.answer not in recent  # so an answer came back through memory
    recalled = [o.recalled for o in outcomes]
    assert sum(recalled) >= 4, recalled


def test_default_memory_brings_back_every_fact_a_long_run_read_in_a_tool_result() -> None:
    """The run a user gets from `lw.run(..., context_tokens=900)` and nothing else: each
    fact is only in what read_page returned at its step, and the step is recalled with
    that result whole (its thought and call shortened first)."""
    outcomes = run_all(paraphrased=False, kind="pages")
    for o in outcomes:
        assert o.trace.stopped_reason == "final" and o.trace.llm_calls == STEPS
        worst = max(estimate_tokens(p) for p in o.prompts)
        assert worst <= WINDOW, f"a prompt of {worst} tokens in a {WINDOW}-token window"
        scratchpad = o.prompts[-1].split("Question:")[-1]
        assert o.fact.answer not in scratchpad  # the answer came back through memory
    assert [o.recalled for o in outcomes] == [True] * len(outcomes)


@pytest.mark.parametrize("page_notes", [1, PAGE_NOTES])
def test_memory_never_repeats_a_step_the_prompt_holds_and_the_newest_step_stays(page_notes: int) -> None:
    """In every prompt of a long paged run: the memory section names no step the
    scratchpad below it still shows (short pages: the scratchpad keeps a few older steps
    as stubs, and memory has them whole), and the scratchpad ends with the step just
    taken (long pages: it is a quarter of the room)."""
    outcome = run_long(FACTS[2], FACTS[2].asked, kind="pages", page_notes=page_notes)
    with_memory = 0
    for k, prompt in enumerate(outcome.prompts[1:], 2):
        head, scratchpad = prompt.rsplit("\nQuestion: ", 1)
        held = {int(n) for n in re.findall(r'Action Input: \{"n": (\d+)\}', scratchpad)}
        assert k - 1 in held  # page k - 1 was read at step k - 1
        if "Memory of earlier steps:" in head:
            with_memory += 1
            recalled = {int(n) for n in re.findall(r"Step (\d+)\. Thought:", head)}
            assert not recalled & held, f"prompt {k} repeats steps {sorted(recalled & held)}"
    assert with_memory > STEPS // 2
    assert outcome.recalled


def test_word_hashing_alone_falls_behind_on_the_same_runs() -> None:
    """The control: the same runs with the old default archive (hashed bag-of-words)."""

    def hashing() -> TieredMemory:
        return TieredMemory(BufferMemory(2), None, SemanticMemory(HashingEmbedder()), recall_k=3)

    hashed = sum(o.recalled for o in run_all(paraphrased=False, make_memory=hashing))
    bm25 = sum(o.recalled for o in run_all(paraphrased=False))
    assert hashed < bm25


def test_a_fact_that_shares_rare_words_with_its_paraphrase_is_still_found() -> None:
    """Paraphrased questions are reported by benchmarks/recall.py; the two that keep a
    name (Mara, Northwind) are found by BM25 without any embedder. (Memory is asked at
    each fold with the task and the latest thought: whether the thought that repeats the
    question came before the last fold decides the notes form's Northwind, so the pages
    form is the one checked for both.)"""
    assert run_long(FACTS[1], FACTS[1].paraphrased).recalled
    for fact in (FACTS[1], FACTS[2]):
        assert run_long(fact, fact.paraphrased, kind="pages").recalled


@pytest.mark.slow
def test_the_window_holds_in_the_embedded_models_own_tokens() -> None:
    """The budget is kept with the conservative estimate; in the real tokenizer's count
    every prompt is inside the window too."""
    from loopwright.models import LlamaCpp

    model = LlamaCpp()
    outcome = run_long(FACTS[0], FACTS[0].asked)
    worst = max(len(model.tokenize(p)) for p in outcome.prompts)
    assert outcome.recalled
    assert worst <= WINDOW, f"{worst} real tokens"
