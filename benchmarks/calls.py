"""Python calls and record constructions per ReAct step: overhead.py's workload traced with
sys.setprofile, so two trees can be diffed function by function.

    python benchmarks/calls.py [--src TREE/src]

Each figure is (the calls of a run of 200 steps) minus (those of a run of 10 steps) over
the 190 steps in between, so what a run does once cancels out. A dataclass's generated
`__init__` is counted under its class's name (INIT Step), a C function under its name
(C isinstance). Runs in a child process with `--src` on its path.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = """
import collections, os, sys
sys.path.insert(0, {here!r})
import overhead as ob
import loopwright as lw

registry = lw.ToolRegistry([lw.tool(ob.add)])


def calls(n):
    counted = collections.Counter()

    def hook(frame, event, arg):
        if event == "call":
            code = frame.f_code
            if code.co_name == "__init__" and code.co_filename == "<string>":
                counted["INIT " + type(frame.f_locals["self"]).__qualname__] += 1
            else:
                counted[f"{{os.path.basename(code.co_filename)}} {{code.co_qualname}}"] += 1
        elif event == "c_call":
            counted["C " + getattr(arg, "__qualname__", repr(arg))] += 1

    sys.setprofile(hook)
    lw.run("sum", ob.make_policy(n), registry, max_steps=n + 1, on_repeat="nudge")
    sys.setprofile(None)
    return counted


calls(10)
few, many = calls(10), calls(200)
for name in sorted(few.keys() | many.keys()):
    per_step = (many[name] - few[name]) / 190
    if abs(per_step) >= 0.01:
        print(f"{{per_step:7.2f}}  {{name}}")
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--src", default=os.path.join(os.path.dirname(HERE), "src"), help="the tree's src/ folder"
    )
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": os.path.abspath(args.src), "PYTHONHASHSEED": "0"}
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(here=HERE)], env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    rows = [line.split(None, 1) for line in out.stdout.splitlines()]
    rows.sort(key=lambda row: (-float(row[0]), row[1]))
    python = sum(float(n) for n, name in rows if not name.startswith(("C ", "INIT ")))
    print(f"{args.src}: {python:.1f} Python calls a step (dataclass __init__ apart)")
    for n, name in rows:
        print(f"{float(n):7.2f}  {name}")


if __name__ == "__main__":
    main()
