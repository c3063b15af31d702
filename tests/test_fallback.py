"""lw.models.Fallback: the next model answers the same request when one fails after its
retries or answers twice unparseably; the step says which model answered and why; the
grammar travels with the request; each model is priced by its own name."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import pytest

import loopwright as lw
from loopwright.models.grammar import grammar_for

FINAL = "Thought: done\nFinal Answer: 42"


@pytest.fixture
def dead_url() -> Iterator[str]:
    """A port bound and not listening for the whole test: connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}/v1"


class Named:
    """A scripted model with a name, recording the requests it was sent."""

    def __init__(self, name: str, outputs: list[Any]) -> None:
        self.name = name
        self.script = lw.ScriptedPolicy(outputs)
        self.requests: list[lw.ModelRequest] = []

    def complete(self, request: lw.ModelRequest) -> Any:
        self.requests.append(request)
        return self.script(request.prompt)


@lw.tool
def add(x: int, y: int) -> int:
    "Add two integers."
    return x + y


def test_a_dead_server_falls_back_and_the_step_says_who_answered_and_why(dead_url: str) -> None:
    primary = lw.models.OpenAICompatible(dead_url, "big", constrain="off", max_retries=0, timeout_s=2)
    secondary = Named("small", [FINAL])
    trace = lw.run("q", lw.models.Fallback(primary, secondary), [])
    assert trace.final_answer == "42"
    meta = trace.steps[-1].meta
    assert meta["answered_by"] == "small"
    [passed] = meta["fallback"]
    assert passed["model"] == "big" and passed["kind"] == "connection" and "APIConnectionError" in passed["reason"]


def test_the_primary_gets_its_retries_before_the_next_model_answers() -> None:
    primary = Named("big", [lw.TransientModelError("busy", "rate_limit")] * 2)
    secondary = Named("small", [FINAL])
    trace = lw.run("q", lw.models.Fallback(primary, secondary), [], retry=lw.Retry(attempts=2, backoff=0.0))
    meta = trace.steps[-1].meta
    assert len(primary.requests) == 2 and meta["answered_by"] == "small"
    assert [(a["model"], a["attempt"], a["kind"]) for a in meta["attempts"]] == [("big", 1, "rate_limit"),
                                                                                ("big", 2, "rate_limit")]


def test_a_failure_outside_on_is_not_passed_on() -> None:
    primary = Named("big", [ValueError("a bug")])
    secondary = Named("small", [FINAL])
    trace = lw.run("q", lw.models.Fallback(primary, secondary), [])
    assert trace.stopped_reason == "error" and secondary.requests == []
    assert trace.steps[-1].meta["fallback"][0]["kind"] == "error"


def test_when_every_model_fails_the_run_records_each_failure() -> None:
    primary = Named("big", [lw.TransientModelError("busy", "server")])
    secondary = Named("small", [lw.TransientModelError("too long", "context")])
    trace = lw.run("q", lw.models.Fallback(primary, secondary), [])
    assert trace.stopped_reason == "error"
    assert [(p["model"], p["kind"]) for p in trace.steps[-1].meta["fallback"]] == [("big", "server"),
                                                                                  ("small", "context")]


def test_an_answer_that_does_not_parse_twice_goes_to_the_next_model_and_its_tokens_count() -> None:
    garbage = lw.Completion("I am not sure what to do", lw.Usage(100, 100, 10))
    primary = Named("big", [garbage, garbage])
    secondary = Named("small", [lw.Completion(FINAL, lw.Usage(100, 100, 5))])
    trace = lw.run("q", lw.models.Fallback(primary, secondary), [])
    assert trace.final_answer == "42" and len(primary.requests) == 2
    assert trace.usage.total_tokens == 110 + 110 + 105  # the budgets see every answer
    [passed] = trace.steps[-1].meta["fallback"]
    assert passed["kind"] == "parse" and passed["usage"]["completion_tokens"] == 20


def test_an_answer_that_parses_the_second_time_stays_with_the_primary() -> None:
    primary = Named("big", ["no format here", FINAL])
    secondary = Named("small", [])
    trace = lw.run("q", lw.models.Fallback(primary, secondary), [])
    assert trace.final_answer == "42" and trace.steps[-1].meta["answered_by"] == "big"
    assert "fallback" not in trace.steps[-1].meta


def test_each_model_is_priced_by_its_own_name() -> None:
    garbage = lw.Completion("not a step", lw.Usage(1_000_000, 1_000_000, 0))
    primary = Named("big", [garbage, garbage])
    secondary = Named("small", [lw.Completion(FINAL, lw.Usage(1_000_000, 1_000_000, 0))])
    prices = {"big": lw.pricing.Prices(10.0, 0.0), "small": lw.pricing.Prices(1.0, 0.0)}
    trace = lw.run("q", lw.models.Fallback(primary, secondary), [], prices=prices)
    assert trace.steps[-1].meta["cost_usd"] == pytest.approx(2 * 10.0 + 1.0)
    assert trace.meta["cost_usd"] == pytest.approx(21.0)


def test_a_model_with_no_price_is_an_error_at_the_start() -> None:
    with pytest.raises(ValueError, match="small"):
        lw.run("q", lw.models.Fallback(Named("big", []), Named("small", [])), [],
               prices={"big": lw.pricing.Prices(1.0, 1.0)})


def test_the_next_model_gets_the_same_request_so_the_same_grammar(dead_url: str) -> None:
    primary = lw.models.OpenAICompatible(dead_url, "big", constrain="grammar", server="llama.cpp", max_retries=0,
                                         timeout_s=2)
    secondary = Named("small", [FINAL])
    lw.run("q", lw.models.Fallback(primary, secondary), [add])
    [request] = secondary.requests
    gbnf = grammar_for(request)
    assert gbnf is not None and "add" in gbnf and request.tools[0]["name"] == "add"


def test_the_async_driver_falls_back_too() -> None:
    primary = Named("big", [lw.TransientModelError("down", "server")])
    secondary = Named("small", [FINAL])
    trace = asyncio.run(lw.arun("q", lw.models.Fallback(primary, secondary), []))
    assert trace.final_answer == "42" and trace.steps[-1].meta["answered_by"] == "small"


def test_a_fallback_checks_its_failure_kinds() -> None:
    with pytest.raises(ValueError, match="parse"):
        lw.models.Fallback(Named("a", []), Named("b", []), on={"flaky"})


@pytest.mark.slow
def test_a_dead_server_falls_back_to_the_embedded_model_held_to_the_same_grammar(dead_url: str) -> None:
    primary = lw.models.OpenAICompatible(dead_url, "big", max_retries=0, timeout_s=2, server="llama.cpp")
    trace = lw.run("What is 2 + 3? Use the add tool.", lw.models.Fallback(primary, lw.models.LlamaCpp()), [add],
                   max_steps=2)
    step = trace.steps[0]
    assert step.meta["answered_by"] == lw.models.LlamaCpp().name
    assert step.meta["fallback"][0]["kind"] == "connection"
    assert step.kind in ("action", "final")  # the grammar holds the small model to a well-formed step
