"""Instructions per ReAct step: overhead.py's workload (loopwright against the bare loop)
counted by valgrind's cachegrind instead of timed, so two trees compare exactly on a busy
machine. Counts repeat to the instruction (hash seed fixed); they weigh every instruction
alike, so confirm a change in time too (overhead.py).

    python benchmarks/instructions.py [--src TREE/src ...] [--n 10 200]

Each figure is (runs of M) minus (runs of m) over the steps in between, so start-up,
imports and the first compilation of changed modules cancel out. Needs `valgrind` on PATH
(Debian: apt-get install valgrind); nothing else uses it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = """
import sys
sys.path.insert(0, {here!r})
import overhead as ob
import loopwright as lw
registry = lw.ToolRegistry([lw.tool(ob.add)])
n, runs, which = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
for _ in range(3 + runs):
    if which == "loopwright":
        lw.run("sum", ob.make_policy(n), registry, max_steps=n + 1, on_repeat="nudge")
    else:
        ob.bare_loop("sum", ob.make_policy(n), {{"add": ob.add}}, n + 1)
"""


def instructions(src: str, n: int, runs: int, which: str) -> int:
    """Instructions of a process that imports loopwright from `src` and makes 3 + runs runs."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            ["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={tmp}/out",
             sys.executable, "-c", CHILD.format(here=HERE), str(n), str(runs), which],
            env={**os.environ, "PYTHONPATH": src, "PYTHONHASHSEED": "0"}, capture_output=True, text=True,
        )  # fmt: skip
    found = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if out.returncode != 0 or found is None:
        raise SystemExit(f"valgrind failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def per_step(src: str, n: int, which: str) -> float:
    few, many = (2, 7) if n >= 100 else (20, 70)
    return (instructions(src, n, many, which) - instructions(src, n, few, which)) / ((many - few) * (n + 1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--src", nargs="+", default=[os.path.join(os.path.dirname(HERE), "src")],
                        help="trees to compare (their src/ folders)")
    parser.add_argument("--n", nargs="+", type=int, default=[10, 200], help="steps a run")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on PATH (Debian: apt-get install valgrind)")
    for src in args.src:
        instructions(src, 0, 0, "loopwright")  # compile the tree's modules once
        for n in args.n:
            ours, bare = per_step(src, n, "loopwright"), per_step(src, n, "bare")
            print(f"{src}  N={n}: loopwright {ours / 1000:.1f}k instructions a step, bare loop "
                  f"{bare / 1000:.1f}k: {ours / bare:.2f}x", flush=True)


if __name__ == "__main__":
    main()
