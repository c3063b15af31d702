"""Agents, and agents as tools: a child run is nested in its parent's trace, budgets,
journal, approvals, cancellation and spans (loopwright/runtime/agents.py)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import loopwright as lw
from conftest import act, final
from loopwright.safety import ApprovalRequest, Decision

HELPERS = Path(__file__).parent / "helpers"


@lw.tool
def add(x: int, y: int) -> int:
    """Add two integers."""
    return x + y


def calculator(script: list[str], **options) -> lw.Agent:
    return lw.Agent("calculator", lw.ScriptedPolicy(script), lw.ToolRegistry([add]),
                    instructions="You are a calculator: use add, then answer with the number.", **options)


CALC = [act("add", '{"x": 2, "y": 3}'), final("5")]
DELEGATE = [act("calculator", '{"task": "2 + 3"}'), final("2 + 3 is 5")]


class Counted:
    """A model that reports fixed usage per call (40 sent, 5 made) and loops on `script`."""

    name = "counted"

    def __init__(self, script: list[str], loop: bool = False) -> None:
        self.script, self.loop, self.calls = list(script), loop, 0

    def complete(self, request: lw.ModelRequest) -> lw.Completion:
        self.calls += 1
        text = self.script[0] if self.loop else self.script.pop(0)
        return lw.Completion(text, lw.Usage(40, 40, 5))


def test_child_trace_is_kept_in_parent_children_and_named_by_the_step():
    trace = lw.run("what is 2 + 3?", lw.ScriptedPolicy(DELEGATE), lw.ToolRegistry([calculator(CALC).as_tool()]))
    assert trace.stopped_reason == "final" and trace.steps[0].observation == "5"
    [(child_id, child)] = trace.children.items()
    assert trace.steps[0].meta["child_run_id"] == child_id
    assert child_id == f"{child.meta['parent_run_id']}:1"
    assert child.final_answer == "5" and child.meta["agent"] == "calculator"
    assert [s.tool for s in child.steps] == ["add", None]
    assert trace.llm_calls == 2  # the parent's own calls: ReAct's llm_calls == steps holds
    own = sum((s.usage for s in trace.steps), lw.Usage())
    assert trace.usage == own + child.usage  # the children's usage is in the parent's


def test_nested_trace_round_trips_and_an_old_dict_without_children_loads():
    trace = lw.run("2 + 3?", lw.ScriptedPolicy(DELEGATE), lw.ToolRegistry([calculator(CALC).as_tool()]))
    data = json.loads(trace.to_json())
    again = lw.Trace.from_dict(data)
    assert again.to_dict() == data
    assert list(again.children) == list(trace.children)
    assert again.children[trace.steps[0].meta["child_run_id"]].steps[0].tool == "add"
    old = {k: v for k, v in data.items() if k != "children"}
    assert lw.Trace.from_dict(old).children == {}
    plain = lw.run("t", lw.ScriptedPolicy([final("1")]), lw.ToolRegistry([add]))
    assert "children" not in plain.to_dict()


def test_instructions_are_in_every_prompt_the_child_sent():
    trace = lw.run("2 + 3?", lw.ScriptedPolicy(DELEGATE), lw.ToolRegistry([calculator(CALC).as_tool()]))
    child = next(iter(trace.children.values()))
    prompts = [child.prompt_for(s) for s in child.steps]
    assert all(p is not None and p.startswith("You are a calculator: use add") for p in prompts)
    assert "Question: 2 + 3" in prompts[0]


def test_agent_tool_schema_takes_a_task_and_optional_context():
    tool = calculator(CALC).as_tool(description="Does sums.", name="calc")
    assert tool.name == "calc" and tool.description == "Does sums."
    assert tool.parameters["required"] == ["task"]
    assert set(tool.parameters["properties"]) == {"task", "context"}
    assert tool.dedupes_on_call_key and tool.idempotent  # its agent only reads: re-entering it is safe


def test_agent_tool_examples_are_checked_and_shown_to_the_callers_model():
    good = [{"question": "What is 6 plus 7?", "args": {"task": "6 + 7"}, "result": "13"}]
    policy = lw.ScriptedPolicy([final("none needed")])
    lw.run("t", policy, lw.ToolRegistry([calculator(CALC).as_tool(examples=good)]))
    assert 'calculator({"task": "6 + 7"})' in policy.requests[0].prompt or '"task": "6 + 7"' in policy.requests[0].prompt
    with pytest.raises(lw.ToolDefinitionError, match="calculator"):
        calculator(CALC).as_tool(examples=[{"args": {"goal": "6 + 7"}}])


def test_context_reaches_the_child_task():
    script = [act("calculator", '{"task": "add them", "context": "the numbers are 2 and 3"}'), final("5")]
    trace = lw.run("t", lw.ScriptedPolicy(script), lw.ToolRegistry([calculator(CALC).as_tool()]))
    assert next(iter(trace.children.values())).task == "add them\n\nContext: the numbers are 2 and 3"


def test_agent_is_read_only_and_checks_its_options_when_made():
    agent = calculator(CALC)
    with pytest.raises(AttributeError):
        agent.name = "other"  # type: ignore[misc]
    with pytest.raises(ValueError, match="mode must be one of"):
        lw.Agent("a", lw.ScriptedPolicy([]), lw.ToolRegistry([add]), mode="nope")
    with pytest.raises(TypeError, match="unknown run option"):
        lw.Agent("a", lw.ScriptedPolicy([]), lw.ToolRegistry([add]), max_reflections=2)


def test_agent_takes_every_option_run_takes_and_tool_search_reaches_its_runs():
    import inspect

    def keywords(fn) -> set[str]:
        return {p.name for p in inspect.signature(fn).parameters.values()
                if p.kind is inspect.Parameter.KEYWORD_ONLY}

    assert keywords(lw.run) - {"run_id"} <= keywords(lw.Agent)
    @lw.tool
    def sub(x: int, y: int) -> int:
        """Subtract y from x."""
        return x - y

    agent = lw.Agent("calc", lw.ScriptedPolicy(CALC), lw.ToolRegistry([add, sub]), tool_search=1)
    trace = agent.run("add 2 and 3")
    assert trace.final_answer == "5"
    assert trace.meta["tool_search"]["k"] == 1 and trace.meta["tool_search"]["loaded"] == ["add"]


def test_agent_run_alone_is_a_plain_run_with_no_parent():
    trace = calculator(CALC).run("2 + 3")
    assert trace.final_answer == "5" and "parent_run_id" not in trace.meta


def test_async_agent_run_and_async_parent():
    async def main() -> tuple[lw.Trace, lw.Trace]:
        alone = await calculator(CALC).arun("2 + 3")
        parent = await lw.arun("2 + 3?", lw.ScriptedPolicy(DELEGATE), lw.ToolRegistry([calculator(CALC).as_tool()]))
        return alone, parent

    alone, parent = asyncio.run(main())
    assert alone.final_answer == "5"
    assert parent.final_answer == "2 + 3 is 5" and next(iter(parent.children.values())).final_answer == "5"


def test_child_that_stops_without_an_answer_is_a_tool_error_the_parent_reads():
    looping = calculator([act("add", '{"x": 1, "y": 1}')] * 5, max_steps=2, on_repeat="off")
    script = [act("calculator", '{"task": "loop"}'), final("gave up")]
    trace = lw.run("t", lw.ScriptedPolicy(script), lw.ToolRegistry([looping.as_tool()]))
    assert trace.steps[0].observation.startswith("ERROR[calculator]: agent 'calculator' stopped (max_steps)")
    assert next(iter(trace.children.values())).stopped_reason == "max_steps"


def test_child_stops_within_what_is_left_of_the_parents_token_budget():
    child_model = Counted([act("add", '{"x": 1, "y": 1}')], loop=True)
    child = lw.Agent("looper", child_model, lw.ToolRegistry([add]), max_steps=50, on_repeat="off")
    parent_model = Counted([act("looper", '{"task": "loop"}'), final("never")])
    trace = lw.run("t", parent_model, lw.ToolRegistry([child.as_tool()]), token_budget=400)
    kid = next(iter(trace.children.values()))
    assert kid.stopped_reason == "token_budget"
    assert kid.usage.total_tokens < 400  # its budget was what the parent had left after its call
    assert kid.usage.total_tokens >= 400 - 45 - 45  # and it used it: within one call of the end
    assert trace.stopped_reason == "token_budget"
    assert parent_model.calls == 1  # the parent made no model call after its child spent the budget
    assert trace.usage.total_tokens == 45 + kid.usage.total_tokens


def test_child_cost_counts_against_the_parents_cost_budget():
    def price(usage: lw.Usage) -> float:
        return usage.total_tokens * 0.001  # 45 tokens a call: $0.045

    child_model = Counted([act("add", '{"x": 1, "y": 1}')], loop=True)
    child = lw.Agent("looper", child_model, lw.ToolRegistry([add]), max_steps=50, on_repeat="off")
    parent_model = Counted([act("looper", '{"task": "loop"}'), final("never")])
    trace = lw.run("t", parent_model, lw.ToolRegistry([child.as_tool()]), cost_budget_usd=0.5, prices=price)
    kid = next(iter(trace.children.values()))
    assert kid.stopped_reason == "cost_budget" and trace.stopped_reason == "cost_budget"
    assert kid.meta["cost_usd"] == pytest.approx(kid.usage.total_tokens * 0.001)
    assert trace.meta["cost_usd"] == pytest.approx(0.045 + kid.meta["cost_usd"])
    assert 0.5 <= trace.meta["cost_usd"] < 0.5 + 0.045
    assert parent_model.calls == 1


def test_child_inherits_the_parents_wall_clock():
    @lw.tool
    def slow(x: int) -> int:
        """Sleep a little, return x."""
        time.sleep(0.2)
        return x

    child = lw.Agent("sleeper", lw.ScriptedPolicy([act("slow", '{"x": 1}')] * 50), lw.ToolRegistry([slow]),
                     max_steps=50, on_repeat="off")
    start = time.perf_counter()
    trace = lw.run("t", lw.ScriptedPolicy([act("sleeper", '{"task": "sleep"}'), final("x")]),
                   lw.ToolRegistry([child.as_tool()]), timeout_s=1.0)
    assert time.perf_counter() - start < 1.5
    child_trace = next(iter(trace.children.values()))
    assert child_trace.stopped_reason == "timeout" and child_trace.duration_s < 1.0
    assert "stopped (timeout)" in trace.steps[0].observation


def test_child_asks_the_parents_approver_and_the_request_names_the_agent(tmp_path):
    asked: list[ApprovalRequest] = []

    @lw.tool(side_effects="destructive")
    def wipe(path: str) -> str:
        """Delete a path."""
        return f"wiped {path}"

    def approver(request: ApprovalRequest) -> Decision:
        asked.append(request)
        return Decision(True, "ok")

    cleaner = lw.Agent("cleaner", lw.ScriptedPolicy([act("wipe", '{"path": "/tmp/x"}'), final("done")]),
                       lw.ToolRegistry([wipe]))
    trace = lw.run("t", lw.ScriptedPolicy([act("cleaner", '{"task": "wipe /tmp/x"}'), final("ok")]),
                   lw.ToolRegistry([cleaner.as_tool()]), approver=approver)
    [request] = asked
    assert request.tool == "wipe" and request.meta["agent"] == "cleaner"
    assert request.run_id == trace.steps[0].meta["child_run_id"]
    assert next(iter(trace.children.values())).steps[0].observation == "wiped /tmp/x"


def test_child_gated_tool_is_denied_when_the_parent_has_no_approver():
    @lw.tool(side_effects="destructive")
    def wipe(path: str) -> str:
        """Delete a path."""
        raise AssertionError("must not run unapproved")

    cleaner = lw.Agent("cleaner", lw.ScriptedPolicy([act("wipe", '{"path": "/"}'), final("done")]),
                       lw.ToolRegistry([wipe]))
    trace = lw.run("t", lw.ScriptedPolicy([act("cleaner", '{"task": "wipe"}'), final("ok")]),
                   lw.ToolRegistry([cleaner.as_tool()]))
    assert next(iter(trace.children.values())).steps[0].kind == "denied"


def test_cancelling_an_async_parent_cancels_its_child():
    entered = threading.Event()

    @lw.tool
    async def wait(x: int) -> int:
        """Wait a long time."""
        entered.set()
        await asyncio.sleep(30)
        return x

    child = lw.Agent("waiter", lw.ScriptedPolicy([act("wait", '{"x": 1}'), final("1")]), lw.ToolRegistry([wait]))
    parent = lw.aiter_run("t", lw.ScriptedPolicy([act("waiter", '{"task": "wait"}'), final("x")]),
                          lw.ToolRegistry([child.as_tool()]))

    async def main() -> None:
        task = asyncio.ensure_future(parent.run())
        while not entered.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    start = time.perf_counter()
    asyncio.run(main())
    assert time.perf_counter() - start < 5
    assert parent.trace.stopped_reason == "interrupted"
    assert parent.trace.meta["in_flight"][0]["tool"] == "waiter"


def test_ctrl_c_in_a_child_interrupts_the_parent():
    @lw.tool
    def boom(x: int) -> int:
        """Ctrl-C."""
        raise KeyboardInterrupt

    child = lw.Agent("c", lw.ScriptedPolicy([act("boom", '{"x": 1}'), final("1")]), lw.ToolRegistry([boom]))
    with pytest.raises(lw.RunInterrupted) as caught:
        lw.run("t", lw.ScriptedPolicy([act("c", '{"task": "x"}'), final("x")]), lw.ToolRegistry([child.as_tool()]))
    assert caught.value.trace.stopped_reason == "interrupted"


def test_child_is_journaled_in_the_parents_store_and_the_store_rebuilds_the_nesting(tmp_path):
    with lw.SQLiteStore(tmp_path / "j.db") as store:
        trace = lw.run("2 + 3?", lw.ScriptedPolicy(DELEGATE), lw.ToolRegistry([calculator(CALC).as_tool()]),
                       store=store, run_id="parent")
        assert list(trace.children) == ["parent:1"]
        record = store.load_run("parent:1")
        assert record.config["meta"] == {"agent": "calculator", "parent_run_id": "parent"}
        loaded = store.trace("parent")
        assert list(loaded.children) == ["parent:1"]
        assert loaded.children["parent:1"].final_answer == "5"
        assert loaded.usage == trace.usage


def test_resuming_a_finished_parent_replays_the_child_without_running_it(tmp_path):
    with lw.SQLiteStore(tmp_path / "j.db") as store:
        first = lw.run("2 + 3?", lw.ScriptedPolicy(DELEGATE), lw.ToolRegistry([calculator(CALC).as_tool()]),
                       store=store, run_id="p")
        again = lw.resume("p", lw.ScriptedPolicy([]), lw.ToolRegistry([calculator([]).as_tool()]), store=store)
    assert again.final_answer == first.final_answer
    assert again.steps[0].meta["replayed"] is True and again.steps[0].meta["child_run_id"] == "p:1"
    assert again.usage == first.usage and list(again.children) == ["p:1"]


def test_resume_after_ctrl_c_in_the_child_resumes_the_child_where_it_stopped(tmp_path):
    effects: list[str] = []

    @lw.tool(side_effects="write")
    def write(text: str) -> str:
        """Append text (not idempotent)."""
        effects.append(text)
        return f"wrote {text}"

    class CtrlCOnSecondCall(Counted):
        def complete(self, request: lw.ModelRequest) -> lw.Completion:
            if self.calls == 1:
                raise KeyboardInterrupt
            return super().complete(request)

    child_script = [act("write", '{"text": "a"}'), act("write", '{"text": "b"}'), final("ab")]
    parent_script = [act("writer", '{"task": "write a and b"}'), final("done")]
    with lw.SQLiteStore(tmp_path / "j.db") as store:
        writer = lw.Agent("writer", CtrlCOnSecondCall(child_script), lw.ToolRegistry([write]))
        with pytest.raises(lw.RunInterrupted):
            lw.run("t", lw.ScriptedPolicy(parent_script), lw.ToolRegistry([writer.as_tool()]), store=store,
                   run_id="p")
        assert effects == ["a"]
        assert store.load_run("p").status == "interrupted" and store.load_run("p:1").status == "interrupted"
        child_policy = Counted(child_script[1:])
        writer = lw.Agent("writer", child_policy, lw.ToolRegistry([write]))
        trace = lw.resume("p", lw.ScriptedPolicy(parent_script[1:]), lw.ToolRegistry([writer.as_tool()]),
                          store=store)
    assert trace.final_answer == "done"
    assert effects == ["a", "b"]  # a was not written again
    assert child_policy.calls == 2  # the child's first (recorded) call was not paid again
    child = trace.children["p:1"]
    assert child.steps[0].meta.get("replayed") is True and child.final_answer == "ab"


def test_sigkill_inside_a_child_then_resume_repeats_no_call_and_no_side_effect(tmp_path):
    db, effects, calls = tmp_path / "j.db", tmp_path / "effects", tmp_path / "calls"

    def phase(name: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(HELPERS / "agent_crash.py"), name, str(db), "p", str(effects), str(calls), "2"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    killed = phase("start")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert effects.read_text() == "a\n"
    assert calls.read_text().splitlines() == ["start parent 1", "start child 1", "start child 2"]
    with lw.SQLiteStore(db) as store:
        assert store.load_run("p:1").status != "finished"
    resumed = phase("resume")
    assert resumed.returncode == 0, resumed.stderr
    trace = lw.Trace.from_json(resumed.stdout.strip().splitlines()[-1])
    assert trace.final_answer == "the writer wrote a and b"
    assert effects.read_text() == "a\nb\n"  # a once, b once
    # after the kill: the child's unrecorded call 2 and its call 3, the parent's call 2; nothing paid twice
    assert calls.read_text().splitlines()[3:] == ["resume child 2", "resume child 3", "resume parent 2"]
    child = trace.children["p:1"]
    assert [s.tool for s in child.steps] == ["write", "write", None]
    assert child.steps[0].meta.get("replayed") is True and child.llm_calls == 3


def test_child_invoke_agent_span_is_under_the_parents_execute_tool_span():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    lw.run("2 + 3?", lw.ScriptedPolicy(DELEGATE), lw.ToolRegistry([calculator(CALC).as_tool()]), tracer=tracer)
    spans = exporter.get_finished_spans()
    agents = [s for s in spans if s.name == "invoke_agent"]
    assert len(agents) == 2
    root = next(s for s in agents if s.parent is None)
    child = next(s for s in agents if s.parent is not None)
    tool = next(s for s in spans if s.name == "execute_tool calculator")
    assert tool.parent.span_id == root.context.span_id
    assert child.parent.span_id == tool.context.span_id
    assert child.attributes["gen_ai.agent.name"] == "calculator"
    assert tool.attributes["gen_ai.tool.call.id"] == "1"
    inner = next(s for s in spans if s.name == "execute_tool add")
    assert inner.parent.span_id == child.context.span_id


def test_child_events_go_to_the_parents_sinks_tagged_with_the_agents_name():
    from loopwright.runtime.front import start

    events: list = []
    spec = lw.RunSpec("2 + 3?", "react")
    start(spec, lw.ScriptedPolicy(DELEGATE), lw.ToolRegistry([calculator(CALC).as_tool()]), sinks=[events.append]).run()
    child = [e for e in events if e.agent == "calculator"]
    assert [e.kind for e in child if e.kind != "model_delta"][:1] == ["run_started"]
    assert child[-1].kind == "run_finished" and child[-1].trace.final_answer == "5"
    assert {e.run_id for e in child} == {child[-1].trace.run_id}
    assert [e.step.tool for e in child if e.kind == "step"] == ["add", None]
    parent = [e for e in events if e.agent is None]
    assert parent[0].kind == "run_started" and parent[-1].kind == "run_finished"
    # the child's events come while the parent's step 1 runs: after its start, before its step
    first_child = events.index(child[0])
    assert events.index(next(e for e in parent if e.kind == "step")) > events.index(child[-1]) > first_child


def test_agent_iter_events_tags_the_agent_and_its_childs_events():
    coordinator = lw.Agent("coordinator", lw.ScriptedPolicy(DELEGATE), lw.ToolRegistry([calculator(CALC).as_tool()]))
    events = list(coordinator.iter_events("2 + 3?"))
    assert {e.agent for e in events} == {"coordinator", "calculator"}
    assert events[0].kind == "run_started" and events[0].agent == "coordinator"
    assert events[-1].kind == "run_finished" and events[-1].agent == "coordinator"
    final = events[-1].trace
    child_id = final.steps[0].meta["child_run_id"]
    child = final.children[child_id]
    # the child's deltas, joined per step, are its steps' raw text
    for step in child.steps:
        text = "".join(e.text for e in events if e.kind == "model_delta" and e.run_id == child_id and e.step == step.index)
        assert text == step.raw
    started = [e for e in events if e.kind == "tool_started"]
    assert [(e.agent, e.tool) for e in started] == [("coordinator", "calculator"), ("calculator", "add")]


def test_agent_aiter_events_on_an_event_loop():
    coordinator = lw.Agent("coordinator", lw.ScriptedPolicy(DELEGATE), lw.ToolRegistry([calculator(CALC).as_tool()]))

    async def main() -> list:
        return [e async for e in coordinator.aiter_events("2 + 3?")]

    events = asyncio.run(main())
    assert [e.kind for e in events if e.agent == "calculator"][0] == "run_started"
    assert events[-1].kind == "run_finished" and events[-1].trace.final_answer == "2 + 3 is 5"
    assert [e.step.tool for e in events if e.kind == "step" and e.agent == "calculator"] == ["add", None]


@pytest.mark.slow
def test_readme_two_agent_example_runs_on_the_embedded_model(tmp_path):
    """The README's example, as written there, on the embedded model: the coordinator
    delegates to the calculator, whose nested run multiplies and answers; so does the
    coordinator (greedy decoding: the same answer every run)."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("## Agents, and agents as tools", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "two_agents.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=400, check=False)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "Task: What is 17 * 23?  [react]"
    assert any(line.startswith("Stopped: final  answer: '391'") for line in lines), out.stdout
    children = [line.split() for line in lines if ":" in line.split(" ", 1)[0] and " calculator " in line]
    # the coordinator delegated to the calculator, whose own nested run found the product
    assert children and children[0][1:4] == ["calculator", "final", "'391'"], out.stdout


