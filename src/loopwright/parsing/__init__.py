"""The parse boundary: untrusted model text in, strict structures out.

`steps` reads ReAct steps (both dialects), `plans` ReWOO plans and their `#E` references,
`toolcalls` native tool calls; `decoding` is what they share (the tool-name rule, the lenient
JSON decoder, the Action and FinalAnswer records). Nothing here knows of tools, loops or models."""

from loopwright.parsing.steps import (
    FORMAT_HELP_BRACKETS,
    FORMAT_HELP_JSON,
    FORMAT_HELP_PLAN,
    REF_PATTERN,
    TOOL_NAME_PATTERN,
    Action,
    FinalAnswer,
    PlanStep,
    find_refs,
    parse_plan,
    parse_react_step,
    parse_tool_calls,
    substitute,
)

__all__ = [
    "FORMAT_HELP_BRACKETS",
    "FORMAT_HELP_JSON",
    "FORMAT_HELP_PLAN",
    "REF_PATTERN",
    "TOOL_NAME_PATTERN",
    "Action",
    "FinalAnswer",
    "PlanStep",
    "find_refs",
    "parse_plan",
    "parse_react_step",
    "parse_tool_calls",
    "substitute",
]
