"""Microseconds per ReAct step: loopwright (defaults: tracing and guards on) against a
bare ~40-line loop (regex + json.loads + dict of tools + growing string), side by side
in the same process, at N = 10 and N = 200 steps.

    .venv/bin/python benchmarks/overhead.py [--repeats 9] [--clock cpu]

The policy is the same cheap function for both: it answers from the step count, so
what is measured is the runtime, not the model. The two alternate round by round (each
sample about 2,000 steps) and the ratio reported is the median of the per-round ratios,
so a change in machine load between rounds hits both sides alike. `--clock cpu` times
each sample in this process's CPU time instead of wall time: on a machine shared with
other work, the time this process waited for a core is left out of both sides.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
import timeit

import loopwright as lw

STEP = 'Thought: keep adding\nAction: add\nAction Input: {"x": %d, "y": 1}'
FINAL = "Thought: done\nFinal Answer: %d"


def make_policy(n: int):
    state = {"i": 0}

    def policy(prompt: str) -> str:
        i = state["i"]
        state["i"] += 1
        return STEP % i if i < n else FINAL % n

    return policy


# -- the baseline: the bare loop -------------------------------------------------------

_ACTION = re.compile(r"Action:\s*(\w+)\s*Action Input:\s*(\{.*\})", re.DOTALL)
_FINAL = re.compile(r"Final Answer:\s*(.*)", re.DOTALL)


def bare_loop(task: str, policy, tools: dict, max_steps: int) -> tuple[str | None, int]:
    scratchpad = f"Question: {task}\nThought:"
    calls = 0
    for _ in range(max_steps):
        out = policy(scratchpad)
        calls += 1
        final = _FINAL.search(out)
        if final:
            return final.group(1).strip(), calls
        m = _ACTION.search(out)
        if not m:
            scratchpad += f" {out}\nObservation: parse error\nThought:"
            continue
        name, args = m.group(1), json.loads(m.group(2))
        try:
            obs = str(tools[name](**args))
        except Exception as exc:
            obs = f"ERROR[{name}]: {type(exc).__name__}: {exc}"
        scratchpad += f" {out}\nObservation: {obs}\nThought:"
    return None, calls


def add(x: int, y: int) -> int:
    """Add two integers."""
    return x + y


CLOCK = time.perf_counter  # or time.process_time (--clock cpu)


def time_per_step(fn, n: int, batch: int) -> float:
    """Microseconds per step over `batch` runs of n steps."""
    start = CLOCK()
    steps = sum(fn(n) for _ in range(batch))
    return (CLOCK() - start) / steps * 1e6


def compare(run_bare, run_lw, n: int, repeats: int) -> tuple[float, float, float]:
    """Median bare and loopwright us/step and the median of their per-round ratio.
    The two alternate round by round, so a change in machine load hits both alike."""
    batch = max(1, 2000 // n)  # ~2,000 steps a sample
    bare, ours, ratios = [], [], []
    for _ in range(repeats):
        b = time_per_step(run_bare, n, batch)
        o = time_per_step(run_lw, n, batch)
        bare.append(b)
        ours.append(o)
        ratios.append(o / b)
    return statistics.median(bare), statistics.median(ours), statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=9, help="rounds per N (median)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: time samples in this process's CPU time (a shared machine)")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    registry = lw.ToolRegistry([lw.tool(add)])

    def run_bare(n: int) -> int:
        answer, calls = bare_loop("sum", make_policy(n), {"add": add}, n + 1)
        assert answer == str(n), answer
        return calls

    def run_lw(n: int) -> int:
        trace = lw.run("sum", make_policy(n), registry, max_steps=n + 1, on_repeat="nudge")
        assert trace.final_answer == str(n) and trace.tool_calls == n, trace.stopped_reason
        return trace.llm_calls

    for fn in (run_bare, run_lw):  # warm up both
        fn(10)
    print(f"{'N':>5} {'bare us/step':>13} {'loopwright us/step':>19} {'ratio':>6}")
    rows = {}
    for n in (10, 200):
        bare, ours, ratio = compare(run_bare, run_lw, n, args.repeats)
        rows[n] = (bare, ours, ratio)
        print(f"{n:>5} {bare:>13.1f} {ours:>19.1f} {ratio:>6.1f}x")
    growth = rows[200][1] / rows[10][1]
    relative = rows[200][2] / rows[10][2]
    print(f"loopwright per-step cost at N=200 vs N=10: {growth:.2f}x; as a ratio to the bare "
          f"loop: {relative:.2f}x (flat is 1.0; the second is steadier on a busy machine)")
    print("target: within 5x of the bare loop at both N, flat in N")
    parse_alone(args.repeats)


def parse_alone(repeats: int) -> None:
    """The parse boundary by itself: parse_react_step on a canonical step against the
    bare loop's regex + json.loads on the same text."""
    text = STEP % 7

    def bare() -> object:
        m = _ACTION.search(text)
        assert m is not None and not _FINAL.search(text)
        return m.group(1), json.loads(m.group(2))

    def ours() -> object:
        return lw.parse_react_step(text)

    ratios = []
    for _ in range(repeats):
        b = min(timeit.repeat(bare, number=5000, repeat=3)) / 5000 * 1e6
        o = min(timeit.repeat(ours, number=5000, repeat=3)) / 5000 * 1e6
        ratios.append((b, o, o / b))
    b, o, r = sorted(ratios, key=lambda row: row[2])[len(ratios) // 2]
    print(f"parse alone: parse_react_step {o:.2f} us, bare regex + json.loads {b:.2f} us: {r:.1f}x")


if __name__ == "__main__":
    main()
