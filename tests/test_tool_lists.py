"""A plain list of tools wherever a ToolRegistry is taken, and Tool objects wherever tool
names are (`tools=`): every front door makes the list a registry in one place."""

from __future__ import annotations

import asyncio

import pytest

import loopwright as lw
from conftest import act, final
from loopwright.durable.sqlite import SQLiteStore


@lw.tool
def add(x: int, y: int) -> int:
    """Add two integers."""
    return x + y


def multiply(x: int, y: int) -> int:
    """Multiply two integers (a plain function: wrapped as a tool)."""
    return x * y


@lw.tool(side_effects="destructive")
def wipe(path: str) -> str:
    """Wipe a path."""
    return f"wiped {path}"


ADD = act("add", '{"x": 2, "y": 3}')
MULTIPLY = act("multiply", '{"x": 5, "y": 10}')


def script() -> lw.ScriptedPolicy:
    return lw.ScriptedPolicy([ADD, MULTIPLY, final("50")])


def test_run_takes_a_plain_list_of_tools_and_functions() -> None:
    trace = lw.run("t", script(), [add, multiply])
    assert trace.stopped_reason == "final" and trace.final_answer == "50"
    assert [s.observation for s in trace.steps[:2]] == ["5", "50"]
    trace = asyncio.run(lw.arun("t", script(), (add, multiply), mode="react"))
    assert trace.final_answer == "50"
    events = list(lw.iter_events("t", script(), [add, multiply]))
    assert events[-1].trace.final_answer == "50"


def test_tools_scope_takes_tool_objects_as_well_as_names() -> None:
    policy = lw.ScriptedPolicy([ADD, act("wipe", '{"path": "/"}'), final("5")])
    trace = lw.run("t", policy, [add, multiply, wipe], tools=[add, "multiply"])
    assert trace.steps[0].observation == "5"
    assert trace.steps[1].observation.startswith("ERROR[wipe]: unknown tool 'wipe'")  # out of scope
    one = lw.run("t", lw.ScriptedPolicy([ADD, final("5")]), lw.ToolRegistry([add, wipe]), tools="add")
    assert one.steps[0].observation == "5"  # one name, not its letters
    assert lw.ToolRegistry([add, multiply]).subset([add]).names == ("add",)
    with pytest.raises(lw.ToolDefinitionError, match=r"unknown tool\(s\) 'wipe'; registered: add"):
        lw.run("t", lw.ScriptedPolicy([]), [add], tools=[wipe])


def test_an_agent_takes_a_plain_list() -> None:
    agent = lw.Agent("calc", script(), [add, multiply], tools=[add, multiply])  # a Tool, a function
    assert isinstance(agent.registry, lw.ToolRegistry) and agent.registry.names == ("add", "multiply")
    assert agent.run("t").final_answer == "50"


def test_run_many_takes_a_plain_list() -> None:
    traces = lw.run_many(["a", "b", "c"], lw.policy_factory(script), [add, multiply], concurrency=2)
    assert [t.final_answer for t in traces] == ["50", "50", "50"]
    assert all(t.stopped_reason == "final" for t in traces)


def test_resume_and_fork_take_a_plain_list(tmp_path) -> None:
    with SQLiteStore(tmp_path / "runs.db") as store:
        with pytest.raises(lw.RunInterrupted):
            lw.run("t", lw.ScriptedPolicy([ADD, KeyboardInterrupt()]), [add, multiply], store=store, run_id="r")
        resumed = lw.resume("r", lw.ScriptedPolicy([MULTIPLY, final("50")]), [add, multiply], store=store)
        forked = lw.fork("r", 1, lw.ScriptedPolicy([MULTIPLY, final("50")]), [add, multiply], store=store)
    assert resumed.final_answer == forked.final_answer == "50"


def test_the_serving_app_runs_with_a_plain_list() -> None:
    from helpers.agui import serving, start_run, watch
    from loopwright.ui import app

    with serving(app(script(), [add, multiply], max_steps=4)) as base:
        events = watch(base, start_run(base, "Add 2 and 3, then multiply by 10."))
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED"
    assert finished["result"]["stopped_reason"] == "final" and finished["result"]["answer"] == "50"


def test_anything_but_a_registry_or_a_list_of_tools_is_refused_at_once() -> None:
    with pytest.raises(TypeError, match=r"put a single tool in a list: \[tool\]"):
        lw.run("t", script(), add)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="item 1 is 'add'"):
        lw.run("t", script(), [add, "add"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="registry must be a ToolRegistry or a list"):
        lw.run_many(["a"], script(), {"add": add})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tools= takes tool names, Tools or functions, got 3"):
        lw.run("t", script(), [add], tools=[3])  # type: ignore[list-item]
