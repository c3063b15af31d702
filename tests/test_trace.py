"""Trace records: JSON-safe, exact round trip, readable."""

from __future__ import annotations

import json

import loopwright as lw
from conftest import act, final
from loopwright.trace import Step, Trace, Usage, estimate_tokens


def test_to_dict_is_json_safe_and_round_trips_exactly(registry):
    class Odd:
        def __str__(self) -> str:
            return "odd!"

    @lw.tool
    def weird(x: int) -> dict:
        """Return a dict holding a non-JSON value."""
        return {"value": Odd(), "x": x}

    registry.register(weird)
    policy = lw.ScriptedPolicy([act("weird", '{"x": 1}'), act("add", '{"x": 1, "y": 1}'), final("ok")])
    trace = lw.run("t", policy, registry)
    data = trace.to_dict()
    text = json.dumps(data)  # must not raise
    again = lw.Trace.from_dict(json.loads(text))
    assert again.to_dict() == data
    assert again.steps[0].observation == '{"value": "odd!", "x": 1}'
    assert again.final_answer == "ok" and again.usage == trace.usage


def test_step_is_frozen():
    step = Step(1, "action")
    try:
        step.kind = "final"  # type: ignore[misc]
    except AttributeError:
        return
    raise AssertionError("Step must be immutable")


def test_usage_adds_and_reports_billed_total():
    total = Usage(10, 4, 2) + Usage(5, 5, 1, estimated=True)
    assert total == Usage(15, 9, 3, estimated=True)
    assert total.total_tokens == 18


def test_estimate_is_conservative_for_english():
    text = "The quick brown fox jumps over the lazy dog. " * 10
    assert estimate_tokens(text) >= len(text) / 4  # never under a typical 4 bytes/token
    assert estimate_tokens("") == 0


def test_str_of_a_trace_names_steps_and_totals(registry):
    trace = lw.run("Add", lw.ScriptedPolicy([act("add", '{"x": 1, "y": 1}'), final("2")]), registry)
    text = str(trace)
    assert "add(" in text and "-> 2" in text
    assert "Stopped: final" in text and "model calls: 2" in text


WORDS = [f"word{i:02d}" for i in range(60)]


def test_str_cuts_long_text_at_word_boundaries_never_inside_a_word():
    @lw.tool
    def prose(topic: str) -> str:
        """Write some prose."""
        return " ".join(WORDS)

    thought = " ".join(WORDS)
    policy = lw.ScriptedPolicy([act("prose", '{"topic": "' + " ".join(WORDS[:20]) + '"}'), final("ok", thought)])
    lines = str(lw.run(" ".join(WORDS * 5), policy, lw.ToolRegistry([prose]))).splitlines()
    cut = [line for line in lines if "…" in line]
    assert len(cut) >= 2  # the task line and the observation
    for line in cut:
        for piece in line.split("…")[:-1]:  # the text before each mark ends on a whole word
            last = piece.replace('"', " ").replace("(", " ").split()[-1]
            assert last in WORDS, line


def test_str_shows_the_answer_on_the_final_step_line(registry):
    trace = lw.run("Add", lw.ScriptedPolicy([act("add", '{"x": 1, "y": 1}'), final("the sum is 2")]), registry)
    last = str(trace).splitlines()[-2]
    assert last.split()[:2] == ["2", "final"] and last.endswith("=> the sum is 2")


def test_str_leaves_no_step_line_blank(registry):
    plan = json.dumps({"plan": [{"id": "E1", "tool": "add", "args": {"x": 1, "y": 1}}]})
    trace = lw.run("Add", lw.ScriptedPolicy([plan, "It is 2."]), registry, mode="rewoo")
    lines = str(trace).splitlines()[1:-1]
    assert [line.split()[:2] for line in lines] == [["1", "plan"], ["2", "action"], ["3", "solve"]]
    assert all(len(line.split()) > 2 for line in lines)
    assert lines[0].endswith('"plan": [{"id": "E1", "tool": "add", "args": {"x": 1, "y": 1}}]}')
    assert lines[-1].endswith("=> It is 2.")


