"""Guardrails: input, output and tool checks in every mode, on both drivers; blocks end the
run "guardrail", fail closed, replace redacts, revise is bounded, verdicts are journaled."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import loopwright as lw
from conftest import FACT, act, final, make_registry
from loopwright.durable.sqlite import SQLiteStore
from loopwright.interfaces.viewer import render_html

PLAN = '[{"id": "E1", "tool": "search", "args": {"q": "france"}}]'
MODES = ["react", "rewoo", "plan_execute", "reflexion", "tot"]
ANSWERS = {"react": "Paris", "rewoo": "Paris", "plan_execute": FACT, "reflexion": "Paris", "tot": "Paris"}


def policy_for(mode: str, prompts: list[str] | None = None) -> Callable[[str], str]:
    """Each mode's script for "search france, then answer": a plain function policy that
    keeps the prompts it was sent."""
    seen = [] if prompts is None else prompts
    if mode == "tot":
        def tot(prompt: str) -> str:
            seen.append(prompt)
            if prompt.endswith("Evaluation:"):
                return "sure"
            return "1. Final Answer: Paris" if "Step 1:" in prompt else "1. search[france]"
        return tot
    script = {"react": [act("search", '{"q": "france"}'), final("Paris")],
              "reflexion": [act("search", '{"q": "france"}'), final("Paris")],
              "rewoo": [PLAN, "Final Answer: Paris"], "plan_execute": [PLAN]}[mode]
    scripted = lw.ScriptedPolicy(script)

    def policy(prompt: str) -> str:
        seen.append(prompt)
        return str(scripted(prompt))
    return policy


def run(mode: str, guardrails: list[lw.Guardrail], driver: str = "sync", calls: list[Any] | None = None,
        prompts: list[str] | None = None, task: str = "what is the capital of france?", **options: Any) -> lw.Trace:
    registry = make_registry(calls)
    if driver == "sync":
        return lw.run(task, policy_for(mode, prompts), registry, mode=mode, guardrails=guardrails, **options)
    return asyncio.run(lw.arun(task, policy_for(mode, prompts), registry, mode=mode, guardrails=guardrails,
                               **options))


def tripped(trace: lw.Trace) -> lw.Step:
    assert trace.stopped_reason == "guardrail" and trace.final_answer is None
    step = trace.steps[-1]
    assert step.kind == "guardrail"
    return step


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_runs_through_allowing_guardrails_unchanged(mode: str) -> None:
    plain = run(mode, [])
    trace = run(mode, [lw.input_guardrail(lambda t: None), lw.output_guardrail(lambda a: True),
                       lw.tool_guardrail(lambda n, a: lw.allow()), lw.tool_guardrail(lambda n, o: None, on="result",
                                                                                     name="r")])
    assert (trace.stopped_reason, trace.final_answer) == ("final", ANSWERS[mode]) == (plain.stopped_reason,
                                                                                      plain.final_answer)
    assert [s.kind for s in trace.steps] == [s.kind for s in plain.steps] and "guardrails" not in trace.meta


@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("mode", MODES)
def test_an_input_guardrail_blocks_before_the_first_model_call(mode: str, driver: str) -> None:
    prompts: list[str] = []
    trace = run(mode, [lw.input_guardrail(lambda task: lw.block("no geography"), name="topic")], driver,
                prompts=prompts)
    step = tripped(trace)
    assert prompts == [] and trace.llm_calls == 0
    assert step.meta == {"guardrail": "topic", "where": "input", "reason": "no geography"}
    assert "topic" in (step.error or "") and "no geography" in (step.error or "")


@pytest.mark.parametrize("mode", MODES)
def test_an_input_guardrail_replace_redacts_the_task_the_model_reads(mode: str) -> None:
    prompts: list[str] = []

    def redact(task: str) -> lw.Verdict:
        return lw.replace(task.replace("4111-1111", "[card]"), "card number")

    trace = run(mode, [lw.input_guardrail(redact)], prompts=prompts, task="france? my card is 4111-1111")
    assert trace.stopped_reason == "final" and prompts
    assert all("4111" not in p for p in prompts) and any("[card]" in p for p in prompts)
    assert trace.task == "france? my card is [card]"
    assert trace.meta["guardrails"][0]["action"] == "replace" and trace.meta["guardrails"][0]["where"] == "input"


@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("mode", MODES)
def test_a_tool_guardrail_blocks_the_call_before_it_runs(mode: str, driver: str) -> None:
    calls: list[Any] = []
    guard = lw.tool_guardrail(lambda name, args: lw.block("no lookups of france") if "france" in args["q"] else None,
                              tools=["search"], name="no-france")
    step = tripped(run(mode, [guard], driver, calls))
    assert calls == [] and step.tool == "search" and step.args == {"q": "france"}
    assert step.meta["guardrail"] == "no-france" and step.meta["where"].startswith("args of search#")


def test_a_tool_guardrail_on_other_tools_leaves_this_one_alone() -> None:
    calls: list[Any] = []
    trace = run("react", [lw.tool_guardrail(lambda n, a: lw.block("never"), tools=["add"])], calls=calls)
    assert trace.stopped_reason == "final" and calls == [("search", {"q": "france"})]


def test_a_tool_guardrail_blocks_before_the_approval_question() -> None:
    asked: list[str] = []
    ran: list[str] = []

    @lw.tool(side_effects="write", requires_approval=True)
    def send(to: str) -> str:
        """Send a message."""
        ran.append(to)
        return "sent"

    trace = lw.run("q", lw.ScriptedPolicy([act("send", '{"to": "eve"}'), final("ok")]), [send],
                   approver=lambda r: asked.append(r.tool) or True,
                   guardrails=[lw.tool_guardrail(lambda n, a: lw.block("eve is not a customer"))])
    tripped(trace)
    assert asked == [] and ran == []


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_tool_guardrail_replace_runs_the_call_with_the_redacted_arguments(driver: str) -> None:
    calls: list[Any] = []
    guard = lw.tool_guardrail(lambda n, a: lw.replace({"q": "France"}, "normalised"), name="norm")
    trace = run("react", [guard], driver, calls)
    assert trace.stopped_reason == "final" and calls == [("search", {"q": "France"})]
    assert trace.meta["guardrails"] == [{"guardrail": "norm", "kind": "tool", "where": "args of search#1",
                                         "action": "replace", "reason": "normalised", "value": {"q": "France"}}]


@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("mode", MODES)
def test_a_result_guardrail_redacts_what_the_model_reads(mode: str, driver: str) -> None:
    prompts: list[str] = []
    guard = lw.tool_guardrail(lambda n, text: lw.replace(text.replace("Paris", "[city]")), on="result", name="pii")
    trace = run(mode, [guard], driver, prompts=prompts)
    assert trace.stopped_reason == "final"
    action = next(s for s in trace.steps if s.tool == "search")
    assert action.observation == FACT.replace("Paris", "[city]")
    assert action.meta["guardrail"] == {"name": "pii", "action": "replace"}
    assert not any(FACT in p for p in prompts[1:])


@pytest.mark.parametrize("mode", MODES)
def test_a_result_guardrail_block_ends_the_run_before_the_model_reads_it(mode: str) -> None:
    prompts: list[str] = []
    calls: list[Any] = []
    guard = lw.tool_guardrail(lambda n, text: lw.block("leaks a city") if "Paris" in text else None, on="result")
    step = tripped(run(mode, [guard], calls=calls, prompts=prompts))
    assert calls == [("search", {"q": "france"})]  # it ran: its result is what was refused
    assert step.meta["where"].startswith("result of search#")
    assert not any(FACT in p for p in prompts)


def test_a_tool_guardrail_revise_gives_the_model_feedback_and_is_bounded() -> None:
    calls: list[Any] = []
    prompts: list[str] = []
    script = lw.ScriptedPolicy([act("search", '{"q": "france"}')] * 3)

    def policy(prompt: str) -> str:
        prompts.append(prompt)
        return str(script(prompt))

    guard = lw.tool_guardrail(lambda n, a: lw.revise("ask about a country's capital, not the country"),
                              max_revisions=2, name="scope")
    trace = lw.run("q", policy, make_registry(calls), guardrails=[guard], on_repeat="off")
    assert calls == []
    assert [s.kind for s in trace.steps] == ["guardrail", "guardrail", "guardrail"]
    assert "ask about a country's capital" in prompts[1] and "ask about a country's capital" in prompts[2]
    step = tripped(trace)
    assert "still refused after 2 revisions" in step.meta["reason"]
    assert [e["action"] for e in trace.meta["guardrails"]] == ["revise", "revise", "block"]


@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("mode", MODES)
def test_an_output_guardrail_blocks_the_final_answer(mode: str, driver: str) -> None:
    step = tripped(run(mode, [lw.output_guardrail(lambda a: lw.block("names a city"), name="no-cities")], driver))
    assert step.meta == {"guardrail": "no-cities", "where": "output", "reason": "names a city"}


@pytest.mark.parametrize("mode", MODES)
def test_an_output_guardrail_replace_redacts_the_answer(mode: str) -> None:
    trace = run(mode, [lw.output_guardrail(lambda a: lw.replace(a.replace("Paris", "P****")))])
    assert (trace.stopped_reason, trace.final_answer) == ("final", ANSWERS[mode].replace("Paris", "P****"))
    assert trace.meta["guardrails"][0]["where"] == "output"


@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("kind", ["input", "output", "tool"])
def test_a_guardrail_that_raises_fails_closed(kind: str, driver: str) -> None:
    def broken(*values: Any) -> None:
        raise RuntimeError("classifier down")

    make = {"input": lw.input_guardrail, "output": lw.output_guardrail, "tool": lw.tool_guardrail}[kind]
    step = tripped(run("react", [make(broken)], driver))
    assert "raised RuntimeError: classifier down" in step.meta["reason"] and "fails closed" in step.meta["reason"]


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_guardrail_that_outlives_its_timeout_fails_closed(driver: str) -> None:
    def slow(task: str) -> None:
        time.sleep(2)

    started = time.perf_counter()
    step = tripped(run("react", [lw.input_guardrail(slow, timeout_s=0.1)], driver))
    assert time.perf_counter() - started < 1.5
    assert "did not answer within timeout_s=0.1" in step.meta["reason"]


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_fail_open_guardrail_that_raises_lets_the_run_go_on_and_says_so(driver: str) -> None:
    def broken(*values: Any) -> None:
        raise RuntimeError("classifier down")

    trace = run("react", [lw.tool_guardrail(broken, fail_open=True, name="flaky")], driver)
    assert (trace.stopped_reason, trace.final_answer) == ("final", "Paris")
    [entry] = trace.meta["guardrails"]
    assert entry["action"] == "allow" and entry["fail_open"] is True and "classifier down" in entry["failed"]


def test_a_guardrail_returning_something_else_fails_closed() -> None:
    step = tripped(run("react", [lw.output_guardrail(lambda a: "fine")]))
    assert "returned 'fine'" in step.meta["reason"]


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_async_guardrails_run_on_both_drivers(driver: str) -> None:
    async def check(task: str) -> lw.Verdict:
        await asyncio.sleep(0)
        return lw.block("async says no")

    assert tripped(run("react", [lw.input_guardrail(check)], driver)).meta["reason"] == "async says no"


def test_guardrails_reject_what_is_not_one() -> None:
    with pytest.raises(TypeError, match="guardrails= takes"):
        lw.run("q", lw.ScriptedPolicy([final("x")]), make_registry(), guardrails=[lambda t: None])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="output guardrails share the name"):
        lw.run("q", lw.ScriptedPolicy([final("x")]), make_registry(),
               guardrails=[lw.output_guardrail(lambda t: None, name="a"), lw.output_guardrail(lambda t: None, name="a")])
    with pytest.raises(ValueError, match="input guardrails only"):
        lw.Guardrail(lambda t: None, "output", name="x", race=True)


# -- the raced input guardrail -----------------------------------------------------------


@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("verdict", ["block", "allow"])
def test_a_raced_input_guardrail_lets_no_tool_run_and_no_text_out_before_it_allows(verdict: str,
                                                                                   driver: str) -> None:
    """The model answers at once with a tool call while the guardrail is still deciding:
    the tool must not run, and no event with the model's text may leave, until it allows."""
    calls: list[Any] = []
    model_answered = threading.Event()
    order: list[str] = []

    def slow_check(task: str) -> lw.Verdict | None:
        assert model_answered.wait(5)  # the model's call ran beside this check
        time.sleep(0.2)
        order.append("verdict")
        return lw.block("off topic") if verdict == "block" else None

    scripted = lw.ScriptedPolicy([act("search", '{"q": "france"}'), final("Paris")])

    def policy(prompt: str) -> str:
        out = str(scripted(prompt))
        model_answered.set()
        return out

    registry = make_registry(calls)
    events: list[Any] = []

    def sink(event: Any) -> None:
        if event.kind in ("model_delta", "step", "tool_started"):
            order.append(event.kind)
        events.append(event)

    options: dict[str, Any] = {"guardrails": [lw.input_guardrail(slow_check, race=True)]}
    if driver == "sync":
        for event in lw.iter_events("q", policy, registry, **options):
            sink(event)
    else:
        async def watch() -> None:
            async for event in lw.aiter_events("q", policy, registry, **options):
                sink(event)
        asyncio.run(watch())
    trace = events[-1].trace
    assert order[0] == "verdict", order
    if verdict == "block":
        tripped(trace)
        assert calls == [] and [e.kind for e in events if e.kind == "model_delta"] == []
        assert trace.llm_calls == 1  # the raced call was made (and paid for); nothing it said left
    else:
        assert trace.stopped_reason == "final" and calls == [("search", {"q": "france"})]


