"""The two-agent workload (delegation.py) in the OpenAI Agents SDK: agents as tools
(`calculator.as_tool(...)`), a custom `Model` returning Responses-API items for both.
Tracing is turned off: its default exporter would try to reach a hosted service."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from agents.models.interface import Model
from delegation import TASK, USAGE, Brains, Outcome, run_main
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from agents import Agent, ModelResponse, Runner, Usage, set_tracing_disabled

current: dict[str, Brains] = {}


def _item(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


def _message(text: str, n: int) -> Any:
    return ResponseOutputMessage(id=f"msg_{n}", type="message", role="assistant", status="completed",
                                 content=[ResponseOutputText(text=text, type="output_text", annotations=[])])


def _call(name: str, args: dict[str, Any], n: int) -> Any:
    return ResponseFunctionToolCall(type="function_call", name=name, call_id=f"call_{n}", id=f"fc_{n}",
                                    arguments=json.dumps(args))


def _usage() -> Any:
    return Usage(requests=1, input_tokens=USAGE[0], output_tokens=USAGE[1], total_tokens=sum(USAGE))


class Scripted(Model):  # type: ignore[misc]
    def __init__(self, role: str) -> None:
        self.role = role

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        brains = current["b"]
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        last = items[-1]
        result = None if _item(last, "output") is None else str(_item(last, "output"))
        if self.role == "parent":
            kind, value = brains.parent(result)
            out = _message(value, brains.parent_calls) if kind == "final" else \
                _call("calculator", {"input": value}, brains.parent_calls)
        else:
            task = str(_item(items[0], "content"))
            kind, value = brains.child(task, result)
            out = _message(value, brains.child_calls) if kind == "final" else _call("add", value, brains.child_calls)
        return ModelResponse(output=[out], usage=_usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def build() -> Any:
    from agents import function_tool

    set_tracing_disabled(True)

    @function_tool
    def add(x: int, y: int) -> int:
        """Add two integers."""
        return current["b"].add(x, y)

    calculator = Agent(name="calculator", instructions="You are a calculator: use add.", tools=[add],
                       model=Scripted("child"))
    coordinator = Agent(name="coordinator", instructions="Delegate sums to the calculator.",
                        tools=[calculator.as_tool(tool_name="calculator", tool_description="Ask the calculator.")],
                        model=Scripted("parent"))
    return coordinator


COORDINATOR = build()


def run(brains: Brains) -> Outcome:
    current["b"] = brains
    result = Runner.run_sync(COORDINATOR, TASK, max_turns=brains.n + 2)
    usage = result.context_wrapper.usage
    return Outcome(str(result.final_output), usage.total_tokens, usage.requests,
                   len(result.raw_responses) - (brains.n + 1))


if __name__ == "__main__":
    from importlib import metadata

    run_main("OpenAI Agents SDK (agents as tools)", run, {
        "version": metadata.version("openai-agents"),
        "resumable": "no: a run is not journaled (sessions keep conversation history, not a run in progress)",
        "budget_shared": "max_turns per run only; no token or cost budget",
    })
