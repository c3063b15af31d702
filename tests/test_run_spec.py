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