def test_a_raced_input_guardrail_cannot_replace_the_task_the_model_read() -> None:
    step = tripped(run("react", [lw.input_guardrail(lambda t: lw.replace("x"), race=True)]))
    assert "race=False" in step.meta["reason"]


# -- model guardrails --------------------------------------------------------------------

CLASSIFIER = "Is this request about geography? Answer allow or block as JSON.\n{text}\n"


def test_a_model_guardrail_asks_its_policy_and_reads_the_verdict() -> None:
    sent: list[str] = []

    def classifier(prompt: str) -> str:
        sent.append(prompt)
        return '{"verdict": "block", "reason": "medical question"}'

    step = tripped(run("react", [lw.model_guardrail(classifier, CLASSIFIER, name="topic")]))
    assert step.meta["reason"] == "medical question"
    assert "<untrusted" in sent[0] and "capital of france" in sent[0]  # the task is fenced as data


@pytest.mark.parametrize(("reply", "action"), [
    ('{"verdict": "allow", "reason": ""}', "allow"), ("allow", "allow"), ("ALLOW.", "allow"),
    ('{"verdict": "block", "reason": "no"}', "block"), ("block: rude", "block"), ("", "block"),
    ("I think it is fine", "block"), ('{"verdict": 3}', "block"),
])
def test_a_classifier_reply_that_is_not_plainly_an_allow_blocks(reply: str, action: str) -> None:
    from loopwright.runtime.guardrails import model_verdict

    assert model_verdict(reply).action == action


