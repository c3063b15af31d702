"""What a tool call gives back: the ToolResult the loops consume, the ToolError the model
reads when a call fails (returned, never raised), and how a value renders as the
observation text. Shared by the registry (`tools`) and the loops."""

from __future__ import annotations

import json
import os
import traceback
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any, Final, Literal

from loopwright.tools.run import Timeout
from loopwright.tools.schema import ToolArgumentError

__all__ = ["ToolError", "ToolErrorKind", "ToolResult", "render_observation"]

ToolErrorKind = Literal[
    "unknown_tool", "invalid_args", "exception", "timeout", "unrenderable", "denied", "guardrail", "in_doubt"
]
"""Why a call failed. "denied": refused by an approval gate; "guardrail": held back by a tool
guardrail (the loops build both); "in_doubt": the tool cannot tell whether its call took
effect (a side effect's run stops for a person, as when it outlives its deadline)."""


@dataclass(frozen=True, slots=True)
class ToolError(Exception):
    """A failed tool call, returned by the registry (never raised out of it) so the model
    can read it and recover.

    A tool may raise one to report a failure in its own words (`raise lw.ToolError("lookup",
    "no item 'zz'")`): the registry returns a copy named for the tool that raised it (the
    copy holds none of the raise's frames).
    `traceback`: for an exception inside the tool, the traceback from the tool's own frames
    (the step keeps it in `meta["traceback"]`; the model reads only the observation)."""

    tool: str
    message: str
    kind: ToolErrorKind = "exception"
    traceback: str | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        Exception.__init__(self, self.tool, self.message, self.kind, self.traceback)  # args: pickles

    def __str__(self) -> str:
        return self.as_observation()

    def as_observation(self) -> str:
        return f"ERROR[{self.tool}]: {self.message}"


@dataclass(frozen=True, slots=True)
class ToolResult:
    """One executed call as the loops consume it: the value (None on failure), the
    rendered observation the model sees, the error if any, and wall time."""

    name: str
    args: dict[str, Any]
    value: Any
    _: KW_ONLY
    observation: str
    error: ToolError | None
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.error is None


def render_observation(value: Any, max_chars: int = 8000) -> str:
    """The text the model sees for a tool result: a str as is, a dict or list as JSON,
    anything else as str(value); truncated past max_chars with a marker.

    Raises whatever rendering raises (the registry reports it as "unrenderable"). A dict
    or list that JSON cannot encode (a tuple key, a cycle) falls back to str(value)."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, (dict, list)):
        try:
            text = json.dumps(value, default=str, ensure_ascii=False)
        except (TypeError, ValueError):
            text = str(value)
    else:
        text = str(value)
    if len(text) > max_chars >= 0:
        return (
            f"{text[:max_chars]}\n…[truncated: {len(text)} chars total, showing first {max_chars}]"
        )
    return text


# --- failures ---------------------------------------------------------------------------

def _exception_text(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:
        text = f"<exception text unavailable: {type(exc).__name__}.__str__ failed>"
    return f"{type(exc).__name__}: {text}"


def _invalid(name: str, exc: Exception) -> ToolError:
    if isinstance(exc, ToolArgumentError):
        return ToolError(name, f"invalid args: {exc}", "invalid_args")
    # e.g. a user's validator inside a pydantic model raising something else
    return ToolError(name, f"invalid args: {_exception_text(exc)}", "invalid_args")


def _unrenderable(name: str, value: Any, exc: Exception) -> ToolError:
    text = f"unrenderable result of type {type(value).__name__} ({_exception_text(exc)})"
    return ToolError(name, text, "unrenderable")


def _failure(name: str, exc: Exception) -> ToolError:
    if isinstance(exc, Timeout):
        return ToolError(name, f"timeout after {exc.seconds:g}s", "timeout")
    if isinstance(exc, ToolError):  # the tool reported its failure itself
        return replace(exc, tool=name)
    return ToolError(name, _exception_text(exc), "exception", _tool_traceback(exc))


_CALLERS: Final = (
    os.path.dirname(__file__) + os.sep,  # the registry and the runner that called the tool
    os.path.join(os.path.dirname(os.path.dirname(__file__)), "offload.py"),
    os.path.join(os.path.dirname(traceback.__file__), "asyncio") + os.sep,  # an async tool's awaiter
)


def _tool_traceback(exc: BaseException) -> str:
    """The exception's traceback from the tool's own frames (the registry's and the event
    loop's frames above them are left out); all of it when none is the tool's."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_CALLERS):
        tb = tb.tb_next
    try:
        return "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))
    except Exception:  # a broken __str__: the type and message text say what they can
        return _exception_text(exc)
