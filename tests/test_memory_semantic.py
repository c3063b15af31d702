import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopwright.errors import StoreError
from loopwright.memory import HashingEmbedder, Recalled, SemanticMemory


class TinyEmbedder:
    """Hand-written 3-d vectors, as in the seeds' lab: the recall is checkable by eye."""

    name = "tiny"
    dim = 3
    table = {
        "cats": [1.0, 0.0, 0.0],
        "kittens": [0.9, 0.1, 0.0],
        "dogs": [0.0, 1.0, 0.0],
        "stocks": [0.0, 0.0, 1.0],
    }

    def embed(self, texts):  # type: ignore[no-untyped-def]
        return np.array([self.table[t] for t in texts], dtype=np.float32)


def test_recall_returns_top_k_by_cosine() -> None:
    memory = SemanticMemory(TinyEmbedder())
    memory.add_many(["dogs", "kittens", "stocks", "cats"])
    hits = memory.recall("cats", k=2)
    assert [h.text for h in hits] == ["cats", "kittens"]
    assert hits[0].score == pytest.approx(1.0)
    assert hits[1].score == pytest.approx(0.9 / np.hypot(0.9, 0.1))


def test_recall_takes_a_query_vector_as_well_as_text() -> None:
    memory = SemanticMemory(TinyEmbedder())
    memory.add_many(["cats", "dogs", "stocks"])
    hits = memory.recall(np.array([0.0, 5.0, 0.1]), k=1)
    assert hits[0].text == "dogs"


def test_recall_gives_back_original_text_score_metadata_and_id() -> None:
    memory = SemanticMemory()
    memory.add("The weather in Lyon is rainy", {"turn": 1})
    ident = memory.add("The user's account number is 4417-2290", {"turn": 2, "who": "user"})
    memory.add("Lunch is served at noon", {"turn": 3})
    (hit,) = memory.recall("what is the account number?", k=1)
    assert hit == Recalled(
        "The user's account number is 4417-2290", hit.score, {"turn": 2, "who": "user"}, ident
    )
    assert 0.0 < hit.score <= 1.0


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 60),
    k=st.integers(0, 70),
    seed=st.integers(0, 2**32 - 1),
)
def test_recall_agrees_with_a_brute_force_cosine_ranking(n: int, k: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, 8)).astype(np.float32)
    query = rng.standard_normal(8).astype(np.float32)
    memory = SemanticMemory(HashingEmbedder(dim=8), capacity=4)
    memory.add_embeddings([f"t{i}" for i in range(n)], vectors)
    cosine = vectors @ query / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(query))
    expected = sorted(range(n), key=lambda i: (-cosine[i], i))[:k]
    hits = memory.recall(query, k=k)
    assert len(hits) == min(k, n)
    np.testing.assert_allclose([h.score for h in hits], cosine[expected], rtol=1e-4, atol=1e-5)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)


def test_ties_are_broken_by_insertion_order() -> None:
    memory = SemanticMemory(TinyEmbedder())
    memory.add_many(["cats", "dogs", "cats", "cats"])
    assert [h.id for h in memory.recall("cats", k=3)] == [0, 2, 3]


