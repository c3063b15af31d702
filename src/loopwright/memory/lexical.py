"""Lexical recall with BM25: a word that few turns contain counts for more than one that
many contain, so the one turn that holds "invoice 7731" outranks a hundred routine
turns that share "project" and "code" with the question.

The index is the `bm25s` package (numpy only; scipy speeds up a rebuild when present),
which indexes in batch. Turns added since the last build form a small delta segment,
scored by the same Lucene BM25 formula from postings kept in a dict, with collection
statistics (document frequencies, average length) that cover every turn. The batch
index is rebuilt only when the delta grows past `rebuild_fraction` of it, so the total
indexing work over n adds is O(n / rebuild_fraction), not O(n^2) (benchmarks/recall.py
measures both).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from loopwright.memory.semantic import Recalled
from loopwright.trace import json_safe

_WORD: Final = re.compile(r"\w+")
# bm25s's English list: articles, auxiliaries and prepositions that carry no topic.
STOPWORDS: Final = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split()
)


class Tokenizer:
    """Lower-cased words, English stop words dropped, Snowball-stemmed when PyStemmer is
    installed (so "recalled" meets "recall"); a word's stem is cached."""

    def __init__(self, *, stem: bool = True, stopwords: Iterable[str] = STOPWORDS) -> None:
        self.stopwords = frozenset(stopwords)
        self._stemmer: Any = None
        if stem:
            try:
                import Stemmer  # PyStemmer
            except ImportError:  # pragma: no cover - a dependency of loopwright
                self._stemmer = None
            else:
                self._stemmer = Stemmer.Stemmer("english")
        self._stems: dict[str, str] = {}
        self.name = f"words-v1(stem={self._stemmer is not None})"

    def __call__(self, text: str) -> list[str]:
        words = [w for w in _WORD.findall(text.lower()) if w not in self.stopwords]
        if self._stemmer is None:
            return words
        stems = self._stems
        unknown = [w for w in set(words) if w not in stems]
        if unknown:
            if len(stems) > 1 << 18:  # bound the cache on an open vocabulary
                stems.clear()
            stems.update(zip(unknown, self._stemmer.stemWords(unknown), strict=True))
        return [stems[w] for w in words]