def test_a_child_paused_for_approval_pauses_its_parent_and_resume_continues_both(tmp_path):
    from loopwright.safety import ApprovalPending

    effects: list[str] = []

    @lw.tool(side_effects="destructive")
    def wipe(path: str) -> str:
        """Delete a path."""
        effects.append(path)
        return f"wiped {path}"

    def later(request: ApprovalRequest) -> Decision:
        raise ApprovalPending

    child_script = [act("wipe", '{"path": "/tmp/x"}'), final("done")]
    parent_script = [act("cleaner", '{"task": "wipe /tmp/x"}'), final("cleaned")]
    with lw.SQLiteStore(tmp_path / "j.db") as store:
        cleaner = lw.Agent("cleaner", lw.ScriptedPolicy(child_script), lw.ToolRegistry([wipe]))
        first = lw.run("t", lw.ScriptedPolicy(parent_script), lw.ToolRegistry([cleaner.as_tool()]), store=store,
                       run_id="p", approver=later)
        assert first.stopped_reason == "paused" and effects == []
        assert first.meta["pending_approval"]["tool"] == "wipe"
        assert first.meta["pending_approval"]["meta"] == {"agent": "cleaner"}
        [pending] = store.pending_approvals("p:1")
        store.decide("p:1", pending.key, True)
        cleaner = lw.Agent("cleaner", lw.ScriptedPolicy(child_script[1:]), lw.ToolRegistry([wipe]))
        again = lw.resume("p", lw.ScriptedPolicy(parent_script[1:]), lw.ToolRegistry([cleaner.as_tool()]),
                          store=store, approver=later)
    assert again.stopped_reason == "final" and again.final_answer == "cleaned"
    assert effects == ["/tmp/x"] and again.children["p:1"].final_answer == "done"


