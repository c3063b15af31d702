"""Tier 3: semantic recall, the searchable archive of every turn.

Vectors live in one preallocated float32 matrix that grows by doubling; each vector is
normalised once on insert, so recall is one matrix-vector product (cosine = dot product)
and a partial sort for the top k. The matrix is stored dimension-major (dim x capacity):
the product then streams whole rows of the matrix, about twice as fast on one core as
the vector-major layout and on par with faiss's flat index (benchmarks/memory.py).
An optional approximate index (see `ann`) takes over at millions of rows with the same
`recall` API.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from loopwright.errors import StoreError
from loopwright.memory.ann import VectorIndex
from loopwright.memory.embedders import Embedder, HashingEmbedder, embedder_name
from loopwright.trace import json_safe

FloatMatrix = npt.NDArray[np.float32]

FILE_FORMAT: Final = "loopwright.semantic-memory"
FILE_VERSION: Final = 1
CHUNK: Final = 1 << 16  # rows converted at a time: bounds the temporary memory of a bulk insert


@dataclass(frozen=True, slots=True)
class Recalled:
    """One recalled memory: the original text, its cosine score, its metadata, its id
    (the insertion position)."""

    text: str
    score: float
    metadata: dict[str, Any]
    id: int


def _as_rows(vectors: Any, dim: int) -> FloatMatrix:
    rows = np.asarray(vectors, dtype=np.float32)
    if rows.ndim == 1:
        rows = rows[None, :]
    if rows.ndim != 2 or rows.shape[1] != dim:
        raise ValueError(f"expected vectors of shape (n, {dim}), got {np.shape(vectors)}")
    return rows


def _normalise_in_place(rows: FloatMatrix) -> None:
    """Scale each row to unit length; zero rows stay zero. Raises on NaN or infinity."""
    if not np.isfinite(rows).all():
        raise ValueError("vectors must be finite (no NaN or infinity)")
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    np.divide(rows, norms, out=rows, where=norms > 0)


class SemanticMemory:
    """Texts with metadata, recalled by cosine similarity to a query.

    `add` / `add_many` embed with the embedder (HashingEmbedder by default);
    `add_embeddings` files texts whose vectors you already have. Metadata is stored as
    JSON data (what json cannot hold becomes its str), so it survives save and load.
    Not thread-safe: guard it with a lock if several threads write.
    """

    def __init__(
        self,
        embedder: Embedder | None = None,
        index: VectorIndex | None = None,
        *,
        capacity: int = 1024,
    ) -> None:
        self.embedder: Embedder = embedder if embedder is not None else HashingEmbedder()
        self.dim = int(self.embedder.dim)
        # column i is the i-th filed vector, unit length
        self._columns: FloatMatrix = np.zeros((self.dim, max(capacity, 1)), dtype=np.float32)
        self._count = 0
        self._texts: list[str] = []
        self._metadata: list[dict[str, Any] | None] = []
        self._forgotten: set[int] = set()
        self.index: VectorIndex | None = None
        if index is not None:
            self.attach_index(index)

    # -- writing ---------------------------------------------------------------------

    def add(self, text: str, metadata: Mapping[str, Any] | None = None) -> int:
        """Embed and file one text; return its id."""
        return self.add_many([text], None if metadata is None else [metadata])[0]

    def add_many(
        self, texts: Sequence[str], metadatas: Sequence[Mapping[str, Any] | None] | None = None
    ) -> list[int]:
        """Embed texts in one batch and file them; return their ids."""
        texts = self._check_texts(texts)
        vectors = self.embedder.embed(texts) if texts else np.zeros((0, self.dim), np.float32)
        return self.add_embeddings(texts, vectors, metadatas)

    def add_embeddings(
        self,
        texts: Sequence[str],
        vectors: Any,
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> list[int]:
        """File texts with precomputed vectors (shape (len(texts), dim)); return their ids."""
        texts = self._check_texts(texts)
        rows = _as_rows(vectors, self.dim) if texts else np.zeros((0, self.dim), np.float32)
        if len(rows) != len(texts):
            raise ValueError(f"got {len(texts)} texts but {len(rows)} vectors")
        if metadatas is not None and len(metadatas) != len(texts):
            raise ValueError(f"got {len(texts)} texts but {len(metadatas)} metadata entries")
        metas = [self._check_metadata(m) for m in metadatas or [None] * len(texts)]
        for lo in range(0, len(rows), CHUNK):
            if not np.isfinite(rows[lo : lo + CHUNK]).all():
                raise ValueError("vectors must be finite (no NaN or infinity)")
        start, end = self._count, self._count + len(rows)
        self._reserve(end)
        for lo in range(0, len(rows), CHUNK):
            block = np.array(rows[lo : lo + CHUNK], dtype=np.float32, copy=True)
            _normalise_in_place(block)
            self._columns[:, start + lo : start + lo + len(block)] = block.T
        self._count = end
        self._texts.extend(texts)
        self._metadata.extend(metas)
        if self.index is not None:
            self._index_rows(self.index, start, end)
        return list(range(start, end))

    def attach_index(self, index: VectorIndex) -> None:
        """Use an approximate index for recall; every row filed so far is added to it."""
        if len(index) != 0:
            raise ValueError("attach an empty index: it must hold exactly this memory's rows")
        self._index_rows(index, 0, self._count)
        self.index = index

    def _index_rows(self, index: VectorIndex, start: int, end: int) -> None:
        for lo in range(start, end, CHUNK):
            hi = min(lo + CHUNK, end)
            index.add(np.ascontiguousarray(self._columns[:, lo:hi].T))

    def _reserve(self, rows: int) -> None:
        capacity = self._columns.shape[1]
        if rows <= capacity:
            return
        grown = np.zeros((self.dim, max(rows, 2 * capacity)), dtype=np.float32)
        grown[:, : self._count] = self._columns[:, : self._count]
        self._columns = grown

    @staticmethod
    def _check_texts(texts: Sequence[str]) -> list[str]:
        if isinstance(texts, str):
            raise TypeError("expected a sequence of texts, not a single str")
        out = list(texts)
        for text in out:
            if not isinstance(text, str):
                raise TypeError(f"texts must be str, got {type(text).__name__}")
        return out

    @staticmethod
    def _check_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any] | None:
        if metadata is None:
            return None
        if not isinstance(metadata, Mapping):
            raise TypeError(f"metadata must be a mapping, got {type(metadata).__name__}")
        safe = json_safe({str(k): v for k, v in metadata.items()})
        return safe if isinstance(safe, dict) else None

    def forget(self, ids: int | Sequence[int]) -> int:
        """Remove memories from recall: their vector is zeroed and their text and
        metadata dropped. Returns how many were not forgotten already."""
        wanted = [ids] if isinstance(ids, int) else list(ids)
        for i in wanted:
            if not 0 <= i < self._count:
                raise IndexError(f"no memory with id {i}; ids are 0..{self._count - 1}")
        fresh = [i for i in dict.fromkeys(wanted) if i not in self._forgotten]
        for i in fresh:
            self._columns[:, i] = 0.0
            self._texts[i] = ""
            self._metadata[i] = None
        self._forgotten.update(fresh)
        return len(fresh)

    # -- reading ---------------------------------------------------------------------

    def recall(self, query: str | npt.ArrayLike, k: int = 5) -> list[Recalled]:
        """The k memories most similar to the query (a text, or a query vector), best
        first. Empty when nothing is filed, k is 0, or the query embeds to zeros."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"k must be an integer >= 0, got {k!r}")
        if k == 0 or self._count == 0:
            return []
        q = self.embedder.embed([query]) if isinstance(query, str) else query
        qv = np.array(_as_rows(q, self.dim), copy=True)
        _normalise_in_place(qv)
        if len(qv) != 1:
            raise ValueError(f"expected one query vector, got {len(qv)}")
        if not qv.any():
            return []
        scores, ids = self.search(qv, k)
        return [self._recalled(int(i), float(s)) for s, i in zip(scores, ids, strict=True)]

    def search(self, query: FloatMatrix, k: int) -> tuple[FloatMatrix, npt.NDArray[np.int64]]:
        """Top-k (scores, ids) for one normalised query of shape (1, dim), best first.
        The index answers when it covers every row; otherwise the exact scan does."""
        n = self._count
        gone = self._forgotten
        if self.index is not None and len(self.index) == n:
            found, ids = self.index.search(query, min(k + len(gone), n))
            if gone:  # the index still holds forgotten rows: drop them
                keep = np.array([int(i) not in gone for i in ids], dtype=bool)
                found, ids = found[keep][:k], ids[keep][:k]
            return found, ids
        scores = query[0] @ self._columns[:, :n]
        if gone:
            scores[np.fromiter(gone, dtype=np.int64)] = -np.inf
            k = min(k, n - len(gone))
            if k <= 0:
                return np.zeros(0, np.float32), np.zeros(0, np.int64)
        if k < n:
            top = np.argpartition(scores, n - k)[n - k :]
        else:
            top = np.arange(n)
        order = top[np.lexsort((top, -scores[top]))]  # best first; ties by id
        return scores[order], order.astype(np.int64)

    def _recalled(self, i: int, score: float) -> Recalled:
        meta = self._metadata[i]
        return Recalled(self._texts[i], score, dict(meta) if meta else {}, i)

    def get(self, id: int) -> Recalled:
        """The memory filed with this id (score 1.0)."""
        if not 0 <= id < self._count:
            raise IndexError(f"no memory with id {id}; ids are 0..{self._count - 1}")
        if id in self._forgotten:
            raise KeyError(f"memory {id} was forgotten")
        return self._recalled(id, 1.0)

    @property
    def texts(self) -> list[str]:
        return list(self._texts)

    @property
    def vectors(self) -> FloatMatrix:
        """The normalised vectors, one row each (a read-only view, not C-contiguous)."""
        view = self._columns[:, : self._count].T
        view.flags.writeable = False
        return view

    @property
    def nbytes(self) -> int:
        """Bytes held by the vector matrix (allocated capacity, not only used rows)."""
        return int(self._columns.nbytes)

    def __len__(self) -> int:
        return self._count

    def __repr__(self) -> str:
        return (
            f"SemanticMemory({len(self)} items, dim={self.dim}, "
            f"embedder={embedder_name(self.embedder)}, index={self.index!r})"
        )

    # -- persistence -----------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write vectors, texts and metadata to one .npz file (no pickle), atomically."""
        target = Path(path)
        header = {
            "format": FILE_FORMAT,
            "version": FILE_VERSION,
            "embedder": embedder_name(self.embedder),
            "dim": self.dim,
            "texts": self._texts,
            "metadata": self._metadata,
        }
        blob = np.frombuffer(json.dumps(header, ensure_ascii=False).encode("utf-8"), np.uint8)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, vectors=self.vectors, header=blob)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return target

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        embedder: Embedder | None = None,
        index: VectorIndex | None = None,
    ) -> SemanticMemory:
        """Read a file written by `save`. The embedder must be the one the vectors were
        made with (checked by name and dimension). Raises StoreError, naming the file and
        what is wrong, for anything that is not such a file."""
        source = Path(path)
        vectors, header = _read(source)
        memory = cls(embedder, capacity=max(len(vectors), 1))
        saved, current = header["embedder"], embedder_name(memory.embedder)
        if header["dim"] != memory.dim or saved != current:
            raise StoreError(
                f"{source} holds vectors from embedder {saved} (dim {header['dim']}); "
                f"loading with {current} (dim {memory.dim}): pass the embedder it was saved with"
            )
        memory._columns[:, : len(vectors)] = vectors.T
        memory._count = len(vectors)
        memory._texts = list(header["texts"])
        memory._metadata = list(header["metadata"])
        if index is not None:
            memory.attach_index(index)
        return memory


