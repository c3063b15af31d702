"""Microseconds per ReAct step: loopwright (defaults: tracing and guards on) against a
bare ~40-line loop (regex + json.loads + dict of tools + growing string), side by side
in the same process, at N = 10 and N = 200 steps.

    .venv/bin/python benchmarks/overhead.py [--repeats 9] [--clock cpu]

Then events (issue 24): the same loopwright run with nobody watching (no sink: no event
is built) against it watched by a sink that drops each event, and by `lw.iter_events`
(its thread and queue): the ratio per step and the cost per event. Whether the unwatched
run costs what it did before: `--against OTHER/src` times the same unwatched run on this
tree and on another (CPU time in alternating subprocesses; a busy machine moves wall time).

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
    parser.add_argument("--against", metavar="SRC", help="another tree's src/: its unwatched run against this one's")
    args = parser.parse_args()
    if args.against:
        against(args.against, args.repeats)
        return
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
    print("target: within 6x of the bare loop at both N, flat in N")
    parse_alone(args.repeats)
    events_cost(registry, args.repeats)


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


_CPU_PER_STEP = """
import sys, time
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])
import loopwright as lw
from overhead import add, make_policy
registry = lw.ToolRegistry([lw.tool(add)])
n = 200
lw.run("sum", make_policy(10), registry, max_steps=11)
start = time.process_time()
steps = sum(lw.run("sum", make_policy(n), registry, max_steps=n + 1, on_repeat="nudge").llm_calls for _ in range(10))
print((time.process_time() - start) / steps * 1e6)
"""


def against(other_src: str, repeats: int) -> None:
    """CPU µs a step of an unwatched run (N = 200) on this tree and on `other_src`, each
    round in fresh subprocesses, alternating; the median of the per-round ratios."""
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    this_src = os.path.join(os.path.dirname(here), "src")

    def cpu(src: str) -> float:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        out = subprocess.run([sys.executable, "-c", _CPU_PER_STEP, here, os.path.abspath(src)], env=env,
                             capture_output=True, text=True, check=True)
        return float(out.stdout.strip())

    ours, theirs = [], []
    for _ in range(repeats):
        ours.append(cpu(this_src))
        theirs.append(cpu(other_src))
    ratio = statistics.median(o / t for o, t in zip(ours, theirs, strict=True))
    print(f"unwatched run, N=200, CPU us/step: this tree {statistics.median(ours):.1f}, "
          f"{other_src} {statistics.median(theirs):.1f}: {ratio:.2f}x (median of {repeats} alternating rounds)")


def events_cost(registry: lw.ToolRegistry, repeats: int, n: int = 200) -> None:
    """A run nobody watches against the same run watched (a sink that drops each event;
    lw.iter_events), alternating round by round: per-step ratios and µs per event."""
    from loopwright.runtime.front import start

    counted = {"events": 0}

    def drop(event: object) -> None:
        counted["events"] += 1

    def plain(n: int) -> int:
        return lw.run("sum", make_policy(n), registry, max_steps=n + 1, on_repeat="nudge").llm_calls

    def sink(n: int) -> int:
        spec = lw.RunSpec("sum", max_steps=n + 1, on_repeat="nudge")
        return start(spec, make_policy(n), registry, sinks=(drop,)).run().llm_calls

    def iterated(n: int) -> int:
        events = list(lw.iter_events("sum", make_policy(n), registry, max_steps=n + 1, on_repeat="nudge"))
        return events[-1].trace.llm_calls

    for fn in (plain, sink, iterated):
        fn(10)
    counted["events"] = 0
    sink(n)
    per_run = counted["events"]
    batch = max(1, 2000 // n)

    def cpu_per_step(fn) -> float:  # CPU time, all threads: iter_events runs the run on its own
        start = time.process_time()
        steps = sum(fn(n) for _ in range(batch))
        return (time.process_time() - start) / steps * 1e6

    rows: dict[str, list[float]] = {"plain": [], "sink": [], "iter_events": []}
    for _ in range(repeats):
        for name, fn in (("plain", plain), ("sink", sink), ("iter_events", iterated)):
            rows[name].append(cpu_per_step(fn))
    base = statistics.median(rows["plain"])
    print(f"events (N={n}, {per_run} events a run, {per_run / (n + 1):.1f} a step):")
    print(f"  nobody watching {base:.1f} CPU us/step")
    for name in ("sink", "iter_events"):
        ratios = [w / p for w, p in zip(rows[name], rows["plain"], strict=True)]
        watched = statistics.median(rows[name])
        per_event = (watched - base) * (n + 1) / per_run
        print(f"  {name:<11} {watched:.1f} CPU us/step ({statistics.median(ratios):.2f}x), {per_event:.2f} us an event")


if __name__ == "__main__":
    main()
