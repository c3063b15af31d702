"""Containments: approval gates, least privilege, exactly-once side effects, no eval."""

from __future__ import annotations

import json
import pathlib
import re
import threading

import pytest

import loopwright as lw
from conftest import act, final
from loopwright.durable.sqlite import SQLiteStore
from loopwright.safety import (
    ApprovalPending,
    ApprovalRequest,
    Decision,
    approval_key,
    ask,
    decisions_approver,
    deny,
)


def make_tools(log: list[tuple[str, dict]]) -> lw.ToolRegistry:
    @lw.tool(side_effects="destructive")
    def delete_file(path: str) -> str:
        """Delete a file."""
        log.append(("delete_file", {"path": path}))
        return f"deleted {path}"

    @lw.tool(side_effects="write", idempotency_key="request_id")
    def send_payment(to: str, cents: int, request_id: str) -> str:
        """Send a payment."""
        log.append(("send_payment", {"to": to, "cents": cents, "request_id": request_id}))
        return f"sent {cents} to {to}"

    @lw.tool(side_effects="read")
    def read_file(path: str) -> str:
        """Read a file."""
        log.append(("read_file", {"path": path}))
        return "contents"

    return lw.ToolRegistry([delete_file, send_payment, read_file])


@pytest.fixture
def log() -> list[tuple[str, dict]]:
    return []


def test_destructive_tools_require_approval_by_default(log):
    reg = make_tools(log)
    assert reg["delete_file"].requires_approval
    assert not reg["read_file"].requires_approval and reg["read_file"].idempotent
    assert not reg["send_payment"].idempotent


def test_without_an_approver_a_gated_tool_is_denied_not_run(log):
    policy = lw.ScriptedPolicy([act("delete_file", '{"path": "/etc"}'), final("ok")])
    trace = lw.run("t", policy, make_tools(log))
    assert log == []
    step = trace.steps[0]
    assert step.kind == "denied"
    assert step.observation.startswith("DENIED[delete_file]: ")
    assert trace.tool_calls == 0


def _gated_registry(log: list[tuple[str, dict]], side_effects: str) -> lw.ToolRegistry:
    @lw.tool(side_effects=side_effects, requires_approval=True)
    def archive(path: str) -> str:
        """Archive a file."""
        log.append(("archive", {"path": path}))
        return f"archived {path}"

    return lw.ToolRegistry([archive])


def _one_call_run(mode: str, registry: lw.ToolRegistry, **options) -> lw.Trace:
    """A run in `mode` whose model asks for archive("/etc") once, then answers."""
    plan = json.dumps({"plan": [{"id": "E1", "tool": "archive", "args": {"path": "/etc"}}]})
    if mode in ("react", "reflexion", "react (async)"):
        policy = lw.ScriptedPolicy([act("archive", '{"path": "/etc"}'), final("ok")])
    elif mode == "rewoo":
        policy = lw.ScriptedPolicy([plan, "Final Answer: ok"])
    elif mode == "plan_execute":
        policy = lw.ScriptedPolicy([plan])
        options["max_replans"] = 0
    else:  # tot: a branch that calls the tool, with side effects allowed in branches

        def policy(prompt: str) -> str:
            if prompt.endswith("Evaluation:"):
                return "sure"
            return "1. Final Answer: ok" if "Step 1:" in prompt else "1. archive[/etc]"

        options.update(allow_side_effects=True, max_steps=4)
    if mode == "react (async)":
        import asyncio

        return asyncio.run(lw.arun("t", policy, registry, **options))
    return lw.run("t", policy, registry, mode=mode, **options)


GATED_MODES = ["react", "react (async)", "rewoo", "plan_execute", "reflexion", "tot"]


@pytest.mark.parametrize("mode", GATED_MODES)
@pytest.mark.parametrize("side_effects", ["none", "read", "write", "destructive"])
def test_without_an_approver_requires_approval_denies_whatever_the_side_effects(log, side_effects, mode):
    """requires_approval=True gates the tool, not its side_effects label: with no approver
    the call is denied and never runs, in every mode and on both drivers."""
    trace = _one_call_run(mode, _gated_registry(log, side_effects))
    assert log == []
    denied = [s for s in trace.steps if s.kind == "denied"]
    assert denied and all(s.tool == "archive" for s in denied)
    assert denied[0].observation.startswith("DENIED[archive]: ")
    assert "no approver" in denied[0].observation
    assert trace.tool_calls == 0


