"""smolagents' ToolCallingAgent with a scripted Model that returns native tool calls; the
final answer is a call to its built-in `final_answer` tool, as the agent expects."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from common import TASK, Harness, Script, last_int, main


def imports() -> None:
    global \
        Tool, \
        ToolCallingAgent, \
        ChatMessage, \
        ChatMessageToolCall, \
        ChatMessageToolCallFunction, \
        MessageRole, \
        Model, \
        LogLevel
    from smolagents import Tool, ToolCallingAgent
    from smolagents.models import (
        ChatMessage,
        ChatMessageToolCall,
        ChatMessageToolCallFunction,
        MessageRole,
        Model,
    )
    from smolagents.monitoring import LogLevel


def _text(message: Any) -> str:
    content = message.content if hasattr(message, "content") else message["content"]
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content)
    return str(content)


def build() -> Callable[[Script], str]:
    current: dict[str, Script] = {}

    class ScriptedModel(Model):  # type: ignore[misc]
        def generate(
            self,
            messages: list[Any],
            stop_sequences: Any = None,
            response_format: Any = None,
            tools_to_call_from: Any = None,
            **kwargs: Any,
        ) -> Any:
            script = current["script"]
            previous = last_int(_text(messages[-1])) if script.calls else 0
            kind, value = script.next_call(previous)
            name, args = ("final_answer", {"answer": value}) if kind == "final" else ("add", value)
            call = ChatMessageToolCall(
                id=f"call_{script.calls}",
                type="function",
                function=ChatMessageToolCallFunction(name=name, arguments=args),
            )
            return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])

    class AddTool(Tool):  # type: ignore[misc]
        name = "add"
        description = "Add two integers."
        inputs = {
            "x": {"type": "integer", "description": "first"},
            "y": {"type": "integer", "description": "second"},
        }
        output_type = "integer"

        def forward(self, x: int, y: int) -> int:
            return current["script"].add(x, y)

    agent = ToolCallingAgent(
        tools=[AddTool()], model=ScriptedModel(), verbosity_level=LogLevel.OFF, max_steps=10
    )

    def run(script: Script) -> str:
        current["script"] = script
        return str(agent.run(TASK, max_steps=script.n + 1))

    return run


if __name__ == "__main__":
    main(Harness("smolagents (ToolCallingAgent)", ("smolagents",), imports, build))
