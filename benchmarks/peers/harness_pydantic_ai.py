"""pydantic-ai with `FunctionModel`: the model is a plain function of the message history.
The request limit is raised above N + 1 (its default, 50, would stop the N = 200 run)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from common import TASK, Harness, Script, last_int, main


def imports() -> None:
    global Agent, ModelResponse, TextPart, ToolCallPart, FunctionModel, UsageLimits
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.usage import UsageLimits


def build() -> Callable[[Script], str]:
    current: dict[str, Script] = {}

    def model(messages: list[Any], info: Any) -> Any:
        script = current["script"]
        previous = last_int(str(messages[-1].parts[-1].content)) if script.calls else 0
        kind, value = script.next_call(previous)
        if kind == "final":
            return ModelResponse(parts=[TextPart(value)])
        return ModelResponse(
            parts=[ToolCallPart("add", value, tool_call_id=f"call_{script.calls}")]
        )

    agent = Agent(FunctionModel(model), instructions="Use the add tool.")

    @agent.tool_plain
    def add(x: int, y: int) -> int:
        """Add two integers."""
        return current["script"].add(x, y)

    def run(script: Script) -> str:
        current["script"] = script
        limits = UsageLimits(request_limit=script.n + 1)
        return str(agent.run_sync(TASK, usage_limits=limits).output)

    return run


if __name__ == "__main__":
    main(Harness("pydantic-ai (FunctionModel)", ("pydantic-ai-slim", "pydantic"), imports, build))