def test_a_tool_body_that_runs_an_agent_twice_makes_two_child_runs():
    agent = calculator(CALC + CALC)

    @lw.tool
    def twice(task: str) -> str:
        """Ask the calculator twice."""
        return agent.run(task).final_answer + agent.run(task).final_answer

    trace = lw.run("t", lw.ScriptedPolicy([act("twice", '{"task": "2 + 3"}'), final("55")]), lw.ToolRegistry([twice]))
    base = trace.steps[0].meta["child_run_id"].rsplit(".", 1)[0]
    assert sorted(trace.children) == [base, base + ".2"]
    assert trace.steps[0].observation == "55"


def test_rewoo_parent_runs_agent_calls_in_parallel_and_keeps_each_child():
    plan = json.dumps({"plan": [{"id": f"E{i}", "tool": "calculator", "args": {"task": f"{i} + 1"}} for i in (1, 2, 3)]})

    class Calc:
        """A calculator model for any "a + b" task (called from three threads at once)."""

        def __call__(self, prompt: str) -> str:
            asked = prompt.rsplit("Question:", 1)[-1]
            if "Observation" in asked:
                return final(asked.rsplit("</untrusted>", 1)[0].rsplit(">", 1)[-1])
            a, b = asked.split("\n", 1)[0].split(" + ")
            return act("add", json.dumps({"x": int(a), "y": int(b)}))

    agent = lw.Agent("calculator", Calc(), lw.ToolRegistry([add]))
    trace = lw.run("three sums", lw.ScriptedPolicy([plan, "Final Answer: 2 3 4"]), lw.ToolRegistry([agent.as_tool()]),
                   mode="rewoo")
    assert trace.stopped_reason == "final" and trace.llm_calls == 2
    actions = [s for s in trace.steps if s.kind == "action"]
    assert sorted(s.observation for s in actions) == ["2", "3", "4"]
    assert sorted(s.meta["child_run_id"].rsplit(":", 1)[1] for s in actions) == ["E1", "E2", "E3"]
    assert len(trace.children) == 3
    assert trace.usage == sum((s.usage for s in trace.steps), lw.Usage()) + sum(
        (c.usage for c in trace.children.values()), lw.Usage())


