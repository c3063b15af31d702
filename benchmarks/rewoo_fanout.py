"""ReWOO fan-out: a plan of N independent tools sleeping 100 ms each, wall time against
the serial N x 100 ms, for N = 2, 4, 8, 16 (sync tools on the worker pool, async tools
on the event loop).

    .venv/bin/python benchmarks/rewoo_fanout.py
"""

from __future__ import annotations

import asyncio
import json
import time

import loopwright as lw


@lw.tool
def nap(i: int) -> int:
    """Sleep 100 ms (a blocking call)."""
    time.sleep(0.1)
    return i


@lw.tool
async def anap(i: int) -> int:
    """Sleep 100 ms (an async call)."""
    await asyncio.sleep(0.1)
    return i


def main() -> None:
    registry = lw.ToolRegistry([nap, anap])
    print(f"{'N':>3} {'serial s':>9} {'sync wall s':>12} {'async wall s':>13} {'speed-up (sync)':>16}")
    for n in (2, 4, 8, 16):
        walls = []
        for name in ("nap", "anap"):
            plan = {"plan": [{"id": f"E{i}", "tool": name, "args": {"i": i}} for i in range(1, n + 1)]}
            policy = lw.ScriptedPolicy([json.dumps(plan), "Final Answer: done"])
            start = time.perf_counter()
            trace = lw.run("fan out", policy, registry, mode="rewoo", max_steps=n)
            walls.append(time.perf_counter() - start)
            assert trace.tool_calls == n and trace.llm_calls == 2
        serial = n * 0.1
        print(f"{n:>3} {serial:>9.2f} {walls[0]:>12.3f} {walls[1]:>13.3f} {serial / walls[0]:>15.1f}x")


if __name__ == "__main__":
    main()
