"""Policies for batch and eval tests, importable by `--policy helpers.batch_policies:NAME`
and picklable for Ray workers."""

from __future__ import annotations

import json
import os
import re

import loopwright as lw


def act(name: str, args: str) -> str:
    return f"Thought: next\nAction: {name}\nAction Input: {args}"


def adder(prompt: str) -> str:
    """ReAct: answers "add A and B" through the demo calculator; "fail" makes it raise."""
    asked = re.findall(r"Question: (.*)", prompt)[-1]
    if "fail" in asked:
        raise RuntimeError(f"cannot do {asked!r}")
    numbers = re.findall(r"\d+", asked)
    after = prompt.split(f"Question: {asked}")[-1]
    if "Observation:" in after:
        value = re.findall(r"Observation: <untrusted[^>]*>(-?[\d.]+)<", after)
        return f"Thought: done\nFinal Answer: {value[-1] if value else 'unknown'}"
    return act("calculate", json.dumps({"expression": f"{numbers[0]} + {numbers[1]}"}))


def planner(prompt: str) -> str:
    """ReWOO / plan-execute: a one-step plan, then the solver's answer from the evidence."""
    if "\nEvidence:" in prompt:
        found = re.findall(r"E1 \[calculate\]: <untrusted[^>]*>(-?[\d.]+)<", prompt)
        return f"Final Answer: {found[-1] if found else 'unknown'}"
    asked = re.findall(r"(?:Question|Task): (.*)", prompt)[-1]
    if "fail" in asked:
        raise RuntimeError(f"cannot plan {asked!r}")
    a, b = re.findall(r"\d+", asked)[:2]
    return json.dumps([{"id": "E1", "tool": "calculate", "args": {"expression": f"{a} + {b}"}}])


def either(prompt: str) -> str:
    return adder(prompt) if "Action Input" in prompt else planner(prompt)


def close_enough(answer: str | None, expected: object) -> float:
    return 1.0 if answer is not None and answer.strip() == str(expected) else 0.0


class PidAdder:
    """adder, signing its final thought with its process id (which worker made it)."""

    def __init__(self) -> None:
        self.pid = os.getpid()

    def __call__(self, prompt: str) -> str:
        return adder(prompt).replace("Thought: done", f"Thought: done pid={self.pid}")


scripted = lw.policy_factory(lambda: lw.ScriptedPolicy(["Thought: t\nFinal Answer: 4"]))
