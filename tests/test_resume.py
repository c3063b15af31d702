"""resume: replay what the journal holds, continue live, never repeat a recorded call."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import loopwright as lw
from conftest import STORE_KINDS, act, final, make_registry, open_journal
from helpers import rekill
from helpers.durable import comparable
from loopwright.durable.resume import iter_resume, resume
from loopwright.durable.sqlite import SQLiteStore
from loopwright.interfaces.common import open_store
from loopwright.interfaces.runs import runs_main
from loopwright.safety import ApprovalPending, ApprovalRequest, Decision, approval_key
from loopwright.tools.toolset import tool_set

HELPERS = Path(__file__).parent / "helpers"

REACT = [
    act("add", '{"x": 2, "y": 3}'),
    act("multiply", '{"x": 5, "y": 10}'),
    act("search", '{"q": "france"}'),
    final("50"),
]
REWOO_PLAN = json.dumps({"plan": [
    {"id": "E1", "tool": "search", "args": {"q": "france"}},
    {"id": "E2", "tool": "word_count", "args": {"text": "#E1"}},
    {"id": "E3", "tool": "multiply", "args": {"x": "#E2", "y": 2}},
    {"id": "E4", "tool": "add", "args": {"x": 1, "y": 1}},
]})
REWOO = [REWOO_PLAN, "Final Answer: 16"]
BAD_PLAN = json.dumps({"plan": [
    {"id": "E1", "tool": "search", "args": {"q": "france"}},
    {"id": "E2", "tool": "no_such_tool", "args": {"x": "#E1"}},
]})
GOOD_PLAN = json.dumps({"plan": [
    {"id": "E1", "tool": "search", "args": {"q": "france"}},
    {"id": "E2", "tool": "word_count", "args": {"text": "#E1"}},
]})
PLAN_EXECUTE = [BAD_PLAN, GOOD_PLAN]
SCRIPTS = {"react": REACT, "rewoo": REWOO, "plan_execute": PLAN_EXECUTE}
CASES = [(mode, k) for mode, script in SCRIPTS.items() for k in range(1, len(script) + 1)]


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path):
    with open_journal(request.param, request, tmp_path / "runs.db") as s:
        yield s


def reference(mode: str) -> tuple[lw.Trace, list, list[str]]:
    calls: list = []
    policy = lw.ScriptedPolicy(SCRIPTS[mode])
    trace = lw.run("task", policy, make_registry(calls), mode=mode)
    return trace, calls, policy.prompts


@pytest.mark.parametrize(("mode", "k"), CASES)
def test_run_interrupted_at_any_model_call_resumes_to_the_uninterrupted_trace(store, mode, k):
    expected, expected_calls, expected_prompts = reference(mode)
    script = SCRIPTS[mode]
    calls: list = []
    first = lw.ScriptedPolicy([*script[: k - 1], KeyboardInterrupt()])
    with pytest.raises(lw.RunInterrupted):
        lw.run("task", first, make_registry(calls), mode=mode, store=store, run_id="r")
    assert store.load_run("r").status == "interrupted"

    rest = lw.ScriptedPolicy(script[k - 1:])
    trace = resume("r", rest, make_registry(calls), store=store)

    rest.assert_consumed()  # recorded calls were not asked again, the rest was
    assert rest.prompts == expected_prompts[k - 1:]
    # every tool ran exactly once across both processes' worth (ReWOO's independent workers
    # run concurrently, so their order is not part of the claim)
    assert sorted(map(repr, calls)) == sorted(map(repr, expected_calls))
    assert comparable(trace) == comparable(expected)
    assert store.load_run("r").status == "finished"
    assert comparable(store.trace("r")) == comparable(expected)


@pytest.mark.parametrize("mode", list(SCRIPTS))
def test_resuming_a_finished_run_replays_it_without_calling_the_model_or_a_tool(store, mode):
    calls: list = []
    original = lw.run("task", lw.ScriptedPolicy(SCRIPTS[mode]), make_registry(calls), mode=mode,
                      store=store, run_id="done")
    ran = len(calls)
    nothing = lw.ScriptedPolicy([])
    again = resume("done", nothing, make_registry(calls), store=store)
    assert nothing.calls == 0 and len(calls) == ran
    assert comparable(again) == comparable(original)
    assert all(s.meta.get("replayed") for s in again.steps if s.kind == "action")
    assert store.load_run("done").resumes == 1


def test_steps_a_resume_replays_keep_their_recorded_rows_and_timings(store):
    with pytest.raises(lw.RunInterrupted):
        lw.run("task", lw.ScriptedPolicy([*REACT[:2], KeyboardInterrupt()]), make_registry(), store=store, run_id="r")
    sql = "SELECT idx, step, created_at FROM steps WHERE run_id = 'r' ORDER BY idx"
    recorded = [tuple(row) for row in store._all(sql)]
    recorded_steps = store.trace("r").steps
    assert [row[0] for row in recorded] == [1, 2]
    trace = resume("r", lw.ScriptedPolicy(REACT[2:]), make_registry(), store=store)
    assert [s.meta.get("replayed") for s in trace.steps[:2]] == [True, True]  # timed anew, marked replayed
    assert [tuple(row) for row in store._all(sql)][:2] == recorded  # but the journal keeps the originals
    assert store.trace("r").steps[:2] == recorded_steps and len(store.trace("r").steps) == 4


def test_a_resume_keeps_the_traceback_a_failed_tool_step_recorded(store):
    with pytest.raises(lw.RunInterrupted):
        lw.run("task", lw.ScriptedPolicy([act("divide", '{"x": 1, "y": 0}'), KeyboardInterrupt()]), make_registry(),
               store=store, run_id="r")
    recorded = store.trace("r").steps[0]
    assert "ZeroDivisionError" in recorded.meta["traceback"]
    resumed = resume("r", lw.ScriptedPolicy([final("x")]), make_registry(), store=store)
    assert "traceback" not in resumed.steps[0].meta  # a replay cannot rebuild it: the journal keeps the original
    assert store.trace("r").steps[0] == recorded


def test_tool_crash_mid_call_reruns_an_idempotent_tool_once(store):
    calls: list = []
    attempts: list[int] = []
    crashed = {"once": False}

    @lw.tool(side_effects="read")
    def lookup(q: str) -> str:
        """Look something up."""
        calls.append(q)
        info = lw.current_call()
        assert info is not None
        attempts.append(info.attempt)
        if not crashed["once"]:
            crashed["once"] = True
            raise SystemExit("the process dies mid-call")
        return f"found {q}"

    script = [act("lookup", '{"q": "a"}'), act("lookup", '{"q": "b"}'), final("ab")]
    with pytest.raises(SystemExit):
        lw.run("t", lw.ScriptedPolicy(script), lw.ToolRegistry([lookup]), store=store, run_id="r")
    assert store.load_run("r").status == "running"  # no end was recorded: a crash
    rest = lw.ScriptedPolicy(script[1:])
    trace = resume("r", rest, lw.ToolRegistry([lookup]), store=store)
    assert trace.final_answer == "ab" and [s.observation for s in trace.steps[:2]] == ["found a", "found b"]
    assert calls == ["a", "a", "b"] and attempts == [1, 2, 1]  # the tool is told which attempt it is
    recorded = store._all("SELECT key, attempts, state FROM tool_calls WHERE run_id = 'r' ORDER BY key")
    assert [tuple(r) for r in recorded] == [("1", 2, "done"), ("2", 1, "done")]


def test_a_call_rerun_to_its_end_on_resume_leaves_nothing_in_doubt_when_the_run_then_fails(store):
    crashed: list[str] = []

    @lw.tool(side_effects="read")
    def lookup(q: str) -> str:
        """Look something up."""
        if not crashed:
            crashed.append(q)
            raise SystemExit("the process dies mid-call")
        return f"found {q}"

    with pytest.raises(SystemExit):
        lw.run("t", lw.ScriptedPolicy([act("lookup", '{"q": "a"}')]), lw.ToolRegistry([lookup]), store=store,
               run_id="r")
    assert [c.key for c in store.unsettled("r")] == ["1"]
    failed = resume("r", lw.ScriptedPolicy([RuntimeError("the model server is down")]), lw.ToolRegistry([lookup]),
                    store=store)
    assert failed.stopped_reason == "error" and failed.steps[0].observation == "found a"
    assert store.unsettled("r") == [] and store.load_run("r").status == "finished"  # not blocked: nothing in doubt


def test_unfinished_non_idempotent_call_is_not_rerun_and_the_run_stops_saying_why(store):
    sent: list[str] = []
    state = {"crash": True}

    @lw.tool(side_effects="write")
    def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        if state["crash"]:
            raise SystemExit("killed after the email left, before its result was recorded")
        return f"sent to {to}"

    script = [act("send_email", '{"to": "ann"}'), final("sent")]
    with pytest.raises(SystemExit):
        lw.run("t", lw.ScriptedPolicy(script), lw.ToolRegistry([send_email]), store=store, run_id="r")
    state["crash"] = False

    blocked = resume("r", lw.ScriptedPolicy([]), lw.ToolRegistry([send_email]), store=store)
    assert sent == ["ann"]  # not sent twice
    assert blocked.stopped_reason == "error"
    why = ("send_email was started before the run stopped but its result was not recorded; it is not idempotent, "
           "so it was not run again. Check whether it took effect, then settle it (store.settle or `loopwright runs "
           "settle`), resume with rerun_unfinished=True, or finish the run by hand.")
    step = blocked.steps[-1]
    assert (step.kind, step.tool, step.args, step.error) == ("error", "send_email", {"to": "ann"}, why)
    assert store.load_run("r").status == "blocked"

    # a person checked that it did not take effect: run it again on purpose
    done = resume("r", lw.ScriptedPolicy(script[1:]), lw.ToolRegistry([send_email]), store=store,
                  rerun_unfinished=True)
    assert done.final_answer == "sent" and sent == ["ann", "ann"]
    assert [s.kind for s in done.steps] == ["action", "final"]
    assert store.load_run("r").status == "finished"
    assert [s.kind for s in store.trace("r").steps] == ["action", "final"]


def test_run_that_failed_on_a_policy_error_resumes_from_the_failed_call(store):
    calls: list = []
    failing = lw.ScriptedPolicy([REACT[0], RuntimeError("server down")])
    trace = lw.run("task", failing, make_registry(calls), store=store, run_id="r")
    assert trace.stopped_reason == "error" and store.load_run("r").status == "finished"
    rest = lw.ScriptedPolicy(REACT[1:])
    resumed = resume("r", rest, make_registry(calls), store=store)
    rest.assert_consumed()
    assert resumed.final_answer == "50" and len(calls) == 3
    assert [s.kind for s in store.trace("r").steps] == ["action", "action", "action", "final"]


def test_rewoo_crash_in_a_worker_resumes_without_rerunning_finished_workers(store):
    calls: list = []
    state = {"crash": True}
    base = make_registry(calls)

    @lw.tool(side_effects="read")
    def slow_add(x: int, y: int) -> int:
        """Add, but the process dies the first time."""
        calls.append(("slow_add", {"x": x, "y": y}))
        if state["crash"]:
            state["crash"] = False
            raise SystemExit("worker dies")
        return x + y

    plan = json.dumps({"plan": [
        {"id": "E1", "tool": "search", "args": {"q": "france"}},
        {"id": "E2", "tool": "word_count", "args": {"text": "#E1"}},
        {"id": "E3", "tool": "slow_add", "args": {"x": "#E2", "y": 2}},
    ]})
    registry = lw.ToolRegistry([base["search"], base["word_count"], slow_add])
    with pytest.raises(SystemExit):
        lw.run("t", lw.ScriptedPolicy([plan, "unused"]), registry, mode="rewoo", store=store, run_id="r")
    rest = lw.ScriptedPolicy(["Final Answer: 10"])
    trace = resume("r", rest, registry, store=store)
    assert trace.final_answer == "10" and [s.observation for s in trace.steps[1:4]][-1] == "10"
    names = [c[0] for c in calls]
    assert names.count("search") == 1 and names.count("word_count") == 1 and names.count("slow_add") == 2


# -- approvals ---------------------------------------------------------------------------


def gated_tools(log: list[str]) -> lw.ToolRegistry:
    @lw.tool(side_effects="destructive")
    def delete_file(path: str) -> str:
        """Delete a file."""
        log.append(path)
        return f"deleted {path}"

    return lw.ToolRegistry([delete_file])


def later(request: ApprovalRequest) -> bool:
    raise ApprovalPending(request.key)


DELETE = [act("delete_file", '{"path": "/tmp/x"}'), final("gone")]
KEY = approval_key("delete_file", {"path": "/tmp/x"})


def test_paused_run_records_the_pending_call_and_a_stored_decision_resumes_it(store):
    log: list[str] = []
    paused = lw.run("t", lw.ScriptedPolicy(DELETE[:1]), gated_tools(log), approver=later,
                    store=store, run_id="r")
    assert paused.stopped_reason == "paused" and log == []
    assert store.load_run("r").status == "paused"
    [pending] = store.pending_approvals("r")
    assert (pending.key, pending.tool, pending.args, pending.step) == (KEY, "delete_file", {"path": "/tmp/x"}, 1)

    store.decide("r", KEY, Decision(True, "checked by Ann"))
    assert store.pending_approvals("r") == []
    rest = lw.ScriptedPolicy(DELETE[1:])
    trace = resume("r", rest, gated_tools(log), store=store)  # no approver: the journal decides
    assert trace.final_answer == "gone" and log == ["/tmp/x"]
    row = tuple(store._one("SELECT state, approved, reason FROM approvals WHERE run_id = 'r'"))
    assert row == ("decided", 1, "checked by Ann")


def test_decisions_passed_to_resume_reach_the_approver(store):
    log: list[str] = []
    lw.run("t", lw.ScriptedPolicy(DELETE[:1]), gated_tools(log), approver=later, store=store, run_id="r")
    denied = resume("r", lw.ScriptedPolicy(["Thought: ok\nFinal Answer: kept"]), gated_tools(log),
                    store=store, decisions={KEY: Decision(False, "not today")})
    assert log == [] and denied.steps[0].kind == "denied"
    assert denied.steps[0].observation == "DENIED[delete_file]: not today"
    assert denied.final_answer == "kept"


def test_a_stored_denial_without_a_reason_replays_as_it_was_given(store):
    log: list[str] = []
    live = lw.run("t", lw.ScriptedPolicy([*DELETE[:1], final("kept")]), gated_tools(log),
                  approver=lambda request: Decision(False, ""))
    lw.run("t", lw.ScriptedPolicy(DELETE[:1]), gated_tools(log), approver=later, store=store, run_id="r")
    store.decide("r", KEY, Decision(False, ""))
    resumed = resume("r", lw.ScriptedPolicy([final("kept")]), gated_tools(log), store=store)
    assert log == [] and resumed.steps[0].observation == live.steps[0].observation


def test_resume_without_a_decision_pauses_again_instead_of_running_ungated(store):
    log: list[str] = []
    lw.run("t", lw.ScriptedPolicy(DELETE[:1]), gated_tools(log), approver=later, store=store, run_id="r")
    again = resume("r", lw.ScriptedPolicy([]), gated_tools(log), store=store)
    assert again.stopped_reason == "paused" and log == []
    assert [p.key for p in store.pending_approvals("r")] == [KEY]


def test_deciding_twice_or_an_unknown_key_is_a_store_error(store):
    lw.run("t", lw.ScriptedPolicy(DELETE[:1]), gated_tools([]), approver=later, store=store, run_id="r")
    with pytest.raises(lw.StoreError, match="is not a pending approval"):
        store.decide("r", "nope", True)
    store.decide("r", KEY, True)
    with pytest.raises(lw.StoreError, match="already decided"):
        store.decide("r", KEY, False)


def test_paused_run_resumes_in_another_process_with_a_decision(tmp_path: Path):
    db, effects = tmp_path / "runs.db", tmp_path / "effects.txt"

    def child(phase: str) -> dict:
        out = subprocess.run(
            [sys.executable, str(HELPERS / "approval_run.py"), phase, str(db), str(effects)],
            capture_output=True, text=True, timeout=120, check=False,
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = child("start")
    assert first["stopped_reason"] == "paused" and not effects.exists()
    with SQLiteStore(db) as store:
        [pending] = store.pending_approvals(first["run_id"])
        store.decide(first["run_id"], pending.key, Decision(True, "approved from another process"))
    second = child("resume")
    assert second["stopped_reason"] == "final" and second["final_answer"] == "deleted"
    assert effects.read_text().splitlines() == ["/tmp/report.txt"]


def test_unknown_run_id_is_a_store_error_naming_it(store):
    with pytest.raises(lw.StoreError, match="no run 'ghost'"):
        resume("ghost", lw.ScriptedPolicy([]), make_registry(), store=store)


def test_iter_resume_yields_replayed_then_live_steps(store):
    with pytest.raises(lw.RunInterrupted):
        lw.run("task", lw.ScriptedPolicy([*REACT[:2], KeyboardInterrupt()]), make_registry(),
               store=store, run_id="r")
    run = iter_resume("r", lw.ScriptedPolicy(REACT[2:]), make_registry(), store=store)
    kinds = [(s.kind, bool(s.meta.get("replayed"))) for s in run]
    assert kinds == [("action", True), ("action", True), ("action", False), ("final", False)]
    assert run.trace.final_answer == "50"


def test_run_without_an_approver_replays_its_denials_instead_of_pausing(store):
    log: list[str] = []
    script = [act("delete_file", '{"path": "/tmp/x"}'), final("could not"), ]
    calls = lw.ScriptedPolicy([script[0], KeyboardInterrupt()])
    with pytest.raises(lw.RunInterrupted):
        lw.run("t", calls, gated_tools(log), store=store, run_id="r")
    assert store.trace("r").steps[0].kind == "denied"
    trace = resume("r", lw.ScriptedPolicy(script[1:]), gated_tools(log), store=store)
    assert log == [] and [s.kind for s in trace.steps] == ["denied", "final"]
    assert trace.stopped_reason == "final" and store.pending_approvals("r") == []


def test_the_journal_keeps_each_approval_with_its_decision_and_when_it_was_decided(store):
    log: list[str] = []
    answers = {"/tmp/x": Decision(True, "checked by Ann"), "/tmp/y": Decision(False, "keep y")}

    def approver(request: ApprovalRequest) -> Decision:
        if request.args["path"] in answers:
            return answers[request.args["path"]]
        raise ApprovalPending(request.key)  # /tmp/z: a person decides later

    script = [act("delete_file", f'{{"path": "/tmp/{name}"}}') for name in "xyz"]
    paused = lw.run("t", lw.ScriptedPolicy(script), gated_tools(log), approver=approver, store=store, run_id="r")
    assert paused.stopped_reason == "paused" and log == ["/tmp/x"]
    decided = {request.args["path"]: decision for request, decision in store.approvals("r")}
    assert decided == {**answers, "/tmp/z": None}
    when = {json.loads(args)["path"]: (requested, at) for args, requested, at in
            store._all("SELECT args, requested_at, decided_at FROM approvals WHERE run_id = 'r'")}
    assert when["/tmp/z"][1] is None  # still pending: not decided
    assert all(at is not None and at >= requested for requested, at in (when["/tmp/x"], when["/tmp/y"]))


def test_a_resumed_run_reads_as_running_with_its_old_end_cleared_while_it_runs(store):
    with pytest.raises(lw.RunInterrupted):
        lw.run("task", lw.ScriptedPolicy([REACT[0], KeyboardInterrupt()]), make_registry(), store=store, run_id="r")
    assert store.load_run("r").status == "interrupted"
    seen: list[tuple] = []

    def policy(prompt: str) -> str:
        record = store.load_run("r")
        seen.append((record.status, record.stopped_reason, record.final_answer, record.resumes))
        return final("5")

    assert resume("r", policy, make_registry(), store=store).final_answer == "5"
    assert seen == [("running", None, None, 1)]
    assert store.load_run("r").status == "finished"


def test_config_saying_the_run_had_an_approver_pauses_an_undecided_call(store):
    log: list[str] = []
    _, journal = store.start_run("r", "t", "react", {"max_steps": 5, "tools": None, "approver": True})
    journal.flush()
    trace = resume("r", lw.ScriptedPolicy(DELETE[:1]), gated_tools(log), store=store)
    assert trace.stopped_reason == "paused" and log == []


def test_a_limit_passed_to_resume_replaces_the_recorded_one(store):
    stopped = lw.run("task", lw.ScriptedPolicy(REACT[:2]), make_registry(), max_steps=2, store=store, run_id="r")
    assert stopped.stopped_reason == "max_steps"
    again = resume("r", lw.ScriptedPolicy([]), make_registry(), store=store)
    assert again.stopped_reason == "max_steps"  # a deterministic end replays as it was
    longer = resume("r", lw.ScriptedPolicy(REACT[2:]), make_registry(), store=store, max_steps=5)
    assert longer.final_answer == "50" and longer.llm_calls == 4


def test_resume_refuses_options_that_would_make_it_another_run(store):
    lw.run("task", lw.ScriptedPolicy(REACT), make_registry(), store=store, run_id="r")
    with pytest.raises(TypeError, match="unexpected keyword argument '_journal'"):
        resume("r", lw.ScriptedPolicy([]), make_registry(), store=store, _journal=None)


def test_resume_that_cannot_start_leaves_the_run_status_alone(store):
    lw.run("t", lw.ScriptedPolicy(DELETE[:1]), gated_tools([]), approver=later, store=store, run_id="r")
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_option'"):
        resume("r", lw.ScriptedPolicy([]), gated_tools([]), store=store, no_such_option=1)
    record = store.load_run("r")
    assert (record.status, record.resumes) == ("paused", 0)


def test_an_in_memory_store_journals_and_resumes_within_the_process():
    with SQLiteStore(":memory:") as mem:
        with pytest.raises(lw.RunInterrupted):
            lw.run("task", lw.ScriptedPolicy([REACT[0], KeyboardInterrupt()]), make_registry(),
                   store=mem, run_id="r")
        trace = resume("r", lw.ScriptedPolicy(REACT[1:]), make_registry(), store=mem)
        assert trace.final_answer == "50" and mem.load_run("r").resumes == 1


def test_store_and_resume_are_public_names():
    assert lw.SQLiteStore is SQLiteStore and lw.resume is resume
    assert {"SQLiteStore", "resume"} <= set(lw.__all__)


# -- the tool set ------------------------------------------------------------------------

PRE_TOOLSET_JOURNAL = Path(__file__).parent / "fixtures" / "pre_toolset_journal.db"


def _cut(store: SQLiteStore, registry: lw.ToolRegistry, **options) -> None:
    with pytest.raises(lw.RunInterrupted):
        lw.run("task", lw.ScriptedPolicy([REACT[0], KeyboardInterrupt()]), registry, store=store,
               run_id="cut", **options)


def test_a_journal_records_each_tools_name_and_schema_fingerprint(store):
    _cut(store, make_registry())
    recorded = store.load_run("cut").config["tool_set"]
    assert set(recorded) == {"add", "multiply", "divide", "search", "word_count"}
    assert recorded == tool_set(make_registry())  # the same in any process
    assert all(len(f) == 64 for f in recorded.values())


def test_resume_with_other_tools_raises_naming_what_was_added_removed_and_changed(store):
    _cut(store, make_registry())

    @lw.tool
    def add(x: int, y: int, z: int = 0) -> int:
        """Add two or three integers."""
        return x + y + z

    @lw.tool
    def extra(q: str) -> str:
        """Something new."""
        return q

    others = make_registry()
    kept = [others.get(n) for n in ("multiply", "divide", "search")]
    registry = lw.ToolRegistry([add, extra, *kept])  # word_count removed, add changed, extra added
    with pytest.raises(lw.ToolSetChangedError) as caught:
        resume("cut", lw.ScriptedPolicy([]), registry, store=store)
    err = caught.value
    assert (err.added, err.removed, err.changed) == (("extra",), ("word_count",), ("add",))
    assert "added extra" in str(err) and "removed word_count" in str(err) and "allow_tool_changes=True" in str(err)
    assert store.load_run("cut").status == "interrupted" and store.load_run("cut").resumes == 0

    trace = resume("cut", lw.ScriptedPolicy(REACT[1:]), registry, store=store, allow_tool_changes=True)
    assert trace.final_answer == "50"
    assert trace.meta["tool_changes"] == {"added": ["extra"], "removed": ["word_count"], "changed": ["add"]}


def test_resume_compares_only_the_tools_the_run_was_scoped_to(store):
    _cut(store, make_registry(), tools=["add", "multiply", "search"])
    registry = make_registry()
    registry.register(lw.Tool.from_schema("other", "Not in the scope.", {"type": "object"}, lambda: "x"))
    trace = resume("cut", lw.ScriptedPolicy(REACT[1:]), registry, store=store)  # outside the scope: fine
    assert trace.final_answer == "50" and "tool_changes" not in trace.meta


def test_a_journal_written_before_tool_sets_were_recorded_resumes_with_any_tools(tmp_path: Path):
    import shutil

    from loopwright.interfaces.demo_tools import demo_registry

    db = tmp_path / "old.db"
    shutil.copy(PRE_TOOLSET_JOURNAL, db)
    with SQLiteStore(db) as old:
        config = old.load_run("old").config
        assert config["tools"] is None and "tool_set" not in config  # the old shape
        trace = resume("old", lw.ScriptedPolicy([final("391")]), demo_registry(), store=old)
        assert trace.final_answer == "391" and trace.steps[0].observation == "391"
        assert old.load_run("old").status == "finished" and "tool_changes" not in trace.meta


JOURNAL_84CC605 = Path(__file__).parent / "fixtures" / "journal_84cc605.db"


@pytest.mark.parametrize(("mode", "rest", "calls"), [
    ("react", [final("391")], 2),
    ("rewoo", ["Final Answer: 391"], 2),
    ("plan_execute", [], 1),  # it had finished: replayed whole, no model call
    ("reflexion", [final("391")], 2),
    ("tot", ["sure", "Final Answer: 391", "sure"], 4),
])
def test_a_journal_written_by_84cc605_resumes_in_every_mode(tmp_path: Path, mode: str, rest: list[str], calls: int):
    import shutil

    from loopwright.interfaces.demo_tools import demo_registry

    db = tmp_path / "old.db"
    shutil.copy(JOURNAL_84CC605, db)
    policy = lw.ScriptedPolicy(rest)
    with SQLiteStore(db) as old:
        record = old.load_run(mode)
        assert record.mode == mode and record.config["tools"] == ["calculate"]  # written by the old release
        trace = resume(mode, policy, demo_registry(), store=old)
        assert trace.final_answer == "391" and trace.stopped_reason == "final"
        assert trace.llm_calls == calls and policy.calls == len(rest)  # the recorded calls were not made again
        assert old.load_run(mode).status == "finished"
        assert any(s.observation == "391" for s in trace.steps)  # the recorded tool result, replayed


def test_the_recorded_settings_of_an_84cc605_journal_hold_on_resume(tmp_path: Path):
    import shutil

    from loopwright.interfaces.demo_tools import demo_registry

    db = tmp_path / "old.db"
    shutil.copy(JOURNAL_84CC605, db)
    with SQLiteStore(db) as old:  # the ReAct run recorded on_repeat="stop" and max_steps=4
        again = act("calculate", '{"expression": "17 * 23"}')
        trace = resume("react", lw.ScriptedPolicy([again, again]), demo_registry(), store=old)
        assert trace.stopped_reason == "repeated_call" and trace.llm_calls == 3
        fresh = lw.run("t", lw.ScriptedPolicy([]), demo_registry(), store=old, run_id="new-react", max_steps=1,
                     on_repeat="stop")  # a run journaled now records what resume reads back
        assert old.load_run("new-react").config["on_repeat"] == "stop" and fresh.stopped_reason == "error"


# -- a resumed run that is killed again reads as running, counted from its journal --------


@pytest.fixture(params=STORE_KINDS)
def journal_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a journal lives, as `--db` names it: a SQLite file, or a fresh Postgres schema."""
    return request.getfixturevalue("pg_dsn") if request.param == "postgres" else str(tmp_path / "runs.db")


