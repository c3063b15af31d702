"""lw.run_spec / lw.arun_spec: a run started from a RunSpec, the value `lw.run` builds
from its keywords, the journal stores and resume rebuilds."""

from __future__ import annotations

import asyncio

import pytest

import loopwright as lw
from conftest import act, final, make_registry
from helpers.durable import comparable
from loopwright.durable.sqlite import SQLiteStore

SCRIPT = [act("add", '{"x": 2, "y": 3}'), act("multiply", '{"x": 5, "y": 10}'), final("50")]


def test_run_spec_runs_what_run_runs_with_the_same_keywords() -> None:
    by_keywords = lw.run("sum", lw.ScriptedPolicy(SCRIPT), make_registry(), max_steps=5, on_repeat="stop")
    spec = lw.RunSpec("sum", max_steps=5, on_repeat="stop")
    by_spec = lw.run_spec(spec, lw.ScriptedPolicy(SCRIPT), make_registry())
    assert by_spec.final_answer == "50" and by_spec.tool_calls == 2
    assert comparable(by_spec) == comparable(by_keywords)


def test_a_replaced_spec_changes_the_run_and_leaves_the_spec_alone() -> None:
    spec = lw.RunSpec("sum", max_steps=5)
    short = spec.replace(max_steps=1)
    trace = lw.run_spec(short, lw.ScriptedPolicy(SCRIPT[:1]), make_registry())
    assert trace.stopped_reason == "max_steps" and trace.llm_calls == 1
    assert spec.max_steps == 5


def test_a_spec_with_another_modes_setting_is_refused_before_anything_runs() -> None:
    with pytest.raises(TypeError, match="max_reflections"):
        lw.run_spec(lw.RunSpec("sum", "react", max_reflections=2), lw.ScriptedPolicy([]), make_registry())


def test_arun_spec_journals_the_run_and_resume_rebuilds_the_spec(tmp_path) -> None:
    calls: list[tuple[str, dict[str, object]]] = []
    with SQLiteStore(tmp_path / "runs.db") as store:
        spec = lw.RunSpec("sum", max_steps=5, store=store, run_id="r1")
        trace = asyncio.run(lw.arun_spec(spec, lw.ScriptedPolicy(SCRIPT), make_registry(calls)))
        assert trace.final_answer == "50" and trace.run_id == "r1"
        # the whole run is in the journal: resuming replays it and calls neither model nor tool
        again = lw.resume("r1", lw.ScriptedPolicy([]), make_registry(calls), store=store)
    assert again.final_answer == "50"
    assert [name for name, _ in calls] == ["add", "multiply"]


# -- options grouped: lw.Limits and each mode's settings object ---------------------------


def test_grouped_options_make_the_same_spec_and_run_as_flat_ones() -> None:
    grouped = lw.RunSpec("sum", limits=lw.Limits(max_steps=5, timeout_s=30, max_tokens=64),
                         settings=lw.ReActSettings(on_repeat="stop", dialect="json"))
    assert grouped == lw.RunSpec("sum", max_steps=5, timeout_s=30, max_tokens=64, on_repeat="stop", dialect="json")
    flat = lw.run("sum", lw.ScriptedPolicy(SCRIPT), make_registry(), max_steps=5, on_repeat="stop")
    by_objects = lw.run("sum", lw.ScriptedPolicy(SCRIPT), make_registry(), limits=lw.Limits(max_steps=5),
                        settings=lw.ReActSettings(on_repeat="stop"))
    assert comparable(by_objects) == comparable(flat)
    tot = lw.RunSpec("t", "tot", settings=lw.ToTSettings(search="dfs", depth=2))
    assert (tot.search, tot.depth, tot.setting("branching")) == ("dfs", 2, 3)
    assert lw.RunSpec("t", "plan_execute", settings=lw.PlanExecuteSettings(max_replans=0)).max_replans == 0
    reflexion = lw.RunSpec("t", "reflexion", settings=lw.ReflexionSettings(max_reflections=1, on_repeat="off"))
    assert (reflexion.max_reflections, reflexion.on_repeat) == (1, "off")
    assert lw.RunSpec("t", "reflexion", settings=lw.ReActSettings(dialect="brackets")).dialect == "brackets"


