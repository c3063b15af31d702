"""The model seam. A policy is anything that maps a prompt to text: a plain function
`str -> str` works, and so does a model object. Models that want more than the prompt
(stop strings, a grammar, chat messages and tool schemas for native tool calling)
implement `complete(request)`; the loops always build the full ModelRequest, so every
backend sees the same prompt the trace records.

A model may also stream: `stream(request)` (or `astream`) yields the text as str deltas
as it is produced and may end with a Completion carrying the usage, tool calls and meta
(its text empty, or the whole text). A run streams only when someone watches it
(`lw.iter_events`, a sink); `stream_reply` is the one place a stream is read.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import KW_ONLY, dataclass, field
from types import FunctionType
from typing import Any, Literal, Protocol, runtime_checkable

from loopwright.errors import ScriptExhaustedError
from loopwright.offload import run_until_complete
from loopwright.trace import Usage

Purpose = Literal["react", "plan", "solve", "replan", "summarize", "reflect", "propose", "value"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A native (OpenAI-style) tool call returned by a chat model."""

    name: str
    arguments: str  # the raw JSON arguments string, parsed at the trust boundary
    id: str | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    """What a policy may return instead of a plain str: text plus what it cost.

    usage None means the backend did not say; the loop then estimates it.
    tool_calls holds native tool calls, if the backend made any.
    meta carries backend facts for the trace (retries, model name, cache hits).
    """

    text: str
    usage: Usage | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Everything the loop asks of a model in one call.

    prompt: the full text prompt (what a completion model is sent, and what the trace
      records). stop: stop strings. purpose: which call of which mode this is.
    tools: the JSON schemas of the tools the model may call ({"name", "description",
      "parameters"}), for grammars and native tool calling. messages: the same state as
      chat messages, for chat backends. max_tokens: a cap on generated tokens.
    dialect: the ReAct step format: "json" (`Action:` / `Action Input:`), "brackets"
      (`Action k: name[arg]`) or "native" (the backend's own tool calling; `prompt` then
      still holds the JSON-dialect transcript for the record).
    known_calls: ReAct calls whose results the prompt already holds, the latest per tool
      (`(tool, args)`); a backend that constrains decoding may exclude repeating them.
    output_schema: the JSON Schema a final answer must fit (`run(..., output_type=...)`),
      for backends that constrain it; None for a free-text answer.
    """

    prompt: str
    stop: tuple[str, ...] = ()
    purpose: Purpose = "react"
    _: KW_ONLY
    tools: tuple[dict[str, Any], ...] = ()
    messages: tuple[dict[str, Any], ...] = ()
    max_tokens: int | None = None
    dialect: str = "json"
    known_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    output_schema: dict[str, Any] | None = None


_RUN_RETRIES: ContextVar[bool] = ContextVar("loopwright_run_retries", default=False)


def run_retries() -> bool:
    """Whether the run calling this model retries its transient failures itself (the run's
    `retry=`): a backend that would retry on its own then tries once and raises
    `TransientModelError`, so one place decides and attempts never multiply."""
    return _RUN_RETRIES.get()


@contextmanager
def retried_by_run() -> Iterator[None]:
    """Around a model call of a run with `retry=`: `run_retries()` is True inside (and in
    the threads loopwright starts from here, which copy the context)."""
    token = _RUN_RETRIES.set(True)
    try:
        yield
    finally:
        _RUN_RETRIES.reset(token)


@runtime_checkable
class Model(Protocol):
    """A policy that takes the whole request (stop strings, grammar, tools, messages)."""

    def complete(self, request: ModelRequest) -> Completion | str: ...


@runtime_checkable
class StreamingModel(Model, Protocol):
    """A Model that can also give its text as it is produced: str deltas, then
    optionally a Completion (usage, tool calls, meta; its text empty or the deltas joined)."""

    def stream(self, request: ModelRequest) -> Iterator[str | Completion]: ...


Policy = Callable[[str], "str | Completion"] | Model
"""Any callable str -> str (or Completion), or a Model."""


def call_policy(policy: Policy, request: ModelRequest) -> Completion:
    """Ask the policy for one completion and normalise the answer to a Completion.

    Raises whatever the policy raises; a return value of the wrong type is a TypeError
    naming what is accepted.
    """
    return as_completion(policy_reply(policy, request))


def policy_reply(policy: Policy, request: ModelRequest) -> str | Completion:
    """`call_policy` without the Completion made for a plain str answer (a run's model
    choke point makes one only when something records it)."""
    if type(policy) is FunctionType:  # a plain function: the prompt only (no attribute lookups)
        out = policy(request.prompt)
    elif callable(complete := getattr(policy, "complete", None)):
        out = complete(request)
    elif callable(acomplete := getattr(policy, "acomplete", None)):
        out = acomplete(request)
    else:
        out = policy(request.prompt)  # type: ignore[operator]
    if type(out) is str or type(out) is Completion:
        return out
    if inspect.isawaitable(out):  # an async policy in a sync run: awaited on a private loop
        out = run_until_complete(out)
    if isinstance(out, Completion):
        return out
    if isinstance(out, str):
        return str(out)  # a str subclass becomes a plain str, as in the trace
    raise TypeError(f"a policy must return str or loopwright.Completion, got {type(out).__name__}")


async def acall_policy(policy: Policy, request: ModelRequest) -> Completion:
    """`call_policy` for an async policy (see `is_async_policy`), awaited on this loop."""
    acomplete = getattr(policy, "acomplete", None)
    if callable(acomplete):
        out = acomplete(request)
    else:
        complete = getattr(policy, "complete", None)
        out = complete(request) if callable(complete) else policy(request.prompt)  # type: ignore[operator]
    if inspect.isawaitable(out):
        out = await out
    return as_completion(out)


def as_completion(out: Any) -> Completion:
    """A policy's answer as a Completion; anything but str or Completion is a TypeError
    naming what is accepted."""
    if isinstance(out, Completion):
        return out
    if isinstance(out, str):
        return Completion(str(out))  # a str subclass becomes a plain str, as in the trace
    raise TypeError(
        f"a policy must return str or loopwright.Completion, got {type(out).__name__}"
    )


Emit = Callable[[str], None]
"""Where `stream_reply` pushes each delta as it arrives."""


def stream_reply(policy: Policy, request: ModelRequest, emit: Emit) -> str | Completion:
    """`policy_reply`, with the text pushed to `emit` as it is produced: read from the
    policy's `stream` (or `astream`, on a private loop) when it has one, else one delta
    holding the whole answer. The answer's text is the deltas joined."""
    if type(policy) is not FunctionType:
        stream = getattr(policy, "stream", None)
        if callable(stream):
            parts: list[str] = []
            end: Completion | None = None
            items = stream(request)
            try:
                for item in items:
                    end = _take(item, parts, emit, end)
            finally:
                close = getattr(items, "close", None)
                if callable(close):  # a stream left early (an error, a cancelled run) ends here
                    close()
            return _streamed(parts, end, emit)
        if callable(getattr(policy, "astream", None)):
            return run_until_complete(astream_reply(policy, request, emit))
    reply = policy_reply(policy, request)
    emit(reply if type(reply) is str else reply.text)  # type: ignore[union-attr]
    return reply