@pytest.mark.parametrize("mode", GATED_MODES)
@pytest.mark.parametrize("side_effects", ["none", "read", "write", "destructive"])
def test_an_approver_is_asked_before_a_tool_that_requires_approval_whatever_the_side_effects(
        log, side_effects, mode):
    asked: list[ApprovalRequest] = []

    def approver(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    trace = _one_call_run(mode, _gated_registry(log, side_effects), approver=approver)
    assert [(r.tool, r.args, r.side_effects) for r in asked] == [("archive", {"path": "/etc"}, side_effects)]
    assert log == [("archive", {"path": "/etc"})] and trace.tool_calls == 1


def test_approver_sees_the_exact_call_and_approval_runs_it(log):
    seen: list[ApprovalRequest] = []

    def approver(request: ApprovalRequest) -> bool:
        seen.append(request)
        return True

    policy = lw.ScriptedPolicy([act("delete_file", '{"path": "/tmp/x"}'), final("done")])
    trace = lw.run("t", policy, make_tools(log), approver=approver)
    assert log == [("delete_file", {"path": "/tmp/x"})]
    assert seen[0].tool == "delete_file" and seen[0].args == {"path": "/tmp/x"}
    assert seen[0].key == approval_key("delete_file", {"path": "/tmp/x"})
    assert seen[0].side_effects == "destructive"
    assert trace.steps[0].kind == "action"


def test_denial_is_an_observation_the_model_can_route_around(log):
    policy = lw.ScriptedPolicy(
        [act("delete_file", '{"path": "/"}'), act("read_file", '{"path": "/"}'), final("read instead")]
    )
    trace = lw.run("t", policy, make_tools(log), approver=lambda r: deny("never delete /"))
    assert trace.steps[0].observation == "DENIED[delete_file]: never delete /"
    assert "DENIED[delete_file]: never delete /" in policy.prompts[1]
    assert log == [("read_file", {"path": "/"})]
    assert trace.stopped_reason == "final"


def test_denial_can_end_the_run(log):
    policy = lw.ScriptedPolicy([act("delete_file", '{"path": "/"}'), final("x")])
    trace = lw.run("t", policy, make_tools(log), approver=lambda r: False, on_deny="stop")
    assert trace.stopped_reason == "denied" and log == []
    assert trace.steps[-1].kind == "denied"


def test_approval_binds_to_the_exact_arguments(log):
    approved = {approval_key("delete_file", {"path": "/tmp/a"}): Decision(True, "ok")}
    policy = lw.ScriptedPolicy([act("delete_file", '{"path": "/tmp/b"}')])
    trace = lw.run("t", policy, make_tools(log), approver=decisions_approver(approved))
    assert log == []
    assert trace.stopped_reason == "paused"
    assert trace.meta["pending_approval"]["args"] == {"path": "/tmp/b"}


def test_pending_approval_pauses_the_run_and_serialises(log):
    def later(request: ApprovalRequest) -> bool:
        raise ApprovalPending(request.key)

    policy = lw.ScriptedPolicy([act("delete_file", '{"path": "/tmp/x"}')])
    trace = lw.run("t", policy, make_tools(log), approver=later)
    assert trace.stopped_reason == "paused" and log == []
    pending = trace.meta["pending_approval"]
    request = ApprovalRequest.from_dict(json.loads(json.dumps(pending)))
    assert request.tool == "delete_file" and request.key == approval_key("delete_file", {"path": "/tmp/x"})
    assert lw.Trace.from_dict(trace.to_dict()).meta["pending_approval"] == pending


def test_an_approver_that_raises_denies(log):
    def broken(request: ApprovalRequest) -> bool:
        raise RuntimeError("approval service down")

    trace = lw.run("t", lw.ScriptedPolicy([act("delete_file", '{"path": "/x"}'), final("x")]),
                   make_tools(log), approver=broken)
    assert log == [] and "approval service down" in trace.steps[0].observation


LONG_FAILURE = "approval service down: " + " ".join(f"detail-{i}" for i in range(40)) + " END-OF-MESSAGE"


def broken_approver(request: ApprovalRequest) -> bool:
    raise RuntimeError(LONG_FAILURE)


@pytest.mark.parametrize("on_deny", ["observe", "stop"])
def test_an_approver_that_raises_is_a_denial_with_its_whole_message_and_traceback(log, on_deny, tmp_path):
    policy = lw.ScriptedPolicy([act("delete_file", '{"path": "/x"}'), final("x")])
    with SQLiteStore(tmp_path / "runs.db") as store:
        trace = lw.run("t", policy, make_tools(log), approver=broken_approver, on_deny=on_deny,
                       store=store, run_id="r")
        journaled = store.trace("r")
    step = trace.steps[0]
    assert log == [] and step.kind == "denied"  # fails closed
    assert step.error == f"approver failed: RuntimeError: {LONG_FAILURE}"
    assert step.observation == f"DENIED[delete_file]: approver failed: RuntimeError: {LONG_FAILURE}"
    tb = step.meta["traceback"]
    assert tb.startswith("Traceback (most recent call last):")
    assert "in broken_approver" in tb and "raise RuntimeError(LONG_FAILURE)" in tb
    assert tb.rstrip().endswith("END-OF-MESSAGE")
    assert journaled.steps[0].meta["traceback"] == tb
    assert LONG_FAILURE in str(trace)  # printed whole, not clipped


def test_decision_and_approval_pending_are_exported_at_the_top(log):
    from loopwright import safety

    assert lw.Decision is safety.Decision and lw.ApprovalPending is safety.ApprovalPending
    assert lw.ApprovalRequest is safety.ApprovalRequest
    assert {"Decision", "ApprovalPending", "ApprovalRequest"} <= set(lw.__all__)

    def careful(request: lw.ApprovalRequest) -> lw.Decision:
        if request.args["path"] == "/later":
            raise lw.ApprovalPending(request.key)
        return lw.Decision(approved=request.args["path"] == "/tmp/x", reason="only /tmp/x")

    calls = [act("delete_file", '{"path": "/tmp/x"}'), act("delete_file", '{"path": "/etc"}'),
             act("delete_file", '{"path": "/later"}')]
    trace = lw.run("t", lw.ScriptedPolicy(calls), make_tools(log), approver=careful)
    assert [s.kind for s in trace.steps] == ["action", "denied"]
    assert trace.steps[1].observation == "DENIED[delete_file]: only /tmp/x"
    assert trace.stopped_reason == "paused" and log == [("delete_file", {"path": "/tmp/x"})]


class LooksApproved:
    """Not a Decision, but shaped like one that approves."""

    approved = True
    reason = "trust me"


@pytest.mark.parametrize("answer", ["yes", "no", 1, "true", [True], None, LooksApproved()],
                         ids=["yes", "no", "one", "true-text", "list", "none", "duck-decision"])
def test_approver_answers_other_than_true_deny(log, answer):
    policy = lw.ScriptedPolicy([act("delete_file", '{"path": "/x"}'), final("x")])
    trace = lw.run("t", policy, make_tools(log), approver=lambda r: answer)
    assert log == []
    assert trace.steps[0].kind == "denied"
    assert trace.steps[0].observation.startswith("DENIED[delete_file]: approver returned ")


def test_only_true_or_an_approving_decision_approves():
    request = ApprovalRequest("delete_file", {"path": "/x"}, "k", 1)
    assert ask(lambda r: True, request)[0].approved is True
    assert ask(lambda r: Decision(True, "ok"), request) == (Decision(True, "ok"), None)
    assert ask(lambda r: False, request)[0].approved is False
    assert ask(lambda r: Decision(False, "no"), request) == (Decision(False, "no"), None)
    assert ask(lambda r: "yes", request)[0].approved is False


def test_a_decision_refuses_an_approval_that_is_not_a_bool(log):
    with pytest.raises(TypeError, match="must be True or False, got 'yes'"):
        Decision("yes")  # type: ignore[arg-type]
    assert Decision.from_dict({"approved": "false"}).approved is False
    assert Decision.from_dict({"approved": 1}).approved is False
    assert Decision.from_dict({"approved": True, "reason": "r"}) == Decision(True, "r")
    # an approver that builds a bad Decision fails, and a failing approver denies
    trace = lw.run("t", lw.ScriptedPolicy([act("delete_file", '{"path": "/x"}'), final("x")]),
                   make_tools(log), approver=lambda r: Decision("yes"))  # type: ignore[arg-type]
    assert log == [] and trace.steps[0].kind == "denied"
    assert "approver failed: TypeError" in trace.steps[0].observation


CUT = "added a missing closing '}': the arguments may have been cut short"


def test_a_repaired_call_to_a_tool_that_changes_things_is_not_run(log):
    asked: list[ApprovalRequest] = []
    cut_payment = 'Thought: pay\nAction: send_payment\nAction Input: {"to": "bob", "cents": 31, "request_id": "r"'
    cut_delete = 'Thought: clean\nAction: delete_file\nAction Input: {"path": "/tmp/x"'
    policy = lw.ScriptedPolicy([cut_payment, cut_delete, act("send_payment", '{"to": "bob", "cents": 31, '
                                                             '"request_id": "r"}'), final("paid")])
    trace = lw.run("t", policy, make_tools(log), approver=lambda r: asked.append(r) or True)
    assert log == [("send_payment", {"to": "bob", "cents": 31, "request_id": "r"})]  # only the whole call ran
    assert asked == []  # a call that will not run is not put to the approver
    for step, tool, kind in ((trace.steps[0], "send_payment", "write"), (trace.steps[1], "delete_file", "destructive")):
        assert step.kind == "action" and step.meta["repaired"] == [CUT]
        assert step.observation.startswith(f"ERROR[{tool}]: invalid args: the arguments were not valid JSON")
        assert f"{tool} changes things ({kind}), so a repaired call is not run" in step.observation
        assert step.observation.endswith("send the call again with its complete arguments")
    assert "repaired" not in trace.steps[2].meta and trace.steps[2].observation == "sent 31 to bob"
    assert trace.tool_calls == 1
    assert "send the call again" in policy.prompts[1]  # the model reads why


def test_a_repaired_call_to_a_read_tool_runs_and_says_so(log):
    policy = lw.ScriptedPolicy(['Thought: read\nAction: read_file\nAction Input: {"path": "/a"', final("read")])
    trace = lw.run("t", policy, make_tools(log))
    assert log == [("read_file", {"path": "/a"})]
    assert trace.steps[0].observation == "contents" and trace.steps[0].meta["repaired"] == [CUT]


def test_a_repaired_native_tool_call_that_changes_things_is_not_run(log):
    call = lw.ToolCall("delete_file", '{"path": "/tmp/x"', id="c1")
    policy = lw.ScriptedPolicy([lw.Completion("", tool_calls=(call,)), lw.Completion("kept")])
    trace = lw.run("t", policy, make_tools(log), dialect="native", approver=lambda r: True)
    assert log == [] and trace.steps[0].meta["repaired"] == [CUT]
    assert "a repaired call is not run" in trace.steps[0].observation


def test_scope_limits_the_run_whatever_the_model_says(log):
    reg = make_tools(log)
    policy = lw.ScriptedPolicy([act("delete_file", '{"path": "/"}'), final("x")])
    trace = lw.run("t", policy, reg, tools=["read_file"], approver=lambda r: True)
    assert log == []
    assert trace.steps[0].observation.startswith("ERROR[delete_file]: unknown tool 'delete_file'")


def test_scope_applies_to_rewoo_plans(log):
    plan = json.dumps({"plan": [{"id": "E1", "tool": "delete_file", "args": {"path": "/"}}]})
    trace = lw.run("t", lw.ScriptedPolicy([plan, "x"]), make_tools(log), mode="rewoo",
                   tools=["read_file"], approver=lambda r: True)
    assert log == [] and "unknown tool" in trace.steps[1].observation


def test_unknown_scope_name_is_a_clear_error(log):
    with pytest.raises(lw.ToolDefinitionError):
        lw.run("t", lw.ScriptedPolicy([]), make_tools(log), tools=["nope"])


def test_destructive_call_with_same_args_and_key_executes_once(log):
    call = act("send_payment", '{"to": "bob", "cents": 500, "request_id": "r-1"}')
    policy = lw.ScriptedPolicy([call, call, final("paid")])
    trace = lw.run("t", policy, make_tools(log))
    assert [c[0] for c in log] == ["send_payment"]
    second = trace.steps[1]
    assert second.observation == trace.steps[0].observation == "sent 500 to bob"
    assert second.meta["exactly_once"] == "not run again: same call and idempotency key as 1"  # step 1's call
    assert trace.tool_calls == 1


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_the_approver_is_asked_only_for_calls_that_will_run(log, driver):
    asked: list[str] = []

    def approver(request: ApprovalRequest) -> bool:
        asked.append(request.args["path"])
        return True

    a, b, c = (act("delete_file", json.dumps({"path": p})) for p in ("/a", "/b", "/c"))
    policy = lw.ScriptedPolicy([a, b, a, c, final("done")])
    if driver == "sync":
        trace = lw.run("t", policy, make_tools(log), approver=approver)
    else:
        import asyncio

        trace = asyncio.run(lw.arun("t", policy, make_tools(log), approver=approver))
    assert [args["path"] for _, args in log] == ["/a", "/b", "/c"]  # three executions
    assert asked == ["/a", "/b", "/c"]  # three questions: the repeat of /a is not asked about
    assert "not run again" in trace.steps[2].meta["exactly_once"]
    assert trace.steps[2].observation == "deleted /a"


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_concurrent_rewoo_workers_ask_only_for_calls_that_will_run(driver):
    # the deletion takes 50 ms, so the workers overlap: the repeat of /a must wait for the
    # first to settle, then reuse it, instead of asking while it runs
    deleted: list[str] = []
    asked: list[str] = []
    lock = threading.Lock()

    @lw.tool(side_effects="destructive")
    def delete_file(path: str) -> str:
        """Delete a file."""
        threading.Event().wait(0.05)
        with lock:
            deleted.append(path)
        return f"deleted {path}"

    def approver(request: ApprovalRequest) -> bool:
        with lock:
            asked.append(request.args["path"])
        return True

    steps = [{"id": f"E{i}", "tool": "delete_file", "args": {"path": p}} for i, p in enumerate(["/a", "/b", "/a", "/c"], 1)]
    policy = lw.ScriptedPolicy([json.dumps({"plan": steps}), "done"])
    if driver == "sync":
        trace = lw.run("t", policy, [delete_file], mode="rewoo", approver=approver)
    else:
        import asyncio

        trace = asyncio.run(lw.arun("t", policy, [delete_file], mode="rewoo", approver=approver))
    assert sorted(deleted) == ["/a", "/b", "/c"]
    assert sorted(asked) == ["/a", "/b", "/c"]  # four calls, three executions, three questions
    assert sum("exactly_once" in s.meta for s in trace.steps) == 1


def test_a_new_idempotency_key_is_a_new_side_effect(log):
    a = act("send_payment", '{"to": "bob", "cents": 500, "request_id": "r-1"}')
    b = act("send_payment", '{"to": "bob", "cents": 500, "request_id": "r-2"}')
    lw.run("t", lw.ScriptedPolicy([a, b, final("paid twice")]), make_tools(log))
    assert [c[1]["request_id"] for c in log] == ["r-1", "r-2"]


def test_exactly_once_holds_across_concurrent_rewoo_steps_of_a_50ms_payment():
    # The payment takes 50 ms, so the four workers really overlap: without the per-key
    # lock each would find the ledger empty and pay.
    paid: list[str] = []

    @lw.tool(side_effects="write", idempotency_key="request_id")
    def send_payment(to: str, cents: int, request_id: str) -> str:
        """Send a payment."""
        threading.Event().wait(0.05)
        paid.append(request_id)
        return f"sent {cents} to {to}"

    args = {"to": "bob", "cents": 5, "request_id": "same"}
    plan = {"plan": [{"id": f"E{i}", "tool": "send_payment", "args": args} for i in range(1, 5)]}
    trace = lw.run("t", lw.ScriptedPolicy([json.dumps(plan), "x"]), lw.ToolRegistry([send_payment]),
                   mode="rewoo")
    assert paid == ["same"]
    assert trace.tool_calls == 1
    assert sum("exactly_once" in s.meta for s in trace.steps) == 3
    assert {s.observation for s in trace.steps if s.kind == "action"} == {"sent 5 to bob"}


def test_a_callable_idempotency_key_makes_calls_with_the_same_key_one_side_effect():
    shipped: list[dict] = []

    @lw.tool(side_effects="write", idempotency_key=lambda args: args["order"])
    def ship(order: str, note: str) -> str:
        """Ship an order."""
        shipped.append({"order": order, "note": note})
        return f"shipped {order}"

    first, retry = act("ship", '{"order": "o-1", "note": "a"}'), act("ship", '{"order": "o-1", "note": "b"}')
    other = act("ship", '{"order": "o-2", "note": "a"}')
    trace = lw.run("t", lw.ScriptedPolicy([first, retry, other, final("ok")]), lw.ToolRegistry([ship]))
    assert shipped == [{"order": "o-1", "note": "a"}, {"order": "o-2", "note": "a"}]
    assert "not run again" in trace.steps[1].meta["exactly_once"]
    assert trace.steps[1].observation == "shipped o-1"


def test_a_named_idempotency_key_does_not_merge_calls_with_different_arguments(log):
    a = act("send_payment", '{"to": "bob", "cents": 500, "request_id": "r-1"}')
    b = act("send_payment", '{"to": "bob", "cents": 700, "request_id": "r-1"}')
    trace = lw.run("t", lw.ScriptedPolicy([a, b, final("paid")]), make_tools(log))
    assert [c[1]["cents"] for c in log] == [500, 700]
    assert all("exactly_once" not in s.meta for s in trace.steps)


def test_exactly_once_holds_across_resume(log, tmp_path):
    call = act("send_payment", '{"to": "bob", "cents": 500, "request_id": "r-1"}')
    with SQLiteStore(tmp_path / "runs.db") as store:
        with pytest.raises(lw.RunInterrupted):
            lw.run("t", lw.ScriptedPolicy([call, KeyboardInterrupt()]), make_tools(log), store=store, run_id="r")
        assert len(log) == 1
        # the resumed run replays step 1 from the journal; the model then asks again
        trace = lw.resume("r", lw.ScriptedPolicy([call, final("paid")]), make_tools(log), store=store)
    assert [c[0] for c in log] == ["send_payment"]
    assert trace.steps[0].meta.get("replayed") is True
    assert "not run again" in trace.steps[1].meta["exactly_once"]
    assert trace.stopped_reason == "final"


def test_no_eval_or_exec_anywhere_in_the_package():
    src = pathlib.Path(lw.__file__).parent
    offenders = []
    pattern = re.compile(r"(?<![\w.])(eval|exec|compile)\s*\(|__import__\s*\(|pickle\.loads?\(")
    for path in src.rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if pattern.search(code):
                offenders.append(f"{path.name}:{n}: {line.strip()}")
    assert offenders == []


def test_a_repaired_call_not_run_names_every_repair_and_took_no_time(log):
    cut = 'Thought: clean\nAction: delete_file\nAction Input: {&quot;path&quot;: &quot;/tmp/x&quot;'
    trace = lw.run("t", lw.ScriptedPolicy([cut, final("no")]), make_tools(log), approver=lambda r: True)
    step = trace.steps[0]
    repairs = ["decoded HTML entities in the JSON syntax", CUT]
    assert log == [] and step.meta["repaired"] == repairs and step.meta["not_run"] == "repaired arguments"
    assert step.error == (f"invalid args: the arguments were not valid JSON as sent and had to be repaired "
                          f"({'; '.join(repairs)}); delete_file changes things (destructive), so a repaired call "
                          f"is not run: send the call again with its complete arguments")
    assert step.observation == f"ERROR[delete_file]: {step.error}"
    assert step.tool == "delete_file" and step.args == {"path": "/tmp/x"} and step.meta["tool_s"] == 0.0


def test_each_decision_is_journaled_with_the_request_it_answers(log, tmp_path):
    store = SQLiteStore(tmp_path / "runs.db")
    answers = iter([True, Decision(False, "not that one")])
    policy = lw.ScriptedPolicy([act("delete_file", '{"path": "/a"}'), act("delete_file", '{"path": "/b"}'),
                                final("done")])
    lw.run("t", policy, make_tools(log), approver=lambda r: next(answers), store=store, run_id="r")
    journaled = store.approvals("r")
    assert [(request.args, request.tool, request.run_id) for request, _ in journaled] == [
        ({"path": "/a"}, "delete_file", "r"), ({"path": "/b"}, "delete_file", "r")]
    assert [(d.approved, d.reason) for _, d in journaled] == [(True, "approved"), (False, "not that one")]
    store.close()
