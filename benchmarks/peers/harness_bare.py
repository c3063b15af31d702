"""Baseline: a bare ReAct loop in about 40 lines (regex, json.loads, a dict of tools, a
growing string). What any framework costs is measured against this."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from common import Harness, Script, last_int, main

ACTION = re.compile(r"Action:\s*(\w+)\s*\nAction Input:\s*(\{.*\})", re.S)
FINAL = re.compile(r"Final Answer:\s*(.*)", re.S)


def react(
    task: str, model: Callable[[str], str], tools: dict[str, Callable[..., Any]], max_steps: int
) -> str | None:
    scratchpad = f"Task: {task}\n"
    for _ in range(max_steps):
        text = model(scratchpad)
        final = FINAL.search(text)
        if final:
            return final.group(1).strip()
        action = ACTION.search(text)
        if action is None:
            scratchpad += f"{text}\nObservation: ERROR: no Action or Final Answer found\n"
            continue
        name, raw_args = action.groups()
        try:
            observation = str(tools[name](**json.loads(raw_args)))
        except Exception as exc:  # the model sees the failure and may recover
            observation = f"ERROR: {type(exc).__name__}: {exc}"
        scratchpad += f"{text}\nObservation: {observation}\n"
    return None


def imports() -> None:
    pass


def build() -> Callable[[Script], str]:
    def run(script: Script) -> str:
        def model(scratchpad: str) -> str:
            previous = last_int(scratchpad) if script.calls else 0
            kind, value = script.next_call(previous)
            if kind == "final":
                return f"Thought: done\nFinal Answer: {value}"
            return f"Thought: add the next number\nAction: add\nAction Input: {json.dumps(value)}"

        answer = react("add", model, {"add": script.add}, script.n + 1)
        return answer or ""

    return run


if __name__ == "__main__":
    main(Harness("bare loop", (), imports, build, notes="about 40 lines, standard library"))
