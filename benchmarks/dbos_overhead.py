"""What a step costs on DBOS: the same ReAct run as a DBOS workflow (loopwright.durable.dbos,
SQLite system database), on loopwright's SQLite journal (NORMAL and FULL) and with no
journal at all, side by side in one process, at N = 10 and N = 200 steps.

    PYTHONPATH=src .venv/bin/python benchmarks/dbos_overhead.py [--repeats 5] [--ns 10,200] [--dir /dev/shm]

The workload is benchmarks/journal.py's (the peers' scripted model calling add(previous, k)
N times, then answering; a step is one model call), measured with its `per_step_us`: the
runners alternate, so a noisy machine hits each alike, and medians are reported. Every
run is a new run id in one database file that grows over the benchmark. DBOS's SQLite
system database keeps SQLite's defaults (a rollback journal, synchronous FULL: a commit
waits for the disk), so "journal FULL" is the like-for-like durability and "journal
NORMAL" (WAL, loopwright's default) the cheaper one. `--dir`: where the databases go (a
temporary folder there); on a tmpfs such as /dev/shm no commit waits for a disk, which
leaves what each costs the CPU. Bytes per step: dbos_bytes.py.
"""

from __future__ import annotations

import argparse
import logging
import os
import sqlite3
import sys
import tempfile
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import TASK, Script, last_int  # benchmarks/peers/common.py

from journal import check, per_step_us  # benchmarks/journal.py


def runners(directory: Path) -> dict[str, Any]:
    """Each way of running the workload, by name; DBOS is launched (destroy it after)."""
    import json

    from dbos import DBOS

    import loopwright as lw
    from loopwright.durable.dbos import DBOSAgent

    current: dict[str, Script] = {}

    @lw.tool
    def add(x: int, y: int) -> int:
        """Add two integers."""
        return current["script"].add(x, y)

    def policy(prompt: str) -> str:
        script = current["script"]
        kind, value = script.next_call(last_int(prompt) if script.calls else 0)
        if kind == "final":
            return f"Thought: done\nFinal Answer: {value}"
        return f"Thought: add the next number\nAction: add\nAction Input: {json.dumps(value)}"

    agent = DBOSAgent(lw.Agent("overhead", policy, [add], max_steps=10_000))
    DBOS(config={"name": "lwoverhead", "system_database_url": f"sqlite:///{directory / 'dbos.sqlite'}",
                 "application_version": "1", "log_level": "ERROR"})
    DBOS.launch()
    stores = {"journal NORMAL": lw.SQLiteStore(directory / "normal.db", synchronous="NORMAL"),
              "journal FULL": lw.SQLiteStore(directory / "full.db", synchronous="FULL")}

    def plain(store: Any) -> Any:
        def run(n: int) -> None:
            script = current["script"] = Script(n)
            check(script, lw.run(TASK, policy, [add], max_steps=n + 1, store=store).final_answer)

        return run

    def on_dbos(n: int) -> None:
        script = current["script"] = Script(n)
        check(script, agent.run(TASK, run_id=uuid.uuid4().hex).final_answer)

    return {"no journal": plain(None)} | {name: plain(store) for name, store in stores.items()} | {"DBOS": on_dbos}


def journal_mode(path: Path) -> str:
    with closing(sqlite3.connect(path)) as conn:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ns", default="10,200")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the databases go (default: the temporary folder)")
    args = parser.parse_args()
    ns = [int(x) for x in args.ns.split(",")]
    logging.getLogger("dbos").setLevel(logging.ERROR)
    from dbos import DBOS

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        ways = runners(Path(tmp))
        try:
            print(f"ReAct, scripted policy, trivial tool: us per step, wall / CPU (all of this process's threads), "
                  f"median of {args.repeats} interleaved runs (load average {os.getloadavg()[0]:.1f} on "
                  f"{os.cpu_count()} cores); databases in {tmp}, DBOS's in "
                  f"{journal_mode(Path(tmp) / 'dbos.sqlite')} journal mode")
            print(f"{'N':>5} " + " ".join(f"{name:>17}" for name in ways)
                  + f" {'DBOS / no journal':>19} {'DBOS / NORMAL':>15} {'DBOS / FULL':>13}")
            for n in ns:
                us = per_step_us(ways, n, args.repeats)
                cells = [f"{us[name]['wall']:>8.0f} /{us[name]['cpu']:>7.0f}" for name in ways]
                ratios = [f"{us['DBOS']['wall'] / us[base]['wall']:>6.1f}x /{us['DBOS']['cpu'] / us[base]['cpu']:>5.1f}x"
                          for base in ("no journal", "journal NORMAL", "journal FULL")]
                print(f"{n:>5} " + " ".join(cells) + f" {ratios[0]:>19} {ratios[1]:>15} {ratios[2]:>13}")
        finally:
            DBOS.destroy()


if __name__ == "__main__":
    main()
