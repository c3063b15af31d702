"""What a mode and its driver say to each other.

A mode is a step machine: a generator that performs no I/O. It reads its run through a
read-only RunView (the driver builds it; a write raises AttributeError), yields the Steps
it records and requests for everything else: what only the driver may do (call the
model, call a tool; ReWOO also starts calls and asks for the next one finished) and every
change to its run (Stop, Record, UseTools). It receives each answer through `send`: a
ModelCall for a ModelRequest (the model call is requested by yielding the request
itself), an Executed for CallTool, a CallDone for NextDone, True or False for CheckClock,
None for a Step, a StartTool, a Stop, a Record or a UseTools. Failures are thrown in:
PolicyFailed where the model call failed (a mode catches it and records why), StopRun
where the run must end (nothing catches it). The drivers dispatch on the type
(runtime/driver.py, runtime/adriver.py).

The requests and results here are messages between a mode and its driver, a few made
every step and never kept: plain slotted dataclasses, not frozen ones. A frozen
dataclass's __init__ writes each field through object.__setattr__ (about 80 ns a field
against 25), and the records that are kept (Step, Usage, ModelRequest) stay frozen.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from loopwright.policy import Completion, ModelRequest
from loopwright.safety import ApprovalRequest, Decision
from loopwright.tools.registry import ToolRegistry, ToolResult
from loopwright.trace import Step, Trace, Usage

if TYPE_CHECKING:
    from loopwright.guards import RunLimits
    from loopwright.memory.embedders import Embedder
    from loopwright.outputs import OutputSpec
    from loopwright.prompting.templates import PromptSet

R = TypeVar("R")

Evaluator = Callable[[str, Trace], "tuple[bool, str] | bool"]
"""Judges a Reflexion attempt's answer: `evaluator(task, trace)` with `trace.final_answer`
set; returns (ok, feedback) or a bool. Feedback reaches the critique prompt."""
ToolSearchOption = int | Literal["auto", "off"]
"""`tool_search=`: K tools a step, "auto" (on when the tool list would not fit the model's
context window) or "off" (modes/toolsearch.py)."""

# -- what a machine sees of its run ---------------------------------------------------


class TraceView(Protocol):
    """What a machine reads of its run's trace so far (`view.trace`): read-only."""

    @property
    def steps(self) -> Sequence[Step]: ...
    @property
    def llm_calls(self) -> int: ...
    @property
    def replans(self) -> int: ...
    @property
    def stopped_reason(self) -> str | None: ...
    @property
    def final_answer(self) -> str | None: ...
    @property
    def outputs(self) -> Mapping[str, str]:
        """Tool results kept whole by handle (`Trace.outputs`), as the run adds them."""
    @property
    def meta(self) -> Mapping[str, Any]:
        """What the run recorded of itself (`Trace.meta`): the Records' meta among it."""


class RunView(Protocol):
    """What a machine reads of its run: the task, the prompts, the tools loaded now, the
    limits and the trace so far. It is read-only: a machine changes its run only through
    the requests it yields (Stop, Record, UseTools)."""

    @property
    def task(self) -> str: ...
    @property
    def prompts(self) -> PromptSet: ...
    @property
    def registry(self) -> ToolRegistry:
        """The tools the run may call now (tool search narrows them)."""
    @property
    def unscoped(self) -> ToolRegistry:
        """What a `tools=` scope was cut from (tool search indexes it once)."""
    @property
    def schemas(self) -> tuple[dict[str, Any], ...]: ...
    @property
    def limits(self) -> RunLimits: ...
    @property
    def trace(self) -> TraceView: ...
    @property
    def output(self) -> OutputSpec | None:
        """The typed final answer asked for (`output_type=`), or None."""
    @property
    def prompt_only(self) -> bool:
        """A plain callable policy: it gets the prompt alone, no tool schemas."""
    @property
    def context_window(self) -> int | None:
        """The model's context window in tokens, as the policy reports it, or None."""
    @property
    def next_index(self) -> int: ...


