"""Native tool calls: an OpenAI-style assistant message's `tool_calls` (a JSON arguments
string each) read into the same Action the ReAct parser returns. Same boundary, same
rules: tolerant of what servers really send, ParseError for anything malformed. Also
importable from `loopwright.parsing.steps`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loopwright.errors import ParseError, describe
from loopwright.parsing.decoding import (
    _FENCE_LINE,
    TOOL_NAME_PATTERN,
    Action,
    _Bad,
    _decode_json_at,
    _json_type,
    _unescape_deep,
)

__all__ = ["parse_tool_calls"]


def parse_tool_calls(message: Any) -> list[Action]:
    """Actions from an OpenAI-style assistant message's native tool calls.

    Accepts a dict message (`{"content", "tool_calls": [{"id", "type": "function",
    "function": {"name", "arguments"}}]}`), an object with `.tool_calls` (openai SDK
    types, loopwright.Completion), or a sequence of calls (loopwright.policy.ToolCall, SDK
    objects or dicts). Arguments are parsed tolerantly (empty -> {}, raw newlines, HTML
    entities, an already-parsed dict). A message without tool calls gives [].
    Raises ParseError on anything malformed.
    """
    try:
        return _parse_tool_calls(message)
    except _Bad as bad:
        raise ParseError(str(bad)) from None
    except RecursionError:
        raise ParseError("tool call arguments are nested too deeply") from None


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    try:
        return getattr(obj, name, None)
    except Exception:  # a property that raises is as good as missing
        return None


def _parse_tool_calls(message: Any) -> list[Action]:
    if isinstance(message, (str, bytes)) or message is None:
        raise _Bad(f"expected a message with tool calls, got {type(message).__name__}")
    if isinstance(message, (list, tuple)):
        calls: Any = message
        content: Any = ""
    else:
        calls = _field(message, "tool_calls")
        content = _field(message, "content")
        if content is None and not isinstance(message, Mapping):
            content = _field(message, "text")  # loopwright.Completion
        if calls is None:
            if isinstance(message, Mapping) or hasattr(message, "content"):
                calls = ()
            else:
                raise _Bad(f"expected a message with tool calls, got {type(message).__name__}")
    if not isinstance(content, str):
        content = ""
    if isinstance(calls, (str, bytes, Mapping)):
        raise _Bad(f"tool_calls must be a list, got {type(calls).__name__}")
    try:
        items = list(calls)
    except TypeError:
        raise _Bad(f"tool_calls must be a list, got {type(calls).__name__}") from None
    thought = content.strip()
    return [_one_call(call, k, thought) for k, call in enumerate(items)]


def _one_call(call: Any, k: int, thought: str) -> Action:
    where = f"tool call {k}"
    if call is None or isinstance(call, (str, bytes, int, float)):
        raise _Bad(f"{where} is not a call object: {describe(call, 60)}")
    kind = _field(call, "type")
    if kind is not None and kind != "function":
        raise _Bad(f"{where} has type {describe(kind, 30)}; only 'function' calls are read")
    function = _field(call, "function")
    source = function if function is not None else call
    name = _field(source, "name")
    arguments = _field(source, "arguments")
    call_id = _field(call, "id")
    if not isinstance(name, str) or not name.strip():
        raise _Bad(f"{where} has no function name")
    name = name.strip()
    if not TOOL_NAME_PATTERN.fullmatch(name):
        raise _Bad(
            f"{where} names {describe(name, 40)}, not a tool name (a letter or '_', then up "
            f"to 63 letters, digits, '_', '-', '.')"
        )
    args, repaired = _call_arguments(arguments, f"{where} ({name})")
    return Action(thought, name, args, call_id=call_id if isinstance(call_id, str) else None, repaired=repaired)


def _call_arguments(arguments: Any, where: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The call's arguments, and what decoding them had to repair."""
    if arguments is None:
        return {}, ()
    if isinstance(arguments, Mapping):
        return {str(k): _unescape_deep(v) for k, v in arguments.items()}, ()
    if not isinstance(arguments, str):
        raise _Bad(f"arguments of {where} must be a JSON object string, "
                   f"got {type(arguments).__name__}")
    text = arguments.strip()
    if "```" in text:
        text = _FENCE_LINE.sub("", text).strip()
    if not text:
        return {}, ()
    try:
        value, _, repaired = _decode_json_at(text, 0, len(text))
    except _Bad as bad:
        raise _Bad(f"arguments of {where}: {str(bad).replace('Action Input ', '')}") from None
    if not isinstance(value, dict):
        raise _Bad(f"arguments of {where} must be a JSON object, got {_json_type(value)}")
    return value, repaired
