"""Recall quality and cost of the memory archives, side by side in one process.

    .venv/bin/python benchmarks/recall.py [--sizes 100,1000,10000] [--k 3] [--no-minilm]
        [--no-longrun] [--no-table] [--longrun-minilm]

Our own benchmark format (no public long-memory benchmark installs offline here): the
remembered turns are the folded steps of a long agent run, routine project notes from
tests/longrun_suite.py that share the questions' common words, with the suite's five
facts planted evenly among them. Each fact is asked in its own words and paraphrased.

- recall@1, recall@k: the fact's turn is the archive's first, or among its top k, for
  the question.
- in prompt: the fact's answer is in the context slice a TieredMemory (2 recent turns,
  3 recalled) assembles for the question within 400 tokens, as a run's prompt gets it.
- add ms: one turn added at that size, one at a time (the incremental path: for BM25 the
  delta segment and its occasional geometric rebuild; for dense, embedding the turn), the
  mean over the last 200 adds. "rebuild each add" is BM25 re-indexed in full on every add,
  the baseline the delta segment avoids.
- query ms: p50 of one recall (embedding the question included).

Then the long-run check itself per archive: the 170-step ReAct run in a 900-token
window, five facts at steps 4..140, asked at the end (facts recalled of 5), in both forms
of tests/longrun_suite.py (the facts in the run's notes, or in the pages it read), with
the archive in the memory a run builds when given none, and with that default itself.
"""

from __future__ import annotations

import argparse
import json
import os

# One query at a time, as an agent recalls: BLAS threads only contend on a shared machine.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import pathlib
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))

from longrun_suite import FACTS, filler, run_all
from loopwright.memory import (
    BM25Memory,
    BufferMemory,
    Embedder,
    HashingEmbedder,
    HybridMemory,
    MiniLMEmbedder,
    SemanticMemory,
    TieredMemory,
)

CONTEXT_TOKENS = 400
TAIL = 200  # adds timed one at a time at each size


def turn(n: int, thought: str, note: str) -> str:
    """A remembered turn as a run folds it: the step's thought, action and observation."""
    action = json.dumps({"text": note})
    return f"Step {n}. Thought: {thought}\nAction: note\nAction Input: {action}\nObservation: filed: {note}\n"


def corpus(size: int) -> tuple[list[str], list[int]]:
    """`size` turns with the five facts planted evenly; returns the turns and the facts'
    positions."""
    spots = [int(size * (j + 0.5) / len(FACTS)) for j in range(len(FACTS))]
    turns = []
    for n in range(size):
        if n in spots:
            turns.append(turn(n + 1, "I should write this down", FACTS[spots.index(n)].note))
        else:
            turns.append(turn(n + 1, *filler(n + 1)))
    return turns, spots


def extra_turns(size: int, count: int) -> list[str]:
    """Fresh routine turns past the end of a corpus (timed adds), worded unlike any turn
    of the largest corpus, so an embedder's cache never has them."""
    out = []
    for i in range(count):
        thought, note = filler(size + i + 1)
        out.append(turn(size + i + 1, f"{thought}, late", f"later: {note}"))
    return out


