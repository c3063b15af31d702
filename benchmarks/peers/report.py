"""Write docs/benchmarks.md and docs/img/peers.png from the JSON of the last run.

    python benchmarks/peers/report.py --peers results/peers.json --modes-md results/modes.md

Needs matplotlib (the .venvs/report environment). Numbers come only from the JSON: a
framework that failed shows its error, not a figure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
COLORS = {
    "bare": "#888888", "loopwright": "#d1495b", "langgraph": "#2e86ab", "smolagents": "#f4a259",
    "openai_agents": "#5c946e", "pydantic_ai": "#8e6bbf",
}
HOW = {
    "bare": "the ~40-line loop in harness_bare.py (regex, json.loads, dict of tools, growing string)",
    "loopwright": "`lw.run(task, policy, registry, mode=\"react\")`, JSON dialect, scripted policy",
    "langgraph": "`langchain.agents.create_agent` (a LangGraph graph) with a `BaseChatModel` "
                 "subclass returning native tool calls",
    "smolagents": "`ToolCallingAgent` with a `Model` subclass returning native tool calls; "
                  "answers through its `final_answer` tool",
    "openai_agents": "`Runner.run_sync` with a custom `Model` returning Responses items; "
                     "tracing disabled (its exporter would call a hosted service)",
    "pydantic_ai": "`Agent(FunctionModel(fn))`; `UsageLimits(request_limit=N+1)` (the default "
                   "limit of 50 would stop N = 200); installed as `pydantic-ai-slim` at the "
                   "same version (the provider SDKs are never imported by this run)",
}


def _ok(peers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in peers if "error" not in p]


def _version(p: dict[str, Any]) -> str:
    versions = p.get("versions") or {}
    main = {k: v for k, v in versions.items() if k not in ("pydantic", "openai", "jsonschema")}
    return ", ".join(f"{k} {v}" for k, v in main.items()) or "standard library"


def table(data: dict[str, Any]) -> str:
    """Two Markdown tables: per-step cost, then start-up and memory."""
    ns = data["ns"]
    head = (["framework", "version"] + [f"wall µs/step N={n}" for n in ns]
            + [f"CPU µs/step N={n}" for n in ns]
            + ["growth µs/step²", f"CPU µs/step, steps 1-20 → last 20 of {ns[-1]}"])
    rows = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    head2 = ["framework", "import s (wall)", "import s (CPU)", "RSS after import MiB", "peak RSS MiB", f"first run (N={ns[0]}) ms"]
    rows2 = ["| " + " | ".join(head2) + " |", "|---|" + "---:|" * (len(head2) - 1)]
    for p in data["peers"]:
        if "error" in p:
            rows.append(f"| {p['env']} | failed: see below |" + " |" * (len(head) - 2))
            rows2.append(f"| {p['env']} | failed |" + " |" * (len(head2) - 2))
            continue
        runs = {r["n"]: r for r in p["runs"]}
        last = runs[ns[-1]]["growth"]
        cells = [p["name"], _version(p)]
        cells += [f"{runs[n]['us_per_step']:,.0f}" for n in ns]
        cells += [f"{runs[n]['cpu_us_per_step']:,.0f}" for n in ns]
        cells += [f"{last['slope_us_per_step']:+.2f}", f"{last['first_us']:,.0f} → {last['last_us']:,.0f}"]
        rows.append("| " + " | ".join(cells) + " |")
        rows2.append(
            f"| {p['name']} | {p['import_s']:.3f} | {p.get('import_cpu_s', float('nan')):.3f} | "
            f"{p['rss_import_mb']:.0f} | {p['rss_peak_mb']:.0f} | "
            f"{p['cold_first_run_s'] * 1e3:.1f} |"
        )
    return "\n".join(rows) + "\n\n" + "\n".join(rows2)


def chart(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    peers = _ok(data["peers"])
    ns = data["ns"]
    fig, grid = plt.subplots(2, 2, figsize=(13, 9))
    ax = grid[0][0]
    for p in peers:
        color = COLORS.get(p["env"])
        ax.plot(ns, [r["cpu_us_per_step"] for r in p["runs"]], "-o", label=p["name"], color=color)
        ax.plot(ns, [r["us_per_step"] for r in p["runs"]], ":", color=color, alpha=0.6)
    ax.set(xscale="log", yscale="log", xlabel="N (tool calls per run)",
           ylabel="µs per step (CPU solid, wall clock dotted)",
           title="Runtime overhead per step (scripted model, no model latency)")
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3)
    ax = grid[0][1]
    width = 0.38
    xs = range(len(peers))
    growth = [p["runs"][-1]["growth"] for p in peers]
    ax.bar([x - width / 2 for x in xs], [g["first_us"] for g in growth], width,
           label="steps 1-20", color="#9ab8d8")
    ax.bar([x + width / 2 for x in xs], [g["last_us"] for g in growth], width,
           label=f"last 20 steps (of {ns[-1]})", color="#2e5e8e")
    ax.set(yscale="log", ylabel="CPU µs per step (median)", title=f"Growth with history (N={ns[-1]})")
    ax.set_xticks(list(xs), [p["name"].split(" (")[0] for p in peers], rotation=20, ha="right")
    ax.legend(fontsize=8)
    ax = grid[1][0]
    bars = ax.bar(list(xs), [p["import_s"] for p in peers], color=[COLORS.get(p["env"]) for p in peers])
    ax.bar_label(bars, fmt="%.2f s", fontsize=8)
    ax.set(ylabel="seconds", title="Import time (median of fresh processes)")
    ax.set_xticks(list(xs), [p["name"].split(" (")[0] for p in peers], rotation=20, ha="right")
    ax = grid[1][1]
    ax.bar([x - width / 2 for x in xs], [p["rss_import_mb"] for p in peers], width,
           label="after import", color="#c9c9c9")
    bars = ax.bar([x + width / 2 for x in xs], [p["rss_peak_mb"] for p in peers], width,
                  label=f"peak, after all runs up to N={ns[-1]}", color="#555555")
    ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set(ylabel="MiB (peak resident set)", title="Memory")
    ax.set_xticks(list(xs), [p["name"].split(" (")[0] for p in peers], rotation=20, ha="right")
    ax.legend(fontsize=8)
    for a in grid.flatten():
        a.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def document(data: dict[str, Any], modes_md: str, command: str) -> str:
    ns = data["ns"]
    failures = [p for p in data["peers"] if "error" in p]
    by_env = {p["env"]: p for p in _ok(data["peers"])}
    notes = "\n".join(f"- **{env}**: {HOW[env]}." for env in HOW if env in by_env)
    failed = "\n\n".join(
        f"**{p['env']} failed**, so it has no figures:\n\n```\n{p['error']}\n```" for p in failures
    ) or "Every framework installed and ran; each run's assertions passed."
    rounds = max((p.get("rounds", 1) for p in by_env.values()), default=1)
    import_runs = max((p.get("import_runs", 1) for p in by_env.values()), default=1)
    lw = by_env.get("loopwright")
    bare = by_env.get("bare")
    summary = ""
    if lw and bare:
        def cpu(p: dict[str, Any]) -> float:
            return float(p["runs"][-1]["cpu_us_per_step"])

        others = sorted((cpu(p), p["name"]) for e, p in by_env.items() if e not in ("bare", "loopwright"))
        summary = (
            f"At N = {ns[-1]}, loopwright spends {cpu(lw):,.0f} µs of CPU a step against the bare "
            f"loop's {cpu(bare):,.0f} µs; the peers spend "
            + ", ".join(f"{us:,.0f} µs ({name})" for us, name in others)
            + ". A real model call takes tens to thousands of milliseconds, so in a short run "
            "this overhead is rarely what you wait for; it matters in long runs, where a cost "
            "per step that grows with history makes the whole run quadratic, in import time "
            "(command-line tools, serverless cold starts) and in memory.\n"
        )
    return f"""# Benchmarks