def test_str_marks_a_child_run_and_indents_its_steps_under_the_call(registry):
    helper = lw.Agent("helper", lw.ScriptedPolicy([act("add", '{"x": 20, "y": 22}'), final("forty-two")]),
                      registry)
    parent = lw.run("ask", lw.ScriptedPolicy([act("helper", '{"task": "add"}'), final("done")]),
                    lw.ToolRegistry([helper.as_tool()]))
    child_id = parent.steps[0].meta["child_run_id"]
    lines = str(parent).splitlines()
    at = next(i for i, line in enumerate(lines) if "helper(" in line)
    assert child_id in lines[at + 1] and "child run" in lines[at + 1]
    call_indent = len(lines[at]) - len(lines[at].lstrip())
    child_steps = lines[at + 2:at + 4]
    assert "add(" in child_steps[0] and "-> 42" in child_steps[0]
    assert child_steps[1].endswith("=> forty-two")
    assert all(len(line) - len(line.lstrip()) > call_indent + 4 for line in child_steps)
    assert lines[at + 4].split()[:2] == ["2", "final"]


def test_transcript_reads_as_the_react_exchange(registry):
    trace = lw.run("Add", lw.ScriptedPolicy([act("add", '{"x": 1, "y": 1}', "sum it"), final("2")]), registry)
    assert trace.transcript.startswith("Question: Add\nThought: sum it\nAction: add")
    assert trace.transcript.rstrip().endswith("Final Answer: 2")


def test_meta_with_keys_json_cannot_hold_still_round_trips():
    step = Step(1, "action", meta={(1, 2): "tuple key"}, args={"x": 1})
    trace = lw.Trace("t", "react", steps=[step])
    data = json.loads(json.dumps(trace.to_dict()))
    again = lw.Trace.from_dict(data)
    assert isinstance(again.steps[0].meta, dict) and "tuple key" in again.steps[0].meta["repr"]
    assert again.to_dict() == data


def test_an_empty_or_blank_final_answer_is_not_answered():
    for answer in ("", "  \n\t"):
        assert not lw.Trace(task="t", mode="rewoo", final_answer=answer, stopped_reason="final").answered
    assert lw.Trace(task="t", mode="react", final_answer="0", stopped_reason="final").answered
    assert not lw.Trace(task="t", mode="react", final_answer="42", stopped_reason="max_steps").answered


def test_str_of_a_trace_trims_a_long_task():
    text = str(lw.Trace(task="word " * 20_000, mode="react"))
    assert len(text.splitlines()[0]) < 300


def test_a_runs_usage_is_the_sum_of_what_was_added_read_at_any_time() -> None:
    trace = Trace(task="t", mode="react", usage=Usage(10, 10, 1))
    assert trace.usage == Usage(10, 10, 1)
    trace.add_usage(Usage(1, 2, 3))
    assert trace.usage == Usage(11, 12, 4)  # read after one call
    for n in range(5):
        trace.add_usage(Usage(n, n, n, estimated=n == 3))
    assert trace.usage == Usage(21, 22, 14, estimated=True)  # read after several: one sum
    assert trace.usage == Usage(21, 22, 14, estimated=True)  # and again, unchanged
    trace.usage = Usage(1, 1, 1)  # assigned: the total is what was assigned
    trace.add_usage(Usage(1, 0, 0))
    assert trace.usage == Usage(2, 1, 1)


def test_a_traces_usage_survives_copy_pickle_replace_and_round_trip() -> None:
    import copy
    import dataclasses
    import pickle

    trace = Trace(task="t", mode="react")
    trace.add_usage(Usage(3, 2, 1, estimated=True))
    for other in (copy.deepcopy(trace), pickle.loads(pickle.dumps(trace)), dataclasses.replace(trace)):
        assert other.usage == Usage(3, 2, 1, estimated=True) and other == trace
        other.add_usage(Usage(1, 1, 1))  # each its own: the original's total is untouched
        assert other.usage == Usage(4, 3, 2, estimated=True) and trace.usage == Usage(3, 2, 1, estimated=True)
    assert Trace.from_dict(trace.to_dict()).usage == Usage(3, 2, 1, estimated=True)
    assert "usage=Usage(prompt_tokens=3" in repr(trace)
    assert [f.name for f in dataclasses.fields(Trace)].count("usage") == 1  # one field, no private ones
    assert not any(f.name.startswith("_") for f in dataclasses.fields(Trace))


def test_usage_added_from_many_threads_while_others_read_is_counted_exactly_once() -> None:
    import threading

    trace = Trace(task="t", mode="react")
    seen: list[Usage] = []

    def add() -> None:
        for _ in range(2000):
            trace.add_usage(Usage(1, 1, 1))

    def read() -> None:
        for _ in range(2000):
            seen.append(trace.usage)

    threads = [threading.Thread(target=add) for _ in range(4)] + [threading.Thread(target=read) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert trace.usage == Usage(8000, 8000, 8000)
    assert all(u.prompt_tokens == u.evaluated_tokens == u.completion_tokens <= 8000 for u in seen)