def billed_classifier(usage: lw.Usage, verdict: str = "allow", asked: list[str] | None = None) -> Any:
    """A classifier that reports `usage` for each call, as a backend does."""
    def classifier(request: Any) -> lw.Completion:
        if asked is not None:
            asked.append(request.prompt)
        return lw.Completion(f'{{"verdict": "{verdict}", "reason": ""}}', usage=usage)

    return type("Classifier", (), {"complete": staticmethod(classifier)})()


GUARD_USAGE = lw.Usage(100, 60, 7)


def test_a_model_guardrails_tokens_are_the_runs_and_are_priced() -> None:
    classifier = billed_classifier(GUARD_USAGE)
    guards = [lw.model_guardrail(classifier, CLASSIFIER, name="topic"),
              lw.model_guardrail(classifier, CLASSIFIER, kind="tool", name="calls"),
              lw.model_guardrail(classifier, CLASSIFIER, kind="output", name="answer")]
    prices = lw.pricing.Prices(1.0, 2.0, 0.5)
    plain = run("react", [], prices=prices)
    trace = run("react", guards, prices=prices)
    assert trace.stopped_reason == "final"
    three = GUARD_USAGE + GUARD_USAGE + GUARD_USAGE
    assert trace.usage == plain.usage + three  # prompt, evaluated and completion tokens
    assert trace.meta["cost_usd"] == pytest.approx(plain.meta["cost_usd"] + prices(three))


