"""A journaled run whose `write` tool SIGKILLs its own process at a chosen text: the
kill-resume-kill test's child process.

    python rekill.py start|resume DB RUN_ID EFFECTS_FILE SKIP KILL_ON

DB: a SQLite path or a postgresql:// DSN. `start` runs SCRIPT from its beginning;
`resume` resumes RUN_ID (re-running a call left in doubt, with a generous timeout_s)
with the script past the SKIP model calls the journal already holds. The tool kills the
process, before it takes effect, when asked to write KILL_ON.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import loopwright as lw
from loopwright.durable.resume import resume
from loopwright.interfaces.common import open_store

TASK = "Write a, then b."
SCRIPT = [
    'Thought: first\nAction: write\nAction Input: {"text": "a"}',
    'Thought: second\nAction: write\nAction Input: {"text": "b"}',
    "Thought: done\nFinal Answer: wrote a and b",
]


def registry(effects: Path, on: Mapping[str, str], *, gated: bool = False) -> lw.ToolRegistry:
    """The `write` tool; `on` maps a text to what happens instead of writing it: "kill"
    (SIGKILL this process), "interrupt" (Ctrl-C) or "sleep" (2 s, then write)."""

    @lw.tool(side_effects="write", requires_approval=gated)
    def write(text: str) -> str:
        """Append text to the effects file."""
        what = on.get(text)
        if what == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if what == "interrupt":
            raise KeyboardInterrupt
        if what == "sleep":
            time.sleep(2.0)
        with effects.open("a") as f:
            f.write(text + "\n")
        return f"wrote {text}"

    return lw.ToolRegistry([write])


def main(phase: str, db: str, run_id: str, effects: str, skip: str, kill_on: str, gated: str = "") -> None:
    tools = registry(Path(effects), {kill_on: "kill"}, gated=gated == "gated")
    policy = lw.ScriptedPolicy(SCRIPT[int(skip):])
    with open_store(db) as store:
        if phase == "start":
            lw.run(TASK, policy, tools, max_steps=5, store=store, run_id=run_id)
        else:
            resume(run_id, policy, tools, store=store, rerun_unfinished=True, timeout_s=60)


if __name__ == "__main__":
    main(*sys.argv[1:])