def _read(source: Path) -> tuple[FloatMatrix, dict[str, Any]]:
    def bad(why: str) -> StoreError:
        return StoreError(f"{source} is not a readable loopwright semantic memory file: {why}")

    try:
        with np.load(source, allow_pickle=False) as data:
            if set(data.files) != {"vectors", "header"}:
                raise bad(f"expected arrays 'vectors' and 'header', found {sorted(data.files)}")
            vectors = data["vectors"]
            header = json.loads(data["header"].tobytes().decode("utf-8"))
    except StoreError:
        raise
    except FileNotFoundError:
        raise
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        raise bad(f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(header, dict) or header.get("format") != FILE_FORMAT:
        raise bad("missing or foreign format marker")
    if header.get("version") != FILE_VERSION:
        raise bad(f"format version {header.get('version')!r}; this loopwright reads {FILE_VERSION}")
    texts, metas = header.get("texts"), header.get("metadata")
    if not isinstance(texts, list) or not isinstance(metas, list) or len(metas) != len(texts):
        raise bad("texts and metadata must be lists of the same length")
    n, dim = len(texts), header.get("dim")
    if vectors.dtype != np.float32 or vectors.ndim != 2 or vectors.shape != (n, dim):
        raise bad(f"vectors of {vectors.dtype} {vectors.shape} do not match {n} texts of dim {dim}")
    if not all(isinstance(t, str) for t in texts) or not all(
        m is None or isinstance(m, dict) for m in metas
    ):
        raise bad("texts must be strings and metadata objects")
    if not isinstance(header.get("embedder"), str):
        raise bad("missing embedder name")
    if not np.isfinite(vectors).all():
        raise bad("vectors contain NaN or infinity")
    return vectors, header
