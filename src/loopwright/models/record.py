"""Record and replay model calls: a JSONL cassette of requests and completions.

Recorder wraps any policy and appends one line per call. Replay serves the recorded
completions back, keyed by what the model was asked (prompt, purpose, dialect, stop
strings, chat messages), so a recorded real-model run replays to the same trace without
the model, deterministically and fast.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from loopwright.errors import ReplayMissError
from loopwright.policy import Completion, ModelRequest, Policy, ToolCall, call_policy
from loopwright.trace import Usage, json_safe

CASSETTE_VERSION: Final = 1


def request_key(request: ModelRequest) -> str:
    """The identity of a request for replay: everything that can change the answer
    (tools by name: their schemas are in the prompt)."""
    return json.dumps(
        {
            "prompt": request.prompt,
            "purpose": request.purpose,
            "dialect": request.dialect,
            "stop": list(request.stop),
            "max_tokens": request.max_tokens,
            "tools": [t.get("name") for t in request.tools],
            "messages": json_safe(list(request.messages)),
        },
        sort_keys=True,
        ensure_ascii=False,
    )


@dataclass(frozen=True, slots=True)
class Entry:
    """One recorded call."""

    request: ModelRequest
    completion: Completion

    def to_dict(self) -> dict[str, Any]:
        r, c = self.request, self.completion
        return {
            "v": CASSETTE_VERSION,
            "purpose": r.purpose,
            "dialect": r.dialect,
            "stop": list(r.stop),
            "max_tokens": r.max_tokens,
            "tools": [t.get("name") for t in r.tools],
            "messages": json_safe(list(r.messages)),
            "prompt": r.prompt,
            "text": c.text,
            "tool_calls": [
                {"name": t.name, "arguments": t.arguments, "id": t.id} for t in c.tool_calls
            ],
            "usage": None if c.usage is None else c.usage.to_dict(),
            "meta": json_safe(c.meta),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Entry:
        request = ModelRequest(
            prompt=str(d["prompt"]),
            stop=tuple(d.get("stop") or ()),
            purpose=d.get("purpose", "react"),
            tools=tuple({"name": name} for name in d.get("tools") or ()),
            messages=tuple(d.get("messages") or ()),
            max_tokens=d.get("max_tokens"),
            dialect=str(d.get("dialect", "json")),
        )
        completion = Completion(
            text=str(d.get("text", "")),
            usage=None if d.get("usage") is None else Usage.from_dict(d["usage"]),
            tool_calls=tuple(
                ToolCall(str(t["name"]), str(t.get("arguments", "")), t.get("id"))
                for t in d.get("tool_calls") or ()
            ),
            meta=dict(d.get("meta") or {}),
        )
        return cls(request, completion)


def read_cassette(path: str | os.PathLike[str]) -> Iterator[Entry]:
    """The entries of a cassette, in recorded order. Raises ValueError naming the line
    for a line that is not a cassette entry."""
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield Entry.from_dict(json.loads(line))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{number}: not a cassette entry ({exc})") from exc


class Recorder:
    """A policy that forwards every call to `policy` and appends the request and its
    completion (text, tool calls, usage) to the JSONL cassette at `path`."""

    def __init__(self, policy: Policy, path: str | os.PathLike[str]) -> None:
        self.policy = policy
        self.path = Path(path)
        self.calls = 0
        self._lock = threading.Lock()

    def complete(self, request: ModelRequest) -> Completion:
        completion = call_policy(self.policy, request)
        line = json.dumps(Entry(request, completion).to_dict(), ensure_ascii=False)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
            self.calls += 1
        return completion

    def __getattr__(self, name: str) -> Any:
        # reset(), close(), name... of the wrapped model stay reachable.
        if name == "policy":
            raise AttributeError(name)
        return getattr(self.policy, name)


class Replay:
    """A policy that serves a cassette's completions back.

    A request is matched on its prompt, purpose, dialect, stop strings, max_tokens, tool
    names and messages.
    Identical requests recorded more than once are served in recorded order, the last
    one repeating. An unrecorded request raises ReplayMissError showing where its prompt
    departs from the nearest recorded one.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.name = f"replay:{self.path.name}"
        self.entries = list(read_cassette(self.path))
        self._by_key: dict[str, list[Completion]] = {}
        for entry in self.entries:
            self._by_key.setdefault(request_key(entry.request), []).append(entry.completion)
        self._served: dict[str, int] = {}
        self.calls = 0

    def complete(self, request: ModelRequest) -> Completion:
        key = request_key(request)
        recorded = self._by_key.get(key)
        if not recorded:
            raise ReplayMissError(self._miss_message(request))
        n = self._served.get(key, 0)
        self._served[key] = n + 1
        self.calls += 1
        return recorded[min(n, len(recorded) - 1)]

    def _miss_message(self, request: ModelRequest) -> str:
        head = (
            f"{self.path} has no recorded completion for this {request.purpose} request "
            f"({len(request.prompt)} prompt chars)"
        )
        if not self.entries:
            return head + "; the cassette is empty"
        nearest = max(
            self.entries,
            key=lambda e: (
                _common_prefix(e.request.prompt, request.prompt),
                e.request.purpose == request.purpose,
            ),
        )
        other = nearest.request
        at = _common_prefix(other.prompt, request.prompt)
        if at == len(other.prompt) == len(request.prompt):
            diffs = [
                f"{name}: recorded {getattr(other, name)!r}, asked {getattr(request, name)!r}"
                for name in ("purpose", "dialect", "stop", "max_tokens", "messages")
                if getattr(other, name) != getattr(request, name)
            ]
            return f"{head}; the prompt matches a recorded one but {'; '.join(diffs)}"
        return (
            f"{head}; nearest recorded prompt differs at char {at} (line "
            f"{request.prompt.count(chr(10), 0, at) + 1}):\n"
            f"  recorded: {other.prompt[max(0, at - 30) : at + 50]!r}\n"
            f"  asked:    {request.prompt[max(0, at - 30) : at + 50]!r}"
        )


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
