"""Results past max_observation_chars are kept whole under a handle, shown as head and tail,
and read back with the built-in read_output (tools/handles.py, the gate, ReAct)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopwright as lw
from conftest import STORE_KINDS, open_journal
from loopwright.durable.base import StoreBase
from loopwright.modes.machine import Record
from loopwright.tools.handles import (
    READ_OUTPUT_SCHEMA,
    keep_output,
    read_output,
    stub,
    view,
)
from loopwright.tools.results import ToolError, ToolResult
from loopwright.trace import estimate_tokens, load_trace

HANDLE = re.compile(r'read_output\(handle="([^"]+)"')


def table(size: int) -> str:
    """`size` characters of rows, some of them not ASCII (pages are cut by characters)."""
    rows, total, n = [], 0, 0
    while total < size:
        row = f"row {n:07d} value é and ☃ and padding to make the row longer\n"
        rows.append(row)
        total += len(row)
        n += 1
    return "".join(rows)[:size]


def dump_registry(text: str, cap: int, calls: list[str] | None = None) -> lw.ToolRegistry:
    @lw.tool
    def dump() -> str:
        """Dump the whole table."""
        if calls is not None:
            calls.append("dump")
        return text

    return lw.ToolRegistry([dump], max_observation_chars=cap)


class Reader:
    """A scripted policy (loop logic only): call dump, then page through the handle named in
    the prompt with read_output, `cap` characters at a time, then answer. Records prompts."""

    def __init__(self, size: int, cap: int, start: int = 0) -> None:
        self.size, self.cap, self.offset = size, cap, start
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        handles = HANDLE.findall(prompt)
        if not handles:
            return 'Thought: get the table\nAction: dump\nAction Input: {}'
        if self.offset >= self.size:
            return "Thought: read it all\nFinal Answer: read"
        offset, self.offset = self.offset, self.offset + self.cap
        return (f'Thought: read on\nAction: read_output\nAction Input: '
                f'{{"handle": "{handles[0]}", "offset": {offset}, "length": {self.cap}}}')


def pages(trace: lw.Trace) -> str:
    return "".join(s.observation or "" for s in trace.steps if s.tool == "read_output" and s.error is None)


def test_a_result_past_the_cap_is_shown_as_head_and_tail_and_kept_whole() -> None:
    text = table(5_000)
    trace = lw.run("Dump it.", lw.ScriptedPolicy(['Thought: go\nAction: dump\nAction Input: {}',
                                                  "Thought: ok\nFinal Answer: done"]),
                   dump_registry(text, 400))
    step = trace.steps[0]
    assert trace.outputs == {"out-1": text}
    assert step.observation == view(text, "out-1", 400)
    assert step.observation.startswith(text[:300]) and step.observation.endswith(text[-100:])
    assert 'out-1: 5000 chars in all' in step.observation and len(step.observation) < 600
    assert step.meta["output"] == "out-1" and step.meta["output_chars"] == 5000
    assert 'read_output(handle="out-1", offset=300' in trace.prompt_for(trace.steps[1])
    again = lw.Trace.from_dict(trace.to_dict())
    assert again.outputs == trace.outputs and again.to_dict() == trace.to_dict()


def test_a_trace_file_keeps_the_outputs_and_refuses_a_bad_table(tmp_path: Path) -> None:
    trace = lw.run("Dump it.", lw.ScriptedPolicy(['Thought: go\nAction: dump\nAction Input: {}',
                                                  "Thought: ok\nFinal Answer: done"]),
                   dump_registry(table(1_000), 100))
    path = tmp_path / "trace.json"
    path.write_text(trace.to_json(), encoding="utf-8")
    assert load_trace(path).outputs == {"out-1": table(1_000)}
    bad = {**trace.to_dict(), "outputs": {"out-1": ["not", "text"]}}
    path.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(ValueError, match="outputs must map handles to strings"):
        load_trace(path)


def test_a_result_within_the_cap_is_unchanged_and_gets_no_handle() -> None:
    trace = lw.run("Dump it.", lw.ScriptedPolicy(['Thought: go\nAction: dump\nAction Input: {}',
                                                  "Thought: ok\nFinal Answer: done"]),
                   dump_registry("x" * 400, 400))
    assert trace.steps[0].observation == "x" * 400 and trace.outputs == {}
    assert "outputs" not in trace.to_dict()


def test_read_output_pages_join_to_the_original() -> None:
    text = table(20_000)
    policy = Reader(len(text), 1_000)
    trace = lw.run("Read the table.", policy, dump_registry(text, 1_000), max_steps=40)
    assert trace.stopped_reason == "final" and pages(trace) == text
    assert trace.tool_calls == 21  # dump and twenty pages: read_output is a tool call
    assert list(trace.outputs) == ["out-1"]  # pages never get a handle of their own


def test_read_output_is_bounded_and_says_what_was_wrong() -> None:
    outputs = {"out-1": "abcdef" * 100}
    assert read_output(outputs, {"handle": "out-1", "offset": 2, "length": 4}, 50).observation == "cdef"
    assert read_output(outputs, {"handle": "out-1", "length": 10_000}, 50).observation == outputs["out-1"][:50]
    assert read_output(outputs, {"input": "out-1"}, 50).observation == outputs["out-1"][:50]  # name[out-1]
    for args, says in [({"handle": "out-9"}, "unknown handle 'out-9' (this run's handles: out-1)"),
                       ({"handle": "out-1", "offset": 600}, "offset 600 is past the end of out-1 (600 chars)"),
                       ({"handle": "out-1", "offset": -1}, "offset must be an integer >= 0, got -1"),
                       ({"handle": "out-1", "length": True}, "length must be an integer >= 1, got True"),
                       ({"handle": 3}, "handle must be a string"),
                       ({"handle": "out-1", "page": 2}, "unknown argument(s) page")]:
        result = read_output(outputs, args, 50)
        assert result.error is not None and result.error.kind == "invalid_args"
        assert says in result.observation and result.observation.startswith("ERROR[read_output]: invalid args: ")
    assert list(outputs) == ["out-1"]


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                          max_size=3), max_leaves=6)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.dictionaries(st.sampled_from(["handle", "offset", "length", "input", "x"]), json_values,
                                 max_size=4),
                 json_values),
       st.integers(min_value=-1, max_value=50))
def test_read_output_never_raises_and_returns_a_slice_or_an_error(args: object, cap: int) -> None:
    """The model writes read_output's arguments: anything at all gets a slice of a kept
    text no longer than the cap, or an invalid_args error it can read."""
    outputs = {"out-1": "0123456789" * 10, "out-2": ""}
    result = read_output(outputs, args, cap)
    if result.error is None:
        handle, offset = result.args["handle"], result.args.get("offset", 0)
        text = outputs[handle]
        assert result.observation == text[offset:offset + len(result.observation)]
        assert cap < 0 or len(result.observation) <= cap
    else:
        assert result.error.kind == "invalid_args" and result.observation.startswith("ERROR[read_output]: ")
    assert list(outputs) == ["out-1", "out-2"]


class Native:
    """A policy that sees the whole request: records the tool names of each."""

    def __init__(self, replies: list[str]) -> None:
        self.replies, self.tools = replies, []

    def complete(self, request: lw.ModelRequest) -> str:
        self.tools.append([t["name"] for t in request.tools])
        return self.replies[len(self.tools) - 1]


def test_read_output_joins_the_tools_sent_once_a_result_is_kept() -> None:
    policy = Native(['Thought: go\nAction: dump\nAction Input: {}',
                     'Thought: read\nAction: read_output\nAction Input: {"handle": "out-1", "offset": 10}',
                     "Thought: ok\nFinal Answer: done"])
    trace = lw.run("Dump it.", policy, dump_registry(table(3_000), 200))
    assert policy.tools == [["dump"], ["dump", "read_output"], ["dump", "read_output"]]
    assert trace.steps[1].observation == table(3_000)[10:210]
    assert READ_OUTPUT_SCHEMA["parameters"]["required"] == ["handle"]


def test_read_output_needs_no_approval_and_a_registry_tool_of_that_name_wins() -> None:
    @lw.tool(requires_approval=True)
    def dump() -> str:
        """Dump the table (approval needed)."""
        return "y" * 500

    script = ['Thought: go\nAction: dump\nAction Input: {}',
              'Thought: read\nAction: read_output\nAction Input: {"handle": "out-1"}', "Thought: ok\nFinal Answer: x"]
    trace = lw.run("t", lw.ScriptedPolicy(script), lw.ToolRegistry([dump], max_observation_chars=100),
                   approver=lambda request: True)
    assert trace.steps[1].observation == "y" * 100 and trace.steps[1].error is None

    @lw.tool(name="read_output")
    def own_reader(handle: str) -> str:
        """The user's own reader."""
        return f"mine: {handle}"

    trace = lw.run("t", lw.ScriptedPolicy(script), lw.ToolRegistry([dump, own_reader], max_observation_chars=100),
                   approver=lambda request: True)
    assert trace.steps[1].observation == "mine: out-1"