class CachedEmbedder:
    """Embeds through `inner`, remembering vectors of texts embedded before, so the five
    archives and three sizes share one MiniLM pass over the corpus; texts it has not seen
    (the timed adds, the questions) pay the real cost."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)
        self.cache: dict[str, np.ndarray] = {}

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def warm(self, texts: Sequence[str]) -> None:
        todo = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if todo:
            self.cache.update(zip(todo, self.inner.embed(todo), strict=True))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in texts if t not in self.cache]
        fresh = dict(zip(missing, self.inner.embed(missing), strict=True)) if missing else {}
        rows = [self.cache[t] if t in self.cache else fresh[t] for t in texts]
        return np.stack(rows).astype(np.float32) if rows else np.zeros((0, self.dim), np.float32)


Archive = Any  # SemanticMemory | HybridMemory | BM25Memory: add_many, add, recall


def archives(minilm: CachedEmbedder | None) -> dict[str, Callable[[], Archive]]:
    out: dict[str, Callable[[], Archive]] = {
        "hashing": lambda: SemanticMemory(HashingEmbedder()),
        "BM25": lambda: HybridMemory(),
        "hybrid (BM25 + hashing)": lambda: HybridMemory(HashingEmbedder()),
    }
    if minilm is not None:
        out["MiniLM"] = lambda: SemanticMemory(minilm)
        out["hybrid (BM25 + MiniLM)"] = lambda: HybridMemory(minilm)
    return out


def measure(
    name: str, make: Callable[[], Archive], turns: list[str], spots: list[int], k: int, size: int
) -> dict[str, Any]:
    archive = make()
    t0 = time.perf_counter()
    for lo in range(0, len(turns), 500):
        archive.add_many(turns[lo : lo + 500])
    fill_s = time.perf_counter() - t0
    tiered = TieredMemory(BufferMemory(2), None, archive, recall_k=3)
    for t in turns[-2:]:
        tiered.buffer.add(t)
    found = {"same": 0, "para": 0}
    first = {"same": 0, "para": 0}
    shown = {"same": 0, "para": 0}
    query_s: list[float] = []
    for fact, spot in zip(FACTS, spots, strict=True):
        for kind, question in (("same", fact.asked), ("para", fact.paraphrased)):
            t = time.perf_counter()
            hits = archive.recall(question, k)
            query_s.append(time.perf_counter() - t)
            found[kind] += any(h.id == spot for h in hits)
            first[kind] += bool(hits) and hits[0].id == spot
            shown[kind] += fact.answer in tiered.context(question, CONTEXT_TOKENS)
    adds = extra_turns(size, TAIL)
    t = time.perf_counter()
    for text in adds:
        archive.add(text)
    add_ms = (time.perf_counter() - t) / TAIL * 1e3
    n = len(FACTS)
    return {
        "size": size, "archive": name, "first_same": first["same"] / n,
        "first_para": first["para"] / n, "recall_same": found["same"] / n,
        "recall_para": found["para"] / n, "prompt_same": shown["same"] / n,
        "prompt_para": shown["para"] / n, "add_ms": add_ms,
        "query_ms": float(np.median(query_s)) * 1e3, "fill_s": fill_s,
    }


def rebuild_each_add_ms(turns: list[str], size: int, count: int = 20) -> tuple[float, float]:
    """ms per add at this size: BM25 re-indexed in full on every add, against the delta
    segment, the two taking turns add by add."""
    full = BM25Memory(min_rebuild=1, rebuild_fraction=1e-9)
    delta = BM25Memory()
    full.add_many(turns)
    delta.add_many(turns)
    adds = extra_turns(size, count)
    spent = [0.0, 0.0]
    for text in adds:
        for j, memory in enumerate((full, delta)):
            t = time.perf_counter()
            memory.add(text)
            spent[j] += time.perf_counter() - t
    return spent[0] / count * 1e3, spent[1] / count * 1e3


def longrun(make: Callable[[], Archive] | None, kind: str) -> tuple[int, int]:
    """Facts recalled of 5 (own words, paraphrased) with the archive in the memory a run
    builds when given none (two recent turns, recalled turns first), or with that default
    itself (`make` None)."""

    def tiered() -> TieredMemory:
        assert make is not None
        return TieredMemory(BufferMemory(2), None, make(), recall_k=3, recall_first=True)

    memory = None if make is None else tiered
    same = sum(o.recalled for o in run_all(False, memory, kind))
    para = sum(o.recalled for o in run_all(True, memory, kind))
    return same, para


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--no-minilm", action="store_true")
    parser.add_argument("--no-longrun", action="store_true")
    parser.add_argument("--no-table", action="store_true")
    parser.add_argument(
        "--longrun-minilm", action="store_true",
        help="also run the long-run check with MiniLM (minutes on a small machine: each fold embeds)",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    started = time.perf_counter()
    minilm = None if args.no_minilm else CachedEmbedder(MiniLMEmbedder(num_threads=1))
    if minilm is not None and not args.no_table:
        t = time.perf_counter()
        minilm.warm(corpus(max(sizes))[0] + corpus(min(sizes))[0] + corpus(1000)[0])
        print(f"MiniLM: {len(minilm.cache)} turns embedded in {time.perf_counter() - t:.0f} s")
    print(f"{os.cpu_count()} cpus, k {args.k}, context {CONTEXT_TOKENS} tokens, 5 facts x 2 wordings")
    header = (
        f"{'turns':>6}  {'archive':<24} {'recall@1 same':>13} {'para':>5} {'recall@k same':>13} "
        f"{'para':>5} {'in prompt same':>14} {'para':>5} {'add ms':>7} {'query ms':>8}"
    )
    print(header)
    print("-" * len(header))
    for size in sizes if not args.no_table else []:
        turns, spots = corpus(size)
        for name, make in archives(minilm).items():
            r = measure(name, make, turns, spots, args.k, size)
            print(
                f"{size:>6}  {name:<24} {r['first_same']:>13.1f} {r['first_para']:>5.1f} "
                f"{r['recall_same']:>13.1f} {r['recall_para']:>5.1f} "
                f"{r['prompt_same']:>14.1f} {r['prompt_para']:>5.1f} {r['add_ms']:>7.2f} "
                f"{r['query_ms']:>8.2f}",
                flush=True,
            )
    print("\nBM25 add, ms per turn: full re-index on every add vs the delta segment")
    for size in sizes if not args.no_table else []:
        full, delta = rebuild_each_add_ms(corpus(size)[0], size)
        print(f"{size:>6}  rebuild each add {full:8.2f}   delta segment {delta:6.3f}   {full / delta:6.0f}x")
    if not args.no_longrun:
        print("\nlong-run check: 170 steps, 900-token window, facts recalled of 5 (own words / paraphrased),")
        print("the facts in the run's notes, or in the pages it read")
        print(f"  {'archive':<34} {'notes':<12} {'pages':<12}")
        runs: dict[str, Callable[[], Archive] | None] = {"default (lw.run, no memory given)": None}
        runs.update(archives(minilm if args.longrun_minilm else None))
        for name, make in runs.items():
            notes, pages = longrun(make, "notes"), longrun(make, "pages")
            print(f"  {name:<34} {notes[0]}/5 / {notes[1]}/5  {pages[0]}/5 / {pages[1]}/5", flush=True)
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