# -- what a child takes from its parent, as its journal records it ----------------------


class FrozenClock:
    """`time` for loopwright.guards: the wall clock stands still, so what is left of a
    run's timeout is exactly what it was given (no timing in the assertions)."""

    @staticmethod
    def monotonic() -> float:
        return 1000.0


@pytest.mark.parametrize(
    ("parent_budget", "own_budget", "childs_budget"),
    [(400, None, 400 - 45), (400, 100, 100), (400, 1000, 400 - 45), (46, None, 1)],
)
def test_a_childs_token_budget_is_its_own_capped_by_what_the_parent_has_left(
    tmp_path, parent_budget, own_budget, childs_budget
):
    child = calculator(CALC, token_budget=own_budget)
    parent = Counted(DELEGATE)  # 45 tokens a call
    with lw.SQLiteStore(tmp_path / "j.db") as store:
        lw.run("t", parent, lw.ToolRegistry([child.as_tool()]), token_budget=parent_budget, store=store, run_id="p")
        assert store.load_run("p:1").config["token_budget"] == childs_budget


@pytest.mark.parametrize(
    ("parent_timeout", "own_timeout", "childs_timeout"),
    [(50.0, None, 49.9), (50.0, 5.0, 5.0), (50.0, 100.0, 49.9), (0.5, None, 0.45), (None, 7.0, 7.0)],
)
def test_a_childs_timeout_is_its_own_capped_by_a_little_less_than_the_parent_has_left(
    tmp_path, monkeypatch, parent_timeout, own_timeout, childs_timeout
):
    from loopwright import guards

    monkeypatch.setattr(guards, "time", FrozenClock)
    child = calculator(CALC, timeout_s=own_timeout)
    with lw.SQLiteStore(tmp_path / "j.db") as store:
        trace = lw.run("t", lw.ScriptedPolicy(DELEGATE), lw.ToolRegistry([child.as_tool()]), timeout_s=parent_timeout,
                       store=store, run_id="p")
        assert trace.final_answer == "2 + 3 is 5"
        assert store.load_run("p:1").config["timeout_s"] == pytest.approx(childs_timeout)