def test_rows_are_normalised_once_on_insert() -> None:
    memory = SemanticMemory(HashingEmbedder(dim=4))
    memory.add_embeddings(["a", "zero"], [[3.0, 4.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    np.testing.assert_allclose(memory.vectors, [[0.6, 0.8, 0, 0], [0, 0, 0, 0]], atol=1e-7)
    assert not memory.vectors.flags.writeable


def test_matrix_grows_past_its_initial_capacity_keeping_every_row() -> None:
    memory = SemanticMemory(HashingEmbedder(dim=16), capacity=2)
    texts = [f"note number {i}" for i in range(37)]
    for text in texts:
        memory.add(text)
    assert len(memory) == 37 and memory.texts == texts
    assert memory.nbytes >= 37 * 16 * 4
    assert memory.recall("note number 30", k=1)[0].text == "note number 30"


def test_empty_memory_zero_k_and_blank_query_recall_nothing() -> None:
    memory = SemanticMemory()
    assert memory.recall("anything", k=3) == []
    memory.add("something")
    assert memory.recall("something", k=0) == []
    assert memory.recall("  ... ", k=3) == []  # no word characters: embeds to zeros


def test_bad_vectors_are_rejected_and_leave_the_memory_unchanged() -> None:
    memory = SemanticMemory(HashingEmbedder(dim=4))
    memory.add_embeddings(["ok"], [[1.0, 0, 0, 0]])
    with pytest.raises(ValueError, match=r"shape \(n, 4\)"):
        memory.add_embeddings(["wrong dim"], [[1.0, 0, 0]])
    with pytest.raises(ValueError, match="finite"):
        memory.add_embeddings(["nan"], [[np.nan, 0, 0, 0]])
    with pytest.raises(ValueError, match="2 texts but 1 vectors"):
        memory.add_embeddings(["a", "b"], [[1.0, 0, 0, 0]])
    with pytest.raises(TypeError, match="mapping"):
        memory.add("x", ["not", "a", "mapping"])  # type: ignore[arg-type]
    assert len(memory) == 1 and memory.texts == ["ok"]
    assert memory.recall([1.0, 0, 0, 0], k=5)[0].text == "ok"


def test_metadata_is_stored_as_json_data_and_returned_as_a_copy() -> None:
    memory = SemanticMemory()
    memory.add("fact", {"when": Path("/tmp/x"), "n": 1})
    hit = memory.recall("fact", k=1)[0]
    assert hit.metadata == {"when": "/tmp/x", "n": 1}
    hit.metadata["n"] = 99
    assert memory.get(0).metadata["n"] == 1


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    embedder = HashingEmbedder(dim=64)
    memory = SemanticMemory(embedder)
    memory.add_many(
        ["alpha centauri is close", "the account id is 7", "ünïcödé text ✓"],
        [{"turn": 1}, None, {"tags": ["x", "y"]}],
    )
    path = memory.save(tmp_path / "memory.npz")
    loaded = SemanticMemory.load(path, embedder=HashingEmbedder(dim=64))
    assert loaded.texts == memory.texts
    np.testing.assert_array_equal(loaded.vectors, memory.vectors)
    assert [loaded.get(i) for i in range(3)] == [memory.get(i) for i in range(3)]
    before, after = memory.recall("account id", k=2), loaded.recall("account id", k=2)
    assert [(h.id, h.text, h.metadata) for h in after] == [
        (h.id, h.text, h.metadata) for h in before
    ]
    assert [h.score for h in after] == pytest.approx([h.score for h in before], abs=1e-6)
    loaded.add("still writable after load")
    assert len(loaded) == 4


def test_save_keeps_the_given_file_name_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    memory = SemanticMemory()
    memory.add("x")
    memory.save(tmp_path / "mem.bin")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mem.bin"]


def test_load_refuses_vectors_made_by_another_embedder(tmp_path: Path) -> None:
    memory = SemanticMemory(HashingEmbedder(dim=64))
    memory.add("x")
    path = memory.save(tmp_path / "m.npz")
    with pytest.raises(StoreError, match="pass the embedder it was saved with"):
        SemanticMemory.load(path, embedder=HashingEmbedder(dim=32))


def _npz(path: Path, **arrays: np.ndarray) -> Path:
    with path.open("wb") as fh:
        np.savez(fh, **arrays)
    return path


def _header(**overrides: object) -> np.ndarray:
    header = {
        "format": "loopwright.semantic-memory",
        "version": 1,
        "embedder": "tiny",
        "dim": 3,
        "texts": ["a"],
        "metadata": [None],
    }
    header.update(overrides)
    return np.frombuffer(json.dumps(header).encode(), np.uint8)


@pytest.mark.parametrize(
    "make",
    [
        lambda p: p.write_bytes(b"\x00garbage, not a zip file at all"),
        lambda p: p.write_bytes(b""),
        lambda p: _npz(p, vectors=np.zeros((1, 3), np.float32)),
        lambda p: _npz(p, vectors=np.zeros((1, 3), np.float32), header=np.zeros(4, np.uint8)),
        lambda p: _npz(p, vectors=np.zeros((2, 3), np.float32), header=_header()),
        lambda p: _npz(p, vectors=np.zeros((1, 3), np.float64), header=_header()),
        lambda p: _npz(p, vectors=np.zeros((1, 3), np.float32), header=_header(version=2)),
        lambda p: _npz(p, vectors=np.zeros((1, 3), np.float32), header=_header(format="x")),
        lambda p: _npz(p, vectors=np.zeros((1, 3), np.float32), header=_header(texts=[1])),
        lambda p: _npz(p, vectors=np.zeros((1, 3), np.float32), header=_header(metadata=[])),
        lambda p: _npz(p, vectors=np.full((1, 3), np.nan, np.float32), header=_header()),
        lambda p: _npz(p, vectors=np.array([object()]), header=_header()),
    ],
    ids=[
        "garbage",
        "empty",
        "no-header",
        "header-not-json",
        "row-count",
        "dtype",
        "newer-version",
        "foreign-format",
        "text-not-str",
        "metadata-length",
        "nan",
        "pickled-object",
    ],
)
def test_loading_a_corrupt_file_raises_a_store_error_naming_the_file(tmp_path: Path, make) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bad.npz"
    try:
        make(path)
    except ValueError:
        pytest.skip("numpy refused to write this case")
    with pytest.raises(StoreError, match="bad.npz"):
        SemanticMemory.load(path, embedder=TinyEmbedder())


def test_loading_a_truncated_file_raises_a_store_error(tmp_path: Path) -> None:
    memory = SemanticMemory()
    memory.add_many([f"item {i}" for i in range(50)])
    path = memory.save(tmp_path / "m.npz")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(StoreError, match="m.npz"):
        SemanticMemory.load(path)
