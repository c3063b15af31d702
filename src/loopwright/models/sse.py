"""A streamed OpenAI-style response put back together: the chunks of `/v1/completions` or
`/v1/chat/completions` with `stream=True` (server-sent events, read by the `openai`
client as JSON objects), as the text deltas to pass on and, at the end, what a whole response holds.

Chat tool calls arrive in pieces: each chunk's `delta.tool_calls` carries an `index`, the
call's id and name in its first piece, and a fragment of the JSON arguments string; the
fragments of one index are joined in order, untouched (the parser reads them at the
trust boundary). Usage comes in a last chunk with no choices when the server honours
`stream_options.include_usage`; a server that sends none gets an estimate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class _PartialCall:
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamedResponse:
    """Chunks added one at a time; `add` returns the text each one carries."""

    __slots__ = ("_calls", "chat", "finish_reason", "usage")

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.finish_reason: Any = None
        self.usage: Any = None  # the usage object of the last chunk that had one
        self._calls: dict[int, _PartialCall] = {}

    def add(self, chunk: Any) -> str:
        """Take one chunk (a JSON object); its text ("" when it carries none)."""
        if not isinstance(chunk, dict):
            return ""
        usage = chunk.get("usage")
        if usage:
            self.usage = usage
        choices = chunk.get("choices")
        if not choices or not isinstance(choices[0], dict):
            return ""
        choice = choices[0]
        if choice.get("finish_reason") is not None:
            self.finish_reason = choice["finish_reason"]
        if not self.chat:
            return str(choice.get("text") or "")
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return ""
        for piece in delta.get("tool_calls") or ():
            index = piece.get("index")
            call = self._calls.setdefault(len(self._calls) if index is None else int(index), _PartialCall())
            if piece.get("id"):
                call.id = piece["id"]
            function = piece.get("function") or {}
            name = function.get("name")
            if name and name != call.name:  # sent once in the first piece (some servers repeat it whole)
                call.name = name if not call.name or name.startswith(call.name) else call.name + name
            if function.get("arguments"):
                call.arguments.append(function["arguments"])
        return str(delta.get("content") or "")

    def tool_calls(self) -> list[tuple[str, str, str | None]]:
        """The calls assembled, in index order: (api name, arguments string, id)."""
        return [(call.name, "".join(call.arguments), call.id)
                for _, call in sorted(self._calls.items()) if call.name]


__all__ = ["StreamedResponse"]
