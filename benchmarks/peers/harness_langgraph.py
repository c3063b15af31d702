"""LangGraph through LangChain's `create_agent`, driven by a fake chat model that makes
native tool calls (the model reads the last ToolMessage for the previous result)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from common import TASK, Harness, Script, last_int, main


def imports() -> None:
    global \
        create_agent, \
        BaseChatModel, \
        AIMessage, \
        HumanMessage, \
        ChatGeneration, \
        ChatResult, \
        StructuredTool
    from langchain.agents import create_agent
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import StructuredTool


def build() -> Callable[[Script], str]:
    current: dict[str, Script] = {}

    class ScriptedChatModel(BaseChatModel):  # type: ignore[misc, valid-type]
        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(
            self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> Any:
            script = current["script"]
            previous = last_int(str(messages[-1].content)) if script.calls else 0
            kind, value = script.next_call(previous)
            if kind == "final":
                message = AIMessage(content=value)
            else:
                message = AIMessage(
                    content="",
                    tool_calls=[{"name": "add", "args": value, "id": f"call_{script.calls}"}],
                )
            return ChatResult(generations=[ChatGeneration(message=message)])

    def add(x: int, y: int) -> int:
        """Add two integers."""
        return current["script"].add(x, y)

    tool = StructuredTool.from_function(add)
    agent = create_agent(ScriptedChatModel(), tools=[tool], system_prompt="Use the add tool.")

    def run(script: Script) -> str:
        current["script"] = script
        out = agent.invoke(
            {"messages": [HumanMessage(content=TASK)]},
            config={"recursion_limit": 2 * script.n + 10},
        )
        return str(out["messages"][-1].content)

    return run


if __name__ == "__main__":
    main(
        Harness(
            "LangGraph (create_agent)", ("langchain", "langgraph", "langchain-core"), imports, build
        )
    )
