"""What a mode and its driver say to each other.

A mode is a step machine: a generator that performs no I/O. It yields the Steps it
records and requests for what only the driver may do (call the model, call a tool;
ReWOO also starts calls and asks for the next one finished), and receives each answer
through `send`: a ModelCall for a ModelRequest (the model call is requested by yielding
the request itself), an Executed for CallTool, a Finished for NextDone, None for a Step
or a StartTool, True or False for CheckClock. Failures are thrown in: PolicyFailed where the model call failed (a mode
catches it and records why), StopRun where the run must end (nothing catches it). The
drivers dispatch on the type (modes/driver.py, modes/adriver.py).

The requests and results here are messages between a mode and its driver, a few made
every step and never kept: plain slotted dataclasses, not frozen ones. A frozen
dataclass's __init__ writes each field through object.__setattr__ (about 80 ns a field
against 25), and the records that are kept (Step, Usage, ModelRequest) stay frozen.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from loopwright.policy import Completion, ModelRequest
from loopwright.safety import ApprovalRequest, Decision
from loopwright.tools.registry import ToolResult
from loopwright.trace import Step, Trace, Usage

if TYPE_CHECKING:
    from loopwright.memory.embedders import Embedder

R = TypeVar("R")

# -- requests -------------------------------------------------------------------------


@dataclass(slots=True)
class CallTool:
    """Execute one tool call through the gate; answered with an Executed. `key` names
    the call within the run (ReAct step "3", ReWOO "E2") so a resumed run finds it.
    `repaired`: what the parser fixed to read the arguments (the gate runs no repaired
    call to a tool that changes things)."""

    name: str
    args: dict[str, Any]
    key: str
    repaired: tuple[str, ...] = ()


@dataclass(slots=True)
class StartTool:
    """Start a tool call and go on at once (ReWOO's parallel workers); its result comes
    back from a later NextDone."""

    call: CallTool


@dataclass(slots=True)
class NextDone:
    """Wait for the next started call to finish; answered with a Finished."""


@dataclass(slots=True)
class Evaluate:
    """Ask the user's evaluator for its verdict on the answer in the run's trace
    (Reflexion); answered with what it returned, or the Exception it raised. The driver
    calls it: the async driver on a thread, so user code never blocks the event loop."""

    evaluator: Callable[[str, Trace], Any]


@dataclass(slots=True)
class Embed:
    """Ask a dense embedder for the vectors of `texts` (tool search); answered with what
    its `embed` returned, or the Exception it raised. The driver calls it: the async
    driver on a thread, so a model-backed embedder never blocks the event loop."""

    embedder: Embedder
    texts: list[str]


@dataclass(slots=True)
class Remember:
    """File `texts` (with `metadatas`) in the user's memory (ReAct's folding): its
    `add_many`, else `add` for each; answered with None, or the Exception it raised."""

    memory: Any
    texts: list[str]
    metadatas: list[dict[str, Any]]


@dataclass(slots=True)
class Recall:
    """What the user's memory recalls for `query` within `tokens`, rendered by `render`
    and leaving out `exclude` (`loopwright.memory.tiered.context_within`); answered with
    the text, or the Exception the memory raised."""

    memory: Any
    query: str
    tokens: int
    render: Callable[[str], str]
    exclude: set[str]


@dataclass(slots=True)
class CheckClock:
    """Ask whether the run's wall clock has run out (`timeout_s`): answered with True or
    False. The driver reads the clock; a mode never does."""


Request = ModelRequest | CallTool | StartTool | NextDone | Evaluate | Embed | Remember | Recall | CheckClock
"""What a mode asks of its driver: a ModelRequest is answered with a ModelCall
(PolicyFailed is thrown in)."""
Machine = Generator[Step | Request, Any, R]
"""A mode's generator: yields Steps and Requests, returns R."""
StepGen = Machine[None]

# -- results --------------------------------------------------------------------------


@dataclass(slots=True)
class ModelCall:
    """One answered model call: its text, the Completion (None when a plain policy
    returned a str), what it cost, how long it took and whether a limit was reached with
    it (stamped by the driver: a mode reads no clock and judges no budget), and the
    transient errors the backend retried for it (the Completion's `meta["retries"]`, None
    when none)."""

    text: str
    completion: Completion | None
    usage: Usage
    seconds: float
    retries: Any = None
    stop: str | None = None
    """The limit the run reached with this call ("token_budget", "cost_budget", "timeout"),
    judged by the driver when the answer came; the mode ends the run with it."""


@dataclass(slots=True)
class Executed:
    """What the gate did with one proposed call: the result, "action" or "denied", and
    notes for the step's meta (replayed, exactly-once)."""

    result: ToolResult
    kind: str = "action"
    meta: dict[str, Any] | None = None


@dataclass(slots=True)
class Finished:
    """A started call that finished: its key and what the gate did."""

    key: str
    executed: Executed


# -- signals --------------------------------------------------------------------------


class StopRun(Exception):
    """Internal: the run must end now (denied, paused, unknown side-effect outcome,
    cancelled). The step explaining why is already recorded."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class PolicyFailed(Exception):
    """Internal: the policy raised or timed out; `message` is what the trace records,
    `seconds` how long the call ran."""

    def __init__(self, message: str, reason: str = "error", seconds: float = 0.0) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.seconds = seconds


class Journal(Protocol):
    """Where a durable run writes every model call, tool call and step before using it,
    and where a resumed run finds them again (see loopwright.durable.journal)."""

    def recorded_completion(self, n: int) -> tuple[Completion, Usage] | None: ...
    def record_completion(self, n: int, request: ModelRequest, completion: Completion, usage: Usage) -> None: ...
    def recorded_tool(self, key: str) -> tuple[str, ToolResult | None] | None: ...
    def record_tool_start(self, key: str, name: str, args: dict[str, Any]) -> None: ...
    def attempt(self, key: str) -> int: ...
    def record_tool_result(self, key: str, result: ToolResult) -> None: ...
    def recorded_decision(self, key: str) -> Decision | None: ...
    def record_decision(self, request: ApprovalRequest, decision: Decision) -> None: ...
    def record_pending(self, request: ApprovalRequest) -> None: ...
    def record_step(self, step: Step) -> None: ...
    def record_end(self, trace: Trace) -> None: ...
    @property
    def failed(self) -> str | None: ...  # why a write failed: nothing more is written


__all__ = [
    "CallTool",
    "CheckClock",
    "Embed",
    "Evaluate",
    "Executed",
    "Finished",
    "Journal",
    "Machine",
    "ModelCall",
    "NextDone",
    "PolicyFailed",
    "Recall",
    "Remember",
    "Request",
    "StartTool",
    "StepGen",
    "StopRun",
]
