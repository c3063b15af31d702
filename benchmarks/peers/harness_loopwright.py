"""loopwright's ReAct loop (JSON dialect) with a scripted policy that reads the previous
result from the end of the scratchpad, through the public `lw.run` facade."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from common import TASK, Harness, Script, last_int, main


def imports() -> None:
    global lw
    import loopwright as lw


def build() -> Callable[[Script], str]:
    current: dict[str, Script] = {}

    @lw.tool
    def add(x: int, y: int) -> int:
        """Add two integers."""
        return current["script"].add(x, y)

    registry = lw.ToolRegistry([add])

    class ScriptedPolicy:
        def complete(self, request: Any) -> str:
            script = current["script"]
            previous = last_int(request.prompt) if script.calls else 0
            kind, value = script.next_call(previous)
            if kind == "final":
                return f"Thought: done\nFinal Answer: {value}"
            return f" add the next number\nAction: add\nAction Input: {json.dumps(value)}"

    def run(script: Script) -> str:
        current["script"] = script
        trace = lw.run(TASK, ScriptedPolicy(), registry, mode="react", max_steps=script.n + 1)
        if trace.stopped_reason != "final" or trace.tool_calls != script.n:
            raise AssertionError(
                f"loopwright stopped with {trace.stopped_reason}: {trace.steps[-1]}"
            )
        return str(trace.final_answer)

    return run


if __name__ == "__main__":
    main(Harness("loopwright (react)", ("loopwright", "pydantic", "jsonschema"), imports, build))
