"""The step machines touch nothing: driven by a driver that serves every request from a
script, with the clock, the filesystem, sockets and threads made to fail, every mode
runs to its end (ReAct with folding, a summary its memory asks for included, and with
tool search; Reflexion with an evaluator). Each is handed a read-only view of its run,
not the RunContext: it changes the run only by the requests it yields."""

from __future__ import annotations

import builtins
import dataclasses
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import loopwright as lw
from conftest import act, final, make_registry
from loopwright.memory import HashingEmbedder
from loopwright.modes.machine import (
    WRITES,
    CallDone,
    CallTool,
    CheckClock,
    Embed,
    Evaluate,
    Executed,
    ModelCall,
    NextDone,
    Recall,
    Remember,
    StartTool,
    Summarize,
)
from loopwright.policy import ModelRequest
from loopwright.runtime.context import RunContext
from loopwright.runtime.front import start
from loopwright.runtime.spec import MODES
from loopwright.tools.registry import ToolResult
from loopwright.trace import Usage
from test_react_context_budget import LONG_THOUGHT, _page_registry
from test_toolsearch import many_tools, step
from test_tot import tree_policy


@contextmanager
def _nothing_reachable(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The clock, files, sockets and threads fail for as long as the block runs."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a machine reached outside itself")

    with monkeypatch.context() as patch:
        for name in ("monotonic", "time", "perf_counter"):
            patch.setattr(time, name, refused)
        patch.setattr(builtins, "open", refused)
        patch.setattr(socket, "socket", refused)
        patch.setattr(threading.Thread, "start", refused)
        yield


def _scripted(replies: Callable[[str], str], evaluator_says: Any = True) -> Callable[[Any], Any]:
    """A server of every request from a script: the model's replies from `replies`, a
    tool's result a page of figures, the clock never out, the evaluator `evaluator_says`, embeddings
    from a HashingEmbedder (pure arithmetic), memory that files nothing, asks for a summary
    each time (made by the script) and recalls a line."""
    started: list[CallTool] = []
    summaries: list[Any] = []
    vectors = HashingEmbedder()

    def result(call: CallTool) -> Executed:
        page = "3: " + "routine figures, nothing new. " * 12
        return Executed(ToolResult(call.name, call.args, page, observation=page, error=None, duration_s=0.0))

    def serve(item: Any) -> Any:
        if isinstance(item, ModelRequest):
            text = replies(item.prompt)
            return ModelCall(text, None, Usage.estimate(item.prompt, text), 0.0)
        if isinstance(item, CallTool):
            return result(item)
        if isinstance(item, StartTool):
            started.append(item.call)
            return None
        if isinstance(item, NextDone):
            call = started.pop(0)
            return CallDone(call.key, result(call))
        if isinstance(item, CheckClock):
            return False
        if isinstance(item, Evaluate):
            return evaluator_says
        if isinstance(item, Embed):
            return vectors.embed(item.texts)
        if isinstance(item, Remember):
            return ["a summary due"]  # what the memory would summarise: the driver makes it
        if isinstance(item, Summarize):
            summaries.append(item.pending)
            return ModelCall("Earlier steps read pages.", None, Usage(1, 1, 1), 0.0)
        if isinstance(item, Recall):
            return item.render("an earlier step read a page")
        raise AssertionError(f"an unexpected request: {item!r}")

    return serve


def _drive(run: lw.Run, serve: Callable[[Any], Any], monkeypatch: pytest.MonkeyPatch) -> lw.Trace:
    ctx, machine = run.context, run.machine
    value: Any = None
    with _nothing_reachable(monkeypatch):
        while True:
            try:
                item = machine.send(value)
            except StopIteration:
                return run.trace
            if isinstance(item, lw.Step):
                run.trace.steps.append(item)
                value = None
                continue
            if isinstance(item, WRITES):  # a change to the run: the one thing served from the context
                ctx.apply(item)
                value = None
                continue
            if isinstance(item, ModelRequest):
                ctx.trace.llm_calls += 1
            value = serve(item)


def _replies(script: list[str]) -> Callable[[str], str]:
    queue = list(script)
    return lambda prompt: queue.pop(0)


PLAN = json.dumps({"plan": [{"id": "E1", "tool": "add", "args": {"x": 1, "y": 2}},
                            {"id": "E2", "tool": "multiply", "args": {"x": "#E1", "y": 1}}]})


def _reading_pages() -> Callable[[str], str]:
    seen: list[int] = []

    def reply(prompt: str) -> str:
        seen.append(1)
        if len(seen) == 30:
            return final("ok")
        return f'Thought: {LONG_THOUGHT}\nAction: fetch\nAction Input: {{"page": {len(seen)}}}'

    return reply


