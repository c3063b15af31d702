"""The typed tool wire: what a tool is and how a call to one is checked, run and answered.

`registry` holds Tool and ToolRegistry (the second trust boundary: dispatch never raises for
anything a tool or the model does); `schema` derives and checks argument schemas; `docstrings`
reads descriptions and parameter help; `examples` holds tool and whole-run examples; `run`
runs one call within a deadline; `results` is what a call gives back; `toolset` fingerprints a
registry for the journal. Nothing here knows of the loops, models or memory above it."""

from loopwright.tools.registry import (
    IdempotencyKey,
    SideEffects,
    Tool,
    ToolArgumentError,
    ToolError,
    ToolErrorKind,
    ToolExample,
    ToolRegistry,
    ToolResult,
    parse_docstring,
    render_observation,
    tool,
)

__all__ = [
    "IdempotencyKey",
    "SideEffects",
    "Tool",
    "ToolArgumentError",
    "ToolError",
    "ToolErrorKind",
    "ToolExample",
    "ToolRegistry",
    "ToolResult",
    "parse_docstring",
    "render_observation",
    "tool",
]