Every figure on this page comes from one command, run on the machine named below:

```bash
{command}
```

It makes one virtual environment per framework (`benchmarks/peers/setup.sh`, pinned
versions, under `benchmarks/peers/.venvs/`), runs each framework's harness in its own
environment one after another in the same session (`benchmarks/peers/run.py`), measures
the three modes (`benchmarks/modes_cost.py`) and writes this page and its charts
(`benchmarks/peers/report.py`). Raw JSON lands in `benchmarks/peers/results/`.

Last run: {data['date']} · {data['machine']} · Python {data['python']} · {data['wall_s']:.0f} s.
The machine is shared (1-minute load average {data['load_before'][0]:.1f} before the run,
{data['load_after'][0]:.1f} after, on {data['machine'].split(', ')[1]}), so wall-clock figures carry noise from
other processes; the CPU-time column is less exposed to it.

## Peers: one scripted workload through each runtime

The workload: a scripted model calls `add(x, y)` N times, `add(previous result, k)` for
k = 1..N, reading the previous result from the history the framework hands it (so tool
results must flow back), then answers N(N+1)/2. Each run asserts that the tool ran exactly
N times, the model was called N + 1 times and the answer is right; a run that fails an
assertion fails the benchmark. A step is one model call (a tool round, or the answer), so
µs/step is a run's time divided by N + 1. The scripted model reads only the tail of its
input, so its own cost is the same at every step: what grows is the framework.

