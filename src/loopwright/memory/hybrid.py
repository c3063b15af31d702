"""The default recall: BM25 over every turn, fused with dense recall when an embedder is
given, optionally kept in a store so it outlives the process.

Fusion is reciprocal rank fusion (Cormack, Clarke and Buettcher, SIGIR 2009): a turn's
score is the sum over the two rankings of 1 / (rrf_k + rank), rank 1 the best, over
each ranking's top `depth`. It needs no calibration between BM25 scores (unbounded)
and cosines (-1..1), which is why LlamaIndex, Elasticsearch and Weaviate use it too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from loopwright.memory.buffer import BufferMemory
from loopwright.memory.embedders import Embedder, embedder_name
from loopwright.memory.lexical import BM25Memory
from loopwright.memory.semantic import Recalled, SemanticMemory
from loopwright.memory.sqlite import MemoryStore
from loopwright.memory.tiered import TieredMemory

RRF_K = 60  # the constant of the paper, and of most implementations since


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[int]], *, rrf_k: int = RRF_K
) -> list[tuple[int, float]]:
    """Fuse rankings of ids (each best first) into one: (id, score), best first; ties go
    to the id ranked better in the first ranking, then to the lower id."""
    scores: dict[int, float] = {}
    first: dict[int, int] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking, 1):
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (rrf_k + rank)
    for rank, doc in enumerate(rankings[0] if rankings else (), 1):
        first.setdefault(doc, rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], first.get(kv[0], 1 << 62), kv[0]))


class HybridMemory:
    """Turns recalled by BM25, fused by reciprocal rank with dense recall when an
    embedder is given; with a `store`, every turn is written through to it under
    `namespace` and the turns already there are loaded (and recalled) on creation.

    The same reading API as SemanticMemory (`add`, `add_many`, `recall`, `get`, `texts`,
    `len`), plus `forget` and `clear`. `recall` scores are fused RRF scores with an
    embedder, BM25 scores without one. Ids are insertion positions in this process;
    `store_id(id)` is the row id in the store.
    """

    def __init__(
        self,
        embedder: Embedder | None = None,
        *,
        store: MemoryStore | None = None,
        namespace: str = "default",
        rrf_k: int = RRF_K,
        depth: int = 50,
        lexical: BM25Memory | None = None,
    ) -> None:
        if rrf_k < 1 or depth < 1:
            raise ValueError(f"rrf_k and depth must be >= 1, got {rrf_k!r} and {depth!r}")
        self.lexical = lexical if lexical is not None else BM25Memory()
        if len(self.lexical.texts):
            raise ValueError("pass an empty BM25Memory: it must hold exactly this memory's turns")
        self.dense = SemanticMemory(embedder) if embedder is not None else None
        self.embedder = embedder
        self.store = store
        self.namespace = namespace
        self.rrf_k = rrf_k
        self.depth = depth
        self._store_ids: list[int] = []
        if store is not None:
            self._load(store)

    def _load(self, store: MemoryStore) -> None:
        items = store.items(self.namespace)
        if not items:
            return
        texts = [m.text for m in items]
        ids = [m.id for m in items]
        self.lexical.add_many(texts, [m.metadata for m in items])
        if self.dense is not None:
            name, dim = embedder_name(self.dense.embedder), self.dense.dim
            kept = store.vectors(ids, name, dim)
            missing = [i for i, sid in enumerate(ids) if sid not in kept]
            if missing:  # filed without this embedder: embed once, keep for next time
                fresh = self.dense.embedder.embed([texts[i] for i in missing])
                store.put_vectors([ids[i] for i in missing], name, fresh)
                kept.update({ids[i]: row for i, row in zip(missing, fresh, strict=True)})
            matrix = np.stack([kept[sid] for sid in ids]).astype(np.float32)
            self.dense.add_embeddings(texts, matrix, [m.metadata for m in items])
        self._store_ids = ids

    # -- writing ---------------------------------------------------------------------

    def add(self, text: str, metadata: Mapping[str, Any] | None = None) -> int:
        """File one turn; return its id."""
        return self.add_many([text], None if metadata is None else [metadata])[0]

    def add_many(
        self, texts: Sequence[str], metadatas: Sequence[Mapping[str, Any] | None] | None = None
    ) -> list[int]:
        """File turns (one embedding batch, one store transaction); return their ids."""
        if isinstance(texts, str):
            raise TypeError("expected a sequence of texts, not a single str")
        texts = list(texts)
        vectors = None
        if self.dense is not None and texts:
            vectors = self.dense.embedder.embed(texts)
        if self.store is not None:
            stored = self.store.add(self.namespace, texts, metadatas)
            if vectors is not None and self.dense is not None:
                self.store.put_vectors(stored, embedder_name(self.dense.embedder), vectors)
            self._store_ids.extend(stored)
        ids = self.lexical.add_many(texts, metadatas)
        if self.dense is not None:
            dense_vectors = vectors if vectors is not None else np.zeros((0, self.dense.dim))
            self.dense.add_embeddings(texts, dense_vectors, metadatas)
        return ids

    def forget(self, ids: int | Iterable[int]) -> int:
        """Forget turns: removed from recall, and from the store's file. Returns how many
        were remembered."""
        wanted = [ids] if isinstance(ids, int) else list(ids)
        removed = self.lexical.forget(wanted)
        if self.dense is not None:
            self.dense.forget(wanted)
        if self.store is not None:
            self.store.forget([self._store_ids[i] for i in wanted])
        return removed

    def clear(self) -> int:
        """Forget every turn of this namespace (in the store too); returns how many."""
        live = self.lexical.live_ids()
        if self.store is not None:
            self.store.forget_namespace(self.namespace)
        removed = self.lexical.forget(live)
        if self.dense is not None:
            self.dense.forget(live)
        return removed

    # -- reading ---------------------------------------------------------------------

    def recall(self, query: str, k: int = 5) -> list[Recalled]:
        """The k turns that best match the query, best first."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"k must be an integer >= 0, got {k!r}")
        if k == 0 or len(self) == 0:
            return []
        depth = max(self.depth, k)
        lexical = self.lexical.ranked(query, depth if self.dense is not None else k)
        if self.dense is None:
            return [self.lexical.hit(i, s) for i, s in lexical]
        dense = [hit.id for hit in self.dense.recall(query, depth)]
        fused = reciprocal_rank_fusion([[i for i, _ in lexical], dense], rrf_k=self.rrf_k)
        return [self.lexical.hit(i, s) for i, s in fused[:k]]

    def get(self, id: int) -> Recalled:
        return self.lexical.get(id)

    def store_id(self, id: int) -> int:
        """The store's row id of the turn with this id (IndexError without a store)."""
        return self._store_ids[id]

    @property
    def texts(self) -> list[str]:
        return self.lexical.texts

    def __len__(self) -> int:
        return len(self.lexical)

    def __repr__(self) -> str:
        dense = "none" if self.dense is None else embedder_name(self.dense.embedder)
        store = "" if self.store is None else f", store={self.store!r}, namespace={self.namespace!r}"
        return f"HybridMemory({len(self)} items, dense={dense}{store})"


def default_memory(
    store: MemoryStore | None = None,
    namespace: str = "default",
    embedder: Embedder | None = None,
    *,
    recent_turns: int = 6,
    recall_k: int = 3,
    recall_first: bool = False,
) -> TieredMemory:
    """What `lw.Session` and a run with `context_tokens` use when given no memory: the
    `recent_turns` newest turns verbatim, and every turn filed in a HybridMemory (BM25;
    fused with `embedder` when one is given; kept in `store` under `namespace` when one
    is given), `recall_k` of them recalled (given the room before the recent turns with
    `recall_first`, as a run's memory is).
    No summary: a summarizer is a model call, so pass a TieredMemory with
    SummaryMemory(model) to have one. No torch is needed."""
    archive = HybridMemory(embedder, store=store, namespace=namespace)
    return TieredMemory(
        BufferMemory(recent_turns), None, archive, recall_k=recall_k, recall_first=recall_first
    )