def rekill_child(phase: str, db: str, run_id: str, effects: Path, skip: int, kill_on: str) -> None:
    """Run (or resume) the rekill workload in a process of its own, SIGKILLed in `write(kill_on)`."""
    out = subprocess.run(
        [sys.executable, str(HELPERS / "rekill.py"), phase, db, run_id, str(effects), str(skip), kill_on],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == -signal.SIGKILL, out.stderr


def runs_cli(*argv: str) -> str:
    out = io.StringIO()
    assert runs_main(list(argv), out=out) == 0
    return out.getvalue()


def journal_counts(store, run_id: str) -> tuple[int, int]:
    """Model calls and finished tool calls the journal holds for the run."""
    return (len(store._all("SELECT n FROM model_calls WHERE run_id = ?", (run_id,))),
            len(store._all("SELECT key FROM tool_calls WHERE run_id = ? AND state = 'done'", (run_id,))))


def assert_running_as_recorded(store, db: str, run_id: str, llm_calls: int, tool_calls: int) -> None:
    """The record, the trace, `runs show` and `runs list` all say: running, not stopped,
    with the counters the journal holds."""
    assert journal_counts(store, run_id) == (llm_calls, tool_calls)
    record = store.load_run(run_id)
    assert (record.status, record.stopped_reason, record.final_answer) == ("running", None, None)
    assert (record.llm_calls, record.tool_calls) == (llm_calls, tool_calls)
    trace = store.trace(run_id)
    assert (trace.stopped_reason, trace.final_answer) == (None, None)
    assert (trace.llm_calls, trace.tool_calls) == (llm_calls, tool_calls)
    sent = sum(int(r[0]) for r in store._all("SELECT prompt_tokens FROM model_calls WHERE run_id = ?", (run_id,)))
    assert record.usage.prompt_tokens == trace.usage.prompt_tokens == sent > 0
    shown = runs_cli("show", run_id, "--db", db)
    assert "status: running  stopped: -\n" in shown
    assert f"model calls: {llm_calls}  tool calls: {tool_calls}  steps: {record.step_count}" in shown
    [row] = [line.split() for line in runs_cli("list", "--db", db).splitlines() if line.startswith(run_id)]
    assert row[2:4] == ["running", "-"] and row[5] == str(llm_calls)


def test_a_resumed_run_killed_again_reads_as_running_with_the_counters_it_recorded(
    journal_target: str, tmp_path: Path
):
    db, effects = journal_target, tmp_path / "effects.txt"
    tools = rekill.registry(effects, {})
    rekill_child("start", db, "r", effects, 0, "a")  # killed inside write(a)
    with open_store(db) as store:
        blocked = resume("r", lw.ScriptedPolicy([]), tools, store=store)
        assert (blocked.stopped_reason, blocked.llm_calls) == ("error", 1)
        assert store.load_run("r").status == "blocked" and store.trace("r").stopped_reason == "error"

    rekill_child("resume", db, "r", effects, 1, "b")  # re-runs write(a), killed inside write(b)
    assert effects.read_text().splitlines() == ["a"]
    with open_store(db) as store:
        assert_running_as_recorded(store, db, "r", llm_calls=2, tool_calls=1)
        assert store.load_run("r").resumes == 2
        assert [s.tool for s in store.trace("r").steps if s.kind == "action"] == ["write"]

        done = resume("r", lw.ScriptedPolicy(rekill.SCRIPT[2:]), tools, store=store, rerun_unfinished=True)
        assert (done.stopped_reason, done.final_answer) == ("final", "wrote a and b")
        record = store.load_run("r")
        assert (record.status, record.stopped_reason, record.llm_calls, record.tool_calls) == ("finished", "final", 3, 2)
        assert store.trace("r").to_dict()["final_answer"] == "wrote a and b"
    assert effects.read_text().splitlines() == ["a", "b"]


@pytest.mark.parametrize("end", ["paused", "interrupted", "timeout"])
def test_a_run_resumed_after_a_pause_an_interrupt_or_a_timeout_and_killed_reads_as_running(
    end: str, journal_target: str, tmp_path: Path
):
    db, effects = journal_target, tmp_path / "effects.txt"
    with open_store(db) as store:
        policy = lw.ScriptedPolicy(rekill.SCRIPT)
        if end == "paused":
            def later(request: ApprovalRequest) -> bool:
                raise ApprovalPending(request.key)

            tools = rekill.registry(effects, {}, gated=True)
            trace = lw.run(rekill.TASK, policy, tools, store=store, run_id="r", approver=later)
            [pending] = store.pending_approvals("r")
            store.decide("r", pending.key, True)
        elif end == "interrupted":
            tools = rekill.registry(effects, {"a": "interrupt"})
            with pytest.raises(lw.RunInterrupted) as info:
                lw.run(rekill.TASK, policy, tools, store=store, run_id="r")
            trace = info.value.trace
        else:
            tools = rekill.registry(effects, {"a": "sleep"})
            trace = lw.run(rekill.TASK, policy, tools, store=store, run_id="r", timeout_s=0.5)
        assert trace.stopped_reason == end and store.load_run("r").stopped_reason == end
        if end == "timeout":  # the clock cut write(a) while it ran: in doubt until a person settles it
            assert store.load_run("r").status == "blocked" and [c.key for c in store.unsettled("r")] == ["1"]
            store.settle("r", "1", error="cut off by the run's timeout; not written")
        before = store.load_run("r")

    rekill_child("resume", db, "r", effects, before.llm_calls, "b")  # killed inside write(b)
    with open_store(db) as store:
        assert_running_as_recorded(store, db, "r", llm_calls=2, tool_calls=1)
        assert store.load_run("r").resumes == 1
