"""Bootstrapped tool examples: the successful calls of correct runs become examples,
they apply to a registry without changing the user's tools, and they travel as a
versioned JSON file that `loopwright run --examples` and `loopwright bootstrap` use."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import loopwright as lw
from loopwright.batch.bootstrap import FORMAT, VERSION, kept_calls
from loopwright.interfaces import cli
from loopwright.interfaces.common import apply_examples, load_tools
from loopwright.interfaces.demo_tools import demo_registry
from loopwright.prompting import templates

LOOPWRIGHT = Path(sys.executable).with_name("loopwright")


def act(name: str, args: dict[str, object]) -> str:
    return f"Thought: I use {name}\nAction: {name}\nAction Input: {json.dumps(args)}"


def final(answer: str) -> str:
    return f"Thought: done\nFinal Answer: {answer}"


LABELLED = [("What is 17 * 23?", "391"), ("What is the capital of Japan?", "Tokyo"), ("What is 2 ** 10?", 1024)]
SCRIPT = [
    act("calculate", {"expression": "17 ** ("}),  # fails: not kept, though the run is correct
    act("calculate", {"expression": "17 * 23"}),
    final("17 * 23 = 391"),
    act("lookup", {"query": "capital of Japan"}),
    final("Osaka"),  # wrong: nothing of this run is kept
    act("calculate", {"expression": "17 * 23"}),  # the same call again: kept once
    act("calculate", {"expression": "2 ** 10"}),
    final("1024"),
]


def _bootstrapped(**options: object) -> lw.BootstrapResult:
    return lw.bootstrap_examples(LABELLED, lw.ScriptedPolicy(list(SCRIPT)), demo_registry(), **options)  # type: ignore[arg-type]


def test_only_the_successful_calls_of_correct_runs_are_kept() -> None:
    result = _bootstrapped()
    assert (result.tasks_run, result.tasks_correct, result.kept) == (3, 2, 2)
    assert list(result.examples) == ["calculate"]  # the wrong run's lookup is not there
    assert [e.to_dict() for e in result.examples["calculate"]] == [
        {"args": {"expression": "17 * 23"}, "question": "What is 17 * 23?", "result": "391"},
        {"args": {"expression": "2 ** 10"}, "question": "What is 2 ** 10?", "result": "1024"},
    ]
    assert all(e.source == "bootstrap" for e in result.examples["calculate"])


def test_dedupe_off_and_max_per_tool_change_what_is_kept() -> None:
    kept_twice = _bootstrapped(dedupe=False)
    assert [e.args["expression"] for e in kept_twice.examples["calculate"]] == ["17 * 23", "17 * 23", "2 ** 10"]
    capped = _bootstrapped(max_per_tool=1)
    assert [e.args["expression"] for e in capped.examples["calculate"]] == ["17 * 23"]


def test_a_custom_checker_decides_what_is_correct() -> None:
    result = _bootstrapped(is_correct=lambda answer, expected: answer == "Osaka")
    assert result.tasks_correct == 1 and list(result.examples) == ["lookup"]
    assert result.examples["lookup"][0].args == {"query": "capital of Japan"}


def test_dict_items_and_a_registry_factory_per_task_are_accepted() -> None:
    made: list[lw.ToolRegistry] = []

    def fresh() -> lw.ToolRegistry:
        made.append(demo_registry())
        return made[-1]

    tasks = [{"question": q, "answer": a} for q, a in LABELLED]
    result = lw.bootstrap_examples(tasks, lw.ScriptedPolicy(list(SCRIPT)), fresh)
    assert len(made) == 3 and result.kept == 2
    with pytest.raises(ValueError, match="labelled task 1 must be a"):
        lw.bootstrap_examples(["no answer"], lw.ScriptedPolicy([]), demo_registry())  # type: ignore[list-item]
    with pytest.raises(ValueError, match="labelled task 2: needs an 'answer'"):
        lw.bootstrap_examples([LABELLED[0], {"task": "t"}], lw.ScriptedPolicy([]), demo_registry())
    with pytest.raises(TypeError, match="registry must be a ToolRegistry"):
        lw.bootstrap_examples(LABELLED, lw.ScriptedPolicy([]), [demo_registry()])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must return a ToolRegistry"):
        lw.bootstrap_examples(LABELLED, lw.ScriptedPolicy([]), lambda: None)  # type: ignore[arg-type, return-value]
    with pytest.raises(ValueError, match="max_per_tool"):
        lw.bootstrap_examples(LABELLED, lw.ScriptedPolicy([]), demo_registry(), max_per_tool=0)


def test_calls_the_schema_rejects_are_dropped_when_validating() -> None:
    strict = lw.ToolRegistry([lw.tool(lambda n: n, name="echo")])
    trace = lw.Trace(task="t", mode="react", steps=[
        lw.Step(0, "action", tool="echo", args={"n": 1, "extra": 2}, observation="1"),
        lw.Step(1, "action", tool="echo", args={"n": 2}, observation="2"),
        lw.Step(2, "nudge", tool="echo", args={"n": 2}, observation="repeated"),
        lw.Step(3, "action", tool="gone", args={"n": 3}, observation="3"),
    ])  # fmt: skip
    assert [e.args for _, e in kept_calls(trace, strict)] == [{"n": 2}]
    assert [e.args for _, e in kept_calls(trace, strict, validate=False)] == [{"n": 1, "extra": 2}, {"n": 2}]


def test_apply_gives_a_new_registry_and_leaves_the_tools_alone() -> None:
    registry = demo_registry()
    before = registry["calculate"].examples
    applied = _bootstrapped().apply(registry)
    assert registry["calculate"].examples == before  # unchanged
    assert applied is not registry and applied.names == registry.names
    assert [e.args["expression"] for e in applied["calculate"].examples[:2]] == ["17 * 23", "2 ** 10"]
    assert applied["calculate"].examples[2:] == before  # bootstrapped first, then the declared ones
    assert {e.source for e in applied["calculate"].examples[:2]} == {"bootstrap"}
    assert applied["lookup"] is registry["lookup"]
    last = _bootstrapped().apply(registry, placement="last")
    assert last["calculate"].examples[: len(before)] == before
    assert last["calculate"].examples[-1].args == {"expression": "2 ** 10"}
    with pytest.raises(ValueError, match="placement must be one of first, last, replace"):
        _bootstrapped().apply(registry, placement="middle")
    replaced = _bootstrapped().apply(registry, placement="replace")
    assert [e.args["expression"] for e in replaced["calculate"].examples] == ["17 * 23", "2 ** 10"]
    assert replaced["calculate"](expression="1 + 1") == 2  # still the same callable


def test_examples_for_a_tool_the_registry_lacks_are_an_error_or_skipped() -> None:
    result = lw.BootstrapResult({"absent": (lw.ToolExample({"x": 1}),)})
    with pytest.raises(lw.ExamplesError, match="'absent' that the registry does not have"):
        result.apply(demo_registry())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        applied = result.apply(demo_registry(), strict=False)
    assert applied.names == ("calculate", "lookup") and "left out" in str(caught[0].message)
    bad = lw.BootstrapResult({"calculate": (lw.ToolExample({"expr": "1"}),)})
    with pytest.raises(lw.ExamplesError, match="does not fit the tool's schema"):
        bad.apply(demo_registry())


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    result = _bootstrapped()
    path = result.save(tmp_path / "examples.json")
    data = json.loads(path.read_text())
    assert (data["format"], data["version"]) == (FORMAT, VERSION)
    loaded = lw.BootstrapResult.load(path)
    assert loaded == result and loaded.kept == 2


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "not JSON"),
        ("[1]", "expected a JSON object"),
        (json.dumps({"format": "other", "version": 1, "tools": {}}), "not a tool examples file"),
        (json.dumps({"format": FORMAT, "version": 99, "tools": {}}), "unsupported version 99"),
        (json.dumps({"format": FORMAT, "version": 1, "tools": []}), "'tools' must be an object"),
        (json.dumps({"format": FORMAT, "version": 1, "tools": {"t": {}}}), "tool 't': expected a list"),
        (json.dumps({"format": FORMAT, "version": 1, "tools": {"t": [{"arg": {}}]}}), "tool 't' example 1"),
        (json.dumps({"format": FORMAT, "version": 1, "tools": {"t": [{"args": {}, "answer": 1}]}}), "unknown key(s) answer"),
        (json.dumps({"format": FORMAT, "version": 1, "tools": {}, "tasks_run": -1}), "'tasks_run' must be"),
    ],
)
def test_a_bad_file_is_an_examples_error_naming_the_problem(content: str, needle: str, tmp_path: Path) -> None:
    (tmp_path / "e.json").write_text(content)
    with pytest.raises(lw.ExamplesError) as caught:
        lw.BootstrapResult.load(tmp_path / "e.json")
    assert needle in str(caught.value) and "e.json" in str(caught.value)
    with pytest.raises(lw.ExamplesError, match="no such file"):
        lw.BootstrapResult.load(tmp_path / "absent.json")


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(tools=_JSON, version=st.sampled_from([1, 2, "1", None]), extra=st.dictionaries(st.sampled_from(
    ["tasks_run", "tasks_correct", "mode"]), _JSON, max_size=3))
def test_any_json_loads_or_is_an_examples_error(tools: object, version: object, extra: dict[str, object]) -> None:
    data = {"format": FORMAT, "version": version, "tools": tools, **extra}
    try:
        loaded = lw.BootstrapResult.from_dict(data)
    except lw.ExamplesError:
        return
    assert lw.BootstrapResult.from_dict(json.loads(json.dumps(loaded.to_dict()))) == loaded


# ------------------------------------------------------------------ the command line

TOOLS_MODULE = '''
import loopwright as lw


@lw.tool
def list_todos(owner: str) -> str:
    """List the open todos of an owner."""
    return f"{owner}: buy milk"


TOOLS = [list_todos]
'''

POLICY_MODULE = '''
import json
import loopwright as lw


def _act(owner):
    return "Thought: I look\\nAction: list_todos\\nAction Input: " + json.dumps({"owner": owner})


POLICY = lw.ScriptedPolicy([_act("Bea"), "Thought: done\\nFinal Answer: buy milk",
                            _act("Cy"), "Thought: done\\nFinal Answer: sell eggs"])
'''


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "lwb_tools.py").write_text(TOOLS_MODULE)
    (tmp_path / "lwb_policy.py").write_text(POLICY_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("lwb_tools", "lwb_policy"):
        sys.modules.pop(name, None)


def command(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(cwd), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([str(LOOPWRIGHT), *argv], capture_output=True, text=True, timeout=180, cwd=cwd,
                          env=env, check=False)


def assert_usage_error(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0], done.stderr
    for needle in needles:
        assert needle in done.stderr


def _examples_file(folder: Path) -> Path:
    result = lw.BootstrapResult({"list_todos": (lw.ToolExample({"owner": "Bea"}, "What are Bea's todos?",
                                                               "Bea: water the plants"),)})
    return result.save(folder / "examples.json")


def _cassette(folder: Path, argv: list[str], replies: list[str]) -> Path:
    """The model calls `loopwright run ARGV` makes, recorded through the command's own
    flag handling (tools, examples, options) on a scripted policy."""
    args = cli.build_parser().parse_args(["run", *argv])
    registry = apply_examples(load_tools(args.tools, args.tool_timeout_s), args.examples)
    path = folder / "c.jsonl"
    lw.run(args.task, lw.models.Recorder(lw.ScriptedPolicy(replies), path), registry, mode=args.mode,
           **cli.run_options(args))
    return path


def test_run_with_examples_puts_them_in_the_prompt(folder: Path) -> None:
    argv = ["Todos of Ann?", "--tools", "lwb_tools:TOOLS", "--examples", str(_examples_file(folder))]
    cassette = _cassette(folder, argv, [act("list_todos", {"owner": "Ann"}), final("buy milk")])
    done = command("run", *argv, "--replay", str(cassette), "--json", cwd=folder)
    assert done.returncode == 0, done.stderr
    trace = lw.Trace.from_json(done.stdout)
    prompt = trace.prompt_for(trace.steps[0]) or ""
    assert "What are Bea's todos?" in prompt and "Bea: water the plants" in prompt
    without = command("run", *argv[:3], "--replay", str(cassette), "--json", cwd=folder)
    assert without.returncode == 1  # another prompt: the cassette has no answer for it


def test_a_missing_or_bad_examples_file_is_a_usage_error(folder: Path) -> None:
    assert_usage_error(command("run", "q", "--examples", "absent.json", cwd=folder), "--examples", "no such file")
    (folder / "bad.json").write_text("{")
    assert_usage_error(command("run", "q", "--examples", "bad.json", cwd=folder), "not JSON")
    # examples for list_todos, but the demo tools are loaded
    assert_usage_error(command("run", "q", "--examples", str(_examples_file(folder)), cwd=folder),
                       "'list_todos' that the registry does not have")


def test_runs_resume_restores_the_recorded_examples(folder: Path) -> None:
    argv = ["Todos of Ann?", "--tools", "lwb_tools:TOOLS", "--examples", str(_examples_file(folder))]
    full = _cassette(folder, argv, [act("list_todos", {"owner": "Ann"}), final("buy milk")])
    first = folder / "first.jsonl"
    first.write_text(full.read_text().splitlines(keepends=True)[0])
    cut = command("run", *argv, "--db", "runs.db", "--run-id", "r", "--replay", str(first), cwd=folder)
    assert cut.returncode == 1 and "ReplayMissError" in cut.stderr
    with lw.SQLiteStore(folder / "runs.db") as store:
        assert store.load_run("r").config["meta"]["cli"]["examples"] == str(folder / "examples.json")
    done = command("runs", "resume", "r", "--db", "runs.db", "--replay", str(full), cwd=folder)
    assert done.returncode == 0 and done.stdout == "buy milk\n", done.stderr


def test_bootstrap_command_writes_the_examples_file(folder: Path) -> None:
    (folder / "tasks.jsonl").write_text(
        json.dumps({"question": "Todos of Bea?", "answer": "buy milk"}) + "\n"
        + json.dumps({"question": "Todos of Cy?", "answer": "buy milk"}) + "\n")
    done = command("bootstrap", "tasks.jsonl", "--out", "out/examples.json", "--tools", "lwb_tools:TOOLS",
                   "--policy", "lwb_policy:POLICY", cwd=folder)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and "1 of 2 tasks answered correctly; kept 1 example(s)" in done.stderr
    loaded = lw.BootstrapResult.load(folder / "out" / "examples.json")
    assert [e.to_dict() for e in loaded.examples["list_todos"]] == [
        {"args": {"owner": "Bea"}, "question": "Todos of Bea?", "result": "Bea: buy milk"}]
    assert_usage_error(command("bootstrap", "absent.jsonl", "--out", "e.json", cwd=folder), "absent.jsonl")


# ------------------------------------------------------------------ the real model


@pytest.mark.slow
def test_bootstrap_with_the_embedded_model_adds_examples_the_next_prompt_shows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOOPWRIGHT_N_THREADS", "1")
    model = lw.models.LlamaCpp()
    try:
        tasks = [("What is 17 * 23?", "391"), ("What is the capital of Japan?", "Tokyo")]
        result = lw.bootstrap_examples(tasks, model, demo_registry(), max_steps=4)
        assert result.tasks_run == 2 and result.kept >= 1, result
        for name, found in result.examples.items():
            assert all(e.question in dict(tasks) and e.result for e in found), (name, found)
        registry = result.apply(demo_registry())
        example = next(iter(result.examples.values()))[0]
        trace = lw.run("What is 144 / 12?", model, registry, max_steps=3)
        assert example.question is not None and example.question in (trace.prompt_for(trace.steps[0]) or "")
    finally:
        model.close()


def test_bootstrap_keeps_only_whole_correct_runs_as_run_examples() -> None:
    result = _bootstrapped()
    # run 1 is correct but one of its calls failed; run 2 answered wrong; run 3 is whole and correct
    assert [r.to_dict() for r in result.runs] == [{
        "question": "What is 2 ** 10?",
        "calls": [{"tool": "calculate", "args": {"expression": "17 * 23"}, "result": "391"},
                  {"tool": "calculate", "args": {"expression": "2 ** 10"}, "result": "1024"}],
        "answer": "1024",
    }]  # fmt: skip
    assert _bootstrapped(max_runs=0).runs == ()


def test_whole_runs_travel_in_the_file_and_apply_as_the_registry_examples(tmp_path: Path) -> None:
    result = _bootstrapped()
    loaded = lw.BootstrapResult.load(result.save(tmp_path / "examples.json"))
    assert loaded.runs == result.runs and all(r.source == "bootstrap" for r in loaded.runs)
    registry = loaded.apply(demo_registry())
    assert registry.examples == result.runs
    policy = lw.ScriptedPolicy([final("x")])
    every = dataclasses.replace(templates.DEFAULT_PROMPTS, run_examples="all")  # not only the nearest
    lw.run("What is 3 ** 3?", policy, registry, prompts=every)
    assert policy.prompts[0].rsplit("\n\nExample:\n", 1)[1].startswith("Question: What is 2 ** 10?\n")
    assert policy.prompts[0].endswith("Final Answer: 1024\n\nQuestion: What is 3 ** 3?\nThought:")


def test_a_whole_run_whose_tool_the_registry_lacks_is_an_examples_error() -> None:
    bad = lw.BootstrapResult(runs=(lw.RunExample("q", (lw.CallExample("nope", {}, 1),), "1"),))
    with pytest.raises(lw.ExamplesError, match=r"run example 1 \('q'\): call 1 names unknown tool 'nope'"):
        bad.apply(demo_registry())
