"""The wire: what crosses between the model, the loop and the tools. Typed tools and their
schemas, deadlines for tool calls, and the parse boundary (ReAct steps, plans, native calls).

Nothing here knows of the loops, models or memory above it."""

from loopwright.wire.parsing import (
    Action,
    FinalAnswer,
    PlanStep,
    parse_plan,
    parse_react_step,
    parse_tool_calls,
    substitute,
)
from loopwright.wire.tools import Tool, ToolError, ToolRegistry, ToolResult, tool

__all__ = [
    "Action",
    "FinalAnswer",
    "PlanStep",
    "Tool",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "parse_plan",
    "parse_react_step",
    "parse_tool_calls",
    "substitute",
    "tool",
]