def test_a_model_guardrail_is_priced_by_its_own_models_name(monkeypatch: pytest.MonkeyPatch) -> None:
    table = {"big": lw.pricing.Prices(10.0, 30.0), "small": lw.pricing.Prices(0.1, 0.2)}

    def price_function(policy: Any, prices: Any) -> Any:  # genai-prices, by the model's name
        if prices is not None:
            return prices
        name = getattr(policy, "model", None)
        if name not in table:
            raise ValueError(f"no price for {name!r}")
        return table[name]

    monkeypatch.setattr(lw.pricing, "price_function", price_function)
    script = policy_for("react")
    big = type("Big", (), {"model": "big", "complete": staticmethod(lambda request: script(request.prompt))})
    classifier = billed_classifier(GUARD_USAGE)
    classifier.model = "small"
    plain = lw.run("q", big(), make_registry(), cost_budget_usd=100)
    script = policy_for("react")
    trace = lw.run("q", big(), make_registry(), cost_budget_usd=100,
                   guardrails=[lw.model_guardrail(classifier, CLASSIFIER, name="topic")])
    assert trace.meta["cost_usd"] == pytest.approx(plain.meta["cost_usd"] + table["small"](GUARD_USAGE))
    unnamed = billed_classifier(GUARD_USAGE)  # no price of its own: the run's
    script = policy_for("react")
    trace = lw.run("q", big(), make_registry(), cost_budget_usd=100,
                   guardrails=[lw.model_guardrail(unnamed, CLASSIFIER, name="topic")])
    assert trace.meta["cost_usd"] == pytest.approx(plain.meta["cost_usd"] + table["big"](GUARD_USAGE))


