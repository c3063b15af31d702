"""lw.fork: a new run that replays the first k steps of a recorded one (no model call, no
tool executed), then goes on live with another policy, prompt or limits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import loopwright as lw
from conftest import STORE_KINDS, act, final, make_registry, open_journal
from helpers.durable import comparable
from loopwright.interfaces.runs import runs_main
from loopwright.interfaces.viewer import render_html
from loopwright.safety import ApprovalRequest, Decision

REACT = [act("add", '{"x": 2, "y": 3}'), act("multiply", '{"x": 5, "y": 10}'),
         act("add", '{"x": 50, "y": 1}'), final("51")]


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path):
    with open_journal(request.param, request, tmp_path / "runs.db") as s:
        yield s


def test_fork_at_k_replays_k_steps_with_no_tool_run_then_diverges(store):
    source = lw.run("task", lw.ScriptedPolicy(REACT), make_registry(), store=store, run_id="src")
    calls: list = []
    policy = lw.ScriptedPolicy([act("add", '{"x": 50, "y": 50}'), final("100")])
    trace = lw.fork("src", 2, policy, make_registry(calls), store=store, new_run_id="alt")
    assert trace.run_id == "alt" and trace.final_answer == "100"
    assert comparable(trace)["steps"][:2] == comparable(source)["steps"][:2]
    assert [s.meta.get("replayed") for s in trace.steps[:2]] == [True, True]
    assert calls == [("add", {"x": 50, "y": 50})]  # only the live step ran a tool
    assert policy.calls == 2  # and only live steps reached the model
    assert trace.llm_calls == 4 and trace.tool_calls == 3
    record = store.load_run("alt")
    assert (record.forked_from, record.forked_at_step, record.status) == ("src", 2, "finished")
    assert trace.meta["forked_from"] == {"run_id": "src", "at_step": 2}
    assert store.trace("alt").to_dict() == trace.to_dict()
    assert store.trace("src").to_dict() == source.to_dict()  # the source is untouched


def test_a_fork_is_a_complete_run_that_resumes_without_its_source_answering(store):
    lw.run("task", lw.ScriptedPolicy(REACT), make_registry(), store=store, run_id="src")
    lw.fork("src", 3, lw.ScriptedPolicy([final("fifty-one")]), make_registry(), store=store, new_run_id="alt")
    assert [n for (n,) in store._all("SELECT n FROM model_calls WHERE run_id = 'alt' ORDER BY n")] == [1, 2, 3, 4]
    assert len(store._all("SELECT key FROM tool_calls WHERE run_id = 'alt'")) == 3
    calls: list = []
    again = lw.resume("alt", lw.ScriptedPolicy([]), make_registry(calls), store=store)
    assert again.final_answer == "fifty-one" and calls == []


def test_fork_takes_other_limits_and_records_them(store):
    lw.run("task", lw.ScriptedPolicy(REACT), make_registry(), store=store, run_id="src")
    trace = lw.fork("src", 1, lw.ScriptedPolicy([act("add", '{"x": 1, "y": 1}')] * 3), make_registry(),
                    store=store, max_steps=2)
    assert trace.stopped_reason == "max_steps" and len(trace.steps) == 2
    assert store.load_run(trace.run_id).config["max_steps"] == 2


def test_fork_at_zero_is_a_fresh_run_of_the_same_task(store):
    lw.run("task", lw.ScriptedPolicy(REACT), make_registry(), store=store, run_id="src")
    policy = lw.ScriptedPolicy([final("none")])
    trace = lw.fork("src", 0, policy, make_registry(), store=store)
    assert trace.task == "task" and trace.final_answer == "none" and policy.calls == 1


def test_rewoo_fork_after_the_plan_replays_it_and_runs_the_workers_live(store):
    plan = json.dumps({"plan": [{"id": "E1", "tool": "search", "args": {"q": "france"}},
                                {"id": "E2", "tool": "word_count", "args": {"text": "#E1"}}]})
    lw.run("task", lw.ScriptedPolicy([plan, "Final Answer: 8"]), make_registry(), mode="rewoo",
           store=store, run_id="src")
    calls: list = []
    policy = lw.ScriptedPolicy(["Final Answer: eight"])
    trace = lw.fork("src", 1, policy, make_registry(calls), store=store)
    assert trace.final_answer == "eight" and policy.calls == 1  # the plan came from the journal
    assert [c[0] for c in calls] == ["search", "word_count"]


def test_a_fork_replays_its_sources_denial_with_its_reason_and_runs_nothing(store):
    ran: list[str] = []

    @lw.tool(side_effects="destructive")
    def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    script = [act("delete_file", '{"path": "/tmp/x"}'), final("kept")]
    lw.run("task", lw.ScriptedPolicy(script), lw.ToolRegistry([delete_file]), store=store, run_id="src",
           approver=lambda request: Decision(False, "not today"))
    # the fork's approver would allow it, but the replayed step is decided as the source's was
    trace = lw.fork("src", 1, lw.ScriptedPolicy([final("still kept")]), lw.ToolRegistry([delete_file]),
                    store=store, new_run_id="alt", approver=lambda request: Decision(True, "fine by me"))
    assert ran == [] and trace.final_answer == "still kept"
    assert trace.steps[0].observation == "DENIED[delete_file]: not today"
    assert trace.steps[0].observation == store.trace("src").steps[0].observation


def test_a_decision_a_fork_records_in_its_replayed_steps_answers_the_same_call_again(store):
    @lw.tool(side_effects="read", requires_approval=True)
    def peek(path: str) -> str:
        """Read a private file."""
        return "secret"

    same = act("peek", '{"path": "/etc/x"}')
    lw.run("task", lw.ScriptedPolicy([same, same, final("none")]), lw.ToolRegistry([peek]), store=store,
           run_id="src")  # no approver: both denied, nothing decided
    asked: list[str] = []

    def approver(request: ApprovalRequest) -> Decision:
        asked.append(request.key)
        return Decision(True, "ok")

    trace = lw.fork("src", 2, lw.ScriptedPolicy([final("read")]), lw.ToolRegistry([peek]), store=store,
                    approver=approver)
    assert len(asked) == 1  # asked for the first, its recorded decision answers the second
    assert [s.observation for s in trace.steps[:2]] == ["secret", "secret"]


def test_bad_forks_are_store_errors(store):
    lw.run("task", lw.ScriptedPolicy(REACT), make_registry(), store=store, run_id="src")
    with pytest.raises(lw.StoreError, match="at_step must be a step number from 0 to 4"):
        lw.fork("src", 5, lw.ScriptedPolicy([]), make_registry(), store=store)
    with pytest.raises(lw.StoreError, match="at_step must be"):
        lw.fork("src", True, lw.ScriptedPolicy([]), make_registry(), store=store)  # type: ignore[arg-type]
    with pytest.raises(lw.StoreError, match="no run 'ghost'"):
        lw.fork("ghost", 1, lw.ScriptedPolicy([]), make_registry(), store=store)
    with pytest.raises(lw.StoreError, match="run id 'src' already exists"):
        lw.fork("src", 1, lw.ScriptedPolicy([]), make_registry(), store=store, new_run_id="src")
    with pytest.raises(TypeError, match="unexpected keyword argument '_journal'"):
        lw.fork("src", 1, lw.ScriptedPolicy([]), make_registry(), store=store, _journal=None)


def test_the_viewer_shows_where_a_fork_came_from(store):
    lw.run("task", lw.ScriptedPolicy(REACT), make_registry(), store=store, run_id="src")
    trace = lw.fork("src", 2, lw.ScriptedPolicy([final("x")]), make_registry(), store=store, new_run_id="alt")
    page = render_html(store.trace("alt"))
    assert 'id="forked-from">forked from <code>src</code> at step 2' in page
    assert "forked-from" not in render_html(store.trace("src"))
    assert "forked-from" in render_html(trace.to_dict())


def test_cli_forks_a_run(tmp_path, capsys):
    db = tmp_path / "runs.db"
    with lw.SQLiteStore(db) as store:
        lw.run("task", lw.ScriptedPolicy(REACT), make_registry(), store=store, run_id="src")
    code = runs_main(["fork", "src", "--at", "3", "--new-id", "alt", "--db", str(db)],
                     policy_factory=lambda args: lw.ScriptedPolicy([final("via cli")]),
                     registry_factory=lambda args: make_registry())
    captured = capsys.readouterr()
    assert code == 0 and "forked run: alt (from src at step 3)" in captured.err
    assert captured.out == "via cli\n"
    assert runs_main(["show", "alt", "--db", str(db)]) == 0
    assert "Forked from src at step 3" in capsys.readouterr().out
    assert runs_main(["fork", "src", "--at", "9", "--db", str(db)],
                     policy_factory=lambda args: lw.ScriptedPolicy([]),
                     registry_factory=lambda args: make_registry()) == 2
    assert "at_step must be" in capsys.readouterr().err