class Settings(Protocol):
    """What a machine reads of its run's options (the runtime's RunSpec is one): a mode
    setting by name, its default filled in, and the options the machines use."""

    def setting(self, name: str) -> Any: ...
    @property
    def max_tokens(self) -> int | None: ...
    @property
    def prompts(self) -> PromptSet | None: ...
    @property
    def memory(self) -> Any: ...
    @property
    def context_tokens(self) -> int | None: ...
    @property
    def evaluator(self) -> Evaluator | bool | None: ...
    @property
    def attempt_steps(self) -> int | None: ...
    @property
    def tool_search(self) -> ToolSearchOption | None: ...
    @property
    def tool_embedder(self) -> Embedder | None: ...


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
    """Wait for the next started call to finish; answered with a CallDone."""


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
    `add_many`, else `add` for each; answered with the summaries the memory would make
    (a list of PendingSummary, for Summarize requests), or the Exception it raised."""

    memory: Any
    texts: list[str]
    metadatas: list[dict[str, Any]]


@dataclass(slots=True)
class Summarize:
    """Make a summary the user's memory asked for while steps were filed in it (a
    `memory.summary.PendingSummary`, from what a Remember was answered with): one call
    of its summarizer, which the driver makes like the run's own model calls (journaled,
    held to the budgets and the clock, its tokens counted in the run's usage, off the event
    loop under `arun`) and folds into the memory; answered with the ModelCall, or the
    Exception the summarizer raised."""

    pending: Any


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


# -- a machine's changes to its run: served by RunContext.apply -----------------------


@dataclass(slots=True)
class Stop:
    """End the run with `reason` ("final", "max_steps", ...) and `answer`: the trace's
    stopped_reason and final_answer; `output`, when not None, is the typed answer
    (`output_type=`). `Stop(None)` takes a stop back: Reflexion's run goes on after an
    attempt that failed. Answered with None."""

    reason: str | None
    answer: str | None = None
    output: Any = None


@dataclass(slots=True)
class Record:
    """Write what the machine keeps of its run in the trace: its `transcript`,
    `scratchpad` (ReAct's final prompt) and `replans` when not None, each key of `meta`
    (a copy: the machine may go on changing its own), and `outputs`: tool results to keep
    whole by handle (a folded one, for read_output). Answered with None."""

    transcript: str | None = None
    scratchpad: str | None = None
    replans: int | None = None
    meta: dict[str, Any] | None = None
    outputs: dict[str, str] | None = None


@dataclass(slots=True)
class UseTools:
    """Run on `registry`'s tools from now on (tool search loads them): the view's
    registry and schemas, and what the driver executes. Answered with None."""

    registry: ToolRegistry


WRITES = (Stop, Record, UseTools)
"""The requests that change the run (the only way a machine can)."""
Request = (ModelRequest | CallTool | StartTool | NextDone | Evaluate | Embed | Remember | Recall | Summarize
           | CheckClock | Stop | Record | UseTools)
"""What a mode asks of its driver: a ModelRequest is answered with a ModelCall
(PolicyFailed is thrown in)."""
Machine = Generator[Step | Request, Any, R]
"""A mode's generator: yields Steps and Requests, returns R."""
StepGen = Machine[None]


def recorded(machine: Machine[R], record: Callable[[], Record]) -> Machine[R]:
    """`machine`, then the Record `record()` makes, however it ends: returned, raised, or
    ended from outside (the driver throws a StopRun into a machine it ends). Not when it is
    closed (GeneratorExit: a Run dropped unfinished), when a generator may not yield."""
    try:
        result = yield from machine
    except GeneratorExit:
        raise
    except BaseException:
        yield record()
        raise
    yield record()
    return result

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
class CallDone:
    """A started call that finished: its key and what the gate did."""

    key: str
    executed: Executed


# -- signals --------------------------------------------------------------------------


class StopRun(Exception):
    """Internal: the run must end now (denied, paused, unknown side-effect outcome,
    cancelled). The step explaining why is already recorded. The driver also throws one
    into a machine still running when it ends the run itself (interrupted, stopped by a
    guardrail), so the machine's `recorded` cleanup still writes the trace."""

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
    def record_note(self, key: str, what: str, value: Any) -> None: ...  # a tool's own record of call `key`
    def recorded_note(self, key: str, what: str) -> Any: ...
    def recorded_decision(self, key: str) -> Decision | None: ...
    def record_decision(self, request: ApprovalRequest, decision: Decision) -> None: ...
    def record_pending(self, request: ApprovalRequest) -> None: ...
    def record_step(self, step: Step) -> None: ...
    def record_end(self, trace: Trace) -> None: ...
    def settle_advice(self, key: str, dedupes: bool) -> str: ...  # what a person does about call `key` in doubt
    @property
    def failed(self) -> str | None: ...  # why a write failed: nothing more is written


__all__ = [
    "CallTool",
    "Evaluator",
    "Record",
    "RunView",
    "Settings",
    "Stop",
    "TraceView",
    "UseTools",
    "WRITES",
    "recorded",
    "CheckClock",
    "Embed",
    "Evaluate",
    "Executed",
    "CallDone",
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
    "Summarize",
    "ToolSearchOption",
]