@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("budget", ["token_budget", "cost_budget"])
def test_a_model_guardrail_that_spends_the_budget_stops_the_run_before_the_model_is_asked(budget: str,
                                                                                        driver: str) -> None:
    prompts: list[str] = []
    calls: list[Any] = []
    limit: dict[str, Any] = ({"token_budget": 50} if budget == "token_budget"
                             else {"cost_budget_usd": 1e-4, "prices": lw.pricing.Prices(1.0, 1.0)})
    trace = run("react", [lw.model_guardrail(billed_classifier(GUARD_USAGE), CLASSIFIER, name="topic")], driver,
                calls, prompts, **limit)
    assert trace.stopped_reason == budget and prompts == [] and calls == [] and trace.llm_calls == 0
    assert trace.usage == GUARD_USAGE
    step = trace.steps[-1]
    assert step.kind == "guardrail" and step.meta["guardrail"] == "topic" and "spent what was left" in step.meta["reason"]


def test_a_block_wins_over_a_spent_budget() -> None:
    trace = run("react", [lw.model_guardrail(billed_classifier(GUARD_USAGE, "block"), CLASSIFIER, name="topic")],
                token_budget=50)
    tripped(trace)
    assert trace.usage == GUARD_USAGE


# -- the journal ---------------------------------------------------------------------------


