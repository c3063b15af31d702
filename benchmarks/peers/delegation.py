"""The two-agent workload (benchmarks/agents.py), shared by its harnesses: a coordinator
delegates to a calculator agent N times, then answers.

Standard library only: each harness runs under its own framework's virtual environment
and imports this file from its own folder.

Delegation k (1..N) asks the calculator "add <total> and <k>"; the calculator calls
`add(total, k)` once and answers with the sum; the coordinator reads the answer from the
history its framework hands it. The answer is N(N+1)/2. Model calls: N + 1 by the
coordinator, 2 per delegation by the calculator, 3N + 1 in all (a "step" is one model
call). Every scripted model call reports the same usage (USAGE: 100 tokens in, 10 out),
so a harness can tell whether the coordinator's recorded usage includes its children's.
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

TASK = "Add the numbers 1 to N: ask the calculator to add each k to the running total, then answer."
USAGE = (100, 10)  # input, output tokens each scripted call reports
_INTS = re.compile(r"-?\d+")


def ints(text: str) -> list[int]:
    return [int(m) for m in _INTS.findall(text)]


@dataclass
class Brains:
    """The scripted models' state for one run."""

    n: int
    parent_calls: int = 0
    child_calls: int = 0
    tool_calls: int = 0
    total: int = 0
    log: list[str] = field(default_factory=list)

    def parent(self, last_answer: str | None) -> tuple[str, str]:
        """("delegate", task for the calculator) or ("final", answer). `last_answer`: the
        calculator's last answer as the coordinator's history shows it (None at first)."""
        self.parent_calls += 1
        if last_answer is not None:
            self.total = ints(last_answer)[-1]
        k = self.parent_calls
        if k <= self.n:
            return "delegate", f"add {self.total} and {k}"
        return "final", str(self.total)

    def child(self, task: str, result: str | None) -> tuple[str, Any]:
        """("add", {"x", "y"}) for a new task, ("final", the sum) once `result` is back."""
        self.child_calls += 1
        if result is None:
            x, y = ints(task)[-2:]
            return "add", {"x": x, "y": y}
        return "final", str(ints(result)[-1])

    def add(self, x: int, y: int) -> int:
        self.tool_calls += 1
        return x + y

    def check(self, answer: str) -> None:
        want = self.n * (self.n + 1) // 2
        if answer.strip() != str(want):
            raise AssertionError(f"answer {answer!r}, want {want}")
        if (self.parent_calls, self.child_calls, self.tool_calls) != (self.n + 1, 2 * self.n, self.n):
            raise AssertionError(f"calls {self.parent_calls}/{self.child_calls}/{self.tool_calls} for n={self.n}")


@dataclass(frozen=True)
class Outcome:
    """One run's answer and what the coordinator's own result records."""

    answer: str
    recorded_tokens: int | None  # the coordinator's recorded total tokens (None: it records none)
    recorded_calls: int | None  # the model calls its usage counts (None: it counts none)
    nested_steps: int  # child model calls reachable from the coordinator's result


def run_main(name: str, run: Callable[[Brains], Outcome], notes: dict[str, str]) -> None:
    """`python harness.py --n 20 --budget-s 1.5`: one JSON object with the per-step cost
    (the median of repeated runs) and what the result records."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--budget-s", type=float, default=1.5)
    args = parser.parse_args()
    n = args.n
    run(Brains(n))  # warm-up
    times: list[float] = []
    spent = 0.0
    outcome = None
    while len(times) < 3 or (spent < args.budget_s and len(times) < 50):
        gc.collect()
        brains = Brains(n)
        t0 = time.perf_counter()
        outcome = run(brains)
        times.append(time.perf_counter() - t0)
        spent += times[-1]
        brains.check(outcome.answer)
    assert outcome is not None
    steps = 3 * n + 1
    all_tokens = steps * sum(USAGE)
    out = {
        "name": name, "n": n, "steps": steps, "repeats": len(times),
        "median_s": statistics.median(times), "us_per_step": statistics.median(times) / steps * 1e6,
        "recorded_tokens": outcome.recorded_tokens, "all_tokens": all_tokens, "recorded_calls": outcome.recorded_calls,
        "usage_includes_children": outcome.recorded_tokens == all_tokens or outcome.recorded_calls == steps,
        "nesting_kept": outcome.nested_steps == 2 * n,
        **notes,
    }  # fmt: skip
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