CASES: dict[str, tuple[str, dict[str, Any], Callable[[], Callable[[str], str]], Callable[[], lw.ToolRegistry], str]] = {
    "react": ("react", {}, lambda: _replies([act("add", '{"x": 1, "y": 2}'), final("3")]), make_registry, "final"),
    "react_folding": ("react", {"max_steps": 40, "context_tokens": 1_500}, _reading_pages,
                      lambda: _page_registry({}), "final"),
    "react_tool_search": ("react", {"tool_search": 3, "tool_embedder": HashingEmbedder()},
                          lambda: _replies([step("search_tools", {"query": "wheather"}), final("ok")]),
                          many_tools, "final"),
    "rewoo": ("rewoo", {}, lambda: _replies([PLAN, "Final Answer: 3"]), make_registry, "final"),
    "plan_execute": ("plan_execute", {}, lambda: _replies([PLAN]), make_registry, "final"),
    "reflexion": ("reflexion", {"evaluator": lambda task, trace: True},
                  lambda: _replies([final("3")]), make_registry, "final"),
    "tot": ("tot", {"search": "dfs"},
            lambda: tree_policy({None: ["A", "B"]}, {"A": "impossible", "B": "2"}), make_registry, "exhausted"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_mode_runs_against_a_scripted_driver_with_the_clock_files_sockets_and_threads_failing(
        case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    mode, options, replies, registry, stopped = CASES[case]
    options = {"timeout_s": 600, **options}  # a run with a clock: a machine that read it would fail here
    real = lw.run("What is 1 + 2?", replies(), registry(), mode=mode, **options)  # also loads what it imports
    assert real.stopped_reason == stopped
    run = start(lw.RunSpec("What is 1 + 2?", mode, **options), replies(), registry())
    trace = _drive(run, _scripted(replies()), monkeypatch)
    assert trace.stopped_reason == stopped
    assert [s.kind for s in trace.steps if s.kind != "action"] == [s.kind for s in real.steps if s.kind != "action"]
    if case == "react_folding":
        assert "summarise" in [f["kind"] for f in trace.meta["folds"]]
        assert sum(f.get("summary_calls", 0) for f in trace.meta["folds"]) >= 1  # asked of the driver
    if case == "react_tool_search":
        assert trace.steps[0].meta["tools_loaded"] == real.steps[0].meta["tools_loaded"] != []


@pytest.mark.parametrize("case", list(CASES))
def test_every_mode_is_handed_a_read_only_view_of_its_run_not_the_run_context(
        case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    mode, options, replies, registry, stopped = CASES[case]
    handed: list[tuple[Any, Any]] = []
    made = MODES[mode]

    def machine(view: Any, settings: Any) -> Any:
        handed.append((view, settings))
        return made.machine(view, settings)

    monkeypatch.setitem(MODES, mode, dataclasses.replace(made, machine=machine))
    run = start(lw.RunSpec("What is 1 + 2?", mode, **options), replies(), registry())
    trace = run.run()
    assert trace.stopped_reason == stopped
    [(view, settings)] = handed
    assert not isinstance(view, RunContext) and not isinstance(view.trace, lw.Trace)
    assert view.task == trace.task and view.trace.steps == tuple(trace.steps) and view.next_index == len(trace.steps) + 1
    assert view.trace.stopped_reason == stopped and view.registry is run.context.registry
    for name in ("task", "prompts", "registry", "limits", "trace", "output", "_ctx", "anything"):
        with pytest.raises(AttributeError):
            setattr(view, name, None)
    for name in ("steps", "stopped_reason", "final_answer", "output", "transcript", "meta", "llm_calls", "_trace"):
        with pytest.raises(AttributeError):
            setattr(view.trace, name, None)
    for written in (view.trace.meta, view.trace.outputs):
        with pytest.raises(TypeError):
            written["planted"] = "x"  # type: ignore[index]
    with pytest.raises(AttributeError):
        view.trace.steps.append(trace.steps[0])  # a tuple
    for method in ("stop", "use_registry", "record", "apply"):
        assert not hasattr(view, method)
    with pytest.raises(AttributeError):
        settings.max_tokens = 1  # the RunSpec is frozen


def test_a_machine_that_writes_to_its_view_ends_its_run_with_an_internal_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def machine(view: Any, settings: Any) -> Any:
        yield lw.Step(view.next_index, "final")
        view.trace.final_answer = "written"

    monkeypatch.setitem(MODES, "writer", dataclasses.replace(MODES["react"], machine=machine))
    trace = lw.run("t", lambda prompt: "", lw.ToolRegistry(), mode="writer")
    assert trace.stopped_reason == "error" and trace.final_answer is None
    assert "read-only" in (trace.steps[-1].error or "")


INTERRUPTED = {
    "react": [act("add", '{"x": 1, "y": 2}'), KeyboardInterrupt()],
    "reflexion": [act("add", '{"x": 1, "y": 2}'), KeyboardInterrupt()],
    "tot": ["1. A\n2. B", KeyboardInterrupt()],
}


@pytest.mark.parametrize("mode", list(INTERRUPTED))
def test_a_run_ended_outside_its_machine_still_gets_what_the_machine_records(mode: str) -> None:
    with pytest.raises(lw.RunInterrupted) as caught:
        lw.run("What is 1 + 2?", lw.ScriptedPolicy(INTERRUPTED[mode]), make_registry(), mode=mode)
    trace = caught.value.trace
    assert trace.stopped_reason == "interrupted"
    if mode == "tot":
        assert trace.meta["tot"]["expanded"] == 1 and trace.meta["tot"]["nodes"] == 1
        return
    assert "Observation: 3" in trace.transcript and trace.prompt_for(trace.steps[0])
    if mode == "reflexion":
        assert trace.transcript.startswith("Attempt 1:")
        assert trace.meta["attempts"] == [{"attempt": 1, "first_step": 1, "last_step": 1,
                                           "stopped_reason": "interrupted"}]
    else:
        assert trace.scratchpad.startswith(trace.prompt_for(trace.steps[0]) or "-")
