"""runtime/gate.py, what stands between a proposed tool call and the tool: what a call that
needs approval is told and records, replayed results, exactly-once, the built-in
read_output. (Approvals as a whole: tests/test_safety.py; calls in doubt:
tests/test_in_doubt.py; results past the cap: tests/test_handles.py.)"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

import loopwright as lw
from conftest import act, final


def test_an_approved_call_in_a_run_without_a_journal_is_its_first_attempt() -> None:
    seen: list[Any] = []

    @lw.tool(side_effects="write", requires_approval=True)
    def send(text: str) -> str:
        """Send a message."""
        seen.append(lw.current_call())
        return "sent"

    trace = lw.run("t", lw.ScriptedPolicy([act("send", '{"text": "hi"}'), final("ok")]), lw.ToolRegistry([send]),
                   approver=lambda request: True)
    assert trace.final_answer == "ok" and [(c.step, c.attempt, c.tool) for c in seen] == [("1", 1, "send")]


def test_on_deny_other_than_observe_or_stop_is_refused_naming_the_value() -> None:
    with pytest.raises(ValueError, match=r"^on_deny must be 'observe' or 'stop', got 'ignore'$"):
        lw.run("t", lw.ScriptedPolicy([final("x")]), lw.ToolRegistry([]), on_deny="ignore")  # type: ignore[arg-type]


def test_a_call_rerun_after_a_crash_is_its_second_attempt_and_the_journal_kept_its_arguments(tmp_path: Any) -> None:
    attempts: list[int] = []
    state = {"crash": True}

    @lw.tool(side_effects="write")
    def send_email(to: str) -> str:
        """Send an email."""
        call = lw.current_call()
        assert call is not None
        attempts.append(call.attempt)
        if state["crash"]:
            raise SystemExit("killed before the result was recorded")
        return f"sent to {to}"

    script = [act("send_email", '{"to": "ann"}'), final("sent")]
    store = lw.SQLiteStore(tmp_path / "runs.db")
    with pytest.raises(SystemExit):
        lw.run("t", lw.ScriptedPolicy(script), lw.ToolRegistry([send_email]), store=store, run_id="r")
    [unsettled] = store.unsettled("r")
    assert (unsettled.key, unsettled.tool, unsettled.args) == ("1", "send_email", {"to": "ann"})
    state["crash"] = False
    done = lw.resume("r", lw.ScriptedPolicy(script[1:]), lw.ToolRegistry([send_email]), store=store,
                     rerun_unfinished=True)
    assert done.final_answer == "sent" and attempts == [1, 2]
    store.close()


def test_a_side_effect_that_failed_runs_again_when_called_again() -> None:
    """Exactly-once keeps a side effect's success, not its failure: the same call after a
    failure is a new try, not an answer from the failed one."""
    tries: list[str] = []

    @lw.tool(side_effects="write", requires_approval=True)
    def pay(invoice: str) -> str:
        """Pay an invoice."""
        tries.append(invoice)
        if len(tries) == 1:
            raise ConnectionError("the bank did not answer")
        return f"paid {invoice}"

    call = act("pay", '{"invoice": "42"}')
    policy = lw.ScriptedPolicy([call, call, call, final("paid")])
    trace = lw.run("t", policy, lw.ToolRegistry([pay]), approver=lambda request: True, on_repeat="off")
    assert tries == ["42", "42"]  # the failure, the success; the third call is answered from the success
    assert [s.observation for s in trace.steps[1:3]] == ["paid 42", "paid 42"]
    assert "exactly_once" not in trace.steps[1].meta and "exactly_once" in trace.steps[2].meta


def test_a_side_effect_that_failed_before_a_resume_runs_again_when_called_again(tmp_path: Any) -> None:
    tries: list[str] = []

    @lw.tool(side_effects="write")
    def pay(invoice: str) -> str:
        """Pay an invoice."""
        tries.append(invoice)
        if len(tries) == 1:
            raise ConnectionError("the bank did not answer")
        return f"paid {invoice}"

    call = act("pay", '{"invoice": "42"}')
    store = lw.SQLiteStore(tmp_path / "runs.db")
    first = lw.run("t", lw.ScriptedPolicy([call, RuntimeError("the model died")]), lw.ToolRegistry([pay]),
                   store=store, run_id="r")
    assert first.stopped_reason == "error" and first.steps[0].error is not None
    again = lw.resume("r", lw.ScriptedPolicy([call, final("paid")]), lw.ToolRegistry([pay]), store=store,
                      on_repeat="off")
    assert tries == ["42", "42"] and again.steps[0].meta["replayed"] is True  # replayed, then tried again
    assert again.steps[1].observation == "paid 42" and "exactly_once" not in again.steps[1].meta
    store.close()


def test_a_tool_that_finishes_while_a_child_agent_runs_beside_it_is_not_taken_for_the_child() -> None:
    """ReWOO runs E1 (a plain tool) and E2 (a child agent) at once; E1 finishes while the
    child is still running, and is recorded as the plain call it is."""
    child_started, lookup_finished = threading.Event(), threading.Event()

    @lw.tool
    def lookup(q: str) -> str:
        """Look something up."""
        child_started.wait(10)  # finish only once the child agent is running
        return "looked up"

    def helper_model(prompt: str) -> str:
        child_started.set()
        lookup_finished.wait(10)  # answer only once E1 has finished
        return final("helped")

    helper = lw.Agent("helper", helper_model, lw.ToolRegistry([]))
    plan = {"plan": [{"id": "E1", "tool": "lookup", "args": {"q": "x"}},
                     {"id": "E2", "tool": "helper", "args": {"task": "help"}}]}
    policy = lw.ScriptedPolicy([json.dumps(plan), "Final Answer: done"])
    seen: list[lw.Event] = []
    for event in lw.iter_events("t", policy, lw.ToolRegistry([lookup, helper.as_tool()]), mode="rewoo"):
        seen.append(event)
        if isinstance(event, lw.ToolFinished) and event.agent is None and event.call_key == "E1":
            lookup_finished.set()
    trace = next(e.trace for e in seen if isinstance(e, lw.RunFinished) and e.agent is None)
    assert trace.stopped_reason == "final"
    steps = {s.step_id: s for s in trace.steps if s.kind == "action"}
    assert steps["E1"].observation == "looked up" and "child_run_id" not in steps["E1"].meta
    assert steps["E2"].observation == "helped" and steps["E2"].meta["child_run_id"] in trace.children
    kinds = [(e.kind, e.agent) for e in seen]
    assert kinds.index(("tool_finished", None)) < kinds.index(("run_finished", "helper"))  # while the child ran


@pytest.mark.parametrize("on_deny", ["observe", "stop"])
def test_a_denied_call_is_a_denied_step_with_its_call_and_the_reason(on_deny: str) -> None:
    @lw.tool(side_effects="destructive")
    def wipe(path: str) -> str:
        """Delete a path."""
        return "gone"

    policy = lw.ScriptedPolicy([act("wipe", '{"path": "/"}'), final("kept")])
    trace = lw.run("t", policy, lw.ToolRegistry([wipe]), approver=lambda r: lw.Decision(False, "not the root"),
                   on_deny=on_deny)  # type: ignore[arg-type]
    step = trace.steps[0]
    assert (step.kind, step.tool, step.args, step.error) == ("denied", "wipe", {"path": "/"}, "not the root")
    assert "not the root" in step.observation and "traceback" not in step.meta  # the approver answered: no traceback
    assert trace.stopped_reason == ("denied" if on_deny == "stop" else "final")


def test_a_repaired_call_not_run_is_journaled_like_any_step(tmp_path: Any) -> None:
    @lw.tool(side_effects="destructive")
    def wipe(path: str) -> str:
        """Delete a path."""
        return "gone"

    cut = 'Thought: wipe\nAction: wipe\nAction Input: {"path": "/tmp"'
    store = lw.SQLiteStore(tmp_path / "runs.db")
    trace = lw.run("t", lw.ScriptedPolicy([cut, final("kept")]), lw.ToolRegistry([wipe]), approver=lambda r: True,
                   store=store, run_id="r")
    assert trace.final_answer == "kept" and trace.steps[0].meta["not_run"] == "repaired arguments"
    assert [s.to_dict() for s in store.trace("r").steps] == [s.to_dict() for s in trace.steps]
    store.close()
