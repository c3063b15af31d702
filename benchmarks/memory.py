"""Semantic recall at scale: loopwright's exact scan (one numpy matrix-vector product and a
partial sort) against faiss-cpu's exact IndexFlatIP on the same vectors in the same run,
and the approximate index (faiss IVF or HNSW behind SemanticMemory's same recall()).

    .venv/bin/python benchmarks/memory.py [--sizes 10000,100000,1000000] [--queries 100]
        [--k 10] [--index ivf|hnsw] [--data clustered|random]

Vectors are synthetic 384-d float32 (the size of all-MiniLM-L6-v2): by default points
around 1,024 centres, so an approximate index meets the structure real embeddings have
(on uniform random data every ANN index degrades towards a guess). Latency is per query,
k nearest, query vector given (embedding time excluded), measured one query at a time
as an agent recalls; the two exact scans take turns on each query, so on a shared
machine both see the same load. Footprint: the bytes each structure holds for its vectors.
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loopwright.memory import HashingEmbedder, HNSWIndex, IVFIndex, SemanticMemory, VectorIndex

DIM = 384


def make_data(n: int, kind: str, rng: np.random.Generator) -> np.ndarray:
    if kind == "random":
        return rng.standard_normal((n, DIM), dtype=np.float32)
    centres = rng.standard_normal((1024, DIM), dtype=np.float32)
    data = rng.standard_normal((n, DIM), dtype=np.float32)
    data *= 0.5
    data += centres[rng.integers(0, len(centres), n)]
    return data


def make_queries(data: np.ndarray, q: int, rng: np.random.Generator) -> np.ndarray:
    """Queries near stored points (as a recall query is near what it should find)."""
    picks: np.ndarray = data[rng.integers(0, len(data), q)]
    queries: np.ndarray = picks + 0.5 * rng.standard_normal(picks.shape, dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return queries.astype(np.float32)


@dataclass
class Row:
    n: int
    method: str
    build_s: float
    p50_ms: float
    p99_ms: float
    held_mb: float
    recall: float | None = None


def timed(
    searches: Sequence[Callable[[np.ndarray], Sequence[int]]], queries: np.ndarray
) -> list[tuple[float, float, list[set[int]]]]:
    """For each search: p50 and p99 milliseconds, one query at a time, and each query's
    result ids. The searches take turns on every query (order alternating), so on a
    shared machine they see the same load."""
    for q in queries[:3]:
        for search in searches:
            search(q)  # warm-up: page the data in, start thread pools
    times: list[list[float]] = [[] for _ in searches]
    found: list[list[set[int]]] = [[] for _ in searches]
    for i, q in enumerate(queries):
        order = range(len(searches)) if i % 2 == 0 else reversed(range(len(searches)))
        for j in order:
            t = time.perf_counter()
            ids = searches[j](q)
            times[j].append(time.perf_counter() - t)
            found[j].append({int(x) for x in ids})
    out = []
    for j in range(len(searches)):
        p50, p99 = np.percentile(np.array(times[j]) * 1e3, [50, 99])
        out.append((float(p50), float(p99), found[j]))
    return out


def overlap(a: list[set[int]], b: list[set[int]], k: int) -> float:
    return float(np.mean([len(x & y) / k for x, y in zip(a, b, strict=True)]))


def ann_index(kind: str, n: int) -> tuple[VectorIndex, str]:
    if kind == "hnsw":
        return HNSWIndex(m=32, ef_construction=40, ef_search=128), "+ HNSW M=32 efSearch=128"
    # about 4 * sqrt(n) lists, enough rows to train them (faiss wants 39 a list), at most
    # 1,024 so that k-means stays a few seconds on a small machine
    nlist = max(16, min(1024, int(4 * np.sqrt(n)), n // 39))
    nprobe = max(8, nlist // 16)
    index = IVFIndex(nlist=nlist, nprobe=nprobe, train_max=40 * nlist)
    return index, f"+ IVF {nlist} lists, probe {nprobe}"


def build_memory(data: np.ndarray) -> tuple[SemanticMemory, float]:
    t = time.perf_counter()
    memory = SemanticMemory(HashingEmbedder(dim=DIM), capacity=len(data))
    memory.add_embeddings([f"memory {i}" for i in range(len(data))], data)
    return memory, time.perf_counter() - t


def bench_exact(
    faiss: Any, memory: SemanticMemory, ours_build: float, queries: np.ndarray, k: int
) -> tuple[list[Row], list[set[int]]]:
    """loopwright's exact scan and faiss's IndexFlatIP over the same normalised rows."""
    n = len(memory)
    t = time.perf_counter()
    flat = faiss.IndexFlatIP(DIM)
    for lo in range(0, n, 1 << 16):  # in slices: no second full copy of the rows at once
        flat.add(np.ascontiguousarray(memory.vectors[lo : lo + (1 << 16)]))
    flat_build = time.perf_counter() - t
    (p50, p99, exact), (f50, f99, flat_found) = timed(
        [
            lambda q: [h.id for h in memory.recall(q, k)],
            lambda q: flat.search(q[None, :], k)[1][0],
        ],
        queries,
    )
    rows = [
        Row(n, "loopwright exact", ours_build, p50, p99, memory.nbytes / 2**20),
        Row(
            n,
            "faiss IndexFlatIP",
            flat_build,
            f50,
            f99,
            flat.ntotal * DIM * 4 / 2**20,
            overlap(exact, flat_found, k),
        ),
    ]
    return rows, exact


def bench_ann(
    kind: str, memory: SemanticMemory, queries: np.ndarray, k: int, exact: list[set[int]]
) -> Row:
    index, label = ann_index(kind, len(memory))
    t = time.perf_counter()
    memory.attach_index(index)
    build = time.perf_counter() - t
    assert len(index) == len(memory), "the approximate index must cover every row"
    ((p50, p99, found),) = timed([lambda q: [h.id for h in memory.recall(q, k)]], queries)
    held = index.nbytes / 2**20 if hasattr(index, "nbytes") else float("nan")
    row = Row(len(memory), f"loopwright {label}", build, p50, p99, held, overlap(exact, found, k))
    memory.index = None
    return row


def bench_size(n: int, args: argparse.Namespace, faiss: Any) -> list[Row]:
    rng = np.random.default_rng(n)
    data = make_data(n, args.data, rng)
    queries = make_queries(data, args.queries, rng)
    memory, build = build_memory(data)
    del data
    gc.collect()
    rows, exact = bench_exact(faiss, memory, build, queries, args.k)
    rows.append(bench_ann(args.index, memory, queries, args.k, exact))
    return rows


def peak_rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--index", choices=("ivf", "hnsw"), default="ivf")
    parser.add_argument("--data", choices=("clustered", "random"), default="clustered")
    args = parser.parse_args()
    import faiss

    print(
        f"dim {DIM}, k {args.k}, {args.queries} queries one at a time, {args.data} data, "
        f"{os.cpu_count()} cpus, faiss {faiss.__version__} "
        f"({faiss.omp_get_max_threads()} omp threads), numpy {np.__version__}"
    )
    header = (
        f"{'n':>9}  {'method':<36} {'build s':>8} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'held MB':>8} {'recall@k':>8}"
    )
    print(header)
    print("-" * len(header))
    started = time.perf_counter()
    ratios = []
    for n in (int(s) for s in args.sizes.split(",")):
        rows = bench_size(n, args, faiss)
        ratios.append((n, rows[0].p50_ms / rows[1].p50_ms))
        for row in rows:
            recall = "" if row.recall is None else f"{row.recall:8.3f}"
            print(
                f"{row.n:>9}  {row.method:<36} {row.build_s:8.2f} {row.p50_ms:8.3f} "
                f"{row.p99_ms:8.3f} {row.held_mb:8.1f} {recall:>8}",
                flush=True,
            )
        gc.collect()
    print(f"total {time.perf_counter() - started:.0f} s, peak RSS {peak_rss_mb():.0f} MB")
    print("exact p50 vs faiss flat: " + ", ".join(f"{n}: {r:.2f}x" for n, r in ratios))
    print(
        "recall@k: overlap with loopwright's exact top k (for faiss flat: agreement of the two "
        "exact scans). held MB: vector matrix (loopwright), codes (faiss flat), lists + ids + "
        "centroids or graph (approximate index, held besides the matrix)."
    )


if __name__ == "__main__":
    main()