async def astream_reply(policy: Policy, request: ModelRequest, emit: Emit) -> Completion | str:
    """`stream_reply` for an async policy, on this loop: its `astream` when it has one,
    else one delta holding the whole answer."""
    astream = getattr(policy, "astream", None)
    if not callable(astream):
        reply = await acall_policy(policy, request)
        emit(reply.text)
        return reply
    parts: list[str] = []
    end: Completion | None = None
    items: AsyncIterator[str | Completion] = astream(request)
    try:
        async for item in items:
            end = _take(item, parts, emit, end)
    finally:
        aclose = getattr(items, "aclose", None)
        if callable(aclose):
            await aclose()
    return _streamed(parts, end, emit)


def _take(item: Any, parts: list[str], emit: Emit, end: Completion | None) -> Completion | None:
    """One item of a stream: a delta is kept and pushed; a Completion is the stream's end."""
    if type(item) is str or isinstance(item, str):
        if item:
            text = str(item)
            parts.append(text)
            emit(text)
        return end
    if isinstance(item, Completion):
        return item
    raise TypeError(f"a policy's stream must yield str deltas and a final loopwright.Completion, "
                    f"got {type(item).__name__}")


def _streamed(parts: list[str], end: Completion | None, emit: Emit) -> str | Completion:
    """The answer a stream gave. A final Completion's text, when it is not empty, must
    continue the deltas (the rest is pushed as one more delta), so the deltas joined are
    always the answer's text."""
    text = "".join(parts)
    if end is None:
        return text
    if end.text and end.text != text:
        if not end.text.startswith(text):
            raise ValueError(f"a stream ended with a Completion whose text {end.text[:80]!r} does not "
                             f"continue its deltas {text[:80]!r}")
        emit(end.text[len(text):])
        return end
    return end if end.text == text else Completion(text, end.usage, end.tool_calls, end.meta)