class BM25Memory:
    """Texts with metadata, recalled by BM25 (Lucene variant, k1 and b as in Lucene).

    The same reading API as SemanticMemory (`add`, `add_many`, `recall`, `get`, `texts`,
    `len`), plus `forget`. A recalled turn shares at least one word (stem) with the query;
    its `score` is the BM25 score. Not thread-safe.
    """

    def __init__(
        self,
        *,
        k1: float = 1.5,
        b: float = 0.75,
        stem: bool = True,
        rebuild_fraction: float = 0.5,
        min_rebuild: int = 256,
    ) -> None:
        if not 0.0 < rebuild_fraction:
            raise ValueError(f"rebuild_fraction must be > 0, got {rebuild_fraction!r}")
        if min_rebuild < 1:
            raise ValueError(f"min_rebuild must be >= 1, got {min_rebuild!r}")
        self.k1, self.b = float(k1), float(b)
        self.rebuild_fraction = rebuild_fraction
        self.min_rebuild = min_rebuild
        self.tokenize = Tokenizer(stem=stem)
        self._texts: list[str] = []
        self._metadata: list[dict[str, Any] | None] = []
        self._tokens: list[list[str]] = []  # kept for rebuilds; [] once forgotten
        self._alive: list[bool] = []
        self._df: Counter[str] = Counter()  # documents containing each term, over every live turn
        self._total_len = 0
        self._live = 0
        self._index: Any = None  # bm25s.BM25 over turns [0, _indexed)
        self._indexed = 0
        self._postings: dict[str, list[tuple[int, int]]] = {}  # delta: term -> (id, tf)
        self.rebuilds = 0

    # -- writing ---------------------------------------------------------------------

    def add(self, text: str, metadata: Mapping[str, Any] | None = None) -> int:
        """File one text; return its id."""
        return self.add_many([text], None if metadata is None else [metadata])[0]

    def add_many(
        self, texts: Sequence[str], metadatas: Sequence[Mapping[str, Any] | None] | None = None
    ) -> list[int]:
        """File texts; return their ids (insertion positions)."""
        if isinstance(texts, str):
            raise TypeError("expected a sequence of texts, not a single str")
        texts = list(texts)
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(f"texts must be str, got {type(text).__name__}")
        if metadatas is not None and len(metadatas) != len(texts):
            raise ValueError(f"got {len(texts)} texts but {len(metadatas)} metadata entries")
        start = len(self._texts)
        rebuild = start + len(texts) - self._indexed >= max(
            self.min_rebuild, self.rebuild_fraction * self._indexed
        )
        for i, text in enumerate(texts):
            meta = None if metadatas is None else metadatas[i]
            if meta is not None and not isinstance(meta, Mapping):
                raise TypeError(f"metadata must be a mapping, got {type(meta).__name__}")
            safe = None if meta is None else json_safe({str(k): v for k, v in meta.items()})
            tokens = self.tokenize(text)
            doc = start + i
            self._texts.append(text)
            self._metadata.append(safe if isinstance(safe, dict) else None)
            self._tokens.append(tokens)
            self._alive.append(True)
            self._live += 1
            self._total_len += len(tokens)
            counts = Counter(tokens)
            self._df.update(counts.keys())
            if not rebuild:  # a batch that triggers a rebuild needs no delta postings
                for term, tf in counts.items():
                    self._postings.setdefault(term, []).append((doc, tf))
        if rebuild:
            self.rebuild()
        return list(range(start, start + len(texts)))

    def rebuild(self) -> None:
        """Index every turn in one bm25s batch and empty the delta segment."""
        import bm25s  # imported on first build: `import loopwright` never pays for it

        docs = self._tokens
        index = bm25s.BM25(k1=self.k1, b=self.b, method="lucene")
        if any(docs):
            # bm25s wants at least one token a document: a forgotten or empty turn gets a
            # placeholder no query can contain (the tokenizer never yields a space)
            placeholder = [" "]
            index.index([d or placeholder for d in docs], show_progress=False)
            self._index = index
        else:
            self._index = None
        self._indexed = len(docs)
        self._postings = {}
        self.rebuilds += 1

    def forget(self, ids: int | Iterable[int]) -> int:
        """Remove turns from recall (their text and metadata are dropped from memory);
        return how many were live. Unknown ids raise IndexError."""
        wanted = [ids] if isinstance(ids, int) else list(ids)
        for i in wanted:
            if not 0 <= i < len(self._texts):
                raise IndexError(f"no memory with id {i}; ids are 0..{len(self._texts) - 1}")
        removed = 0
        for i in wanted:
            if not self._alive[i]:
                continue
            tokens = self._tokens[i]
            self._df.subtract(set(tokens))
            self._total_len -= len(tokens)
            self._alive[i] = False
            self._live -= 1
            self._tokens[i] = []
            self._texts[i] = ""
            self._metadata[i] = None
            removed += 1
        return removed

    # -- reading ---------------------------------------------------------------------

    def scores(self, query: str) -> npt.NDArray[np.float32]:
        """The BM25 score of every filed turn for the query (0 for no shared term,
        -inf for a forgotten turn)."""
        n = len(self._texts)
        out = np.zeros(n, dtype=np.float32)
        terms = self.tokenize(query)
        if not terms or n == 0:
            return out
        if self._index is not None:
            known = self._index.get_tokens_ids(terms)
            if known:
                out[: self._indexed] = self._index.get_scores_from_ids(known)
        if self._indexed < n:
            self._score_delta(terms, out)
        if self._live < n:
            out[~np.asarray(self._alive, dtype=bool)] = -np.inf
        return out

    def _score_delta(self, terms: list[str], out: npt.NDArray[np.float32]) -> None:
        """BM25 of the turns not yet in the batch index, from the delta postings."""
        n_docs = max(self._live, 1)
        avg_len = max(self._total_len / n_docs, 1e-9)
        k1, b = self.k1, self.b
        for term in terms:  # a repeated query term counts again, as in bm25s
            postings = self._postings.get(term)
            if not postings:
                continue
            df = self._df[term]
            idf = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
            for doc, tf in postings:
                length = len(self._tokens[doc])
                out[doc] += idf * tf / (k1 * (1.0 - b + b * length / avg_len) + tf)

    def recall(self, query: str, k: int = 5) -> list[Recalled]:
        """The k turns with the highest BM25 score for the query, best first (ties by
        id); only turns that share a term with it."""
        return [self.hit(i, s) for i, s in self.ranked(query, k)]

    def ranked(self, query: str, k: int) -> list[tuple[int, float]]:
        """(id, score) of the top k, best first; what `recall` and HybridMemory read."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"k must be an integer >= 0, got {k!r}")
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, got {type(query).__name__}")
        scores = self.scores(query)
        hits = np.flatnonzero(scores > 0)
        if k == 0 or len(hits) == 0:
            return []
        if len(hits) > k:
            hits = hits[np.argpartition(-scores[hits], k - 1)[:k]]
        order = hits[np.lexsort((hits, -scores[hits]))]
        return [(int(i), float(scores[i])) for i in order]

    def hit(self, i: int, score: float) -> Recalled:
        """The turn with id i as a Recalled with this score."""
        meta = self._metadata[i]
        return Recalled(self._texts[i], score, dict(meta) if meta else {}, i)

    def get(self, id: int) -> Recalled:
        """The memory filed with this id (score 1.0); a forgotten one raises KeyError."""
        if not 0 <= id < len(self._texts):
            raise IndexError(f"no memory with id {id}; ids are 0..{len(self._texts) - 1}")
        if not self._alive[id]:
            raise KeyError(f"memory {id} was forgotten")
        return self.hit(id, 1.0)

    @property
    def texts(self) -> list[str]:
        """Every filed text by id ("" for a forgotten one)."""
        return list(self._texts)

    def live_ids(self) -> list[int]:
        """Ids of the turns not forgotten, in order."""
        return [i for i, alive in enumerate(self._alive) if alive]

    @property
    def delta_size(self) -> int:
        """Turns not yet in the batch index (scored from the delta postings)."""
        return len(self._texts) - self._indexed

    def __len__(self) -> int:
        """Live (not forgotten) turns."""
        return self._live

    def __repr__(self) -> str:
        return (
            f"BM25Memory({self._live} items, indexed={self._indexed}, delta={self.delta_size}, "
            f"rebuilds={self.rebuilds})"
        )
