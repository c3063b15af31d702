"""Who hears about a run as it happens: the journal, OpenTelemetry spans, the cost meter.

Each is an Observer, called in a list at the run's choke points (a model call answered
or failed, a tool call done, a step recorded, the run ended); a run with none pays for an
empty loop. The journal's writes that a replay depends on (a tool call started, an
approval asked) stay in the tool gate; here it hears what is recorded after the fact.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from loopwright import pricing
from loopwright.errors import StoreError
from loopwright.modes.machine import Journal
from loopwright.policy import Completion, ModelRequest
from loopwright.tools.registry import ToolResult
from loopwright.trace import Step, Trace, Usage


class Observer(Protocol):
    """Told of each thing a run does, in order; must not raise."""

    def model(self, n: int, request: ModelRequest, completion: Completion, usage: Usage, start: float) -> None: ...
    def model_failed(self, purpose: str, message: str, seconds: float,
                     meta: Mapping[str, Any] | None = None) -> None: ...
    def tool(self, key: str, result: ToolResult, kind: str) -> None: ...
    def step(self, step: Step) -> None: ...
    def end(self, trace: Trace) -> None: ...


class JournalObserver:
    """A durable run's record: each model call (written before the loop uses it), each
    step, and the run's end."""

    __slots__ = ("journal",)

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def model(self, n: int, request: ModelRequest, completion: Completion, usage: Usage, start: float) -> None:
        self.journal.record_completion(n, request, completion, usage)

    def model_failed(self, purpose: str, message: str, seconds: float,
                     meta: Mapping[str, Any] | None = None) -> None:
        pass

    def tool(self, key: str, result: ToolResult, kind: str) -> None:
        pass

    def step(self, step: Step) -> None:
        if self.journal.failed is None:  # after a failed write (the run stops) nothing more is written
            self.journal.record_step(step)

    def end(self, trace: Trace) -> None:
        if self.journal.failed is not None:
            return
        try:
            self.journal.record_end(trace)
        except StoreError as exc:  # the run ended, but its end is not in the journal: say so
            store_failed(trace, exc)


def store_failed(trace: Trace, exc: StoreError) -> None:
    """Mark the trace of a run whose journal write failed: stop reason `store_error`, and a
    last step that says what failed. The journal holds what was written before; the run
    can be resumed from it once the store works again."""
    message = (f"the run journal failed, so the run stopped: {exc}. Nothing more was written to the journal; "
               "resume the run from it once the store works again")
    trace.steps.append(Step(len(trace.steps) + 1, "error", error=message, meta={"store_error": True}))
    trace.stopped_reason = "store_error"
    trace.final_answer = None


class CostMeter:
    """What the run's model calls cost (`prices`, `cost_budget_usd`): each step's cost on
    the step, the run's so far in `trace.meta["cost_usd"]`. `looked_up`: the run's price
    came from its model's name (no `prices=`), so another model is priced by its own."""

    __slots__ = ("adjust", "apart_cost", "apart_usage", "budget", "by_model", "looked_up", "price", "trace")

    def __init__(self, price: pricing.PriceFunction, budget: float | None, trace: Trace,
                 looked_up: bool = False, by_model: dict[str, pricing.PriceFunction] | None = None) -> None:
        self.price = price
        self.budget = budget
        self.trace = trace
        self.looked_up = looked_up
        # child agents' and model guardrails' usage: in trace.usage, but priced apart
        self.apart_usage = Usage()
        self.apart_cost = 0.0
        self.by_model = by_model  # lw.models.Fallback: each model's price, by name
        self.adjust = 0.0  # what calls other models answered cost beyond `price` of their usage
        trace.meta["cost_usd"] = 0.0

    def cost_of(self, usage: Usage, meta: dict[str, Any]) -> float:
        """One call's cost: each model's share at its own price (lw.models.Fallback)."""
        parts = pricing.split_usage(usage, meta) if self.by_model is not None else None
        if parts is None:
            return self.price(usage)
        by_model = self.by_model or {}
        return sum(by_model.get(name, self.price)(part) for name, part in parts)

    def answered(self, completion: Completion, usage: Usage) -> None:
        """A model call answered (or replayed): a Fallback's call is priced by model."""
        if self.by_model is not None and "answered_by" in completion.meta:
            self.adjust += self.cost_of(usage, completion.meta) - self.price(usage)

    def spent(self) -> bool:
        """Record the run's cost so far on its trace; True when it reached the budget."""
        usage = self.trace.usage
        if self.apart_cost or self.apart_usage.total_tokens:
            apart = self.apart_usage
            usage = Usage(usage.prompt_tokens - apart.prompt_tokens, usage.evaluated_tokens - apart.evaluated_tokens,
                          usage.completion_tokens - apart.completion_tokens, estimated=usage.estimated)
            cost = self.trace.meta["cost_usd"] = self.price(usage) + self.adjust + self.apart_cost
        else:
            cost = self.trace.meta["cost_usd"] = self.price(usage) + self.adjust
        return self.budget is not None and bool(cost >= self.budget)

    def price_of(self, policy: Any) -> pricing.PriceFunction:
        """The price of another model's calls (a model guardrail's): its own, looked up by
        its name, when the run's was; else (prices= given, or a name with no price) the run's."""
        if self.looked_up and policy is not None:
            try:
                return pricing.price_function(policy, None)
            except ValueError:
                pass
        return self.price

    def add_apart(self, usage: Usage, cost: float) -> None:
        """Usage already in trace.usage that was priced apart (a model guardrail's call)."""
        self.apart_usage = self.apart_usage + usage
        self.apart_cost += cost
        self.spent()

    def left(self) -> float | None:
        """What is left of the budget (None: no budget)."""
        if self.budget is None:
            return None
        self.spent()
        return self.budget - float(self.trace.meta["cost_usd"])

    def add_child(self, usage: Usage, cost: float | None) -> None:
        """A child agent's run: its usage (already in trace.usage) at its own cost, or at
        this run's prices when it priced nothing."""
        self.add_apart(usage, self.price(usage) if cost is None else cost)

    def model(self, n: int, request: ModelRequest, completion: Completion, usage: Usage, start: float) -> None:
        pass

    def model_failed(self, purpose: str, message: str, seconds: float,
                     meta: Mapping[str, Any] | None = None) -> None:
        pass

    def tool(self, key: str, result: ToolResult, kind: str) -> None:
        pass

    def step(self, step: Step) -> None:
        if self.by_model is not None and "answered_by" in step.meta:
            step.meta["cost_usd"] = self.cost_of(step.usage, step.meta)
        else:
            pricing.charge(self.price, step)

    def end(self, trace: Trace) -> None:
        self.spent()


def cost_meter(policy: Any, budget: Any, prices: Any, trace: Trace) -> CostMeter | None:
    """The run's CostMeter, or None when neither a budget nor prices were given (the run
    then pays nothing for this). Raises ValueError for a bad budget or no known price."""
    if budget is None and prices is None:
        return None
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int | float) or budget <= 0):
        raise ValueError(f"cost_budget_usd must be a positive number of dollars, got {budget!r}")
    return CostMeter(pricing.price_function(policy, prices), None if budget is None else float(budget), trace,
                     looked_up=prices is None, by_model=pricing.by_model(policy, prices))


__all__ = ["CostMeter", "JournalObserver", "Observer", "cost_meter", "store_failed"]