def test_a_child_with_no_limits_of_its_own_under_an_unlimited_parent_is_unlimited(tmp_path):
    with lw.SQLiteStore(tmp_path / "j.db") as store:
        lw.run("t", lw.ScriptedPolicy(DELEGATE), lw.ToolRegistry([calculator(CALC).as_tool()]), store=store,
               run_id="p")
        config = store.load_run("p:1").config
    assert config["token_budget"] is None and config["timeout_s"] is None and config["approver"] is False


def test_a_childs_journal_meta_is_its_own_plus_the_agent_and_its_parent(tmp_path):
    child = calculator(CALC, journal_meta={"team": "maths"})
    with lw.SQLiteStore(tmp_path / "j.db") as store:
        lw.run("t", lw.ScriptedPolicy(DELEGATE), lw.ToolRegistry([child.as_tool()]), store=store, run_id="p")
        assert store.load_run("p:1").config["meta"] == {"team": "maths", "agent": "calculator", "parent_run_id": "p"}


def test_a_child_of_a_parent_with_no_store_is_journaled_in_its_own_store(tmp_path):
    with lw.SQLiteStore(tmp_path / "own.db") as own:
        trace = lw.run("t", lw.ScriptedPolicy(DELEGATE), lw.ToolRegistry([calculator(CALC, store=own).as_tool()]))
        [child_id] = trace.children
        assert own.load_run(child_id).config["meta"]["agent"] == "calculator"
        assert own.trace(child_id).final_answer == "5"


def test_a_child_of_a_parent_with_a_store_is_journaled_in_the_parents_not_its_own(tmp_path):
    with lw.SQLiteStore(tmp_path / "own.db") as own, lw.SQLiteStore(tmp_path / "parent.db") as store:
        lw.run("t", lw.ScriptedPolicy(DELEGATE), lw.ToolRegistry([calculator(CALC, store=own).as_tool()]),
               store=store, run_id="p")
        assert store.load_run("p:1").status == "finished"
        with pytest.raises(lw.StoreError):
            own.load_run("p:1")


# -- cost: a child's own budget and prices ----------------------------------------------


def per_token(dollars: float):
    def price(usage: lw.Usage) -> float:
        return usage.total_tokens * dollars

    return price


def looper(**options) -> lw.Agent:
    """A child whose model calls add forever (45 tokens a call), until a limit stops it."""
    return lw.Agent("looper", Counted([act("add", '{"x": 1, "y": 1}')], loop=True), lw.ToolRegistry([add]),
                    max_steps=50, on_repeat="off", **options)


LOOP = [act("looper", '{"task": "loop"}'), final("done")]


def test_a_childs_own_cost_budget_stops_it_before_the_parents_does():
    trace = lw.run("t", Counted(LOOP), lw.ToolRegistry([looper(cost_budget_usd=0.1).as_tool()]),
                   cost_budget_usd=0.5, prices=per_token(0.001))
    kid = next(iter(trace.children.values()))
    assert kid.stopped_reason == "cost_budget" and kid.llm_calls == 3  # 3 x $0.045 reach $0.10
    assert trace.stopped_reason == "final"  # the parent had $0.32 left
    assert trace.meta["cost_usd"] == pytest.approx(2 * 0.045 + 3 * 0.045)


def test_a_child_prices_its_calls_at_its_own_prices_within_the_parents_budget():
    trace = lw.run("t", Counted(LOOP), lw.ToolRegistry([looper(prices=per_token(0.002)).as_tool()]),
                   cost_budget_usd=0.5, prices=per_token(0.001))
    kid = next(iter(trace.children.values()))
    assert kid.meta["cost_usd"] == pytest.approx(kid.usage.total_tokens * 0.002)
    assert kid.stopped_reason == "cost_budget" and kid.llm_calls == 6  # $0.09 a call against the $0.455 left
    assert trace.meta["cost_usd"] == pytest.approx(0.045 + kid.meta["cost_usd"])


def test_a_child_with_its_own_prices_under_an_unpriced_parent_reports_its_cost_to_it():
    priced = lw.Agent("calculator", Counted(CALC), lw.ToolRegistry([add]), prices=per_token(0.002))
    trace = lw.run("t", lw.ScriptedPolicy(DELEGATE), lw.ToolRegistry([priced.as_tool()]))
    kid = next(iter(trace.children.values()))
    assert kid.meta["cost_usd"] == pytest.approx(2 * 45 * 0.002)
    assert trace.meta["cost_usd"] == pytest.approx(kid.meta["cost_usd"])


