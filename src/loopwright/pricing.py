"""What model calls cost in US dollars, for the `cost_budget_usd` limit and the trace.

    lw.run(task, model, tools, cost_budget_usd=0.05)                 # prices from genai-prices
    lw.run(task, model, tools, cost_budget_usd=0.05, prices=lw.pricing.Prices(3.0, 15.0, 0.3))
    lw.run(task, model, tools, prices=lambda usage: usage.total_tokens * 1e-6)

Prices are per million tokens. Prompt tokens the KV cache saved (sent minus evaluated) are
charged at the cache-read price. Without `prices`, the model's name is looked up in the
maintained price table of the `genai-prices` package (`pip install 'loopwright[prices]'`);
a model it does not know is a clear error at the start of the run, not a silent $0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loopwright.trace import Step, Usage

__all__ = ["Prices", "charge", "price_function"]

PriceFunction = Callable[[Usage], float]


@dataclass(frozen=True, slots=True)
class Prices:
    """US dollars per million tokens: prompt (input), generated (output), and prompt tokens
    read from the cache (default: the input price)."""

    input_per_mtok: float
    output_per_mtok: float
    cache_read_per_mtok: float | None = None

    def __call__(self, usage: Usage) -> float:
        cached = usage.prompt_tokens - usage.evaluated_tokens
        cache_price = self.input_per_mtok if self.cache_read_per_mtok is None else self.cache_read_per_mtok
        return (
            usage.evaluated_tokens * self.input_per_mtok
            + cached * cache_price
            + usage.completion_tokens * self.output_per_mtok
        ) / 1e6


def _model_name(policy: Any) -> str | None:
    for attr in ("model", "name"):
        value = getattr(policy, attr, None)
        if isinstance(value, str):
            return value
    return None


def price_function(policy: Any, prices: Any) -> PriceFunction:
    """The cost of one call's Usage: `prices` (a Prices, or any Usage -> dollars function),
    else the policy's model looked up in genai-prices. Raises ValueError when no price is
    known."""
    if prices is not None:
        if not callable(prices):
            raise TypeError(f"prices must be a loopwright.pricing.Prices or a function of Usage, got {type(prices).__name__}")
        return prices  # type: ignore[no-any-return]
    name = _model_name(policy)
    if name is None:
        raise ValueError("cost_budget_usd needs prices: the model has no name to look up; pass prices=")
    try:
        from genai_prices import Usage as PriceUsage
        from genai_prices import calc_price
    except ImportError:
        raise ValueError(
            f"no price for {name!r}: pass prices=, or pip install 'loopwright[prices]' for the genai-prices table"
        ) from None
    try:
        calc_price(PriceUsage(input_tokens=1, output_tokens=1), model_ref=name)
    except LookupError:
        raise ValueError(f"genai-prices has no price for model {name!r}; pass prices=") from None

    def table(usage: Usage) -> float:
        priced = calc_price(
            PriceUsage(
                input_tokens=usage.prompt_tokens,
                output_tokens=usage.completion_tokens,
                cache_read_tokens=usage.prompt_tokens - usage.evaluated_tokens,
            ),
            model_ref=name,
        )
        return float(priced.total_price)

    return table


def charge(price: PriceFunction, step: Step) -> None:
    """Put the cost of a step's model call on the step (`meta["cost_usd"]`)."""
    if step.usage.prompt_tokens or step.usage.completion_tokens:
        step.meta["cost_usd"] = price(step.usage)
