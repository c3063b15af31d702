"""What each mode costs as the plan grows: ReAct against ReWOO against plan-execute.

A fixed task set, run through `lw.run` in all three modes with scripted policies:

- chain-L: add 1..L with L dependent calls, add(previous, k); the answer is L(L+1)/2.
- fanout-L: L independent calls of `fetch(i)`, a tool that sleeps 5 ms and returns 10*i;
  the answer is the largest value, 10*L (plan-execute, which has no solver, answers with
  its last step's result, which is that value). This one shows tool latency: ReWOO runs independent steps
  concurrently, ReAct and plan-execute run them one by one.

For every run: model calls, prompt tokens sent, prompt tokens evaluated with prefix
reuse, completion tokens, tool calls, summed tool latency and wall clock. Token counts
are loopwright's estimate (one token per 3 UTF-8 bytes) of the real prompts the loops
build; "evaluated" models a KV-cached backend such as llama.cpp: a call evaluates only
the part of its prompt past the longest common prefix with what the cache holds from
the previous call of the same run (that call's prompt plus its completion).

    python benchmarks/modes_cost.py                       # print the table
    python benchmarks/modes_cost.py --json OUT.json --markdown OUT.md --png docs/img/modes_cost.png

The PNG needs matplotlib (the benchmarks/peers/.venvs/report environment has it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright.trace import Usage, estimate_tokens

LENGTHS = (1, 2, 4, 8, 16, 32, 64)
MODES = ("react", "rewoo", "plan_execute")
FETCH_S = 0.005
LAST_INT = re.compile(r"(-?\d+)\D*$")
EVIDENCE = re.compile(r">(-?\d+)</untrusted>")


@lw.tool
def add(x: int, y: int) -> int:
    """Add two integers."""
    return x + y


@lw.tool
def fetch(i: int) -> int:
    """Fetch the value of item i (a slow lookup: 5 ms)."""
    time.sleep(FETCH_S)
    return 10 * i


REGISTRY = lw.ToolRegistry([add, fetch])


class CachedCostPolicy:
    """A scripted policy (a function of the prompt) that reports what a KV-cached
    backend would evaluate: the prompt past its common prefix with the cache."""

    def __init__(self, reply: Callable[[str, int], str]) -> None:
        self.reply = reply
        self.calls = 0
        self.cache = ""

    def complete(self, request: lw.ModelRequest) -> lw.Completion:
        prompt = request.prompt
        text = self.reply(prompt, self.calls)
        self.calls += 1
        shared = len(os.path.commonprefix([prompt, self.cache]))
        self.cache = prompt + text
        usage = Usage(estimate_tokens(prompt), estimate_tokens(prompt[shared:]),
                      estimate_tokens(text), estimated=True)
        return lw.Completion(text, usage)


def expected(family: str, length: int) -> int:
    if family == "chain":
        return length * (length + 1) // 2
    return 10 * length


def plan_json(family: str, length: int) -> str:
    steps = []
    for k in range(1, length + 1):
        if family == "chain":
            args: dict[str, Any] = {"x": f"#E{k - 1}" if k > 1 else 0, "y": k}
            steps.append({"id": f"E{k}", "tool": "add", "args": args})
        else:
            steps.append({"id": f"E{k}", "tool": "fetch", "args": {"i": k}})
    return json.dumps({"plan": steps})


def react_reply(family: str, length: int) -> Callable[[str, int], str]:
    def reply(prompt: str, call: int) -> str:
        if call < length:
            k = call + 1
            if family == "chain":
                previous = int(LAST_INT.search(prompt[-200:]).group(1)) if call else 0  # type: ignore[union-attr]
                args = {"x": previous, "y": k}
                return f" add {k}\nAction: add\nAction Input: {json.dumps(args)}"
            return f" fetch {k}\nAction: fetch\nAction Input: {json.dumps({'i': k})}"
        # the observations of this run: after the prompt's worked example
        values = [int(v) for v in EVIDENCE.findall(prompt[prompt.rfind("Question:"):])]
        answer = values[-1] if family == "chain" else max(values)
        return f" I have it.\nFinal Answer: {answer}"

    return reply


def planner_reply(family: str, length: int, mode: str) -> Callable[[str, int], str]:
    def reply(prompt: str, call: int) -> str:
        if call == 0:
            return plan_json(family, length)
        # the ReWOO solver reads the evidence it was given
        values = [int(v) for v in EVIDENCE.findall(prompt)]
        answer = values[-1] if family == "chain" else max(values)
        return f"{answer}"

    return reply


def measure_one(mode: str, family: str, length: int) -> dict[str, Any]:
    reply = react_reply(family, length) if mode == "react" else planner_reply(family, length, mode)
    policy = CachedCostPolicy(reply)
    t0 = time.perf_counter()
    trace = lw.run(f"{family} of length {length}", policy, REGISTRY, mode=mode,
                   max_steps=length + 1, max_replans=0)
    wall = time.perf_counter() - t0
    want = str(expected(family, length))
    if trace.stopped_reason != "final" or (trace.final_answer or "").strip() != want:
        raise AssertionError(f"{mode} {family}-{length}: stopped {trace.stopped_reason}, "
                             f"answer {trace.final_answer!r}, want {want}")
    if trace.tool_calls != length:
        raise AssertionError(f"{mode} {family}-{length}: {trace.tool_calls} tool calls, want {length}")
    tool_s = sum(float(s.meta.get("tool_s", 0.0)) for s in trace.steps if s.kind == "action")
    u = trace.usage
    return {
        "mode": mode, "family": family, "length": length, "llm_calls": trace.llm_calls,
        "tool_calls": trace.tool_calls, "prompt_tokens": u.prompt_tokens,
        "evaluated_tokens": u.evaluated_tokens, "completion_tokens": u.completion_tokens,
        "tool_s": tool_s, "wall_s": wall,
    }


def measure(lengths: tuple[int, ...] = LENGTHS, repeats: int = 5) -> list[dict[str, Any]]:
    """Every (mode, family, length) once for the counts; fan-out runs `repeats` times and
    keep the run with the median wall clock (the machine may be shared)."""
    rows = [measure_one(m, "chain", n) for n in lengths for m in MODES]
    for n in lengths:
        for m in MODES:
            runs = sorted((measure_one(m, "fanout", n) for _ in range(repeats)),
                          key=lambda r: r["wall_s"])
            rows.append(runs[len(runs) // 2])
    return rows


def _get(rows: list[dict[str, Any]], mode: str, family: str, length: int) -> dict[str, Any]:
    return next(r for r in rows if (r["mode"], r["family"], r["length"]) == (mode, family, length))


def markdown(rows: list[dict[str, Any]]) -> str:
    lengths = sorted({r["length"] for r in rows})
    names = {"react": "ReAct", "rewoo": "ReWOO", "plan_execute": "plan-execute"}
    out = ["Tokens per run (chain-L): prompt tokens sent / prompt tokens evaluated with prefix "
           "reuse / completion tokens generated, and model calls in brackets:", "",
           "| plan length | " + " | ".join(names[m] for m in MODES) + " |",
           "|---:|" + "---:|" * len(MODES)]
    for n in lengths:
        cells = []
        for m in MODES:
            r = _get(rows, m, "chain", n)
            cells.append(f"{r['prompt_tokens']:,} / {r['evaluated_tokens']:,} / "
                         f"{r['completion_tokens']:,} ({r['llm_calls']})")
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    out += ["", f"Tool latency (fanout-L, a {FETCH_S * 1e3:.0f} ms tool; summed tool time / wall clock "
            "of the run):", "",
            "| plan length | " + " | ".join(names[m] for m in MODES) + " |",
            "|---:|" + "---:|" * len(MODES)]
    for n in lengths:
        cells = []
        for m in MODES:
            r = _get(rows, m, "fanout", n)
            cells.append(f"{r['tool_s'] * 1e3:.0f} ms / {r['wall_s'] * 1e3:.0f} ms")
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def chart(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = sorted({r["length"] for r in rows})
    colors = {"react": "#d1495b", "rewoo": "#2e86ab", "plan_execute": "#5c946e"}
    names = {"react": "ReAct", "rewoo": "ReWOO", "plan_execute": "plan-execute"}
    fig, grid = plt.subplots(2, 2, figsize=(13, 9))
    axes = grid.flatten()
    for ax, log in ((axes[0], False), (axes[1], True)):
        for m in MODES:
            sent = [_get(rows, m, "chain", n)["prompt_tokens"] for n in lengths]
            evaluated = [_get(rows, m, "chain", n)["evaluated_tokens"] for n in lengths]
            ax.plot(lengths, sent, "-o", color=colors[m], label=f"{names[m]}: sent")
            ax.plot(lengths, evaluated, "--", marker="s", mfc="none", color=colors[m],
                    label=f"{names[m]}: evaluated (prefix reuse)")
        ax.set(xlabel="plan length L (tool calls)", ylabel="prompt tokens per run (estimated)")
        if log:
            ax.set(xscale="log", yscale="log", title="The same, log-log: slope 2 is quadratic, 1 linear")
            ax.set_xticks(lengths, [str(n) for n in lengths])
        else:
            ax.set(title="Prompt tokens per run (chain-L): quadratic against linear")
            ax.set_xticks(lengths[2:], [str(n) for n in lengths[2:]])
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.legend(fontsize=8)
    ax = axes[2]
    for m in MODES:
        ax.plot(lengths, [_get(rows, m, "chain", n)["llm_calls"] for n in lengths], "-o",
                color=colors[m], label=names[m])
    ax.set(title="Model calls per run", xlabel="plan length L", ylabel="model calls")
    ax.set_xticks(lengths[2:], [str(n) for n in lengths[2:]])
    ax.legend(fontsize=8)
    ax = axes[3]
    for m in MODES:
        ax.plot(lengths, [_get(rows, m, "fanout", n)["wall_s"] * 1e3 for n in lengths], "-o",
                color=colors[m], label=names[m])
    ax.set(title=f"Wall clock, L independent {FETCH_S * 1e3:.0f} ms tools (fanout-L)",
           xlabel="plan length L", ylabel="ms per run")
    ax.set_xticks(lengths[2:], [str(n) for n in lengths[2:]])
    ax.legend(fontsize=8)
    for a in axes:
        a.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the rows as JSON")
    parser.add_argument("--markdown", type=Path, help="write the tables as Markdown")
    parser.add_argument("--png", type=Path, help="draw the cost curves (needs matplotlib)")
    args = parser.parse_args()
    rows = measure()
    table = markdown(rows)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(table)
    if args.png:
        chart(rows, args.png)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