def test_the_async_driver_keeps_and_reads_the_same() -> None:
    text = table(5_000)
    sync = lw.run("Read the table.", Reader(len(text), 1_000), dump_registry(text, 1_000), max_steps=10)
    done = asyncio.run(lw.arun("Read the table.", Reader(len(text), 1_000), dump_registry(text, 1_000), max_steps=10))
    assert pages(done) == pages(sync) == text and done.outputs == sync.outputs


def test_rewoo_evidence_shows_the_view_and_keeps_the_result() -> None:
    text = table(3_000)
    plan = '{"plan": [{"id": "E1", "tool": "dump", "args": {}}]}'
    seen: list[str] = []

    def policy(prompt: str) -> str:
        seen.append(prompt)
        return plan if len(seen) == 1 else "done"

    trace = lw.run("Dump it.", policy, dump_registry(text, 300), mode="rewoo")
    assert trace.outputs == {"out-E1": text}
    assert "out-E1: 3000 chars in all" in seen[1] and len(seen[1]) < 1_500


def _journaled(store: StoreBase, size: int, cap: int, budget: int) -> tuple[str, Reader]:
    """A journaled run that reads `size` characters and stops (max_steps) part way."""
    text = table(size)
    policy = Reader(len(text), cap)
    first = lw.run("Read the table.", policy, dump_registry(text, cap), store=store, run_id="r", max_steps=4,
                   context_tokens=budget)
    assert first.stopped_reason == "max_steps" and first.outputs == {"out-1": text}
    return text, policy


