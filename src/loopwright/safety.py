"""Approval gates and exactly-once side effects.

An approver is any callable given an ApprovalRequest (the exact tool and arguments)
that returns a Decision (or a bool). Only an explicit approval runs the call: `True` or
a Decision whose `approved` is True; any other answer ("yes", 1, None) denies it. A decision binds to the exact call: its key is a
hash of the tool name and the canonical arguments, so approving `delete(id=1)` says
nothing about `delete(id=2)`. An approver that cannot decide now raises
ApprovalPending: the run stops with "paused", the request is serialisable, and a later
`resume` (with a journal) continues once a decision is given.
"""

from __future__ import annotations

import hashlib
import json
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from loopwright.guards import call_key


@dataclass(frozen=True, slots=True)
class Decision:
    """An approver's answer: approved or not, and why (shown to the model on denial)."""

    approved: bool
    reason: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.approved, bool):  # "no" is truthy: only a real bool decides
            raise TypeError(f"Decision.approved must be True or False, got {self.approved!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"approved": self.approved, "reason": self.reason}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Decision:
        return cls(d.get("approved") is True, str(d.get("reason", "")))  # fails closed


def approve(reason: str = "approved") -> Decision:
    return Decision(True, reason)


def deny(reason: str = "denied by approver") -> Decision:
    return Decision(False, reason)


def approval_key(tool: str, args: Any) -> str:
    """The identity a decision binds to: the tool and its exact arguments."""
    return hashlib.sha256(call_key(tool, args).encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A call waiting for a person or a program to allow it."""

    tool: str
    args: dict[str, Any]
    key: str
    step: int | str
    side_effects: str = "none"
    description: str = ""
    run_id: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "tool": self.tool,
            "args": json.loads(json.dumps(self.args, default=str)),
            "key": self.key,
            "step": self.step,
            "side_effects": self.side_effects,
            "description": self.description,
            "run_id": self.run_id,
        }
        if self.meta:  # e.g. {"agent": name}: a child agent's call (loopwright.runtime.agents)
            out["meta"] = json.loads(json.dumps(self.meta, default=str))
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ApprovalRequest:
        return cls(
            tool=str(d["tool"]),
            args=dict(d["args"]),
            key=str(d["key"]),
            step=d["step"],
            side_effects=str(d.get("side_effects", "none")),
            description=str(d.get("description", "")),
            run_id=d.get("run_id"),
            meta=dict(d.get("meta") or {}),
        )


class ApprovalPending(Exception):
    """Raised by an approver to pause the run until a decision is available."""


Approver = Callable[[ApprovalRequest], "Decision | bool"]


def ask(approver: Approver, request: ApprovalRequest) -> tuple[Decision, str | None]:
    """Call an approver and normalise its answer; the decision, and the traceback when the
    approver raised. ApprovalPending propagates; any other exception is a denial (an
    approver that breaks must not approve by accident) whose reason keeps the whole
    message, and so is any answer but `True` or a Decision: the gate fails closed."""
    try:
        out = approver(request)
    except ApprovalPending:
        raise
    except Exception as exc:
        return Decision(False, f"approver failed: {_exception_text(exc)}"), _traceback_text(exc)
    if isinstance(out, Decision):
        return out, None
    if isinstance(out, bool):
        return Decision(out, "approved" if out else "denied by approver"), None
    return Decision(False, f"approver returned {type(out).__name__}, not a Decision or bool"), None


def _exception_text(exc: BaseException) -> str:
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:  # its __str__ raised: the type still says something
        return f"{type(exc).__name__} (its message could not be read)"


def _traceback_text(exc: BaseException) -> str:
    try:
        return "".join(traceback.format_exception(exc))
    except Exception:
        return _exception_text(exc)


def decisions_approver(decisions: Mapping[str, Decision | bool], fallback: Approver | None = None) -> Approver:
    """An approver that answers from decisions given ahead of time, keyed by approval
    key; calls it has no decision for are passed to `fallback`, else left pending."""

    def approver(request: ApprovalRequest) -> Decision | bool:
        if request.key in decisions:
            return decisions[request.key]
        if fallback is not None:
            return fallback(request)
        raise ApprovalPending(request.key)

    return approver


NO_APPROVER: Final = "this tool needs approval and the run has no approver"
"""The reason a gated call is denied in a run given no approver."""


def denial_observation(tool: str, reason: str) -> str:
    return f"DENIED[{tool}]: {reason}"


def terminal_approver(
    ask_line: Callable[[str], str] | None = None, write: Callable[[str], Any] | None = None
) -> Approver:
    """An approver that asks the person at the terminal, showing the exact call.

    Anything but "y" or "yes" denies; so does end of input (no terminal, CI)."""

    def approver(request: ApprovalRequest) -> Decision:
        read = ask_line if ask_line is not None else input  # looked up per call
        args = json.dumps(request.args, ensure_ascii=False, default=str)
        text = f"\nApprove {request.tool}({args}) [{request.side_effects}]? [y/N] "
        try:
            if write is not None:
                write(text)
                answer = read("")
            else:
                answer = read(text)
        except EOFError:
            return Decision(False, "no one at the terminal to approve it")
        if answer.strip().lower() in ("y", "yes"):
            return Decision(True, "approved at the terminal")
        return Decision(False, "denied at the terminal")

    return approver
