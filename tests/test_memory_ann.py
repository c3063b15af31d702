import numpy as np
import pytest

from loopwright.memory import HashingEmbedder, HNSWIndex, IVFIndex, SemanticMemory, VectorIndex

pytest.importorskip("faiss")

DIM = 32


def clustered(n: int, seed: int = 0) -> np.ndarray:
    """Points around 20 centres: data with structure, as embeddings have."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((20, DIM)).astype(np.float32)
    points = centres[rng.integers(0, 20, n)] + 0.3 * rng.standard_normal((n, DIM))
    return points.astype(np.float32)


def memory_with(index: VectorIndex | None, vectors: np.ndarray) -> SemanticMemory:
    memory = SemanticMemory(HashingEmbedder(dim=DIM), index)
    memory.add_embeddings([f"item {i}" for i in range(len(vectors))], vectors)
    return memory


def overlap(a: SemanticMemory, b: SemanticMemory, queries: np.ndarray, k: int) -> float:
    hits = [
        len({h.id for h in a.recall(q, k)} & {h.id for h in b.recall(q, k)}) / k for q in queries
    ]
    return float(np.mean(hits))


@pytest.mark.parametrize("make", [HNSWIndex, lambda: IVFIndex(nlist=16, nprobe=4)])
def test_approximate_recall_agrees_with_the_exact_scan(make) -> None:  # type: ignore[no-untyped-def]
    data = clustered(3000)
    queries = clustered(50, seed=1)
    exact = memory_with(None, data)
    approx = memory_with(make(), data)
    assert approx.index is not None and len(approx.index) == 3000
    assert overlap(exact, approx, queries, k=10) >= 0.9
    hit = approx.recall(data[123], k=1)[0]
    assert hit.id == 123 and hit.text == "item 123" and hit.score == pytest.approx(1.0, abs=1e-5)


def test_ivf_holds_rows_back_until_it_can_train_and_recall_stays_exact_meanwhile() -> None:
    index = IVFIndex(nlist=8, train_min=400)
    memory = SemanticMemory(HashingEmbedder(dim=DIM), index)
    data = clustered(500)
    memory.add_embeddings([f"i{i}" for i in range(300)], data[:300])
    assert not index.trained and len(index) == 0
    assert memory.recall(data[7], k=1)[0].id == 7  # exact scan answers
    memory.add_embeddings([f"i{i}" for i in range(300, 500)], data[300:])
    assert index.trained and len(index) == 500
    assert memory.recall(data[450], k=1)[0].id == 450


def test_attaching_an_index_adds_every_row_already_filed() -> None:
    data = clustered(200)
    memory = memory_with(None, data)
    memory.attach_index(HNSWIndex())
    assert memory.index is not None and len(memory.index) == 200
    assert memory.recall(data[42], k=1)[0].id == 42


def test_an_index_that_already_holds_rows_cannot_be_attached() -> None:
    index = HNSWIndex()
    index.add(clustered(5))
    with pytest.raises(ValueError, match="empty index"):
        SemanticMemory(HashingEmbedder(dim=DIM), index)


def test_a_loaded_memory_rebuilds_its_index(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = clustered(100)
    path = memory_with(None, data).save(tmp_path / "m.npz")
    loaded = SemanticMemory.load(path, embedder=HashingEmbedder(dim=DIM), index=HNSWIndex())
    assert loaded.index is not None and len(loaded.index) == 100
    assert loaded.recall(data[9], k=1)[0].id == 9