def test_verdicts_are_journaled_and_a_resumed_run_does_not_ask_again(tmp_path: Any) -> None:
    asked: list[str] = []

    def classifier(prompt: str) -> str:
        asked.append(prompt)
        return '{"verdict": "allow", "reason": ""}'

    @lw.tool(side_effects="write", requires_approval=True)
    def send(to: str) -> str:
        """Send a message."""
        return "sent"

    def pending(request: Any) -> Any:
        raise lw.ApprovalPending

    guards = [lw.model_guardrail(classifier, CLASSIFIER, name="topic"),
              lw.model_guardrail(classifier, CLASSIFIER, kind="tool", name="calls"),
              lw.model_guardrail(classifier, CLASSIFIER, kind="output", name="answer")]
    script = [act("send", '{"to": "bob"}'), final("sent")]
    store = SQLiteStore(tmp_path / "runs.db")
    first = lw.run("send bob a note", lw.ScriptedPolicy(script), [send], store=store, run_id="r1", approver=pending,
                   guardrails=guards)
    assert first.stopped_reason == "paused" and len(asked) == 2  # the task and the call's arguments
    trace = lw.resume("r1", lw.ScriptedPolicy(script[1:]), [send], store=store, approver=lambda r: True,
                      guardrails=guards)  # the first model call is replayed from the journal
    assert (trace.stopped_reason, trace.final_answer) == ("final", "sent")
    assert len(asked) == 3  # only the answer was new: the task's and the call's verdicts were replayed
    # the replayed verdicts' tokens are counted again: the usage is that of the run made in one go
    whole = lw.run("send bob a note", lw.ScriptedPolicy(script), [send], approver=lambda r: True, guardrails=guards)
    bare = lw.run("send bob a note", lw.ScriptedPolicy(script), [send], approver=lambda r: True)
    assert trace.usage == whole.usage and whole.usage.total_tokens > bare.usage.total_tokens
    with pytest.raises(TypeError, match="pass guardrails= again"):
        lw.resume("r1", lw.ScriptedPolicy(script), [send], store=store, approver=lambda r: True)
    store.close()


def test_a_blocked_verdict_is_journaled_with_its_step(tmp_path: Any) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    trace = run("react", [lw.output_guardrail(lambda a: lw.block("no"), name="out")], store=store, run_id="b1")
    tripped(trace)
    loaded = store.trace("b1")
    assert loaded.stopped_reason == "guardrail" and loaded.steps[-1].kind == "guardrail"
    assert loaded.meta["guardrails"][0]["guardrail"] == "out"
    rows = store._all("SELECT key, guardrail, verdict FROM guardrail_verdicts WHERE run_id = ?", ("b1",))
    assert [(r[0], r[1]) for r in rows] == [("out @ output", "out")] and '"block"' in rows[0][2]
    store.close()


def test_a_fork_replays_the_sources_verdicts_within_the_steps_it_keeps(tmp_path: Any) -> None:
    asked: list[str] = []

    def classifier(prompt: str) -> str:
        asked.append(prompt)
        return '{"verdict": "allow", "reason": ""}'

    guards = [lw.model_guardrail(classifier, CLASSIFIER, name="topic"),
              lw.model_guardrail(classifier, CLASSIFIER, kind="tool", name="calls")]
    store = SQLiteStore(tmp_path / "runs.db")
    script = [act("search", '{"q": "france"}'), final("Paris")]
    lw.run("q", lw.ScriptedPolicy(script), make_registry(), store=store, run_id="src", guardrails=guards)
    assert len(asked) == 2
    forked = lw.fork("src", 1, lw.ScriptedPolicy([final("Lyon")]), make_registry(), store=store, guardrails=guards)
    assert (forked.stopped_reason, forked.final_answer) == ("final", "Lyon")
    assert len(asked) == 2  # the task's and the first call's verdicts came from the source run
    store.close()


# -- where a verdict can be read back: events, OpenTelemetry, the viewer -----------------


def test_a_watched_run_sends_the_guardrail_step_and_the_stop_reason() -> None:
    events = list(lw.iter_events("q", policy_for("react"), make_registry(),
                                 guardrails=[lw.tool_guardrail(lambda n, a: lw.block("no"), name="t")]))
    steps = [e.step for e in events if e.kind == "step"]
    assert steps[-1].kind == "guardrail" and steps[-1].meta["guardrail"] == "t"
    assert [e.kind for e in events if e.kind == "tool_started"] == []
    assert events[-1].kind == "run_finished" and events[-1].trace.stopped_reason == "guardrail"


def test_a_watched_output_block_sends_no_final_answer() -> None:
    events = list(lw.iter_events("q", policy_for("react"), make_registry(),
                                 guardrails=[lw.output_guardrail(lambda a: lw.block("no"), name="o")]))
    assert events[-1].trace.final_answer is None and events[-1].trace.stopped_reason == "guardrail"


