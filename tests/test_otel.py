"""OpenTelemetry spans of runs, read back from the SDK's in-memory exporter: names,
parents and the GenAI semantic-convention attributes, exactly."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import loopwright as lw
from conftest import act, final, make_registry
from loopwright import otel
from loopwright.pricing import Prices


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    otel.uninstrument()


def _ordered(exporter):
    """Finished spans by start time (a model span is exported when its step is recorded,
    after the tool span of that step)."""
    return sorted(exporter.get_finished_spans(), key=lambda s: s.start_time)


def _by_name(exporter):
    return {s.name: s for s in exporter.get_finished_spans()}


class Counted:
    """A Model that reports real-looking usage: 40 sent, 10 of them evaluated, 5 made."""

    name = "counted-model"

    def __init__(self, replies):
        self.replies = list(replies)

    def complete(self, request):
        return lw.Completion(self.replies.pop(0), lw.Usage(40, 10, 5), meta={"finish_reason": "stop"})


def test_off_by_default_a_run_has_no_span_recorder():
    from loopwright.runtime import iter_react

    run = iter_react("t", lw.ScriptedPolicy([final("1")]), make_registry())
    assert not any(isinstance(o, otel.RunSpans) for o in run.context.observers)
    run.run()


def test_a_react_run_is_one_invoke_agent_span_with_model_and_tool_spans_under_it(spans):
    provider, exporter = spans
    otel.instrument(provider)
    policy = Counted([act("add", '{"x": 2, "y": 3}'), final("5")])
    trace = lw.run("2+3?", policy, make_registry())
    assert trace.stopped_reason == "final"
    names = [s.name for s in _ordered(exporter)]
    assert names == [
        "invoke_agent", "text_completion counted-model", "execute_tool add", "text_completion counted-model",
    ]
    run, first, tool, second = _ordered(exporter)
    assert run.parent is None
    for child in (first, tool, second):
        assert child.parent.span_id == run.context.span_id
        assert child.context.trace_id == run.context.trace_id
    assert dict(first.attributes) == {
        "gen_ai.operation.name": "text_completion",
        "gen_ai.provider.name": "loopwright",
        "gen_ai.request.model": "counted-model",
        "gen_ai.usage.input_tokens": 40,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.usage.cache_read.input_tokens": 30,
        "gen_ai.response.finish_reasons": ("stop",),
        "loopwright.usage.evaluated_tokens": 10,
        "loopwright.usage.estimated": False,
        "loopwright.purpose": "react",
        "loopwright.step.kind": "action",
        "loopwright.step.index": 1,
    }
    assert second.attributes["loopwright.step.kind"] == "final"
    assert dict(tool.attributes) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "gen_ai.tool.call.id": "1",
        "gen_ai.tool.type": "function",
        "loopwright.step.kind": "action",
    }
    for span in (first, tool, second):  # no content unless asked for
        assert not any(k.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.tool.call.a", "gen_ai.tool.call.r"))
                       for k in span.attributes)
    assert first.start_time <= first.end_time <= tool.start_time <= tool.end_time <= second.start_time


class Hosted(Counted):
    """Counted, from a backend that names its provider."""

    provider_name = "acme"


def test_the_run_span_names_its_provider_and_has_exactly_the_conventions_attributes(spans, tmp_path):
    """The whole attribute set, not key by key: a renamed or dropped key fails here."""
    provider, exporter = spans
    otel.instrument(provider)
    store = lw.SQLiteStore(tmp_path / "runs.db")
    try:
        lw.run("2+3?", Hosted([act("add", '{"x": 2, "y": 3}'), final("5")]), make_registry(), store=store,
               run_id="run-9", prices=Prices(1.0, 2.0))
    finally:
        store.close()
    assert dict(_by_name(exporter)["invoke_agent"].attributes) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "acme",
        "gen_ai.request.model": "counted-model",
        "loopwright.mode": "react",
        "loopwright.run_id": "run-9",
        "gen_ai.usage.input_tokens": 80,
        "gen_ai.usage.output_tokens": 10,
        "gen_ai.usage.cache_read.input_tokens": 60,
        "loopwright.usage.evaluated_tokens": 20,
        "loopwright.stop_reason": "final",
        "loopwright.llm_calls": 2,
        "loopwright.tool_calls": 1,
        "loopwright.cost_usd": 1e-4,  # (20 * $1 + 60 * $1 + 10 * $2) per million tokens
    }


def test_plan_replan_solve_failed_and_denied_spans_have_exactly_their_attributes(spans):
    provider, exporter = spans
    otel.instrument(provider)
    model = {"gen_ai.operation.name": "text_completion", "gen_ai.provider.name": "acme",
             "gen_ai.request.model": "counted-model"}
    usage = {"gen_ai.usage.input_tokens": 40, "gen_ai.usage.output_tokens": 5,
             "gen_ai.usage.cache_read.input_tokens": 30, "loopwright.usage.evaluated_tokens": 10,
             "loopwright.usage.estimated": False, "gen_ai.response.finish_reasons": ("stop",)}
    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.type": "function"}

    plan = json.dumps({"plan": [{"id": "E1", "tool": "add", "args": {"x": 2, "y": 3}}]})
    lw.run("2+3?", Hosted([plan, "5"]), make_registry(), mode="rewoo")
    got = [(s.name, dict(s.attributes)) for s in _ordered(exporter)[1:]]
    assert got == [
        ("text_completion counted-model", {**model, **usage, "loopwright.purpose": "plan",
                                           "loopwright.step.kind": "plan", "loopwright.step.index": 1}),
        ("plan", {"loopwright.plan.kind": "plan", "loopwright.step.kind": "plan", "loopwright.step.index": 1}),
        ("execute_tool add", {**tool, "gen_ai.tool.name": "add", "gen_ai.tool.call.id": "E1",
                              "loopwright.step.kind": "action"}),
        ("text_completion counted-model", {**model, **usage, "loopwright.purpose": "solve",
                                           "loopwright.step.kind": "solve", "loopwright.step.index": 3}),
    ]

    @lw.tool(side_effects="destructive")
    def wipe(path: str) -> str:
        """Delete a path."""
        return "gone"

    registry = make_registry()
    registry.register(wipe)
    exporter.clear()
    lw.run("t", Hosted([act("divide", '{"x": 1, "y": 0}'), act("wipe", '{"path": "/"}'), final("no")]), registry)
    tools = [dict(s.attributes) for s in _ordered(exporter) if s.name.startswith("execute_tool")]
    assert tools == [
        {**tool, "gen_ai.tool.name": "divide", "gen_ai.tool.call.id": "1", "loopwright.step.kind": "action",
         "error.type": "exception"},
        {**tool, "gen_ai.tool.name": "wipe", "gen_ai.tool.call.id": "2", "loopwright.step.kind": "denied",
         "error.type": "denied"},
    ]

    exporter.clear()  # plan-execute: a plan whose tool is unknown, then a replan
    unknown = json.dumps({"plan": [{"id": "E1", "tool": "nope", "args": {}}]})
    lw.run("2+3?", Hosted([unknown, plan]), make_registry(), mode="plan_execute")
    by_name: dict[str, list[dict]] = {}
    for span in _ordered(exporter):
        by_name.setdefault(span.name, []).append(dict(span.attributes))
    assert by_name["plan"] == [
        {"loopwright.plan.kind": "plan", "loopwright.step.kind": "plan", "loopwright.step.index": 1},
        {"loopwright.plan.kind": "replan", "loopwright.step.kind": "replan", "loopwright.step.index": 3},
    ]
    assert by_name["text_completion counted-model"] == [
        {**model, **usage, "loopwright.purpose": "plan", "loopwright.step.kind": "plan", "loopwright.step.index": 1},
        {**model, **usage, "loopwright.purpose": "replan", "loopwright.step.kind": "replan",
         "loopwright.step.index": 3},
    ]
    assert by_name["execute_tool nope"] == [{**tool, "gen_ai.tool.name": "nope", "gen_ai.tool.call.id": "1:E1",
                                             "loopwright.step.kind": "action", "error.type": "unknown_tool"}]
    assert by_name["execute_tool add"] == [{**tool, "gen_ai.tool.name": "add", "gen_ai.tool.call.id": "2:E1",
                                            "loopwright.step.kind": "action"}]

    class Down(Hosted):
        def complete(self, request):
            raise RuntimeError("backend down")

    exporter.clear()
    lw.run("t", Down([]), make_registry())
    run, failed = _ordered(exporter)
    assert dict(failed.attributes) == {**model, "loopwright.purpose": "react", "error.type": "policy_error"}
    assert dict(run.attributes) == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": "acme",
        "gen_ai.request.model": "counted-model", "loopwright.mode": "react",
        "gen_ai.usage.input_tokens": 0, "gen_ai.usage.output_tokens": 0,
        "gen_ai.usage.cache_read.input_tokens": 0, "loopwright.usage.evaluated_tokens": 0,
        "loopwright.stop_reason": "error", "loopwright.llm_calls": 1, "loopwright.tool_calls": 0,
    }


def _content(span) -> dict:
    return {k: v for k, v in span.attributes.items()
            if k.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.tool.call.a", "gen_ai.tool.call.r"))}


def test_content_is_recorded_only_with_capture_content(spans):
    provider, exporter = spans
    otel.instrument(provider, capture_content=True)
    replies = [act("add", '{"x": 2, "y": 3}'), final("5")]
    trace = lw.run("2+3?", Counted(list(replies)), make_registry())
    run, first, tool, second = _ordered(exporter)

    def said(role: str, text: str) -> str:
        return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}], ensure_ascii=False)

    assert _content(run) == {"gen_ai.input.messages": said("user", "2+3?"),
                             "gen_ai.output.messages": said("assistant", "5")}
    for span, step, reply in ((first, trace.steps[0], replies[0]), (second, trace.steps[1], replies[1])):
        assert _content(span) == {"gen_ai.input.messages": said("user", trace.prompt_for(step)),
                                  "gen_ai.output.messages": said("assistant", reply)}
    assert _content(tool) == {"gen_ai.tool.call.arguments": '{"x": 2, "y": 3}', "gen_ai.tool.call.result": "5"}


def test_a_per_run_tracer_traces_that_run_only(spans):
    provider, exporter = spans
    lw.run("t", lw.ScriptedPolicy([final("1")]), make_registry())
    assert exporter.get_finished_spans() == ()
    lw.run("t", lw.ScriptedPolicy([final("1")]), make_registry(), tracer=provider.get_tracer("mine"))
    assert [s.name for s in _ordered(exporter)] == ["invoke_agent", "text_completion scripted"]


def test_the_run_span_is_a_child_of_the_callers_current_span(spans):
    provider, exporter = spans
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("request") as outer:
        lw.run("t", lw.ScriptedPolicy([final("1")]), make_registry(), tracer=tracer)
    run = _by_name(exporter)["invoke_agent"]
    assert run.parent.span_id == outer.get_span_context().span_id


def test_a_failed_tool_and_a_denied_tool_are_error_spans(spans):
    provider, exporter = spans
    otel.instrument(provider)

    @lw.tool(side_effects="destructive")
    def wipe(path: str) -> str:
        """Delete a path."""
        return "gone"

    registry = make_registry()
    registry.register(wipe)
    policy = lw.ScriptedPolicy([act("divide", '{"x": 1, "y": 0}'), act("wipe", '{"path": "/"}'), final("no")])
    lw.run("t", policy, registry)
    tools = [s for s in _ordered(exporter) if s.name.startswith("execute_tool")]
    assert [s.name for s in tools] == ["execute_tool divide", "execute_tool wipe"]
    assert tools[0].status.status_code == StatusCode.ERROR and tools[0].attributes["error.type"] == "exception"
    assert tools[1].attributes["loopwright.step.kind"] == "denied" and tools[1].attributes["error.type"] == "denied"


def test_a_policy_that_raises_gives_an_error_model_span_and_an_error_run(spans):
    provider, exporter = spans
    otel.instrument(provider)

    def broken(prompt: str) -> str:
        raise RuntimeError("backend down")

    trace = lw.run("t", broken, make_registry())
    assert trace.stopped_reason == "error"
    run, model = _ordered(exporter)
    assert model.status.status_code == StatusCode.ERROR and model.attributes["error.type"] == "policy_error"
    assert run.status.status_code == StatusCode.ERROR and run.attributes["loopwright.stop_reason"] == "error"


def test_rewoo_has_a_plan_span_holding_its_model_call_and_tools_beside_it(spans):
    provider, exporter = spans
    otel.instrument(provider)
    plan = json.dumps({"plan": [{"id": "E1", "tool": "add", "args": {"x": 2, "y": 3}}]})
    trace = lw.run("2+3?", Counted([plan, "5"]), make_registry(), mode="rewoo")
    assert trace.stopped_reason == "final", trace
    got = exporter.get_finished_spans()
    by = {s.name: s for s in got}
    run, plan_span = by["invoke_agent"], by["plan"]
    plan_call = next(s for s in got if s.name.startswith("text_completion") and s.parent.span_id == plan_span.context.span_id)
    assert plan_span.parent.span_id == run.context.span_id
    assert plan_span.attributes["loopwright.plan.kind"] == "plan" and plan_span.attributes["loopwright.step.kind"] == "plan"
    assert plan_call.attributes["loopwright.purpose"] == "plan"
    assert by["execute_tool add"].parent.span_id == run.context.span_id
    assert by["execute_tool add"].attributes["gen_ai.tool.call.id"] == "E1"
    solve = [s for s in got if s.name.startswith("text_completion") and s.attributes["loopwright.purpose"] == "solve"]
    assert len(solve) == 1 and solve[0].parent.span_id == run.context.span_id
    assert plan_span.start_time <= plan_call.start_time <= plan_call.end_time <= plan_span.end_time


def test_the_journal_run_id_is_on_the_run_span(spans, tmp_path):
    provider, exporter = spans
    otel.instrument(provider)
    store = lw.SQLiteStore(tmp_path / "runs.db")
    try:
        trace = lw.run("t", lw.ScriptedPolicy([final("1")]), make_registry(), store=store, run_id="run-7")
    finally:
        store.close()
    assert trace.run_id == "run-7"
    assert _by_name(exporter)["invoke_agent"].attributes["loopwright.run_id"] == "run-7"


def test_span_cost_per_call_does_not_grow_with_the_history(spans):
    """Each model span carries its own call's numbers only; no attribute grows with the run."""
    provider, exporter = spans
    otel.instrument(provider)
    replies = [act("add", f'{{"x": {i}, "y": 1}}') for i in range(12)] + [final("done")]
    lw.run("t", lw.ScriptedPolicy(replies), make_registry(), max_steps=13, on_repeat="off")
    models = [s for s in exporter.get_finished_spans() if s.name.startswith("text_completion")]
    sizes = {sum(len(str(v)) for v in s.attributes.values()) for s in models[1:-1]}
    assert len(models) == 13 and max(sizes) - min(sizes) <= 8  # token counts' digits only