@pytest.mark.parametrize(("own_prices", "childs_cost"), [(None, None), (per_token(0.002), 2 * 45 * 0.002)])
def test_a_priced_parent_with_no_budget_counts_its_childs_cost_at_the_childs_prices_else_its_own(
    own_prices, childs_cost
):
    child = lw.Agent("calculator", Counted(CALC), lw.ToolRegistry([add]), prices=own_prices)
    trace = lw.run("t", Counted(DELEGATE), lw.ToolRegistry([child.as_tool()]), prices=per_token(0.001))
    kid = next(iter(trace.children.values()))
    assert trace.final_answer == "2 + 3 is 5"
    assert kid.meta.get("cost_usd") == (None if childs_cost is None else pytest.approx(childs_cost))
    at_parents_prices = 2 * 45 * 0.001
    assert trace.meta["cost_usd"] == pytest.approx(2 * 45 * 0.001 + (childs_cost or at_parents_prices))


def test_a_child_started_after_the_parents_budget_is_spent_stops_at_its_first_call():
    agent = looper()

    @lw.tool
    def twice(task: str) -> str:
        """Run the looper twice."""
        return f"{agent.run(task).stopped_reason} {agent.run(task).stopped_reason}"

    trace = lw.run("t", Counted([act("twice", '{"task": "loop"}'), final("done")]), lw.ToolRegistry([twice]),
                   cost_budget_usd=0.5, prices=per_token(0.001))
    assert trace.steps[0].observation == "cost_budget cost_budget"
    first, second = trace.children.values()
    assert first.llm_calls == 11 and second.llm_calls == 1
    assert trace.stopped_reason == "cost_budget"


# -- the approver: the parent's, never the child's own ----------------------------------


def test_a_childs_own_approver_cannot_approve_what_its_parent_has_no_approver_for():
    @lw.tool(side_effects="destructive")
    def wipe(path: str) -> str:
        """Delete a path."""
        raise AssertionError("must not run unapproved")

    cleaner = lw.Agent("cleaner", lw.ScriptedPolicy([act("wipe", '{"path": "/"}'), final("done")]),
                       lw.ToolRegistry([wipe]), approver=lambda request: Decision(True, "yes"))
    trace = lw.run("t", lw.ScriptedPolicy([act("cleaner", '{"task": "wipe"}'), final("ok")]),
                   lw.ToolRegistry([cleaner.as_tool()]))
    assert next(iter(trace.children.values())).steps[0].kind == "denied"


# -- the agent as a tool: its name, description, arguments and answers -------------------


def test_a_child_that_stops_without_an_answer_tells_the_parent_why_and_its_last_error():
    @lw.tool
    def broken(x: int) -> int:
        """Fail."""
        raise ValueError("no adding today")

    failing = lw.Agent("calculator", lw.ScriptedPolicy([act("broken", '{"x": 1}')]), lw.ToolRegistry([broken]),
                       max_steps=1)
    trace = lw.run("t", lw.ScriptedPolicy([act("calculator", '{"task": "x"}'), final("x")]),
                   lw.ToolRegistry([failing.as_tool()]))
    assert trace.steps[0].observation == (
        "ERROR[calculator]: agent 'calculator' stopped (max_steps) without an answer: ValueError: no adding today"
    )
    assert trace.steps[0].error == "agent 'calculator' stopped (max_steps) without an answer: " \
                                   "ValueError: no adding today"


def test_a_child_of_an_async_parent_that_stops_without_an_answer_tells_the_parent_why():
    looping = calculator([act("add", '{"x": 1, "y": 1}')] * 5, max_steps=2, on_repeat="off")
    trace = asyncio.run(lw.arun("t", lw.ScriptedPolicy([act("calculator", '{"task": "loop"}'), final("gave up")]),
                                lw.ToolRegistry([looping.as_tool()])))
    assert trace.steps[0].observation == "ERROR[calculator]: agent 'calculator' stopped (max_steps) without an answer"
    assert next(iter(trace.children.values())).stopped_reason == "max_steps"


def test_a_child_that_stops_with_no_error_on_its_last_step_says_only_why_it_stopped():
    looping = calculator([act("add", '{"x": 1, "y": 1}')] * 5, max_steps=2, on_repeat="off")
    trace = lw.run("t", lw.ScriptedPolicy([act("calculator", '{"task": "loop"}'), final("gave up")]),
                   lw.ToolRegistry([looping.as_tool()]))
    assert trace.steps[0].observation == "ERROR[calculator]: agent 'calculator' stopped (max_steps) without an answer"


def test_an_agent_tool_is_named_for_the_agent_and_described_by_its_instructions_first_line():
    agent = lw.Agent("calculator", lw.ScriptedPolicy([]), lw.ToolRegistry([add]),
                     instructions="\n  Add the numbers.\nThen answer.")
    tool = agent.as_tool()
    assert tool.name == "calculator" and tool.description == "Ask the calculator agent (Add the numbers.)"


def test_an_agent_tool_without_instructions_is_described_by_the_tools_its_agent_can_use():
    @lw.tool
    def sub(x: int, y: int) -> int:
        """Subtract y from x."""
        return x - y

    tool = lw.Agent("calc", lw.ScriptedPolicy([]), [add, sub]).as_tool()
    assert tool.description == "Ask the calc agent; it can use: add, sub"


def test_an_agent_tools_arguments_are_described_to_the_callers_model():
    properties = calculator(CALC).as_tool().parameters["properties"]
    assert properties["task"] == {"type": "string", "description": "what to do, in plain words"}
    assert properties["context"] == {"type": "string", "default": "",
                                     "description": "anything the agent should know (optional)"}


def test_an_agent_tool_may_write_when_its_agent_has_a_tool_that_writes_or_needs_approval():
    @lw.tool(side_effects="write")
    def save(text: str) -> str:
        """Save text."""
        return text

    @lw.tool(side_effects="destructive")
    def wipe(path: str) -> str:
        """Delete a path."""
        return path

    assert calculator(CALC).as_tool().side_effects == "read"
    for tool in (save, wipe):
        agent_tool = lw.Agent("a", lw.ScriptedPolicy([]), lw.ToolRegistry([add, tool])).as_tool()
        assert agent_tool.side_effects == "write" and not agent_tool.idempotent
        assert agent_tool.dedupes_on_call_key  # a resumed parent re-enters the child: never in doubt


def test_a_task_with_no_context_reaches_the_child_as_it_is():
    trace = lw.run("t", lw.ScriptedPolicy(DELEGATE), lw.ToolRegistry([calculator(CALC).as_tool()]))
    assert next(iter(trace.children.values())).task == "2 + 3"


