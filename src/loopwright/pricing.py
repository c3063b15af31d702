"""What model calls cost in US dollars, for the `cost_budget_usd` limit and the trace.

    lw.run(task, model, tools, cost_budget_usd=0.05)                 # prices from genai-prices
    lw.run(task, model, tools, cost_budget_usd=0.05, prices=lw.pricing.Prices(3.0, 15.0, 0.3))
    lw.run(task, model, tools, prices=lambda usage: usage.total_tokens * 1e-6)

Prices are per million tokens. Prompt tokens the KV cache saved (sent minus evaluated) are
charged at the cache-read price. Without `prices`, the model's name is looked up in the
maintained price table of the `genai-prices` package (`pip install 'loopwright[prices]'`);
a model it does not know is a clear error at the start of the run, not a silent $0.

With `lw.models.Fallback`, each model is priced by its own name: a call another model
answered (`meta["answered_by"]`) costs what each model it went to spent at that model's
price (`by_model`, `split_usage`); `prices=` may then map model names to prices.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from loopwright.trace import Step, Usage

__all__ = ["Prices", "by_model", "charge", "price_function", "split_usage"]

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
    """The cost of one call's Usage: `prices` (a Prices, or any Usage -> dollars function,
    or a mapping of model names to those), else the policy's model looked up in
    genai-prices. A Fallback is priced as its first model (`by_model` prices the others).
    Raises ValueError when no price is known."""
    models = getattr(policy, "models", None)
    if isinstance(models, tuple) and models:  # lw.models.Fallback
        policy = models[0]
    if isinstance(prices, Mapping):
        name = _model_name(policy)
        if name not in prices:
            raise ValueError(f"prices has no entry for model {name!r}; it has {', '.join(map(repr, prices))}")
        prices = prices[name]
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


def by_model(policy: Any, prices: Any) -> dict[str, PriceFunction] | None:
    """Each model of a Fallback by name, with its price (checked now: a model with no known
    price is a ValueError at the start of the run); None for any other policy."""
    models = getattr(policy, "models", None)
    if not isinstance(models, tuple) or not models:
        return None
    return {str(_model_name(m)): price_function(m, prices) for m in models}


def split_usage(usage: Usage, meta: Mapping[str, Any]) -> list[tuple[str, Usage]] | None:
    """A Fallback's call, its usage by the model that spent it (the answering model's share
    is what the others' recorded usage leaves); None for a call no Fallback answered."""
    answered = meta.get("answered_by")
    if not isinstance(answered, str):
        return None
    parts: list[tuple[str, Usage]] = []
    rest = usage
    for entry in meta.get("fallback") or ():
        spent = entry.get("usage") if isinstance(entry, Mapping) else None
        if isinstance(spent, Mapping):
            part = Usage.from_dict(spent)
            parts.append((str(entry.get("model")), part))
            rest = Usage(rest.prompt_tokens - part.prompt_tokens, rest.evaluated_tokens - part.evaluated_tokens,
                         rest.completion_tokens - part.completion_tokens, estimated=rest.estimated)
    parts.append((answered, rest))
    return parts