def is_async_policy(policy: Any) -> bool:
    """Whether the policy answers with a coroutine: it has `acomplete`, or its
    `complete` or `__call__` is an `async def`."""
    if type(policy) is FunctionType:  # the common case, without inspect's unwrapping
        # (3.12's inspect.markcoroutinefunction leaves this marker on the function)
        return bool(policy.__code__.co_flags & inspect.CO_COROUTINE) or "_is_coroutine_marker" in policy.__dict__
    if callable(getattr(policy, "acomplete", None)):
        return True
    complete = getattr(policy, "complete", None)
    target = complete if callable(complete) else policy
    return inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        getattr(target, "__call__", None)  # noqa: B004 - an object with `async def __call__`
    )


class ScriptedPolicy:
    """A deterministic policy for tests: returns scripted outputs in order.

    Each entry is a str, a Completion, an exception instance (raised when reached), a
    tuple of str (the deltas `stream` yields; `complete` returns them joined), or a
    callable taking the prompt and returning one of those. Strict: a call past the end
    raises ScriptExhaustedError; `assert_consumed()` fails if outputs are left over.
    `prompts` records every prompt it was sent.
    """

    def __init__(self, outputs: Iterable[Any], *, name: str = "scripted") -> None:
        self._outputs: list[Any] = list(outputs)
        self._next = 0
        self.name = name
        self.prompts: list[str] = []
        self.requests: list[ModelRequest] = []

    @property
    def calls(self) -> int:
        return self._next

    @property
    def remaining(self) -> int:
        return len(self._outputs) - self._next

    def complete(self, request: ModelRequest) -> Completion | str:
        item = self._take(request)
        return "".join(item) if isinstance(item, tuple) else item

    def stream(self, request: ModelRequest) -> Iterator[str | Completion]:
        """The next entry as a stream: a tuple's deltas, a str whole, a Completion's
        text and then the Completion."""
        item = self._take(request)
        if isinstance(item, tuple):
            yield from item
        elif isinstance(item, Completion):
            yield item.text
            yield item
        else:
            yield item

    def _take(self, request: ModelRequest) -> Completion | str | tuple[str, ...]:
        self.prompts.append(request.prompt)
        self.requests.append(request)
        if self._next >= len(self._outputs):
            raise ScriptExhaustedError(
                f"{self.name} was called {self._next + 1} times but scripted for "
                f"{len(self._outputs)}; last prompt ends: {request.prompt[-200:]!r}"
            )
        item = self._outputs[self._next]
        self._next += 1
        if callable(item) and not isinstance(item, (str, Completion, tuple)):
            item = item(request.prompt)
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, (str, Completion)):
            return item
        if isinstance(item, tuple) and all(isinstance(part, str) for part in item):
            return item
        raise TypeError(f"{self.name}: scripted item {self._next} is {type(item).__name__}")

    def __call__(self, prompt: str) -> Completion | str:
        return self.complete(ModelRequest(prompt))

    def assert_consumed(self) -> None:
        if self.remaining:
            raise AssertionError(
                f"{self.name}: {self.remaining} of {len(self._outputs)} scripted outputs unused"
            )
