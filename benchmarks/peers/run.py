"""Run every peer harness in its own virtual environment, one after another in this one
session, and collect their JSON into one file.

    python benchmarks/peers/run.py [--out benchmarks/peers/results/peers.json] [--only NAME ...]

Each round measures every framework once (a few fresh import-only processes, then one
measuring process, see common.py); rounds interleave the frameworks so that a burst of
load from elsewhere does not fall on one of them only. For each N the fastest round's
median is kept (wall clock and CPU time each); import time and import RSS are medians over all import processes. A harness that fails is recorded
with its error, never with made-up numbers.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
VENVS = HERE / ".venvs"

# (environment, harness file); the order is the order of the table.
PEERS = [
    ("bare", "harness_bare.py"),
    ("loopwright", "harness_loopwright.py"),
    ("langgraph", "harness_langgraph.py"),
    ("smolagents", "harness_smolagents.py"),
    ("openai_agents", "harness_openai_agents.py"),
    ("pydantic_ai", "harness_pydantic_ai.py"),
]


def _run(python: Path, args: list[str], timeout_s: float) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PYTHONHASHSEED"] = "0"
    proc = subprocess.run(
        [str(python), *args],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-8:]
        raise RuntimeError(f"exit {proc.returncode}: " + "\n".join(tail))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"no JSON on stdout: {proc.stdout[-400:]!r}")
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def measure_peer(env: str, harness: str, ns: str, import_runs: int, budget_s: float) -> dict[str, Any]:
    """One round for one framework: import_runs fresh import-only processes, then one
    measuring process."""
    python = VENVS / env / "bin" / "python"
    if not python.exists():
        return {"env": env, "error": f"no environment at {python}: run benchmarks/peers/setup.sh"}
    try:
        imports = [_run(python, [harness, "--import-only"], 120) for _ in range(import_runs)]
        result = _run(python, [harness, "--ns", ns, "--budget-s", str(budget_s)], 900)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return {"env": env, "error": str(exc)}
    result["env"] = env
    result["imports"] = [(float(r["import_s"]), float(r["rss_import_mb"]), float(r["import_cpu_s"]))
                         for r in imports]
    return result


def merge_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Rounds of one framework as one result: for each N the round whose median run was
    fastest (load from other processes only ever adds time); imports pooled."""
    failed = [r for r in rounds if "error" in r]
    if failed:
        return failed[0]
    best = {k: v for k, v in rounds[0].items() if k != "imports"}
    best["runs"] = []
    for i in range(len(rounds[0]["runs"])):
        by_wall = min((r["runs"][i] for r in rounds), key=lambda x: x["median_s"])
        by_cpu = min((r["runs"][i] for r in rounds), key=lambda x: x["cpu_us_per_step"])
        best["runs"].append(by_wall | {"cpu_us_per_step": by_cpu["cpu_us_per_step"],
                                       "growth": by_cpu["growth"]})
    best["cold_first_run_s"] = statistics.median(r["cold_first_run_s"] for r in rounds)
    best["rss_peak_mb"] = max(r["rss_peak_mb"] for r in rounds)
    imports = [i for r in rounds for i in r["imports"]]
    best["import_s"] = statistics.median(i[0] for i in imports)
    best["rss_import_mb"] = statistics.median(i[1] for i in imports)
    best["import_cpu_s"] = statistics.median(i[2] for i in imports)
    best["import_runs"] = len(imports)
    best["rounds"] = len(rounds)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(HERE / "results" / "peers.json"))
    parser.add_argument("--ns", default="10,50,200")
    parser.add_argument("--import-runs", type=int, default=3, help="per round")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds over all peers")
    parser.add_argument("--budget-s", type=float, default=1.5)
    parser.add_argument("--only", nargs="*", help="environment names to run")
    args = parser.parse_args()
    peers = [p for p in PEERS if not args.only or p[0] in args.only]
    load_before = os.getloadavg()
    started = time.perf_counter()
    rounds: dict[str, list[dict[str, Any]]] = {env: [] for env, _ in peers}
    for k in range(args.rounds):
        for env, harness in peers:
            if rounds[env] and "error" in rounds[env][-1]:
                continue  # a failure is recorded once, not retried
            print(f"round {k + 1}: {env} ...", file=sys.stderr, flush=True)
            r = measure_peer(env, harness, args.ns, args.import_runs, args.budget_s)
            if "error" in r:
                print(f"  FAILED: {r['error']}", file=sys.stderr)
            else:
                line = ", ".join(f"N={x['n']}: {x['us_per_step']:.0f} us/step" for x in r["runs"])
                print(f"  {line}", file=sys.stderr)
            rounds[env].append(r)
    results = [merge_rounds(rounds[env]) for env, _ in peers]
    out = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "wall_s": time.perf_counter() - started,
        "ns": [int(x) for x in args.ns.split(",")],
        "peers": results,
    }
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