@pytest.mark.parametrize(("mode", "settings"), [
    ("react", lw.ToTSettings(depth=2)), ("react", lw.ReflexionSettings(max_reflections=1)),
    ("rewoo", lw.ReActSettings()), ("plan_execute", lw.ReActSettings(on_repeat="stop")),
    ("tot", lw.PlanExecuteSettings(max_replans=1)), ("reflexion", lw.ToTSettings()),
])
def test_a_settings_object_for_another_mode_is_a_type_error_at_the_call(mode: str, settings: object) -> None:
    policy = lw.ScriptedPolicy([])
    with pytest.raises(TypeError, match=f"not for mode '{mode}'"):
        lw.run("t", policy, make_registry(), mode, settings=settings)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=f"not for mode '{mode}'"):
        asyncio.run(lw.arun("t", policy, make_registry(), mode, settings=settings))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=f"not for mode '{mode}'"):
        lw.Agent("a", policy, make_registry(), mode, settings=settings)  # type: ignore[arg-type]


@pytest.mark.parametrize(("make", "message"), [
    (lambda: lw.Limits(max_steps=0), "max_steps must be a positive integer"),
    (lambda: lw.Limits(timeout_s=-1), "timeout_s must be a positive number"),
    (lambda: lw.Limits(cost_budget_usd=0), "cost_budget_usd must be a positive number of dollars"),
    (lambda: lw.Limits(max_tokens=True), "max_tokens must be a positive integer"),
    (lambda: lw.ReActSettings(on_repeat="again"), "on_repeat must be"),
    (lambda: lw.ReActSettings(dialect="xml"), "dialect must be one of"),
    (lambda: lw.ReActSettings(max_nudges=-1), "max_nudges must be an integer >= 0"),
    (lambda: lw.ReflexionSettings(max_reflections=-1), "max_reflections must be an integer >= 0"),
    (lambda: lw.ReflexionSettings(evaluator="yes"), "evaluator must be a callable"),
    (lambda: lw.PlanExecuteSettings(max_replans=-1), "max_replans must be an integer >= 0"),
    (lambda: lw.ToTSettings(threshold=2), "threshold must be a number from 0 to 1"),
    (lambda: lw.ToTSettings(search="best"), "search must be 'bfs' or 'dfs'"),
])
def test_limits_and_settings_check_their_values_when_made(make, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        make()


def test_settings_objects_take_keywords_only_and_a_value_given_twice_must_agree() -> None:
    with pytest.raises(TypeError):
        lw.ToTSettings("dfs")  # type: ignore[misc]
    with pytest.raises(TypeError, match="max_steps given twice, 3 and 4"):
        lw.RunSpec("t", max_steps=3, limits=lw.Limits(max_steps=4))
    assert lw.RunSpec("t", max_steps=4, limits=lw.Limits(max_steps=4)).max_steps == 4
    with pytest.raises(TypeError, match="limits must be an lw.Limits"):
        lw.RunSpec("t", limits={"max_steps": 4})  # type: ignore[arg-type]


def test_resume_and_fork_take_grouped_limits_over_what_the_run_recorded(tmp_path) -> None:
    with SQLiteStore(tmp_path / "runs.db") as store:
        stopped = lw.run("sum", lw.ScriptedPolicy(SCRIPT[:1]), make_registry(), max_steps=1, store=store, run_id="r")
        assert stopped.stopped_reason == "max_steps"
        longer = lw.resume("r", lw.ScriptedPolicy(SCRIPT[1:]), make_registry(), store=store,
                           limits=lw.Limits(max_steps=5))
        assert (longer.final_answer, longer.llm_calls) == ("50", 3)
        forked = lw.fork("r", 1, lw.ScriptedPolicy(SCRIPT[1:]), make_registry(), store=store, new_run_id="f",
                         limits=lw.Limits(max_steps=4))
        assert forked.final_answer == "50" and store.load_run("f").config["max_steps"] == 4


@pytest.mark.slow
def test_mypy_checks_the_options_every_front_door_takes(tmp_path) -> None:
    import subprocess
    import sys

    program = tmp_path / "uses.py"
    program.write_text(
        "import loopwright as lw\n"
        "reg = lw.ToolRegistry([])\n"
        "lw.run('t', lambda p: p, reg, max_steps=8)\n"
        "lw.run('t', lambda p: p, reg, limits=lw.Limits(max_steps=8), settings=lw.ToTSettings(depth=2))\n"
        "lw.run_rewoo('t', lambda p: p, reg, max_stepz=8)\n"
        "lw.run('t', lambda p: p, reg, max_steps='8')\n",
        "utf-8",
    )
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(program)],
                         capture_output=True, text=True, check=False)
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors] == ["5", "6"], out.stdout
