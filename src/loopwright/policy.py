"""The model seam. A policy is anything that maps a prompt to text: a plain function
`str -> str` works, and so does a model object. Models that want more than the prompt
(stop strings, a grammar, chat messages and tool schemas for native tool calling)
implement `complete(request)`; the loops always build the full ModelRequest, so every
backend sees the same prompt the trace records.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
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
    tools: tuple[dict[str, Any], ...] = ()
    messages: tuple[dict[str, Any], ...] = ()
    max_tokens: int | None = None
    dialect: str = "json"
    known_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    output_schema: dict[str, Any] | None = None


@runtime_checkable
class Model(Protocol):
    """A policy that takes the whole request (stop strings, grammar, tools, messages)."""

    def complete(self, request: ModelRequest) -> Completion | str: ...


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

    Each entry is a str, a Completion, an exception instance (raised when reached), or a
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
        self.prompts.append(request.prompt)
        self.requests.append(request)
        if self._next >= len(self._outputs):
            raise ScriptExhaustedError(
                f"{self.name} was called {self._next + 1} times but scripted for "
                f"{len(self._outputs)}; last prompt ends: {request.prompt[-200:]!r}"
            )
        item = self._outputs[self._next]
        self._next += 1
        if callable(item) and not isinstance(item, (str, Completion)):
            item = item(request.prompt)
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, (str, Completion)):
            return item
        raise TypeError(f"{self.name}: scripted item {self._next} is {type(item).__name__}")

    def __call__(self, prompt: str) -> Completion | str:
        return self.complete(ModelRequest(prompt))

    def assert_consumed(self) -> None:
        if self.remaining:
            raise AssertionError(
                f"{self.name}: {self.remaining} of {len(self._outputs)} scripted outputs unused"
            )


def cycle_policy(outputs: Sequence[str]) -> Callable[[str], str]:
    """A policy that repeats `outputs` forever (for loop-guard tests)."""
    state = {"i": 0}

    def policy(prompt: str) -> str:
        text = outputs[state["i"] % len(outputs)]
        state["i"] += 1
        return text

    return policy
