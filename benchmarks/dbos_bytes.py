"""System-database bytes per step of a run on DBOS (loopwright.durable.dbos, SQLite system
database) against the same run on the SQLite journal, at 50 and 200 ReAct steps.

    PYTHONPATH=src .venv/bin/python benchmarks/dbos_bytes.py

Each step is a model call and a read tool call (a 50-character result). Two figures per run:
the file's growth (database pages, after a checkpoint, over an empty database of its kind)
and the bytes of the run's rows (DBOS: step outputs, the workflow's input and output; the
journal: every column of its rows). Linear in steps means the same bytes per step at 50
and at 200; records that held the whole history would grow about fourfold.
"""

from __future__ import annotations

import logging
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path

import loopwright as lw

STEPS = (50, 200)


@lw.tool(side_effects="read")
def lookup(n: int) -> str:
    """Look a number up."""
    return f"value {n} " + "x" * 40


def policy(steps: int) -> lw.Policy:
    def answer(prompt: str) -> str:
        done = prompt.count("Observation:")
        if done >= steps:
            return "Thought: done\nFinal Answer: looked up"
        return f'Thought: next\nAction: lookup\nAction Input: {{"n": {done + 1}}}'

    return answer


def file_bytes(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages, size = conn.execute("PRAGMA page_count").fetchone()[0], conn.execute("PRAGMA page_size").fetchone()[0]
    return int(pages * size)


def row_bytes(path: Path, tables: dict[str, str]) -> int:
    """The summed length of every column of the rows `tables` selects (table -> WHERE)."""
    total = 0
    with closing(sqlite3.connect(path)) as conn:
        for table, where in tables.items():
            columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            summed = " + ".join(f"coalesce(length({c}), 0)" for c in columns)
            total += conn.execute(f"SELECT coalesce(sum({summed}), 0) FROM {table} WHERE {where}").fetchone()[0]
    return total


def on_dbos(folder: Path, steps: int, agents: dict[int, object]) -> tuple[int, int]:
    from dbos import DBOS

    path = folder / f"dbos-{steps}.sqlite"
    DBOS(config={"name": "lwbytes", "system_database_url": f"sqlite:///{path}", "application_version": "1",
                 "log_level": "ERROR"})
    DBOS.launch()
    empty = file_bytes(path)
    trace = agents[steps].run("look them up", run_id="r")  # type: ignore[attr-defined]
    assert trace.answered and len(trace.steps) == steps + 1
    DBOS.destroy()
    rows = row_bytes(path, {"operation_outputs": "workflow_uuid = 'r'", "workflow_input": "workflow_uuid = 'r'",
                            "workflow_output": "workflow_uuid = 'r'", "workflow_status": "workflow_uuid = 'r'"})
    return file_bytes(path) - empty, rows


def on_journal(folder: Path, steps: int) -> tuple[int, int]:
    path = folder / f"journal-{steps}.db"
    with lw.SQLiteStore(path) as store:
        empty = file_bytes(path)
        trace = lw.run("look them up", policy(steps), [lookup], max_steps=steps + 2, store=store, run_id="r")
        assert trace.answered
    tables = {t: "run_id = 'r'" for t in ("model_calls", "tool_calls", "steps")}
    rows = row_bytes(path, {**tables, "runs": "id = 'r'"})
    return file_bytes(path) - empty, rows


def main() -> None:
    from loopwright.durable.dbos import DBOSAgent

    logging.getLogger("dbos").setLevel(logging.ERROR)
    agents = {n: DBOSAgent(lw.Agent(f"bytes-{n}", policy(n), [lookup], max_steps=n + 2)) for n in STEPS}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(f"{'store':<16}{'steps':>6}{'file B/step':>13}{'rows B/step':>13}")
        for steps in STEPS:
            for name, (grown, rows) in (("DBOS (SQLite)", on_dbos(folder, steps, agents)),
                                        ("SQLite journal", on_journal(folder, steps))):
                print(f"{name:<16}{steps:>6}{grown / steps:>13.0f}{rows / steps:>13.0f}")


if __name__ == "__main__":
    main()
