"""The crash test's run: a ReAct run of STEPS appends, each a side effect on a file.

Shared by the forking child (crash_child.py) and the test that resumes its runs. The
policy answers from the prompt (how many appends it has seen), so the same policy
object serves a fresh run and a resumed one from any point.

The tool is honest about exactly-once: an append cannot be made atomic with the
journal write that follows it, so each call carries an operation key and skips an
append whose key is already in the file. That makes it safe to run again, so it is
declared idempotent. A separate execution log records every real execution, so the
test can tell "ran again after a crash" from "ran once".
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import loopwright as lw

STEPS = 8
TASK = f"Append {STEPS} lines to the file, one operation at a time."
POLICY_SLEEP_S = 0.002
TOOL_SLEEP_S = 0.0015  # twice: before the append and after it
signal_fd: int | None = None  # set in a forked child: written once when the run is under way


def _signal() -> None:
    global signal_fd
    if signal_fd is not None:
        os.write(signal_fd, b"s")
        os.close(signal_fd)
        signal_fd = None


def _append(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))  # one write: all of the line or none of it
    finally:
        os.close(fd)


class StepPolicy:
    """Step k appends op-k; after STEPS appends it answers. Signals at its first call."""

    def __init__(self, signal_on_first_call: bool = False) -> None:
        self.calls = 0
        self.signal = signal_on_first_call

    def __call__(self, prompt: str) -> str:
        self.calls += 1
        if self.signal:
            _signal()
        time.sleep(POLICY_SLEEP_S)
        done = prompt.count("appended op-")
        if done >= STEPS:
            return f"Thought: all appended\nFinal Answer: {STEPS} lines"
        k = done + 1
        args = json.dumps({"op": f"op-{k}", "text": f"line {k}"})
        return f"Thought: append line {k}\nAction: append_line\nAction Input: {args}"


def registry(effects: Path, executions: Path, *, idempotent: bool = True, signal_in_tool: bool = False) -> lw.ToolRegistry:
    @lw.tool(side_effects="write", idempotent=idempotent)
    def append_line(op: str, text: str) -> str:
        """Append one line to the file, once per operation key."""
        _append(executions, op + "\n")
        if signal_in_tool:
            _signal()
            time.sleep(30)  # killed here
        time.sleep(TOOL_SLEEP_S)
        existing = effects.read_text("utf-8").splitlines() if effects.exists() else []
        if idempotent and any(line.split(" ", 1)[0] == op for line in existing):
            return f"appended {op}"
        _append(effects, f"{op} {text}\n")
        time.sleep(TOOL_SLEEP_S)
        return f"appended {op}"

    return lw.ToolRegistry([append_line])
