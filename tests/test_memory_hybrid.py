"""HybridMemory: BM25 fused with dense recall by reciprocal rank."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from loopwright.memory import (
    HashingEmbedder,
    HybridMemory,
    MiniLMEmbedder,
    TieredMemory,
    default_memory,
    reciprocal_rank_fusion,
)


def test_reciprocal_rank_fusion_adds_one_over_k_plus_rank() -> None:
    fused = dict(reciprocal_rank_fusion([[1, 2, 3], [3, 1]], rrf_k=60))
    assert fused[1] == pytest.approx(1 / 61 + 1 / 62)
    assert fused[3] == pytest.approx(1 / 63 + 1 / 61)
    assert fused[2] == pytest.approx(1 / 62)
    assert [d for d, _ in reciprocal_rank_fusion([[5, 6], [6, 5]])] == [5, 6]  # tie: first list
    assert reciprocal_rank_fusion([]) == []


class TopicEmbedder:
    """A dense embedder that knows one synonym: 'physician' and 'doctor' share a direction."""

    dim = 4
    name = "topic-test"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), 4), dtype=np.float32)
        for i, text in enumerate(texts):
            low = text.lower()
            out[i, 0] = 1.0 if ("doctor" in low or "physician" in low) else 0.0
            out[i, 1] = 1.0 if "invoice" in low else 0.0
            out[i, 2] = 0.1
        return out


def test_dense_recall_finds_what_shares_no_word_and_bm25_keeps_the_rare_word() -> None:
    memory = HybridMemory(TopicEmbedder())
    memory.add_many(
        [f"routine note {i} about the weekly sync" for i in range(30)]
        + ["the doctor is allergic to penicillin", "invoice 7731 is overdue"]
    )
    # no shared word: BM25 alone finds nothing, the dense tier does
    assert HybridMemory().recall("physician", 3) == []
    assert memory.recall("which physician", 1)[0].text == "the doctor is allergic to penicillin"
    # a rare word: BM25 ranks it first, and fusion keeps it first
    assert memory.recall("invoice 7731", 1)[0].text == "invoice 7731 is overdue"


def test_forget_removes_a_turn_from_both_tiers() -> None:
    memory = HybridMemory(HashingEmbedder())
    ids = memory.add_many(["alpha fact", "beta fact", "gamma fact"])
    assert memory.forget(ids[1]) == 1
    assert "beta fact" not in [h.text for h in memory.recall("beta fact", 3)]
    assert len(memory) == 2
    assert memory.clear() == 2 and memory.recall("fact", 3) == []


def test_default_memory_is_a_tiered_memory_over_bm25_without_torch() -> None:
    memory = default_memory()
    assert isinstance(memory, TieredMemory)
    assert isinstance(memory.semantic, HybridMemory) and memory.semantic.dense is None
    memory.add_many([f"Q: chore {i}\nA: done" for i in range(20)] + ["Q: my PIN?\nA: 9090"])
    memory.add_many([f"Q: later chore {i}\nA: done" for i in range(10)])
    assert "9090" in memory.context("what is my PIN", 200)


@pytest.mark.slow
def test_hybrid_with_minilm_finds_a_paraphrase_that_bm25_misses() -> None:
    pytest.importorskip("sentence_transformers")
    texts = [f"reviewed the project code for module {i}" for i in range(40)]
    texts.append("billing reference for the Acme client: 80-4471-2390")
    hybrid = HybridMemory(MiniLMEmbedder(num_threads=1))
    hybrid.add_many(texts)
    lexical = HybridMemory()
    lexical.add_many(texts)
    query = "what account number does the customer use for payments"
    assert "80-4471-2390" in hybrid.recall(query, 1)[0].text
    assert all("80-4471-2390" not in h.text for h in lexical.recall(query, 1))
