"""What every mode shares: the run context (limits, counters, the trace), the one place a
model is called, the one place a tool is executed, and the Run iterator that drives a
mode's step generator."""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from loopwright.errors import RunInterrupted
from loopwright.guards import Deadline, Limits
from loopwright.policy import Completion, ModelRequest, Policy, call_policy
from loopwright.prompts import DEFAULT_PROMPTS, PromptSet
from loopwright.tools import ToolRegistry, ToolResult
from loopwright.trace import Step, Trace, Usage

StepGen = Generator[Step, None, None]


class _StopRun(Exception):
    """Internal: a guard fired inside a helper; carries the stop reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One answered model call: its completion, what it cost, and how long it took."""

    completion: Completion
    usage: Usage
    seconds: float


class PolicyFailed(Exception):
    """Internal: the policy raised or timed out; `message` is what the trace records."""

    def __init__(self, message: str, reason: str = "error") -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


class RunContext:
    """The state of one run that is not the mode's own: limits, counters and the trace."""

    def __init__(
        self,
        task: str,
        mode: str,
        policy: Policy,
        registry: ToolRegistry,
        limits: Limits,
        prompts: PromptSet = DEFAULT_PROMPTS,
        *,
        tools: Iterable[str] | None = None,
    ) -> None:
        if not isinstance(task, str):
            raise TypeError(f"task must be a str, got {type(task).__name__}")
        if not isinstance(registry, ToolRegistry):
            raise TypeError(f"registry must be a loopwright.ToolRegistry, got {type(registry).__name__}")
        if not (callable(policy) or callable(getattr(policy, "complete", None))):
            raise TypeError(
                f"policy must be a callable str -> str or have complete(request), got {type(policy).__name__}"
            )
        self.task = task
        self.policy = policy
        self.registry = registry if tools is None else registry.subset(tools)
        self.limits = limits
        self.prompts = prompts
        self.trace = Trace(task=task, mode=mode)
        self.deadline = Deadline(limits.timeout_s)
        self.started = time.perf_counter()
        self.schemas: list[dict[str, Any]] = self.registry.schemas()

    # -- the trace -------------------------------------------------------------------

    @property
    def next_index(self) -> int:
        return len(self.trace.steps) + 1

    def record(self, step: Step) -> Step:
        self.trace.steps.append(step)
        return step

    def stop(self, reason: str, answer: str | None = None) -> None:
        self.trace.stopped_reason = reason
        self.trace.final_answer = answer

    # -- the model: the one place a policy is called -------------------------------

    def call_model(self, request: ModelRequest) -> ModelCall:
        """Call the policy once. Counts the call, adds its usage to the run's total.

        Raises PolicyFailed when the policy raises or outlives the run's wall clock.
        """
        self.trace.llm_calls += 1
        start = time.perf_counter()
        remaining = self.deadline.remaining()
        try:
            if remaining is None:
                completion = call_policy(self.policy, request)
            else:
                completion = _call_within(self.policy, request, remaining)
        except _PolicyTimeout:
            raise PolicyFailed(
                f"model call outlived the run's timeout_s={self.limits.timeout_s}", "timeout"
            ) from None
        except Exception as exc:  # the choke point: any policy failure ends the run cleanly
            raise PolicyFailed(f"policy raised {type(exc).__name__}: {exc}") from exc
        usage = completion.usage or Usage.estimate(request.prompt, completion.text)
        self.trace.usage = self.trace.usage + usage
        return ModelCall(completion, usage, time.perf_counter() - start)

    def guard_after_call(self) -> str | None:
        """The stop reason if the token budget or the wall clock is spent, else None."""
        budget = self.limits.token_budget
        if budget is not None and self.trace.usage.total_tokens >= budget:
            return "token_budget"
        if self.deadline.expired():
            return "timeout"
        return None

    # -- tools: the one place a tool is executed ------------------------------------

    def execute(self, name: str, args: dict[str, Any]) -> ToolResult:
        """Run a tool through the registry (which never raises for tool failures)."""
        remaining = self.deadline.remaining()
        result = self.registry.execute(name, args, timeout_s=remaining)
        self.trace.tool_calls += 1
        return result


class _PolicyTimeout(Exception):
    pass


def _call_within(policy: Policy, request: ModelRequest, seconds: float) -> Completion:
    """Call the policy on a daemon thread and wait at most `seconds` for it.

    A policy that overruns is abandoned (Python cannot kill a thread); the run stops
    with "timeout" rather than waiting on it.
    """
    box: list[Any] = []
    done = threading.Event()

    def target() -> None:
        try:
            box.append(call_policy(policy, request))
        except BaseException as exc:  # handed to the caller's thread below
            box.append(exc)
        finally:
            done.set()

    threading.Thread(target=target, name="loopwright-policy", daemon=True).start()
    if not done.wait(seconds):
        raise _PolicyTimeout
    out = box[0]
    if isinstance(out, BaseException):
        raise out
    return out  # type: ignore[no-any-return]


class Run(Iterator[Step]):
    """A run in progress: iterate it to get each Step as it happens; `.trace` is the
    live (partial) trace. Ctrl-C marks the trace "interrupted" and raises RunInterrupted,
    a KeyboardInterrupt that carries it."""

    def __init__(self, ctx: RunContext, steps: StepGen) -> None:
        self._ctx = ctx
        self._steps = steps
        self._finished = False

    @property
    def trace(self) -> Trace:
        return self._ctx.trace

    def __iter__(self) -> Run:
        return self

    def __next__(self) -> Step:
        if self._finished:
            raise StopIteration
        try:
            return next(self._steps)
        except StopIteration:
            self._finish()
            raise
        except KeyboardInterrupt as exc:
            if self.trace.stopped_reason is None:
                self._ctx.stop("interrupted")
            self._finish()
            raise RunInterrupted(self.trace) from exc
        except Exception as exc:  # a defect in a mode: keep the partial trace, say why
            self._ctx.record(
                Step(
                    self._ctx.next_index,
                    "error",
                    error=f"internal error: {type(exc).__name__}: {exc}",
                    meta={"traceback": traceback.format_exc()},
                )
            )
            self._ctx.stop("error")
            self._finish()
            raise StopIteration from exc

    def _finish(self) -> None:
        if not self._finished:
            self._finished = True
            self.trace.duration_s = time.perf_counter() - self._ctx.started
            self._steps.close()

    def run(self) -> Trace:
        """Drive the run to its end and return the trace."""
        for _ in self:
            pass
        return self.trace


def first_line(text: str, limit: int = 500) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…"


def tool_names(schemas: Sequence[dict[str, Any]]) -> str:
    return ", ".join(str(s["name"]) for s in schemas) or "(none)"
