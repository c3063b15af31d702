"""Containments: approval gates, least privilege, exactly-once side effects, no eval."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

import loopwright as lw
from conftest import act, final
from loopwright.safety import (
    ApprovalPending,
    ApprovalRequest,
    Decision,
    approval_key,
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
    assert "not run again" in second.meta["exactly_once"]
    assert trace.tool_calls == 1


def test_a_new_idempotency_key_is_a_new_side_effect(log):
    a = act("send_payment", '{"to": "bob", "cents": 500, "request_id": "r-1"}')
    b = act("send_payment", '{"to": "bob", "cents": 500, "request_id": "r-2"}')
    lw.run("t", lw.ScriptedPolicy([a, b, final("paid twice")]), make_tools(log))
    assert [c[1]["request_id"] for c in log] == ["r-1", "r-2"]


def test_exactly_once_holds_across_concurrent_rewoo_steps(log):
    args = {"to": "bob", "cents": 5, "request_id": "same"}
    plan = {"plan": [{"id": f"E{i}", "tool": "send_payment", "args": args} for i in range(1, 5)]}
    trace = lw.run("t", lw.ScriptedPolicy([json.dumps(plan), "x"]), make_tools(log), mode="rewoo")
    assert len(log) == 1
    assert sum("exactly_once" in s.meta for s in trace.steps) == 3


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
