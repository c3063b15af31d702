"""A sixth mode is its file plus one registration line: a toy mode written to a module of
its own runs through run, arun, iter_events and resume from a journal."""

from __future__ import annotations

import ast
import asyncio
import importlib
import sys
import textwrap
from pathlib import Path

import pytest

import loopwright as lw
from loopwright.runtime.spec import MODES

# A toy mode: ask the model which tool to call, call it once with x=2, answer with the
# result, and record each step; limits come from the runtime like any mode's.
TOY = '''
from loopwright.modes.machine import CallTool, PolicyFailed, Stop
from loopwright.policy import ModelRequest
from loopwright.runtime import register_mode
from loopwright.trace import Step


def machine(view, settings):
    k = view.next_index
    try:
        call = yield ModelRequest(f"Task: {view.task}\\nTools: {', '.join(view.registry.names)}\\nTool:", ("\\n",))
    except PolicyFailed as failed:
        yield Step(k, "error", error=failed.message)
        yield Stop(failed.reason)
        return
    name = call.text.strip()
    executed = yield CallTool(name, {"x": 2}, str(k))
    yield Step(k, executed.kind, raw=call.text, tool=name, args={"x": 2}, observation=executed.result.observation,
               usage=call.usage)
    try:
        answer = yield ModelRequest(f"{name}(2) = {executed.result.observation}\\nAnswer:", ("\\n",))
    except PolicyFailed as failed:
        yield Step(k + 1, "error", error=failed.message)
        yield Stop(failed.reason)
        return
    yield Step(k + 1, "final", raw=answer.text, usage=answer.usage)
    yield Stop("final", answer.text.strip())


register_mode("toy", machine, settings={"max_steps": 2})
'''


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "toy_mode.py").write_text(textwrap.dedent(TOY), "utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("toy_mode", None)
    importlib.import_module("toy_mode")
    yield "toy"
    MODES.pop("toy", None)
    sys.modules.pop("toy_mode", None)


def square(x: int) -> int:
    """The square of x."""
    return x * x


def tools(calls: list[int] | None = None) -> lw.ToolRegistry:
    def counted(x: int) -> int:
        """The square of x."""
        if calls is not None:
            calls.append(x)
        return square(x)

    return lw.ToolRegistry([lw.tool(name="square")(counted)])


def test_the_toy_mode_is_its_machine_plus_one_registration_line():
    body = ast.parse(TOY).body
    assert {type(node) for node in body} == {ast.ImportFrom, ast.FunctionDef, ast.Expr}
    [line] = [node for node in body if isinstance(node, ast.Expr)]
    assert line.lineno == line.end_lineno and "register_mode(" in ast.unparse(line)


def test_a_registered_mode_runs_through_run(toy):
    trace = lw.run("square 2", lw.ScriptedPolicy(["square", "4"]), tools(), mode=toy)
    assert (trace.final_answer, trace.stopped_reason, trace.mode) == ("4", "final", "toy")
    assert [s.kind for s in trace.steps] == ["action", "final"]
    assert trace.llm_calls == 2 and trace.tool_calls == 1
    assert trace.steps[0].observation == "4"


def test_a_registered_mode_runs_through_arun(toy):
    trace = asyncio.run(lw.arun("square 2", lw.ScriptedPolicy(["square", "4"]), tools(), mode=toy))
    assert (trace.final_answer, trace.stopped_reason) == ("4", "final")


def test_a_registered_mode_runs_through_iter_events(toy):
    events = list(lw.iter_events("square 2", lw.ScriptedPolicy(["square", "4"]), tools(), mode=toy))
    kinds = [e.kind for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert "tool_started" in kinds and kinds.count("step") == 2
    assert events[-1].trace.final_answer == "4"


def test_a_registered_mode_resumes_from_its_journal(toy, tmp_path):
    store = lw.SQLiteStore(str(tmp_path / "runs.db"))
    calls: list[int] = []
    with pytest.raises(lw.RunInterrupted):
        lw.run("square 2", lw.ScriptedPolicy(["square", KeyboardInterrupt()]), tools(calls), mode=toy,
               store=store, run_id="r")
    assert store.load_run("r").status == "interrupted"
    rest = lw.ScriptedPolicy(["4"])
    trace = lw.resume("r", rest, tools(calls), store=store)
    rest.assert_consumed()  # the first call was replayed from the journal, not asked again
    assert calls == [2]  # the tool ran once across both
    assert (trace.final_answer, trace.stopped_reason, trace.mode) == ("4", "final", "toy")
    assert store.load_run("r").status == "finished"


def test_a_registered_modes_settings_default_and_journal_like_the_others(toy, tmp_path):
    store = lw.SQLiteStore(str(tmp_path / "runs.db"))
    lw.run("square 2", lw.ScriptedPolicy(["square", "4"]), tools(), mode=toy, store=store, run_id="r")
    assert store.load_run("r").config["max_steps"] == 2
    with pytest.raises(TypeError, match="unknown run option.*toy.*max_reflections"):
        lw.run("q", lw.ScriptedPolicy([]), tools(), mode=toy, max_reflections=1)
    with pytest.raises(ValueError, match="mode must be one of"):
        lw.run("q", lw.ScriptedPolicy([]), tools(), mode="seventh")