def test_opentelemetry_names_the_guardrail_and_its_reason() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    run("react", [lw.output_guardrail(lambda a: lw.block("names a city"), name="no-cities")],
        tracer=provider.get_tracer("t"))
    spans = {s.name: s for s in exporter.get_finished_spans()}
    guard = spans["guardrail no-cities"]
    assert guard.attributes["loopwright.guardrail.reason"] == "names a city"
    assert guard.attributes["loopwright.guardrail.where"] == "output"
    agent = spans["invoke_agent"]
    assert agent.attributes["loopwright.stop_reason"] == "guardrail"
    assert agent.attributes["loopwright.guardrail.name"] == "no-cities"


def test_the_viewer_shows_the_guardrail_step_and_the_verdicts() -> None:
    trace = run("react", [lw.tool_guardrail(lambda n, o: lw.replace("[x]"), on="result", name="pii"),
                          lw.output_guardrail(lambda a: lw.block("names a city"), name="no-cities")])
    page = render_html(trace)
    assert 'data-step-kind="guardrail"' in page and 'id="guardrails"' in page
    assert 'data-guardrail="pii"' in page and "names a city" in page and 'data-stop-reason="guardrail"' in page
    assert lw.Trace.from_dict(trace.to_dict()).meta["guardrails"] == trace.meta["guardrails"]


@pytest.mark.slow
def test_a_model_guardrail_on_the_embedded_model_gives_a_journaled_verdict(tmp_path: Any) -> None:
    model = lw.models.LlamaCpp(n_ctx=512)
    guard = lw.model_guardrail(model, "Reply allow if this request is about geography, else block.\n{text}\n",
                               name="topic", max_tokens=32)
    store = SQLiteStore(tmp_path / "runs.db")
    trace = run("react", [guard], store=store, run_id="m1")
    [(key, verdict)] = [tuple(r) for r in store._all("SELECT key, verdict FROM guardrail_verdicts")]
    assert key == "topic @ input" and ('"allow"' in verdict or '"block"' in verdict)
    assert trace.stopped_reason in ("final", "guardrail")
    assert (trace.stopped_reason == "guardrail") == ('"block"' in verdict)
    store.close()


# -- a watched run's answer: streamed through the output guardrails ------------------------

ANSWER = "The capital is Paris. It is big! The secret code is 1234. Bye"


class Streaming:
    """A scripted policy that streams each reply in pieces of 4 characters (a marker such
    as "Final Answer:" arrives cut across deltas)."""

    def __init__(self, replies: list[str]) -> None:
        self.script = lw.ScriptedPolicy(replies)

    def complete(self, request: Any) -> str:
        return str(self.script(request.prompt))

    def stream(self, request: Any) -> Any:
        text = self.complete(request)
        for at in range(0, len(text), 4):
            yield text[at:at + 4]


def watch(guardrails: list[lw.Guardrail], driver: str, answer: str = ANSWER) -> list[Any]:
    policy = Streaming([act("search", '{"q": "france"}'), final(answer)])
    if driver == "sync":
        return list(lw.iter_events("q", policy, make_registry(), guardrails=guardrails))

    async def collect() -> list[Any]:
        return [e async for e in lw.aiter_events("q", policy, make_registry(), guardrails=guardrails)]
    return asyncio.run(collect())


