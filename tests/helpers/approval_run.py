"""A run paused for approval in one process and resumed in another.

    python approval_run.py start|resume DB EFFECTS_FILE

Prints the trace's summary as one JSON line. `start` runs with an approver that cannot
decide now (the run pauses); `resume` continues the journal's only run, with no
approver: the decision must come from the journal.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import loopwright as lw
from loopwright.durable.resume import resume
from loopwright.durable.sqlite import SQLiteStore
from loopwright.safety import ApprovalPending, ApprovalRequest

SCRIPT = [
    'Thought: clean up\nAction: delete_file\nAction Input: {"path": "/tmp/report.txt"}',
    "Thought: done\nFinal Answer: deleted",
]


def registry(effects: Path) -> lw.ToolRegistry:
    @lw.tool(side_effects="destructive")
    def delete_file(path: str) -> str:
        """Delete a file (here: append its path to the effects file)."""
        with effects.open("a") as f:
            f.write(path + "\n")
        return f"deleted {path}"

    return lw.ToolRegistry([delete_file])


def pending(request: ApprovalRequest) -> bool:
    raise ApprovalPending(request.key)


def main(phase: str, db: str, effects: str) -> None:
    with SQLiteStore(db) as store:
        if phase == "start":
            trace = lw.run("Delete the report.", lw.ScriptedPolicy(SCRIPT[:1]), registry(Path(effects)),
                           approver=pending, store=store)
        else:
            [run] = store.list_runs()
            trace = resume(run.id, lw.ScriptedPolicy(SCRIPT[1:]), registry(Path(effects)), store=store)
    print(json.dumps({"run_id": trace.run_id, "stopped_reason": trace.stopped_reason,
                      "final_answer": trace.final_answer}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
