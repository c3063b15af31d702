"""A streamed OpenAI-style response put back together: the chunks of `/v1/completions` or
`/v1/chat/completions` with `stream=True` (server-sent events, read by the `openai`
client), as the text deltas to pass on and, at the end, what a whole response holds.

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
        self.usage: Any = None  # read as a response's `.usage` (openai_compat._usage)
        self._calls: dict[int, _PartialCall] = {}

    def add(self, chunk: Any) -> str:
        """Take one chunk; its text ("" when it carries none)."""
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.usage = usage
        choices = getattr(chunk, "choices", None)
        if not choices:
            return ""
        choice = choices[0]
        if choice.finish_reason is not None:
            self.finish_reason = choice.finish_reason
        if not self.chat:
            return str(choice.text or "")
        delta = choice.delta
        if delta is None:
            return ""
        for piece in getattr(delta, "tool_calls", None) or ():
            index = piece.index if piece.index is not None else len(self._calls)
            call = self._calls.setdefault(index, _PartialCall())
            if piece.id:
                call.id = piece.id
            function = piece.function
            if function is not None:
                if function.name and function.name != call.name:
                    call.name = call.name + function.name if call.name and not function.name.startswith(call.name) \
                        else function.name
                if function.arguments:
                    call.arguments.append(function.arguments)
        return str(delta.content or "")

    def tool_calls(self) -> list[tuple[str, str, str | None]]:
        """The calls assembled, in index order: (api name, arguments string, id)."""
        return [(call.name, "".join(call.arguments), call.id)
                for _, call in sorted(self._calls.items()) if call.name]  # fmt: skip


__all__ = ["StreamedResponse"]
