"""Issue 25: what a long run's prompts cost with and without folding, and what keeping a
large tool result whole costs (bytes journaled, time).

    .venv/bin/python benchmarks/large_outputs.py [--steps 200] [--context-tokens 2000,8000] [--repeats 3]

Part 1: a scripted policy (loop logic only) reads page after page of a report (a 400-char
result, a 180-char thought a step) for `--steps` model calls, once with no budget (the
append-only scratchpad) and once with `context_tokens` (folds: stub old results, drop old
thoughts, summarise into the default memory). Prompt tokens are loopwright's estimate
(one token per 3 bytes), per step at a few points and in total; seconds are the run's wall
clock (median of `--repeats`).

Part 2: one tool returns a result of S characters (5 KB, 500 KB, 5 MB); the run calls it,
reads one page back with read_output and answers, journaled in a fresh SQLite file. Bytes
journaled: the file's size after the run, and the tool call's row (value + observation);
seconds: the run's wall clock (median of `--repeats`), against the same run with no store.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

import loopwright as lw
from loopwright.trace import estimate_tokens

THOUGHT = "I have read this page; the next one may hold the figure, so I read on and keep track " * 2
PAGE = "routine figures for the quarter, nothing that changes the totals. " * 6


def page_registry() -> lw.ToolRegistry:
    @lw.tool
    def fetch(page: int) -> str:
        """Fetch a page of the report."""
        return f"page {page}: {PAGE}"

    return lw.ToolRegistry([fetch])


def long_run(steps: int, context_tokens: int | None) -> tuple[list[int], float, lw.Trace, int]:
    """The prompt sizes, seconds, trace, and the tokens a prefix (KV) cache would evaluate:
    each prompt less what it shares with the one before."""
    prompts: list[str] = []

    def policy(prompt: str) -> str:
        prompts.append(prompt)
        if len(prompts) == steps:
            return "Thought: done\nFinal Answer: ok"
        return f'Thought: {THOUGHT}\nAction: fetch\nAction Input: {{"page": {len(prompts)}}}'

    start = time.perf_counter()
    trace = lw.run("Read the report.", policy, page_registry(), max_steps=steps, context_tokens=context_tokens)
    seconds = time.perf_counter() - start
    evaluated = sum(estimate_tokens(now[len(os.path.commonprefix([before, now])):])
                    for before, now in zip(["", *prompts], prompts, strict=False))
    return [estimate_tokens(p) for p in prompts], seconds, trace, evaluated


def part1(steps: int, budgets: list[int], repeats: int) -> None:
    print(f"## prompt tokens per step, {steps} steps (scripted policy)")
    points = sorted({1, 10, 25, 50, 100, 150, steps} & set(range(1, steps + 1)))
    print("| run | " + " | ".join(f"step {p}" for p in points)
          + " | max | total sent | evaluated with a prefix cache | folds | s |")
    print("|---|" + "---|" * (len(points) + 5))
    for label, budget in [("no budget", None), *((f"context_tokens={b:,}", b) for b in budgets)]:
        runs = [long_run(steps, budget) for _ in range(repeats)]
        seen, _, trace, evaluated = runs[0]
        seconds = statistics.median(r[1] for r in runs)
        kinds: dict[str, int] = {}
        for fold in trace.meta.get("folds", []):
            kind = fold.get("kind", "summarise")  # a fold before issue 25 was a summary
            kinds[kind] = kinds.get(kind, 0) + 1
        folds = ", ".join(f"{k} {v}" for k, v in kinds.items()) or "none"
        rewritten = len({fold["before_step"] for fold in trace.meta.get("folds", [])})
        print(f"| {label} | " + " | ".join(f"{seen[p - 1]:,}" for p in points)
              + f" | {max(seen):,} | {sum(seen):,} | {evaluated:,} | {folds} ({rewritten} prompts rewritten)"
              + f" | {seconds:.2f} |")


def dump_run(size: int, store: lw.SQLiteStore | None) -> tuple[float, lw.Trace]:
    text = ("row of the table with a value é, " * (size // 33 + 1))[:size]

    @lw.tool
    def dump() -> str:
        """Dump the table."""
        return text

    script = ['Thought: dump\nAction: dump\nAction Input: {}',
              'Thought: read\nAction: read_output\nAction Input: {"handle": "out-1", "offset": 8000}',
              "Thought: done\nFinal Answer: ok"]
    registry = lw.ToolRegistry([dump])
    start = time.perf_counter()
    trace = lw.run("Dump the table.", lw.ScriptedPolicy(script), registry, store=store)
    seconds = time.perf_counter() - start
    assert trace.stopped_reason == "final"
    kept = getattr(trace, "outputs", None)  # absent before issue 25 (the result was cut)
    assert size <= 8000 or kept is None or kept["out-1"] == text
    return seconds, trace


def part2(repeats: int) -> None:
    print("\n## keeping a large result whole (SQLite journal, synchronous=NORMAL)")
    print("| result | journal file | tool_calls row (value + observation) | prompt of the next step | "
          "run s, no store | run s, journaled |")
    print("|---|---|---|---|---|---|")
    for size in (5_000, 500_000, 5_000_000):
        bare = statistics.median(dump_run(size, None)[0] for _ in range(repeats))
        timed, files, row, prompt = [], [], 0, 0
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "runs.db"
                store = lw.SQLiteStore(path)
                seconds, trace = dump_run(size, store)
                store.close()
                with closing(sqlite3.connect(path)) as db:
                    row = int(db.execute("SELECT coalesce(length(value), 0) + coalesce(length(observation), 0) "
                                         "FROM tool_calls WHERE key = '1'").fetchone()[0])
                timed.append(seconds)
                files.append(sum(p.stat().st_size for p in Path(tmp).iterdir()))
                prompt = estimate_tokens(trace.prompt_for(trace.steps[1]) or "")
        print(f"| {size:,} chars | {statistics.median(files):,} B | {row:,} chars | {prompt:,} tokens | "
              f"{bare:.3f} | {statistics.median(timed):.3f} |")


def part3(repeats: int) -> None:
    """Reading a 5 MB result back whole, a page of max_observation_chars a step."""
    print("\n## reading a 5,000,000-char result back through read_output")
    print("| max_observation_chars | context_tokens | model calls | largest prompt | pages equal the original | run s |")
    print("|---|---|---|---|---|---|")
    text = ("row of the table with a value é, " * 151_516)[:5_000_000]
    for cap, budget in ((250_000, 120_000), (50_000, 30_000)):

        @lw.tool
        def dump() -> str:
            """Dump the table."""
            return text

        timed, largest, calls, equal = [], 0, 0, False
        for _ in range(repeats):
            sizes: list[int] = []

            def policy(prompt: str, sizes: list[int] = sizes, cap: int = cap) -> str:
                sizes.append(estimate_tokens(prompt))
                offset = (len(sizes) - 2) * cap
                if len(sizes) == 1:
                    return 'Thought: dump\nAction: dump\nAction Input: {}'
                if offset >= len(text):
                    return "Thought: done\nFinal Answer: ok"
                return ('Thought: read\nAction: read_output\nAction Input: '
                        f'{{"handle": "out-1", "offset": {offset}, "length": {cap}}}')

            start = time.perf_counter()
            trace = lw.run("Read the table.", policy, lw.ToolRegistry([dump], max_observation_chars=cap),
                           max_steps=200, context_tokens=budget)
            timed.append(time.perf_counter() - start)
            pages = "".join(s.observation or "" for s in trace.steps if s.tool == "read_output")
            largest, calls, equal = max(sizes), trace.llm_calls, pages == text
        print(f"| {cap:,} | {budget:,} | {calls} | {largest:,} tokens | {equal} | {statistics.median(timed):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--context-tokens", default="2000,8000", help="budgets, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    part1(args.steps, [int(b) for b in args.context_tokens.split(",")], args.repeats)
    part2(args.repeats)
    part3(args.repeats)
    print("\n" + json.dumps({"python": sys.version.split()[0], "loopwright": lw.__file__}))


if __name__ == "__main__":
    main()
