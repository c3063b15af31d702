"""A coordinator run on a SQLite store that delegates to a remote A2A agent, for the client's
crash test: `python a2a_coordinator.py DB URL` (the test SIGKILLs it mid-delegation)."""

from __future__ import annotations

import sys

import loopwright as lw

DELEGATE = 'Thought: ask the worker\nAction: worker\nAction Input: {"task": "record a note"}'


def policy(prompt: str) -> str:
    if "recorded once" not in prompt:
        return DELEGATE
    return "Thought: done\nFinal Answer: the worker recorded it"


def registry(url: str) -> list[lw.Tool]:
    return [lw.A2AAgent(url, name="worker", description="Ask the worker agent", timeout_s=60).as_tool()]


if __name__ == "__main__":
    db, url = sys.argv[1], sys.argv[2]
    lw.run("Have the note recorded.", policy, registry(url), max_steps=4, store=lw.SQLiteStore(db), run_id="coord")