def sent(events: list[Any]) -> str:
    """Everything the events carry to a watcher but the run's own trace (which keeps all)."""
    import json

    out = [json.dumps(e.to_dict()) for e in events if e.kind != "run_finished"]
    return "\n".join(out) + str(events[-1].trace.final_answer)


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_blocked_answer_never_appears_in_any_event(driver: str) -> None:
    guard = lw.output_guardrail(lambda text: lw.block("no codes") if "secret" in text else None, name="leak")
    events = watch([guard], driver)
    trace = events[-1].trace
    step = tripped(trace)
    assert "secret" not in sent(events) and "1234" not in sent(events) and "Bye" not in sent(events)
    deltas = "".join(e.text for e in events if e.kind == "model_delta")
    assert deltas.endswith("Final Answer: The capital is Paris. It is big!")  # the sentences that passed
    assert [e.step.kind for e in events if e.kind == "step"] == ["action", "guardrail"]  # no final step out
    assert step.meta["where"] == "output chunk 3 of step 2" and "secret code" in step.raw  # the trace keeps it


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_whole_answer_blocked_after_its_sentences_went_out_withholds_the_answer(driver: str) -> None:
    guard = lw.output_guardrail(lambda text: lw.block("too long") if len(text) > 40 else None, name="short")
    events = watch([guard], driver)
    tripped(events[-1].trace)
    deltas = "".join(e.text for e in events if e.kind == "model_delta")
    assert deltas.endswith(ANSWER)  # each sentence passed on its own, so each went out
    assert [e.step.kind for e in events if e.kind == "step"] == ["action", "guardrail"]


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_an_allowed_answer_streams_and_its_step_follows_the_verdict(driver: str) -> None:
    order: list[str] = []

    def check(text: str) -> None:
        order.append(f"check {text.strip()}")

    events = watch([lw.output_guardrail(check)], driver)
    trace = events[-1].trace
    assert (trace.stopped_reason, trace.final_answer) == ("final", ANSWER)
    second = [e for e in events if getattr(e, "step", None) == 2 or getattr(getattr(e, "step", None), "index", 0) == 2]
    deltas = [e.text for e in second if e.kind == "model_delta"]
    assert "".join(deltas) == final(ANSWER) and len(deltas) > 4  # streamed, sentence by sentence
    assert [e.kind for e in second][-1] == "step" and events[-1].kind == "run_finished"
    assert order[-1] == f"check {ANSWER}"  # the whole answer, judged before its step went out


def test_sentence_chunks_reach_the_output_guardrail_in_order_while_the_model_streams() -> None:
    seen: list[str] = []
    policy = Streaming([act("search", '{"q": "france"}'), final(ANSWER)])
    stream = policy.stream

    def streamed(request: Any) -> Any:
        for piece in stream(request):
            seen.append(f"model: {piece}")
            yield piece

    policy.stream = streamed  # type: ignore[method-assign]
    list(lw.iter_events("q", policy, make_registry(), guardrails=[lw.output_guardrail(lambda t: seen.append(t))]))
    checks = [s for s in seen if not s.startswith("model: ")]
    assert checks == [" The capital is Paris.", " It is big!", " The secret code is 1234.", " Bye", ANSWER]
    # each sentence was judged as soon as it was whole, while the model went on
    last_piece = max(i for i, s in enumerate(seen) if s.startswith("model: "))
    assert seen.index(" The capital is Paris.") < seen.index(" It is big!") < last_piece


def test_a_streamed_replace_sends_the_redacted_sentence() -> None:
    guard = lw.output_guardrail(lambda text: lw.replace(text.replace("1234", "****")) if "1234" in text else None)
    events = watch([guard], "sync")
    assert "1234" not in sent(events) and "The secret code is ****." in sent(events)
    assert events[-1].trace.final_answer == ANSWER.replace("1234", "****")


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_iter_run_yields_the_final_step_only_after_the_output_verdict(driver: str) -> None:
    order: list[str] = []

    def check(answer: str) -> lw.Verdict | None:
        order.append("verdict")
        return lw.block("no") if answer == "blocked" else None

    for answer in ("Paris", "blocked"):
        order.clear()
        options: dict[str, Any] = {"guardrails": [lw.output_guardrail(check)]}
        policy = lw.ScriptedPolicy([act("search", '{"q": "france"}'), final(answer)])
        if driver == "sync":
            for step in lw.iter_run("q", policy, make_registry(), **options):
                order.append(step.kind)
        else:
            async def drive(policy: Any, options: dict[str, Any]) -> None:
                async for step in lw.aiter_run("q", policy, make_registry(), **options):
                    order.append(step.kind)
            asyncio.run(drive(policy, options))
        assert order == (["action", "verdict", "final"] if answer == "Paris" else ["action", "verdict"])
