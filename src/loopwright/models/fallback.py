"""Fallback: several models answering in turn. When a call to one fails after its retries,
or it answers a ReAct step twice with text that does not parse, the next model answers the
same request.

    model = lw.models.Fallback(lw.models.OpenAICompatible(url, "big"), lw.models.LlamaCpp())

The request is passed on unchanged, so a model that constrains its output builds the same
constraint from it: the embedded LlamaCpp holds a ReAct step or a plan to the GBNF grammar
(`grammar_for`) that an OpenAI-compatible server was sent, with the same tools, known calls
excluded. In a run, each model's call goes through the run's `retry=` before the next model
is asked (the drivers call `answer_in_turn` with their retrying call); alone, each model is
asked once. The answer's meta says which model answered (`answered_by`, on the step too) and
why the ones before did not (`fallback`: model, kind, reason, and the usage an unparseable
answer spent, so a run's budgets and cost cover it, each model priced by its own name).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import Any, Final, get_args

from loopwright.errors import ParseError, TransientKind, TransientModelError
from loopwright.parsing.steps import parse_react_step
from loopwright.policy import (
    Completion,
    ModelRequest,
    Policy,
    acall_policy,
    as_completion,
    policy_reply,
)
from loopwright.trace import Usage

KINDS: Final = frozenset((*get_args(TransientKind), "parse", "error"))
DEFAULT_ON: Final = frozenset((*get_args(TransientKind), "parse"))
"""Every transient failure, and an answer that does not parse twice; not "error" (any other
exception: a bug or a refused request, which the next model would likely meet too)."""

Call = Callable[[Policy, ModelRequest], Any]


class Fallback:
    """Models asked in turn. on: the failures that pass the request to the next model:
    the `TransientModelError` kinds ("rate_limit", "server", "timeout", "connection",
    "context"), "parse" (a ReAct step that does not parse, twice), "error" (any other
    exception). The last model's failure is the call's failure."""

    def __init__(self, primary: Policy, secondary: Policy, *more: Policy, on: Collection[str] = DEFAULT_ON) -> None:
        on = frozenset([on] if isinstance(on, str) else on)
        unknown = sorted(on - KINDS)
        if unknown:
            raise ValueError(f"on: unknown failure kind(s) {', '.join(map(repr, unknown))}; "
                             f"accepted: {', '.join(sorted(KINDS))}")
        self.models: tuple[Policy, ...] = (primary, secondary, *more)
        self.on = on
        self.name = model_name(primary)  # what the run's span and price table name first

    def __repr__(self) -> str:
        return f"Fallback({', '.join(model_name(m) for m in self.models)})"

    @property
    def context_window(self) -> int | None:
        """The smallest window among the models (what tool search must fit)."""
        windows = [w for m in self.models if isinstance(w := getattr(m, "context_window", None), int)]
        return min(windows) if windows else None

    def complete(self, request: ModelRequest) -> Completion:
        """Each model asked once, in turn."""
        return self.answer_in_turn(request, policy_reply)

    async def acomplete(self, request: ModelRequest) -> Completion:
        return await self.aanswer_in_turn(request, acall_policy)

    def answer_in_turn(self, request: ModelRequest, call: Call) -> Completion:
        """The first answer a model gives through `call(model, request)` (a run's driver
        passes its retrying call)."""
        passed: list[dict[str, Any]] = []
        for model in self.models:
            try:
                answer: Completion | None = as_completion(call(model, request))
                if answer is not None and not self._parses(request, answer, model):  # asked once more, then passed over
                    answer = self._again(request, answer, as_completion(call(model, request)), model, passed)
            except Exception as exc:
                self._failed(exc, model, passed)
                continue
            if answer is not None:
                return self._answered(request, answer, model, passed)
        raise self._exhausted(passed)

    async def aanswer_in_turn(self, request: ModelRequest, call: Callable[[Policy, ModelRequest],
                                                                           Awaitable[Any]]) -> Completion:
        """`answer_in_turn`, awaited."""
        passed: list[dict[str, Any]] = []
        for model in self.models:
            try:
                answer: Completion | None = as_completion(await call(model, request))
                if answer is not None and not self._parses(request, answer, model):  # asked once more, then passed over
                    answer = self._again(request, answer, as_completion(await call(model, request)), model, passed)
            except Exception as exc:
                self._failed(exc, model, passed)
                continue
            if answer is not None:
                return self._answered(request, answer, model, passed)
        raise self._exhausted(passed)

    def _parses(self, request: ModelRequest, answer: Completion, model: Policy) -> bool:
        """Whether a ReAct step in a text dialect parses (anything else is taken as it is;
        the last model's answer is never judged: the run's parse handling has it)."""
        if "parse" not in self.on or model is self.models[-1] or request.purpose != "react":
            return True
        if request.dialect not in ("json", "brackets") or answer.tool_calls:
            return True
        try:
            parse_react_step(answer.text, dialect="brackets" if request.dialect == "brackets" else "json")
        except ParseError:
            return False
        return True

    def _again(self, request: ModelRequest, first: Completion, second: Completion, model: Policy,
               passed: list[dict[str, Any]]) -> Completion | None:
        """The second answer of a model whose first did not parse, with both answers' usage;
        None, and the model recorded as passed over, when it does not parse either."""
        spent = _usage(request, first) + _usage(request, second)
        if not self._parses(request, second, model):
            passed.append({"model": model_name(model), "kind": "parse", "reason": "its answer did not parse, twice",
                           "usage": spent.to_dict()})
            return None
        return Completion(second.text, spent, second.tool_calls, {**second.meta, "unparsed_first": first.text})

    def _failed(self, exc: Exception, model: Policy, passed: list[dict[str, Any]]) -> None:
        """A model's failure: recorded and passed over when `on` covers it, else raised."""
        kind = exc.kind if isinstance(exc, TransientModelError) else "error"
        passed.append({"model": model_name(model), "kind": kind, "reason": f"{type(exc).__name__}: {exc}"})
        if kind not in self.on or model is self.models[-1]:
            exc.fallback = passed  # type: ignore[attr-defined]  # the run's error step records it
            raise exc

    def _answered(self, request: ModelRequest, answer: Completion, model: Policy,
                  passed: list[dict[str, Any]]) -> Completion:
        """The answer, its usage covering the unparseable answers of the models passed over
        (`pricing.split_usage` gives each model its share back)."""
        meta = {**answer.meta, "answered_by": model_name(model)}
        if not passed:
            return Completion(answer.text, answer.usage, answer.tool_calls, meta)
        meta["fallback"] = passed
        usage = _usage(request, answer)
        for entry in passed:
            if "usage" in entry:
                usage = usage + Usage.from_dict(entry["usage"])
        return Completion(answer.text, usage, answer.tool_calls, meta)

    def _exhausted(self, passed: list[dict[str, Any]]) -> TransientModelError:
        """Every model passed over (the last answered twice unparseably with parse on)."""
        error = TransientModelError("no model of the Fallback answered: " + "; ".join(
            f"{p['model']}: {p['reason']}" for p in passed), "server")
        error.fallback = passed  # type: ignore[attr-defined]
        return error


def _usage(request: ModelRequest, answer: Completion) -> Usage:
    return answer.usage or Usage.estimate(request.prompt, answer.text)


def model_name(model: Any) -> str:
    """A model's name as the trace, the spans and the price table know it."""
    for attr in ("name", "model"):
        value = getattr(model, attr, None)
        if isinstance(value, str):
            return value
    return getattr(model, "__name__", None) or type(model).__name__


__all__ = ["DEFAULT_ON", "Fallback", "model_name"]
