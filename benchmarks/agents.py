"""Agents as tools, side by side: what a child-agent call costs against a plain tool call
(loopwright alone), and the same two-agent task in loopwright, the OpenAI Agents SDK
(agents as tools) and pydantic-ai (agent delegation) on scripted models: per-step cost
and what each records (usage shared with the coordinator? the child's run kept in the
coordinator's result? resumable after a crash?).

    .venv/bin/python benchmarks/agents.py [--n 20] [--budget-s 1.5] [--json out.json]

The workload is benchmarks/peers/delegation.py: a coordinator delegates "add <total> and
<k>" to a calculator agent N times (the calculator calls add once and answers), then
answers N(N+1)/2: 3N + 1 model calls. The baseline is the coordinator calling add itself
N times (N + 1 model calls). The peers run in their own virtual environments
(benchmarks/peers/setup.sh openai_agents pydantic_ai), as subprocesses; a missing one is
reported as skipped.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import loopwright as lw

PEERS = Path(__file__).parent / "peers"
sys.path.insert(0, str(PEERS))
from delegation import TASK, USAGE, Brains, ints  # noqa: E402

_USAGE = lw.Usage(USAGE[0], USAGE[0], USAGE[1])


def _question(prompt: str) -> tuple[str, str | None]:
    """The task the prompt asks (after its last "Question:") and the last observation
    after it, or None before the first."""
    asked = prompt.rsplit("Question:", 1)[-1]
    task, _, rest = asked.partition("\n")
    return task, (rest[-200:] if "Observation" in rest else None)


class Coordinator:
    def __init__(self, brains: Brains, tool: str) -> None:
        self.brains, self.tool = brains, tool

    def complete(self, request: lw.ModelRequest) -> lw.Completion:
        _, last = _question(request.prompt)
        kind, value = self.brains.parent(last)
        if kind == "final":
            return lw.Completion(f"Thought: done\nFinal Answer: {value}", _USAGE)
        if self.tool == "add":  # the baseline: the coordinator adds itself
            self.brains.child_calls += 2  # (what the calculator would have made: the check counts them)
            x, y = ints(value)[-2:]
            args = json.dumps({"x": x, "y": y})
        else:
            args = json.dumps({"task": value})
        return lw.Completion(f"Thought: next\nAction: {self.tool}\nAction Input: {args}", _USAGE)


class Calculator:
    def __init__(self, brains: Brains) -> None:
        self.brains = brains

    def complete(self, request: lw.ModelRequest) -> lw.Completion:
        task, last = _question(request.prompt)
        kind, value = self.brains.child(task, last)
        if kind == "final":
            return lw.Completion(f"Thought: done\nFinal Answer: {value}", _USAGE)
        return lw.Completion(f"Thought: add\nAction: add\nAction Input: {json.dumps(value)}", _USAGE)


def loopwright_run(delegate: bool, store: Any = None) -> Callable[[Brains], dict[str, Any]]:
    def run(brains: Brains) -> dict[str, Any]:
        @lw.tool
        def add(x: int, y: int) -> int:
            """Add two integers."""
            return brains.add(x, y)

        tools = lw.ToolRegistry([add])
        if delegate:
            calculator = lw.Agent("calculator", Calculator(brains), tools, instructions="You are a calculator.")
            tools = lw.ToolRegistry([calculator.as_tool()])
        coordinator = Coordinator(brains, "calculator" if delegate else "add")
        trace = lw.run(TASK, coordinator, tools, max_steps=brains.n + 2, store=store)
        nested = sum(c.llm_calls for c in trace.children.values())
        return {"answer": trace.final_answer or "", "tokens": trace.usage.total_tokens, "nested": nested}

    return run


def measure(run: Callable[[Brains], dict[str, Any]], n: int, budget_s: float) -> tuple[float, dict[str, Any]]:
    """The median seconds of repeated runs (at least 3, until budget_s), and the last run's record."""
    run(Brains(n))
    times: list[float] = []
    out: dict[str, Any] = {}
    while len(times) < 3 or (sum(times) < budget_s and len(times) < 50):
        gc.collect()
        brains = Brains(n)
        t0 = time.perf_counter()
        out = run(brains)
        times.append(time.perf_counter() - t0)
        brains.check(out["answer"])
    return statistics.median(times), out


def loopwright_rows(n: int, budget_s: float) -> list[dict[str, Any]]:
    rows = []
    plain_s, _ = measure(loopwright_run(False), n, budget_s)
    rows.append({"name": "loopwright: coordinator calls add (plain tool)", "steps": n + 1,
                 "us_per_step": plain_s / (n + 1) * 1e6, "us_per_call": plain_s / (n + 1) * 1e6})
    with tempfile.TemporaryDirectory() as folder:
        for label, store in (("", None), (", journaled (SQLite)", lw.SQLiteStore(Path(folder) / "j.db"))):
            seconds, out = measure(loopwright_run(True, store), n, budget_s)
            steps = 3 * n + 1
            rows.append({
                "name": f"loopwright: coordinator calls the calculator agent (Agent.as_tool){label}",
                "steps": steps, "us_per_step": seconds / steps * 1e6,
                # one delegation: a coordinator step whose tool is a whole child run (2 model calls)
                "us_per_call": seconds / n * 1e6,
                "usage_includes_children": out["tokens"] == steps * sum(USAGE),
                "nesting_kept": out["nested"] == 2 * n,
                "budget_shared": "yes: token, cost and wall-clock budgets; the child gets what is left",
                "resumable": "yes: the child is journaled under the call's key and resumed with its parent",
            })  # fmt: skip
            if store is not None:
                store.close()
    return rows


def peer_rows(n: int, budget_s: float) -> list[dict[str, Any]]:
    rows = []
    for venv, harness in (("openai_agents", "harness_agents_openai.py"), ("pydantic_ai", "harness_agents_pydantic_ai.py")):
        python = PEERS / ".venvs" / venv / "bin" / "python"
        if not python.exists():
            rows.append({"name": venv, "skipped": f"no {python} (run benchmarks/peers/setup.sh {venv})"})
            continue
        out = subprocess.run([str(python), str(PEERS / harness), "--n", str(n), "--budget-s", str(budget_s)],
                             capture_output=True, text=True, timeout=600, cwd=PEERS, check=False)
        if out.returncode != 0:
            rows.append({"name": venv, "skipped": out.stderr.strip().splitlines()[-1:]})
            continue
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| run | model calls | µs per step | µs per coordinator step (the child's run included) | usage includes the child's | "
             "child's run kept in the result | budget shared | resumable |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['name']} | skipped: {r['skipped']} |||||||")
            continue
        per_call = f"{r['us_per_call']:.0f}" if "us_per_call" in r else "–"
        flags = [("yes" if r[k] else "no") if k in r else "–" for k in ("usage_includes_children", "nesting_kept")]
        lines.append(f"| {r['name']} | {r['steps']} | {r['us_per_step']:.0f} | {per_call} | {flags[0]} | {flags[1]} | "
                     f"{r.get('budget_shared', '–')} | {r.get('resumable', '–')} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20, help="delegations per run")
    parser.add_argument("--budget-s", type=float, default=1.5, help="seconds of repeats per row")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    rows = loopwright_rows(args.n, args.budget_s) + peer_rows(args.n, args.budget_s)
    print(table(rows))
    plain, agent = rows[0]["us_per_call"], rows[1]["us_per_call"]
    print(f"\nA child-agent call costs {agent / plain:.1f}x a plain tool call (it makes 3 model calls where the "
          f"plain call makes 1): {agent:.0f} µs against {plain:.0f} µs per coordinator step, scripted models.")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
