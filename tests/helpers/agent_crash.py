"""A coordinator whose `writer` agent (a child run, through `Agent.as_tool`) appends to a
file: the SIGKILL trial of a child agent run.

    python agent_crash.py start|resume DB RUN_ID EFFECTS CALLS KILL_AT

`start` runs the coordinator from its beginning; the process SIGKILLs itself inside the
writer's model call number KILL_AT (after the child's earlier calls and writes were
journaled). `resume` resumes RUN_ID with each script past the calls the journal holds.
Every model call actually made (not replayed) appends "<phase> <who> <n>" to CALLS; every
write appends its text to EFFECTS, so the test sees what was paid for and done twice.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import loopwright as lw

TASK = "Have the writer write a and b."
PARENT = [
    'Thought: delegate\nAction: writer\nAction Input: {"task": "write a, then b"}',
    "Thought: done\nFinal Answer: the writer wrote a and b",
]
CHILD = [
    'Thought: first\nAction: write\nAction Input: {"text": "a"}',
    'Thought: second\nAction: write\nAction Input: {"text": "b"}',
    "Thought: done\nFinal Answer: wrote a and b",
]


class Logged:
    """A scripted policy that logs each call it answers and can SIGKILL its process."""

    def __init__(self, who: str, script: list[str], first: int, calls: Path, phase: str, kill_at: int) -> None:
        self.who, self.script, self.n, self.calls, self.phase, self.kill_at = who, script, first, calls, phase, kill_at

    def __call__(self, prompt: str) -> str:
        with self.calls.open("a") as f:
            f.write(f"{self.phase} {self.who} {self.n}\n")
        if self.n == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        reply = self.script[self.n - 1]
        self.n += 1
        return reply


def registry(effects: Path) -> lw.ToolRegistry:
    @lw.tool(side_effects="write")
    def write(text: str) -> str:
        """Append text to the effects file (not idempotent)."""
        with effects.open("a") as f:
            f.write(text + "\n")
        return f"wrote {text}"

    return lw.ToolRegistry([write])


def main(phase: str, db: str, run_id: str, effects: str, calls: str, kill_at: str) -> None:
    log = Path(calls)
    done = {"parent": 0, "child": 0}
    if phase == "resume":  # the calls the journal holds are replayed: the scripts go on after them
        with lw.SQLiteStore(db) as store:
            done = {"parent": store.load_run(run_id).llm_calls, "child": store.load_run(f"{run_id}:1").llm_calls}
    kill = int(kill_at) if phase == "start" else 0
    writer = lw.Agent("writer", Logged("child", CHILD, done["child"] + 1, log, phase, kill), registry(Path(effects)),
                      instructions="You write what you are asked to, once.")
    coordinator = Logged("parent", PARENT, done["parent"] + 1, log, phase, 0)
    tools = lw.ToolRegistry([writer.as_tool()])
    with lw.SQLiteStore(db) as store:
        if phase == "start":
            trace = lw.run(TASK, coordinator, tools, max_steps=5, store=store, run_id=run_id)
        else:
            trace = lw.resume(run_id, coordinator, tools, store=store)
    print(trace.to_json(indent=None))


if __name__ == "__main__":
    main(*sys.argv[1:])
