"""What every peer harness shares: the workload, the clock, the measurement, the JSON.

Standard library only: each harness runs under its own framework's virtual environment
and imports this file from its own folder.

The workload: a scripted model calls `add(x, y)` N times, then answers. Call k (1..N) is
`add(previous result, k)`, where the model reads the previous result from the history the
framework hands it (so the run proves tool results flow back), and the answer is the last
result, N(N+1)/2. A "step" is one model call: a run has N + 1 of them.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import re
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata

TASK = "Add the numbers 1 to N by calling add(x, y), one call at a time, then answer."
LAST_INT = re.compile(r"(-?\d+)\D*$")


def expected_answer(n: int) -> int:
    return n * (n + 1) // 2


def last_int(text: str) -> int:
    """The last integer in text (the previous tool result at the end of the history).
    Reads only the tail, so the scripted model costs the same at every step."""
    m = LAST_INT.search(text[-200:])
    if m is None:
        raise AssertionError(f"no integer at the end of the history: {text[-200:]!r}")
    return int(m.group(1))


@dataclass
class Script:
    """The scripted model's state for one run: how many calls it made, when, and the
    previous result it read. `next_call(previous)` returns ("add", args) or ("final", answer)."""

    n: int
    calls: int = 0
    tool_calls: int = 0
    stamps: list[tuple[int, int]] = field(default_factory=list)  # (wall ns, CPU ns) per call

    def next_call(self, previous: int) -> tuple[str, dict[str, int] | str]:
        self.stamps.append((time.perf_counter_ns(), time.process_time_ns()))
        self.calls += 1
        if self.calls <= self.n:
            return "add", {"x": previous, "y": self.calls}
        return "final", str(previous)

    def add(self, x: int, y: int) -> int:
        self.tool_calls += 1
        return x + y


@dataclass(frozen=True)
class Harness:
    """A framework under test. imports() does every import the workload needs (it is
    timed in a fresh process); build() returns run(script) -> final answer text."""

    name: str
    packages: tuple[str, ...]
    imports: Callable[[], None]
    build: Callable[[], Callable[[Script], str]]
    notes: str = ""


def _check(name: str, script: Script, answer: str) -> None:
    want = expected_answer(script.n)
    if script.tool_calls != script.n:
        raise AssertionError(f"{name}: add was called {script.tool_calls} times, want {script.n}")
    if script.calls != script.n + 1:
        raise AssertionError(
            f"{name}: the model was called {script.calls} times, want {script.n + 1}"
        )
    if answer.strip() != str(want):
        raise AssertionError(f"{name}: answer {answer!r}, want {want}")


def _timed_run(h: Harness, run: Callable[[Script], str], n: int) -> tuple[float, float, Script]:
    """One checked run: (wall seconds, CPU seconds of this process, the script)."""
    script = Script(n)
    c0 = time.process_time_ns()
    t0 = time.perf_counter_ns()
    answer = run(script)
    elapsed = (time.perf_counter_ns() - t0) / 1e9
    cpu = (time.process_time_ns() - c0) / 1e9
    _check(h.name, script, answer)
    return elapsed, cpu, script


def _growth(script: Script) -> dict[str, float]:
    """Per-step time against step number, in CPU time (a shared machine preempts a
    process now and then, which puts spikes into wall-clock gaps but not into CPU time):
    the median of the first and of the last 20 steps, and the slope between them (how
    much each step of history adds to the next step)."""
    cpu = [(b[1] - a[1]) / 1e3 for a, b in zip(script.stamps, script.stamps[1:], strict=False)]
    wall = [(b[0] - a[0]) / 1e3 for a, b in zip(script.stamps, script.stamps[1:], strict=False)]
    k = min(20, len(cpu))
    first, last = statistics.median(cpu[:k]), statistics.median(cpu[-k:])
    span = len(cpu) - k
    return {
        "slope_us_per_step": (last - first) / span if span > 0 else 0.0,
        "first_us": first,
        "last_us": last,
        "wall_first_us": statistics.median(wall[:k]),
        "wall_last_us": statistics.median(wall[-k:]),
    }


def _versions(packages: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for p in packages:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = "not installed"
    return out


def measure(h: Harness, ns: list[int], budget_s: float, max_repeats: int) -> dict[str, object]:
    """Build once, then for each N: repeat runs until budget_s is spent (at least 3);
    report the median wall clock, and the median run by CPU time (its CPU time and its
    per-step growth). The first run of all is reported apart as the cold run."""
    run = h.build()
    cold_s, _, _ = _timed_run(h, run, ns[0])
    per_n = []
    for n in ns:
        _timed_run(h, run, n)  # warm-up at this size
        runs: list[tuple[float, float, Script]] = []
        spent = 0.0
        while len(runs) < 3 or (spent < budget_s and len(runs) < max_repeats):
            gc.collect()
            runs.append(_timed_run(h, run, n))
            spent += runs[-1][0]
        runs.sort(key=lambda r: r[1])
        _, cpu, script = runs[len(runs) // 2]
        wall = statistics.median(r[0] for r in runs)
        per_n.append(
            {
                "n": n,
                "model_calls": n + 1,
                "repeats": len(runs),
                "median_s": wall,
                "min_s": runs[0][0],
                "us_per_step": wall / (n + 1) * 1e6,
                "cpu_us_per_step": cpu / (n + 1) * 1e6,
                "growth": _growth(script),
            }
        )
    return {"cold_first_run_s": cold_s, "runs": per_n}


def main(h: Harness) -> None:
    """`python harness.py --import-only` or `python harness.py --ns 10,50,200`; prints
    one JSON object."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--import-only", action="store_true")
    parser.add_argument("--ns", default="10,50,200")
    parser.add_argument("--budget-s", type=float, default=1.5)
    parser.add_argument("--max-repeats", type=int, default=30)
    args = parser.parse_args()
    c0 = time.process_time()
    t0 = time.perf_counter()
    h.imports()
    import_s = time.perf_counter() - t0
    out: dict[str, object] = {"name": h.name, "import_s": import_s,
                              "import_cpu_s": time.process_time() - c0}
    if args.import_only:
        out["rss_import_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    else:
        ns = [int(x) for x in args.ns.split(",")]
        out |= measure(h, ns, args.budget_s, args.max_repeats)
        out["rss_peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        out["versions"] = _versions(h.packages)
        out["python"] = platform.python_version()
        out["notes"] = h.notes
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
