"""BM25Memory: rare words outweigh common ones, the delta segment scores exactly as a
batch index would, adds do not rebuild the index each time, forgetting is final."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopwright.memory import BM25Memory, HashingEmbedder, SemanticMemory

ROUTINE = [
    f"reviewed the project code for module {i} with the team; the project code builds"
    for i in range(200)
]
FACT = "the project code name for the launch is Bluefin"


def test_a_rare_word_outranks_many_turns_that_share_common_words() -> None:
    memory = BM25Memory()
    memory.add_many(ROUTINE[:100] + [FACT] + ROUTINE[100:])
    query = "the project code name"
    assert memory.recall(query, 1)[0].text == FACT
    # the control: hashed bag-of-words has no notion of rarity
    dense = SemanticMemory(HashingEmbedder())
    dense.add_many(ROUTINE[:100] + [FACT] + ROUTINE[100:])
    assert dense.recall(query, 1)[0].text != FACT


def test_stemming_lets_a_word_form_meet_another() -> None:
    memory = BM25Memory()
    memory.add_many(["she recalled the meeting was cancelled", "weather is sunny"])
    assert memory.recall("cancel recall", 1)[0].id == 0


def test_only_turns_sharing_a_term_are_recalled() -> None:
    memory = BM25Memory()
    memory.add_many(["alpha beta", "gamma delta"])
    assert [h.id for h in memory.recall("beta", 5)] == [0]
    assert memory.recall("zeta", 5) == []
    assert memory.recall("the of and", 5) == []  # stop words only
    assert BM25Memory().recall("anything", 3) == []


def test_delta_segment_scores_as_the_batch_index_does() -> None:
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(60)]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(1, 12)))) for _ in range(300)]
    delta = BM25Memory(min_rebuild=10**9)  # everything stays in the delta postings
    delta.add_many(texts)
    assert delta.delta_size == 300
    batch = BM25Memory(min_rebuild=10**9)
    batch.add_many(texts)
    batch.rebuild()  # everything in one bm25s index
    assert batch.delta_size == 0
    for query in ["w1 w2", "w5", "w7 w7 w30", "w59 w0 w11 w12"]:
        np.testing.assert_allclose(delta.scores(query), batch.scores(query), rtol=1e-5)


def test_adding_turns_one_at_a_time_rebuilds_the_index_geometrically() -> None:
    memory = BM25Memory(rebuild_fraction=0.5, min_rebuild=64)
    for i in range(5000):
        memory.add(f"turn {i} about topic {i % 97}")
    # batch sizes 64, then x1.5 each time: about log_1.5(5000 / 64) + 1 rebuilds, not 5000
    assert memory.rebuilds <= 12
    assert memory.delta_size < 0.5 * (5000 - memory.delta_size) + 64
    assert memory.recall("topic 42", 200)[0].text.endswith("topic 42")


def test_recall_is_the_same_whichever_segment_holds_the_fact() -> None:
    early, late = BM25Memory(min_rebuild=16), BM25Memory(min_rebuild=16)
    early.add_many([FACT, *ROUTINE[:40]])
    late.add_many([*ROUTINE[:40], FACT])
    assert early.delta_size < 41 and early.rebuilds >= 1
    query = "project code name for the launch"
    assert early.recall(query, 1)[0].text == late.recall(query, 1)[0].text == FACT


def test_forgotten_turns_are_never_recalled_again() -> None:
    memory = BM25Memory(min_rebuild=4)
    ids = memory.add_many([FACT, *ROUTINE[:10], "Bluefin ships in May"])
    assert memory.forget([ids[0], ids[-1]]) == 2
    assert memory.forget(ids[0]) == 0  # already forgotten
    assert all("Bluefin" not in h.text for h in memory.recall("Bluefin launch", 20))
    memory.rebuild()
    assert memory.recall("Bluefin", 5) == []
    assert len(memory) == 10 and memory.texts[0] == ""
    with pytest.raises(KeyError):
        memory.get(ids[0])
    with pytest.raises(IndexError):
        memory.forget(99)


def test_bad_arguments_are_clear_errors() -> None:
    memory = BM25Memory()
    with pytest.raises(TypeError, match="not a single str"):
        memory.add_many("abc")
    with pytest.raises(TypeError, match="must be str"):
        memory.add_many([1])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="k must be"):
        memory.recall("x", -1)
    with pytest.raises(ValueError, match="metadata"):
        memory.add_many(["a"], [{}, {}])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=30), st.text(max_size=40), st.integers(0, 8))
def test_recall_of_any_text_returns_at_most_k_live_turns(
    texts: list[str], query: str, k: int
) -> None:
    memory = BM25Memory(min_rebuild=5)
    memory.add_many(texts)
    if texts:
        memory.forget(0)
    hits = memory.recall(query, k)
    assert len(hits) <= k
    assert all(h.id != 0 and h.score > 0 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_default_recall_needs_neither_torch_nor_scipy() -> None:
    """In a fresh interpreter where torch and scipy cannot be imported, the default
    memory files and recalls (bm25s falls back to its numpy backend)."""
    import subprocess
    import sys

    script = (
        "import sys; sys.modules['torch'] = None; sys.modules['scipy'] = None\n"
        "import loopwright as lw\n"
        "m = lw.memory.default_memory()\n"
        "m.add_many([f'routine note {i}' for i in range(300)] + ['the vault code is 4411'])\n"
        "m.add_many([f'later note {i}' for i in range(10)])\n"
        "assert '4411' in m.context('what is the vault code', 300)\n"
        "assert 'torch' not in [k for k, v in sys.modules.items() if v is not None]\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