def test_a_repaired_call_that_is_not_run_is_an_error_span_of_no_duration(spans):
    provider, exporter = spans
    otel.instrument(provider, capture_content=True)

    @lw.tool(side_effects="destructive")
    def wipe(path: str) -> str:
        """Delete a path."""
        return "gone"

    cut = 'Thought: wipe\nAction: wipe\nAction Input: {"path": "/tmp"'
    trace = lw.run("t", lw.ScriptedPolicy([cut, final("no")]), lw.ToolRegistry([wipe]), approver=lambda r: True)
    [span] = [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]
    assert span.name == "execute_tool wipe" and span.start_time == span.end_time
    assert span.status.status_code == StatusCode.ERROR and span.status.description == trace.steps[0].error
    attributes = dict(span.attributes)
    assert {k: attributes[k] for k in ("gen_ai.tool.call.id", "loopwright.step.kind", "error.type")} == {
        "gen_ai.tool.call.id": "1", "loopwright.step.kind": "action", "error.type": "invalid_args"}
    assert json.loads(attributes["gen_ai.tool.call.arguments"]) == {"path": "/tmp"}
    assert attributes["gen_ai.tool.call.result"] == trace.steps[0].observation


def test_a_read_output_call_is_an_execute_tool_span_like_any_tool(spans):
    provider, exporter = spans
    otel.instrument(provider)

    @lw.tool
    def dump() -> str:
        """Dump the table."""
        return "y" * 500

    script = [act("dump", "{}"), act("read_output", '{"handle": "out-1"}'), final("x")]
    lw.run("t", lw.ScriptedPolicy(script), lw.ToolRegistry([dump], max_observation_chars=100))
    tools = [s for s in _ordered(exporter) if s.name.startswith("execute_tool")]
    assert [s.name for s in tools] == ["execute_tool dump", "execute_tool read_output"]
    attributes = dict(tools[1].attributes)
    assert (attributes["gen_ai.tool.call.id"], attributes["loopwright.step.kind"]) == ("2", "action")
    assert "error.type" not in attributes


def test_a_denied_call_s_span_keeps_the_arguments_it_was_denied_with(spans):
    provider, exporter = spans
    otel.instrument(provider, capture_content=True)

    @lw.tool(side_effects="destructive")
    def wipe(path: str) -> str:
        """Delete a path."""
        return "gone"

    trace = lw.run("t", lw.ScriptedPolicy([act("wipe", '{"path": "/"}'), final("no")]), lw.ToolRegistry([wipe]),
                   approver=lambda r: False)
    [span] = [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]
    attributes = dict(span.attributes)
    assert span.name == "execute_tool wipe" and attributes["loopwright.step.kind"] == "denied"
    assert attributes["gen_ai.tool.call.id"] == "1" and span.start_time == span.end_time  # it never ran
    assert json.loads(attributes["gen_ai.tool.call.arguments"]) == {"path": "/"}
    assert attributes["gen_ai.tool.call.result"] == trace.steps[0].observation
