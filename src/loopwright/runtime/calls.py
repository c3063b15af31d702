"""The identity of the tool call in progress: `current_call()`, for tools that pass an
idempotency key to the system they change (a payment provider, a table with a unique key).

The key is derived from durable identity, never generated inside the tool: the run id and
the call's journal key (ReAct step "3", ReWOO "E2", plan-execute "2:E1"). It is the same on
every retry and every resume of that call, and differs between calls and between runs. A
tool declared `dedupes_on_call_key=True` promises that its system ignores a second call with
the same key, so a resumed run runs it again after a crash instead of stopping for a person.

Both drivers set it (`bind_call`) while a tool runs; worker threads and async tools see it
too (loopwright copies the context into the threads it starts).
"""

from __future__ import annotations

import secrets
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Final, Protocol


@dataclass(frozen=True, slots=True)
class CallInfo:
    """The tool call in progress.

    run_id: the run's id; in a run without a store, its `run_id=` if given, else an
    ephemeral id made once per run (then `durable` is False: nothing outlives the process).
    step: the call's key within the run (ReAct step "3", ReWOO "E2", plan-execute "2:E1").
    attempt: 1 for the first execution; 2 and up when a resumed run ran it again.
    key: `run_id + ":" + step`, the idempotency key to hand to the system the tool changes.
    """

    run_id: str
    step: str
    attempt: int
    key: str
    tool: str
    durable: bool


class CallSource(Protocol):
    """What the choke point binds: something that knows the run's id."""

    def call_run_id(self) -> tuple[str, bool]: ...


_CURRENT: Final[ContextVar[tuple[CallSource, str, int, str] | None]] = ContextVar(
    "loopwright_current_call", default=None
)


def current_call() -> CallInfo | None:
    """The tool call in progress, or None when no loopwright run is executing a tool here
    (a tool called directly, as a plain function, gets None)."""
    bound = _CURRENT.get()
    if bound is None:
        return None
    source, step, attempt, tool = bound
    run_id, durable = source.call_run_id()
    return CallInfo(run_id, step, attempt, f"{run_id}:{step}", tool, durable)


def bind_call(source: CallSource, step: str, attempt: int, tool: str) -> Token[tuple[CallSource, str, int, str] | None]:
    """Make a call current (the choke point does, around the tool); `unbind_call` undoes it."""
    return _CURRENT.set((source, step, attempt, tool))


def unbind_call(token: Token[tuple[CallSource, str, int, str] | None]) -> None:
    """Undo `bind_call`: the call is over."""
    _CURRENT.reset(token)


def bound_call() -> tuple[CallSource, str] | None:
    """What the choke point bound for the call in progress here: its source (the run) and
    the call's key; None outside a tool call. A child agent run started inside a tool finds
    its parent run this way."""
    bound = _CURRENT.get()
    return None if bound is None else (bound[0], bound[1])


def ephemeral_run_id() -> str:
    """The id a run without a store or run_id gives its calls' keys."""
    return "ephemeral-" + secrets.token_hex(8)