- **wall µs/step**: median wall clock of repeated runs (at least 3, about 1.5 s of runs
  per N, after a warm-up run at that N), in each of {rounds} rounds that interleave the
  frameworks; the faster round's median is kept. **CPU µs/step**: the same in CPU time of
  the measuring process (all its threads). On a busy shared machine the wall clock also
  counts the times the process was preempted (a few ms each), which weighs on the short
  runs; CPU time is the steadier measure of what a framework does per step.
- **growth µs/step²**: how much each step of history adds to the next step: in the median
  run at N = {ns[-1]}, the CPU time between consecutive model calls, median of the last 20
  steps minus median of the first 20, divided by the steps between them (the last column
  gives the two medians). Near 0 is flat; a positive slope makes a run's cost quadratic.
- **import s**: wall and CPU time of the imports the workload needs, in a fresh process
  (median of {import_runs} processes; the first import reads files, so on a busy machine
  the wall clock runs well ahead of CPU time). **RSS after import**: peak resident memory of such a process. **peak RSS**:
  of the measuring process after all runs. **first run**: the first N = {ns[0]} run in a fresh
  process (lazy imports, graph compilation, first-call caches).

{table(data)}

![µs per step, growth with history, import time and memory per framework](img/peers.png)

{summary}
How each framework was driven (harnesses in `benchmarks/peers/harness_*.py`):

{notes}

{failed}

## Modes: what ReAct, ReWOO and plan-execute cost as the plan grows

`benchmarks/modes_cost.py` runs a fixed task set through `lw.run` in each mode with a
scripted policy. chain-L adds 1..L with L dependent calls; fanout-L makes L independent
calls of a 5 ms tool. Token counts are loopwright's estimate (one token per 3 UTF-8 bytes)
of the prompts the loops really build. "Evaluated" models a KV-cached backend (llama.cpp
keeps the longest common prefix of its last evaluation): a call evaluates only the part of
its prompt past the longest common prefix with the previous call's prompt and completion
in the same run.

{modes_md}
![Prompt tokens sent and evaluated, model calls and wall clock against plan length](img/modes_cost.png)

What the curves say:

- ReAct re-sends the whole scratchpad at every step, so the prompt tokens it sends grow
  with the square of the plan length (sum of a growing prefix), and it makes L + 1 model
  calls. With a KV cache that keeps the prefix, the tokens actually evaluated grow only
  linearly (each new token still attends over the cached prefix): without one, or on a
  hosted API that bills every prompt token, the quadratic is what you pay.
- ReWOO makes two model calls whatever L is; its solver prompt grows linearly with the
  evidence. Independent steps run concurrently, so L independent 5 ms tools cost about one
  tool's latency plus scheduling, where ReAct and plan-execute pay L × 5 ms. (Its summed
  tool time exceeds the wall clock because concurrent calls overlap; each call's time also
  includes waiting for a thread on a 2-core machine.)
- Plan-execute makes one call when the plan succeeds (its prompt does not grow with L; the
  plan it generates does) and one more per replan; it runs the plan serially.
"""


KEEP_MARKER = "<!-- sections below are written by other benchmarks; report.py keeps them -->"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", type=Path, default=HERE / "results" / "peers.json")
    parser.add_argument("--modes-md", type=Path, default=HERE / "results" / "modes.md")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks.md")
    parser.add_argument("--png", type=Path, default=REPO / "docs" / "img" / "peers.png")
    parser.add_argument("--command", default="scripts/bench_peers.sh")
    args = parser.parse_args()
    data = json.loads(args.peers.read_text())
    chart(data, args.png)
    modes_md = args.modes_md.read_text() if args.modes_md.exists() else "(not measured)\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # Sections other benchmarks wrote below KEEP_MARKER (benchmarks/batch.py) stay as they are.
    kept = ""
    if args.out.exists() and KEEP_MARKER in (old := args.out.read_text()):
        kept = "\n" + old[old.index(KEEP_MARKER):]
    args.out.write_text(document(data, modes_md, args.command) + kept)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
