"""A loopwright A2A server on a SQLite store, for the restart tests: `python
a2a_crash_server.py DB PORT WORKDIR BLOCK`. Its tool appends a line to WORKDIR/effects per
call; with BLOCK=1 the model's second call writes WORKDIR/waiting and waits until
WORKDIR/go exists (the test kills or stops the process there, or lets it go on)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import uvicorn

import loopwright as lw
from loopwright.a2a import app

db, port, workdir, block = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] == "1"


@lw.tool(side_effects="write")
def record(note: str) -> str:
    """Record a note."""
    with open(workdir / "effects", "a") as f:
        f.write(note + "\n")
    return "NOTE-STORED-7"


def policy(prompt: str) -> str:
    if "NOTE-STORED-7" not in prompt:
        return 'Thought: record it\nAction: record\nAction Input: {"note": "once"}'
    if block:
        (workdir / "waiting").write_text("x")
        deadline = time.monotonic() + 600
        while not (workdir / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return "Thought: done\nFinal Answer: recorded once"


url = f"http://127.0.0.1:{port}"
uvicorn.run(app(policy, [record], max_steps=4, url=url, store=lw.SQLiteStore(db)), host="127.0.0.1", port=port,
            log_level="warning")