def test_instructions_are_stripped_and_their_braces_taken_literally_in_every_prompt_that_states_the_task():
    import dataclasses

    from loopwright.prompting.templates import DEFAULT_PROMPTS

    agent = lw.Agent("a", lw.ScriptedPolicy([final("1")]), lw.ToolRegistry([add]),
                     instructions="  Add {numbers}.\nOnly add.  ")
    trace = agent.run("2 + 3")
    assert trace.prompt_for(trace.steps[0]).startswith("Add {numbers}.\nOnly add.\n\n")
    for field in dataclasses.fields(DEFAULT_PROMPTS):
        default, given = getattr(DEFAULT_PROMPTS, field.name), getattr(agent.spec.prompts, field.name)
        if isinstance(default, str) and "{task}" in default:
            assert given == "Add {{numbers}}.\nOnly add.\n\n" + default
        else:
            assert given == default


def test_an_agent_checks_its_name_and_instructions_when_made():
    from loopwright.prompting.templates import DEFAULT_PROMPTS

    for name in ("", None, 3):
        with pytest.raises(TypeError, match="an agent's name must be a non-empty str"):
            lw.Agent(name, lw.ScriptedPolicy([]), [add])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="instructions must be a str or None, got int"):
        lw.Agent("a", lw.ScriptedPolicy([]), [add], instructions=3)  # type: ignore[arg-type]
    agent = lw.Agent("a", lw.ScriptedPolicy([]), [add])
    assert repr(agent) == "Agent(name='a', mode='react', tools=['add'])"
    assert agent.spec.prompts is DEFAULT_PROMPTS  # no instructions: the prompts as they are
    with pytest.raises(AttributeError, match="an Agent is read-only; make another \\(cannot set 'mode'\\)"):
        agent.mode = "rewoo"  # type: ignore[misc]


def test_a_tool_body_that_runs_an_agent_three_times_numbers_each_child_run_in_order():
    agent = calculator(CALC * 3)

    @lw.tool
    def thrice(task: str) -> str:
        """Ask the calculator three times."""
        return "".join(agent.run(task).final_answer for _ in range(3))

    trace = lw.run("t", lw.ScriptedPolicy([act("thrice", '{"task": "2 + 3"}'), final("555")]),
                   lw.ToolRegistry([thrice]), run_id="p")
    assert list(trace.children) == ["p:1", "p:1.2", "p:1.3"]
    assert trace.steps[0].observation == "555"


# -- a resumed child: what it keeps of its own options and its parent's limits ------------


class CtrlCOnCall(Counted):
    """Counted, with Ctrl-C in model call number `at`."""

    def __init__(self, script: list[str], at: int) -> None:
        super().__init__(script)
        self.at = at

    def complete(self, request: lw.ModelRequest) -> lw.Completion:
        if self.calls + 1 == self.at:
            raise KeyboardInterrupt
        return super().complete(request)


def interrupted_then_resumed(store: lw.SQLiteStore, make_child, child_script: list[str], **limits) -> lw.Trace:
    """The parent (run and resumed with `limits`) delegates to the agent `make_child(policy)`
    makes; Ctrl-C in the child's second model call; the parent resumed, the child's policy
    given the rest of its script."""
    parent_script = [act("worker", '{"task": "work"}'), final("done")]
    with pytest.raises(lw.RunInterrupted):
        lw.run("t", Counted(parent_script), lw.ToolRegistry([make_child(CtrlCOnCall(child_script, 2)).as_tool()]),
               store=store, run_id="p", **limits)
    return lw.resume("p", Counted(parent_script[1:]), lw.ToolRegistry([make_child(Counted(child_script[1:])).as_tool()]),
                     store=store, **limits)


def test_a_resumed_child_keeps_its_instructions_and_its_output_type(tmp_path):
    def worker(policy) -> lw.Agent:
        return lw.Agent("worker", policy, lw.ToolRegistry([add]), instructions="Only add.", output_type=int)

    script = [act("add", '{"x": 2, "y": 3}'), act("add", '{"x": 5, "y": 0}'), final("5")]
    with lw.SQLiteStore(tmp_path / "j.db") as store:
        trace = interrupted_then_resumed(store, worker, script)
    child = trace.children["p:1"]
    assert child.steps[0].meta.get("replayed") is True and child.final_answer == "5"
    assert child.output == 5
    assert all(child.prompt_for(step).startswith("Only add.\n\n") for step in child.steps[1:])


def test_a_resumed_child_folds_its_prompt_into_its_own_memory_within_its_context_budget(tmp_path):
    @lw.tool
    def read(page: int) -> str:
        """Read a page."""
        return f"page {page}: " + "lorem ipsum dolor " * 30

    class Remembering:
        """A memory that files every folded turn and recalls one fixed line."""

        def __init__(self) -> None:
            self.turns: list[str] = []

        def add(self, turn: str, metadata=None) -> None:
            self.turns.append(turn)

        def context(self, query: str, budget_tokens: int) -> str:
            return "REMEMBERED"

    memory = Remembering()

    def worker(policy) -> lw.Agent:
        return lw.Agent("worker", policy, lw.ToolRegistry([read]), memory=memory, context_tokens=400)

    script = [act("read", f'{{"page": {n}}}') for n in (1, 2, 3)] + [final("read")]
    with lw.SQLiteStore(tmp_path / "j.db") as store:
        trace = interrupted_then_resumed(store, worker, script)
    child = trace.children["p:1"]
    assert child.final_answer == "read" and memory.turns  # the resumed child folded steps into it
    assert "REMEMBERED" in child.prompt_for(child.steps[-1])


def test_a_resumed_child_is_held_to_what_is_left_of_the_parents_cost_budget(tmp_path):
    def worker(policy) -> lw.Agent:
        return lw.Agent("worker", policy, lw.ToolRegistry([add]), on_repeat="off")

    script = [act("add", '{"x": 1, "y": 1}')] * 4 + [final("2")]
    with lw.SQLiteStore(tmp_path / "j.db") as store:
        trace = interrupted_then_resumed(store, worker, script, cost_budget_usd=0.2, prices=per_token(0.001))
    child = trace.children["p:1"]
    # $0.045 a call: the parent's first call leaves $0.155, which the child's fourth call passes
    assert child.stopped_reason == "cost_budget" and child.llm_calls == 4
    assert trace.stopped_reason == "cost_budget"


