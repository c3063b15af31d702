"""cost_budget_usd: a run stops when its model calls have cost the budget; prices come from
the user or from the genai-prices table; each call's cost is on its step and its span."""

from __future__ import annotations

import pytest

import loopwright as lw
from conftest import act, final, make_registry
from loopwright.pricing import Prices


class Priced:
    """A Model named like a hosted one, reporting 1,000 tokens sent (400 of them from the
    cache) and 100 generated per call."""

    def __init__(self, name, replies):
        self.name = name
        self.replies = list(replies)

    def complete(self, request):
        return lw.Completion(self.replies.pop(0), lw.Usage(1000, 600, 100))


def test_prices_charge_cached_prompt_tokens_at_the_cache_read_price():
    usage = lw.Usage(1000, 600, 100)
    assert Prices(2.0, 10.0, 0.5)(usage) == pytest.approx((600 * 2.0 + 400 * 0.5 + 100 * 10.0) / 1e6)
    assert Prices(2.0, 10.0)(usage) == pytest.approx((1000 * 2.0 + 100 * 10.0) / 1e6)


def test_the_run_stops_with_cost_budget_once_its_calls_cost_the_budget():
    steps = [act("add", f'{{"x": {i}, "y": 1}}') for i in range(6)] + [final("done")]
    # each call: (600 * 2 + 400 * 0.5 + 100 * 10) / 1e6 = $0.0024; the third reaches $0.0072
    trace = lw.run("t", Priced("m", steps), make_registry(), max_steps=7,
                   cost_budget_usd=0.007, prices=Prices(2.0, 10.0, 0.5))  # fmt: skip
    assert trace.stopped_reason == "cost_budget" and trace.llm_calls == 3
    assert trace.meta["cost_usd"] == pytest.approx(0.0072)
    assert trace.tool_calls == 2  # the third call's action is not executed
    costs = [s.meta["cost_usd"] for s in trace.steps if "cost_usd" in s.meta]
    assert costs == [pytest.approx(0.0024)] * 3
    assert "cost_budget" in lw.STOP_REASONS


@pytest.mark.parametrize("mode", ["react", "rewoo", "plan_execute"])
def test_a_run_that_spends_exactly_its_cost_budget_makes_no_further_paid_call(mode):
    """The budget is reached at equality: three calls of $0.0024 against $0.0072 stop the run
    after the third call (no fourth call is made), the same as the token budget does."""
    assert Prices(2.0, 10.0, 0.5)(lw.Usage(3000, 1800, 300)) == 0.0072  # exact in floating point
    plan = '{"plan": [{"id": "E1", "tool": "add", "args": {"x": 1, "y": "oops"}}]}'  # fails: a replan
    if mode == "react":
        replies = [act("add", f'{{"x": {i}, "y": 1}}') for i in range(5)] + [final("done")]
        options = {"max_steps": 7}
    elif mode == "plan_execute":
        replies = [plan] * 5
        options = {"max_replans": 4}
    else:  # ReWOO makes two calls: a budget of exactly one call's cost stops it after the plan
        replies = ['{"plan": [{"id": "E1", "tool": "add", "args": {"x": 1, "y": 1}}]}', "Final Answer: 2"]
        options = {}
    budget = 0.0024 if mode == "rewoo" else 0.0072
    priced = Priced("m", replies)
    trace = lw.run("t", priced, make_registry(), mode=mode, cost_budget_usd=budget,
                   prices=Prices(2.0, 10.0, 0.5), **options)  # fmt: skip
    assert trace.stopped_reason == "cost_budget"
    assert trace.llm_calls == (1 if mode == "rewoo" else 3)
    assert trace.meta["cost_usd"] == budget


def test_under_budget_the_run_finishes_and_reports_its_cost():
    trace = lw.run("t", Priced("m", [act("add", '{"x": 1, "y": 1}'), final("2")]), make_registry(),
                   cost_budget_usd=1.0, prices=Prices(2.0, 10.0, 0.5))  # fmt: skip
    assert trace.stopped_reason == "final" and trace.meta["cost_usd"] == pytest.approx(0.0048)


def test_without_prices_the_model_is_priced_from_the_genai_prices_table():
    from genai_prices import Usage, calc_price

    trace = lw.run("t", Priced("gpt-4o", [final("x")]), make_registry(), cost_budget_usd=1.0)
    expected = calc_price(Usage(input_tokens=1000, output_tokens=100, cache_read_tokens=400), model_ref="gpt-4o")
    assert trace.meta["cost_usd"] == pytest.approx(float(expected.total_price)) and trace.meta["cost_usd"] > 0


def test_a_model_with_no_known_price_is_a_clear_error_not_a_free_run():
    with pytest.raises(ValueError, match="no price for model 'my-local-model'"):
        lw.run("t", Priced("my-local-model", [final("x")]), make_registry(), cost_budget_usd=1.0)
    with pytest.raises(ValueError, match="positive"):
        lw.run("t", Priced("m", [final("x")]), make_registry(), cost_budget_usd=0, prices=Prices(1, 1))


def test_each_model_span_carries_its_calls_cost():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    lw.run("t", Priced("m", [act("add", '{"x": 1, "y": 1}'), final("2")]), make_registry(),
           prices=Prices(2.0, 10.0, 0.5), tracer=provider.get_tracer("t"))  # fmt: skip
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert dict(spans["text_completion m"].attributes) == {  # whole: the cost sits beside the usage
        "gen_ai.operation.name": "text_completion", "gen_ai.provider.name": "loopwright",
        "gen_ai.request.model": "m", "gen_ai.usage.input_tokens": 1000, "gen_ai.usage.output_tokens": 100,
        "gen_ai.usage.cache_read.input_tokens": 400, "loopwright.usage.evaluated_tokens": 600,
        "loopwright.usage.estimated": False, "loopwright.purpose": "react",
        "loopwright.cost_usd": 0.0024, "loopwright.step.kind": "final", "loopwright.step.index": 2,
    }
    assert spans["invoke_agent"].attributes["loopwright.cost_usd"] == pytest.approx(0.0048)