def check_resume_and_fork(store: StoreBase, size: int, cap: int, budget: int) -> None:
    text, before = _journaled(store, size, cap, budget)
    calls: list[str] = []
    resumed_policy = Reader(len(text), cap, start=before.offset)
    resumed = lw.resume("r", resumed_policy, dump_registry(text, cap, calls), store=store,
                        max_steps=size // cap + 10, context_tokens=budget)
    assert resumed.stopped_reason == "final" and calls == []  # the dump was replayed, not run again
    assert resumed.outputs == {"out-1": text} and pages(resumed) == text
    assert store.trace("r").outputs == {"out-1": text}  # the journal holds it whole
    forked_policy = Reader(len(text), cap)
    forked = lw.fork("r", 1, forked_policy, dump_registry(text, cap, calls), store=store, new_run_id="f",
                     max_steps=size // cap + 10, context_tokens=budget)
    assert forked.stopped_reason == "final" and calls == [] and pages(forked) == text
    assert forked.outputs == {"out-1": text} and store.trace("f").outputs["out-1"] == text
    prompts = before.prompts + resumed_policy.prompts + forked_policy.prompts
    assert max(estimate_tokens(p) for p in prompts) <= budget


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreBase]:
    with open_journal(request.param, request, tmp_path / "runs.db") as s:
        yield s


def test_resume_and_fork_keep_the_handles(store: StoreBase) -> None:
    check_resume_and_fork(store, 30_000, 2_000, 3_000)


@pytest.mark.slow
def test_a_5mb_result_read_back_whole_under_the_budget_through_resume_and_fork(tmp_path: Path) -> None:
    """Issue 25's check: a 5 MB result; every prompt stays under context_tokens, the pages
    read through read_output join to the original, and resume and fork keep the handle."""
    with lw.SQLiteStore(tmp_path / "runs.db") as store:
        check_resume_and_fork(store, 5_000_000, 250_000, 120_000)


def test_a_stubbed_page_points_back_into_the_result_it_was_read_from() -> None:
    text = table(40_000)
    policy = Reader(len(text), 2_000)
    trace = lw.run("Read the table.", policy, dump_registry(text, 2_000), max_steps=30, context_tokens=3_000)
    assert pages(trace) == text and list(trace.outputs) == ["out-1"]
    assert 'read_output(handle="out-1", offset=2000) reads it back]' in "\n".join(policy.prompts)
    assert all("out-1" in prompt for prompt in policy.prompts[1:])  # a summarised prompt still names it
    stubbed = [k for f in trace.meta["folds"] if f["kind"] == "stub_results" for k in f["folded_steps"]]
    assert 1 in stubbed and len(stubbed) > 10
    assert max(estimate_tokens(p) for p in policy.prompts) <= 3_000


def test_a_summarised_prompt_still_names_the_kept_results_it_folded_away() -> None:
    text = table(12_000)
    prompts: list[str] = []

    @lw.tool
    def note(text: str) -> str:
        """Write a note down."""
        return f"noted: {text}"

    def policy(prompt: str) -> str:  # dump the table, then take notes: no later step names out-1
        prompts.append(prompt)
        if len(prompts) == 1:
            return "Thought: get the table\nAction: dump\nAction Input: {}"
        if len(prompts) == 40:
            return "Thought: done\nFinal Answer: read"
        thought = "keep count of the rows " * 8
        return f'Thought: {thought}\nAction: note\nAction Input: {{"text": "row count {len(prompts)}"}}'

    registry = lw.ToolRegistry([*dump_registry(text, 600), note], max_observation_chars=600)
    trace = lw.run("Read the table.", policy, registry, max_steps=40, context_tokens=1_000)
    assert trace.stopped_reason == "final"
    summarised = [f["before_step"] for f in trace.meta["folds"] if f["kind"] == "summarise" and 1 in f["folded_steps"]]
    assert summarised
    prompt = prompts[summarised[0] - 1]
    assert "Results kept whole, read_output(handle, offset, length) reads them: out-1 (12000 chars)" in prompt
    assert all("out-1" in p for p in prompts[1:])
    assert max(estimate_tokens(p) for p in prompts) <= 1_000


def test_a_view_under_a_cap_of_four_shows_the_head_and_no_tail() -> None:
    assert view("abcdefgh", "out-2", 3) == (
        'abc\n…[output out-2: 8 chars in all, shown: the first 3 and the last 0; '
        'read the rest with read_output(handle="out-2", offset=3, length=3)]…\n')


def test_a_kept_result_changes_only_what_the_model_sees() -> None:
    error = ToolError("dump", "x" * 50, "raised")
    for result in (ToolResult("dump", {"rows": 9}, ["a", "b"], observation="y" * 50, error=None, duration_s=0.25),
                   ToolResult("dump", {"rows": 9}, None, observation=error.as_observation(), error=error, duration_s=0.25)):
        outputs: dict[str, str] = {}
        shown, notes = keep_output(outputs, "4", result, 20)
        assert shown == ToolResult("dump", {"rows": 9}, result.value, observation=view(result.observation, "out-4", 20),
                                   error=result.error, duration_s=0.25)
        assert outputs == {"out-4": result.observation}
        assert notes == {"output": "out-4", "output_chars": len(result.observation)}


def test_a_cap_of_zero_keeps_every_nonempty_result_and_a_negative_cap_keeps_none() -> None:
    result = ToolResult("dump", {}, "x", observation="x", error=None, duration_s=0.0)
    outputs: dict[str, str] = {}
    assert keep_output(outputs, "1", result, 0)[1] == {"output": "out-1", "output_chars": 1}
    assert keep_output(outputs, "2", ToolResult("dump", {}, "", observation="", error=None, duration_s=0.0), 0) == (
        ToolResult("dump", {}, "", observation="", error=None, duration_s=0.0), None)
    assert keep_output(outputs, "3", result, -1) == (result, None)
    assert outputs == {"out-1": "x"}
    assert read_output(outputs, {"handle": "out-1"}, 0).observation == ""  # never more than the cap


def test_a_record_files_a_folded_result_once_under_its_handle() -> None:
    ctx = lw.iter_run("t", lambda prompt: "", lw.ToolRegistry()).context
    ctx.trace.outputs["out-1"] = "first"
    ctx.apply(Record(outputs={"out-1": "second", "out-E2": "evidence"}))
    assert ctx.trace.outputs == {"out-1": "first", "out-E2": "evidence"}


def test_a_stub_names_the_handle_and_an_offset_only_when_there_is_one() -> None:
    assert stub("out-3", 1200) == '[result folded away (1200 chars): read_output(handle="out-3") reads it back]'
    assert stub("out-3", 400, 800) == (
        '[result folded away (400 chars): read_output(handle="out-3", offset=800) reads it back]')


def test_with_no_cap_read_output_reads_to_the_end_or_the_length_asked() -> None:
    outputs = {"out-1": "0123456789"}
    assert read_output(outputs, {"handle": "out-1", "offset": 4}, -1).observation == "456789"
    assert read_output(outputs, {"handle": "out-1", "offset": 4, "length": 3}, -1).observation == "456"


def test_read_output_answers_as_the_read_output_tool_with_the_args_it_was_given() -> None:
    outputs = {"out-1": "0123456789"}
    for args in ({"handle": "out-1", "length": 2}, {"handle": "out-1", "offset": 99}):
        result = read_output(outputs, args, 50)
        assert (result.name, result.args, result.value, result.duration_s) == ("read_output", args, None, 0.0)


def test_an_unknown_handle_lists_the_first_eight_of_the_runs_handles() -> None:
    def says(outputs: dict[str, str]) -> str:
        return read_output(outputs, {"handle": "out-x"}, 50).observation

    assert says({}).endswith("unknown handle 'out-x' (this run's handles: none yet)")
    many = {f"out-{n}": "text" for n in range(1, 11)}
    assert says(many).endswith("(this run's handles: out-1, out-2, out-3, out-4, out-5, out-6, out-7, out-8)")


def test_bad_read_output_arguments_are_named_all_at_once() -> None:
    assert read_output({}, {"handle": "out-1", "page": 2, "from": 1}, 50).observation.endswith(
        "invalid args: unknown argument(s) from, page; read_output takes handle, offset, length")
    assert read_output({}, {"handle": None}, 50).observation.endswith(
        'invalid args: handle must be a string such as "out-3"')