def test_a_resumed_child_under_an_unpriced_parent_keeps_pricing_its_calls_at_its_own_prices(tmp_path):
    def worker(policy) -> lw.Agent:
        return lw.Agent("worker", policy, lw.ToolRegistry([add]), prices=per_token(0.002))

    script = [act("add", '{"x": 2, "y": 3}'), act("add", '{"x": 5, "y": 0}'), final("5")]
    with lw.SQLiteStore(tmp_path / "j.db") as store:
        trace = interrupted_then_resumed(store, worker, script)
    child = trace.children["p:1"]
    assert child.final_answer == "5" and child.llm_calls == 3
    assert child.meta["cost_usd"] == pytest.approx(3 * 45 * 0.002)  # the replayed call's too
    assert trace.meta["cost_usd"] == pytest.approx(child.meta["cost_usd"])


def test_resuming_a_parent_whose_call_was_answered_by_a_plain_tool_names_no_child(tmp_path):
    @lw.tool
    def calculator(task: str) -> str:
        """Does sums."""
        return "5"

    with lw.SQLiteStore(tmp_path / "j.db") as store:
        first = lw.run("t", lw.ScriptedPolicy(DELEGATE), lw.ToolRegistry([calculator]), store=store, run_id="p")
        agent = lw.Agent("calculator", lw.ScriptedPolicy([]), lw.ToolRegistry([add]))
        again = lw.resume("p", lw.ScriptedPolicy([]), lw.ToolRegistry([agent.as_tool()]), store=store,
                          allow_tool_changes=True)
    assert again.final_answer == first.final_answer and again.steps[0].observation == "5"
    assert "child_run_id" not in again.steps[0].meta and again.children == {}


def test_a_child_whose_own_store_is_not_a_journal_store_runs_unjournaled():
    class Unjournaled:
        """A RunStore with no way to look a run up: a child cannot resume from it."""

        def start_run(self, run_id, task, mode, config):
            raise AssertionError("a child does not start its run in it")

    agent = calculator(CALC, store=Unjournaled())
    trace = lw.run("t", lw.ScriptedPolicy(DELEGATE), lw.ToolRegistry([agent.as_tool()]))
    assert trace.steps[0].observation == "5"


# -- run ids, events and spans of an agent's run ----------------------------------------


def test_an_agent_run_takes_the_run_id_it_is_given():
    assert calculator(CALC).run("2 + 3", run_id="calc-1").run_id == "calc-1"
    assert asyncio.run(calculator(CALC).arun("2 + 3", run_id="calc-2")).run_id == "calc-2"
    events = list(calculator(CALC).iter_events("2 + 3", run_id="calc-3"))
    assert {e.run_id for e in events} == {"calc-3"} and events[-1].trace.run_id == "calc-3"

    async def watch() -> list:
        return [e async for e in calculator(CALC).aiter_events("2 + 3", run_id="calc-4")]

    assert {e.run_id for e in asyncio.run(watch())} == {"calc-4"}


def test_a_childs_run_started_event_names_its_task_and_mode():
    coordinator = lw.Agent("coordinator", lw.ScriptedPolicy(DELEGATE), lw.ToolRegistry([calculator(CALC).as_tool()]))
    started = [e for e in coordinator.iter_events("2 + 3?") if e.kind == "run_started"]
    assert [(e.agent, e.task, e.mode) for e in started] == [("coordinator", "2 + 3?", "react"),
                                                            ("calculator", "2 + 3", "react")]


def test_a_traced_run_with_a_child_leaves_the_callers_opentelemetry_context_as_it_was():
    from opentelemetry import trace as otel_trace

    tracer = TracerProvider().get_tracer("test")
    before = otel_trace.get_current_span()
    lw.run("2 + 3?", lw.ScriptedPolicy(DELEGATE), lw.ToolRegistry([calculator(CALC).as_tool()]), tracer=tracer)
    assert otel_trace.get_current_span() is before


# -- an agent's own run, and its tool called from anywhere ------------------------------


def test_an_agent_run_alone_runs_its_task_and_asks_its_approver_with_a_request_that_names_it():
    asked: list[ApprovalRequest] = []

    @lw.tool(side_effects="destructive")
    def wipe(path: str) -> str:
        """Delete a path."""
        return f"wiped {path}"

    def approver(request: ApprovalRequest) -> Decision:
        asked.append(request)
        return Decision(True, "ok")

    cleaner = lw.Agent("cleaner", lw.ScriptedPolicy([act("wipe", '{"path": "/tmp/x"}'), final("done")]),
                       lw.ToolRegistry([wipe]), approver=approver)
    trace = cleaner.run("wipe /tmp/x")
    assert trace.task == "wipe /tmp/x" and trace.final_answer == "done"
    [request] = asked
    assert request.tool == "wipe" and request.meta["agent"] == "cleaner"
    assert cleaner.spec.task == ""  # the options every run starts from: each run gives its task


def test_an_agent_run_alone_names_the_agent_on_its_invoke_agent_span():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    calculator(CALC, tracer=provider.get_tracer("test")).run("2 + 3")
    [span] = [s for s in exporter.get_finished_spans() if s.name == "invoke_agent"]
    assert span.attributes["gen_ai.agent.name"] == "calculator"


def test_an_agents_own_prompt_set_gets_its_instructions_too():
    import dataclasses

    from loopwright.prompting.templates import DEFAULT_PROMPTS

    own = dataclasses.replace(DEFAULT_PROMPTS, react_json="Be brief.\n" + DEFAULT_PROMPTS.react_json)
    agent = lw.Agent("a", lw.ScriptedPolicy([final("1")]), lw.ToolRegistry([add]), prompts=own,
                     instructions="Only add.")
    trace = agent.run("2 + 3")
    assert trace.prompt_for(trace.steps[0]).startswith("Only add.\n\nBe brief.\n")


def test_an_agent_tool_called_outside_any_run_runs_its_agent_alone_and_returns_the_answer():
    agent = calculator(CALC)
    tool = agent.as_tool()
    assert tool.agent is agent
    assert tool("2 + 3") == "5"


def test_a_child_of_an_async_parent_runs_on_the_parents_event_loop():
    loops: list[asyncio.AbstractEventLoop] = []

    @lw.tool
    async def where(x: int) -> int:
        """Note the event loop this runs on."""
        loops.append(asyncio.get_running_loop())
        return x

    child = lw.Agent("child", lw.ScriptedPolicy([act("where", '{"x": 1}'), final("1")]), lw.ToolRegistry([where]))

    async def main() -> asyncio.AbstractEventLoop:
        await lw.arun("t", lw.ScriptedPolicy([act("child", '{"task": "where"}'), final("x")]),
                      lw.ToolRegistry([child.as_tool()]))
        return asyncio.get_running_loop()

    assert loops == [asyncio.run(main())]
