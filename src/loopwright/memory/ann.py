"""Approximate nearest-neighbour indexes for SemanticMemory at millions of items.

Optional (extra `loopwright[ann]`, faiss-cpu). An index holds the same normalised rows as
the memory's matrix, in the same order, so a row's position is its id; SemanticMemory
searches it only while it covers every row and falls back to the exact scan otherwise.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

FloatMatrix = npt.NDArray[np.float32]
IdArray = npt.NDArray[np.int64]

_FAISS_HINT = "the approximate index needs faiss-cpu: `pip install 'loopwright[ann]'`"


@runtime_checkable
class VectorIndex(Protocol):
    """Inner-product search over appended rows; a row's id is its insertion position."""

    def add(self, vectors: FloatMatrix) -> None:
        """Append L2-normalised rows, shape (n, dim)."""

    def search(self, query: FloatMatrix, k: int) -> tuple[FloatMatrix, IdArray]:
        """Top-k (scores, ids) for one normalised query of shape (1, dim), best first;
        fewer than k when the index finds fewer."""

    def __len__(self) -> int:
        """How many rows are searchable now."""


def _faiss() -> Any:
    try:
        import faiss
    except ImportError as exc:
        raise ImportError(_FAISS_HINT) from exc
    return faiss


def _results(scores: Any, ids: Any) -> tuple[FloatMatrix, IdArray]:
    found = ids[0] >= 0
    return (
        np.asarray(scores[0][found], dtype=np.float32),
        np.asarray(ids[0][found], dtype=np.int64),
    )


class HNSWIndex:
    """A faiss HNSW graph (inner product). Incremental, no training; build cost grows
    with `ef_construction`, recall with `ef_search`."""

    def __init__(self, m: int = 32, *, ef_construction: int = 80, ef_search: int = 128) -> None:
        self.m = m
        self.ef_construction = ef_construction
        self.ef_search = ef_search
        self._index: Any = None

    def add(self, vectors: FloatMatrix) -> None:
        if self._index is None:
            faiss = _faiss()
            self._index = faiss.IndexHNSWFlat(vectors.shape[1], self.m, faiss.METRIC_INNER_PRODUCT)
            self._index.hnsw.efConstruction = self.ef_construction
        self._index.add(np.ascontiguousarray(vectors, dtype=np.float32))

    def search(self, query: FloatMatrix, k: int) -> tuple[FloatMatrix, IdArray]:
        self._index.hnsw.efSearch = max(self.ef_search, k)
        return _results(*self._index.search(np.ascontiguousarray(query, dtype=np.float32), k))

    def __len__(self) -> int:
        return 0 if self._index is None else int(self._index.ntotal)

    @property
    def nbytes(self) -> int:
        """Bytes held: the vectors plus the graph's neighbour lists, offsets and levels."""
        if self._index is None:
            return 0
        hnsw = self._index.hnsw
        graph = hnsw.neighbors.size() * 4 + hnsw.offsets.size() * 8 + hnsw.levels.size() * 4
        return int(self._index.ntotal * self._index.d * 4 + graph)

    def __repr__(self) -> str:
        return f"HNSWIndex(m={self.m}, rows={len(self)})"


class IVFIndex:
    """A faiss inverted-file index (inner product): rows are bucketed by k-means into
    `nlist` lists and a query scans the `nprobe` nearest lists.

    It needs training data: rows are held back until `train_min` of them have arrived
    (by default 39 * nlist, faiss's minimum), then the quantizer is trained on a sample of
    at most `train_max` rows and everything is added. Until then the index is empty and
    SemanticMemory uses its exact scan.
    """

    def __init__(
        self,
        nlist: int = 1024,
        *,
        nprobe: int = 16,
        train_min: int | None = None,
        train_max: int | None = None,
        seed: int = 0,
    ) -> None:
        if nlist < 1 or nprobe < 1:
            raise ValueError(f"nlist and nprobe must be >= 1, got {nlist!r}, {nprobe!r}")
        self.nlist = nlist
        self.nprobe = nprobe
        self.train_min = train_min if train_min is not None else 39 * nlist
        self.train_max = train_max if train_max is not None else 64 * nlist
        self.seed = seed
        self._index: Any = None
        self._quantizer: Any = None
        self._pending: list[FloatMatrix] = []
        self._pending_rows = 0

    @property
    def trained(self) -> bool:
        return self._index is not None

    def add(self, vectors: FloatMatrix) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if self._index is not None:
            self._index.add(vectors)
            return
        self._pending.append(vectors)
        self._pending_rows += len(vectors)
        if self._pending_rows >= max(self.train_min, self.nlist):
            pending = self._pending
            self._train(pending[0] if len(pending) == 1 else np.concatenate(pending))

    def _train(self, rows: FloatMatrix) -> None:
        faiss = _faiss()
        quantizer = faiss.IndexFlatIP(rows.shape[1])
        index = faiss.IndexIVFFlat(quantizer, rows.shape[1], self.nlist, faiss.METRIC_INNER_PRODUCT)
        sample = rows
        if len(rows) > self.train_max:
            pick = np.random.default_rng(self.seed).choice(len(rows), self.train_max, replace=False)
            sample = rows[np.sort(pick)]
        index.train(sample)
        index.add(rows)
        index.nprobe = self.nprobe
        self._quantizer = quantizer  # faiss does not own it from Python: keep it alive
        self._index = index
        self._pending, self._pending_rows = [], 0

    def search(self, query: FloatMatrix, k: int) -> tuple[FloatMatrix, IdArray]:
        self._index.nprobe = self.nprobe
        return _results(*self._index.search(np.ascontiguousarray(query, dtype=np.float32), k))

    def __len__(self) -> int:
        return 0 if self._index is None else int(self._index.ntotal)

    @property
    def nbytes(self) -> int:
        """Bytes held: each row's vector and id in its list, the centroids, and rows
        still waiting for training."""
        pending = sum(int(p.nbytes) for p in self._pending)
        if self._index is None:
            return pending
        d = int(self._index.d)
        return int(self._index.ntotal * (d * 4 + 8) + self.nlist * d * 4) + pending

    def __repr__(self) -> str:
        return f"IVFIndex(nlist={self.nlist}, nprobe={self.nprobe}, rows={len(self)})"
