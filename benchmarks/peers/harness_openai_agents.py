"""The OpenAI Agents SDK with a custom `Model` returning Responses-API output items.
Tracing is turned off: its default exporter would try to reach a hosted service."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from common import TASK, Harness, Script, last_int, main


def imports() -> None:
    global \
        Agent, \
        ModelResponse, \
        Runner, \
        Usage, \
        function_tool, \
        set_tracing_disabled, \
        Model, \
        ResponseFunctionToolCall, \
        ResponseOutputMessage, \
        ResponseOutputText
    from agents.models.interface import Model
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    from agents import Agent, ModelResponse, Runner, Usage, function_tool, set_tracing_disabled


def build() -> Callable[[Script], str]:
    set_tracing_disabled(True)
    current: dict[str, Script] = {}

    class ScriptedModel(Model):  # type: ignore[misc]
        async def get_response(
            self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
        ) -> Any:
            script = current["script"]
            previous = 0
            if script.calls:
                item = input[-1]
                previous = last_int(str(item["output"] if isinstance(item, dict) else item.output))
            kind, value = script.next_call(previous)
            if kind == "final":
                text = ResponseOutputText(text=value, type="output_text", annotations=[])
                out = ResponseOutputMessage(
                    id=f"msg_{script.calls}",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[text],
                )
            else:
                out = ResponseFunctionToolCall(
                    type="function_call",
                    name="add",
                    call_id=f"call_{script.calls}",
                    id=f"fc_{script.calls}",
                    arguments=json.dumps(value),
                )
            return ModelResponse(output=[out], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            raise NotImplementedError

    @function_tool
    def add(x: int, y: int) -> int:
        """Add two integers."""
        return current["script"].add(x, y)

    agent = Agent(
        name="adder", instructions="Use the add tool.", tools=[add], model=ScriptedModel()
    )

    def run(script: Script) -> str:
        current["script"] = script
        result = Runner.run_sync(agent, TASK, max_turns=script.n + 1)
        return str(result.final_output)

    return run


if __name__ == "__main__":
    main(Harness("OpenAI Agents SDK", ("openai-agents", "openai"), imports, build))
