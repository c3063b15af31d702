"""One of two workers racing to resume the same run.

    python lease_race.py DB_OR_DSN RUN_ID

Waits for a line on stdin ("go"), then resumes the run. The winner prints
{"outcome": "holding"} from inside its tool and waits for a second line before finishing
({"outcome": "resumed", ...}); a refused worker prints {"outcome": "refused", "error": ...}.
"""

from __future__ import annotations

import json
import sys

import loopwright as lw
from loopwright.interfaces.common import open_store


def main(target: str, run_id: str) -> None:
    @lw.tool(side_effects="write")
    def hold() -> str:
        """Hold the run until told to go on."""
        print(json.dumps({"outcome": "holding"}), flush=True)
        sys.stdin.readline()
        return "held"

    policy = lw.ScriptedPolicy(['Thought: hold\nAction: hold\nAction Input: {}', "Thought: done\nFinal Answer: held"])
    with open_store(target) as store:
        sys.stdin.readline()  # both workers start together
        try:
            # other tools than the run started with, on purpose: this worker only holds the lease
            trace = lw.resume(run_id, policy, lw.ToolRegistry([hold]), store=store, allow_tool_changes=True)
        except lw.StoreError as exc:
            print(json.dumps({"outcome": "refused", "error": str(exc)}), flush=True)
            return
        print(json.dumps({"outcome": "resumed", "answer": trace.final_answer}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
