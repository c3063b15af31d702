"""A run's retry policy, `retry=lw.Retry(...)`: which failed model and tool calls are tried
again, how often, how far apart and how long each attempt may take.

One object serves both kinds of call, because one run has one idea of what "transient"
means and one wall clock; `on` names the failures it covers, and the tool kinds carry a
`tool_` prefix so a policy reads as what it does (`on={"rate_limit", "server"}` retries no
tool). The drivers do the waiting; this module decides and keeps the record.

Model calls: a `TransientModelError` (HTTP 429 `rate_limit`, 5xx `server`, `timeout`,
`connection`, a prompt past the context window `context`), a builtin TimeoutError or
ConnectionError, or an attempt that outlived `per_attempt_timeout_s`. In a run with
`retry=`, a backend that retries by itself (OpenAICompatible) tries once
(`policy.run_retries`), so the attempts never multiply.

Tool calls: a failed call is retried only when running it again is safe, which the gate
decides the way it decides after a crash (`ToolGate.rerun_safe`): the tool is idempotent,
or its system dedupes on the call key. A side effect that may have happened is never run
again: the run stops in doubt, its journal row left `started`, exactly as after a crash.

Every failed attempt is recorded: its number, kind, error and the delay before the next
(`attempt_record`), on the step (`meta["attempts"]`), with it in the journal, and as
events on the call's OpenTelemetry span. The run's wall clock covers every attempt and
every wait: a delay that would outlast it is not waited, the call fails instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from loopwright.errors import TransientModelError
from loopwright.offload import Timeout
from loopwright.tools.registry import ToolResult

RetryOn = Literal["rate_limit", "server", "timeout", "connection", "context", "tool_timeout", "tool_exception"]
KINDS: Final = frozenset(get_args(RetryOn))
DEFAULT_ON: Final[frozenset[RetryOn]] = frozenset({"rate_limit", "server", "timeout", "connection", "tool_timeout"})
"""Not "context": the same prompt overflows the same model again (a Fallback's next model
may take it). Not "tool_exception": most exceptions a tool raises say something about its
input, and the model should read them; name it to retry a flaky tool's errors."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Retry:
    """How a run retries transient failures of its model and tool calls.

    attempts: tries in all, the first included (1: no retry). backoff: seconds before the
    second attempt, doubled before each next one, at most `max_backoff_s` (a server's
    Retry-After is honoured when longer). per_attempt_timeout_s: the longest one attempt
    may take (a model attempt past it is a "timeout" failure; a tool attempt past it is a
    tool timeout), within the run's `timeout_s`. on: the failures retried (see `RetryOn`)."""

    attempts: int = 3
    backoff: float = 0.5
    max_backoff_s: float = 30.0
    per_attempt_timeout_s: float | None = None
    on: Iterable[RetryOn] = DEFAULT_ON

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or self.attempts < 1:
            raise ValueError(f"attempts must be an integer >= 1 (tries in all), got {self.attempts!r}")
        for name in ("backoff", "max_backoff_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")
        timeout = self.per_attempt_timeout_s
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0):
            raise ValueError(f"per_attempt_timeout_s must be a positive number of seconds or None, got {timeout!r}")
        on = frozenset([self.on] if isinstance(self.on, str) else self.on)
        unknown = sorted(on - KINDS)
        if unknown:
            raise ValueError(f"on: unknown failure kind(s) {', '.join(map(repr, unknown))}; "
                             f"accepted: {', '.join(sorted(KINDS))}")
        object.__setattr__(self, "on", on)

    def delay(self, attempt: int, asked: float | None = None) -> float:
        """Seconds to wait after failed attempt `attempt` (1, 2, ...)."""
        wait = float(min(self.backoff * 2 ** (attempt - 1), self.max_backoff_s))
        return wait if asked is None else max(wait, min(asked, self.max_backoff_s))

    def covers(self, kind: str | None) -> bool:
        return kind is not None and kind in self.on  # type: ignore[operator]

    def config(self) -> dict[str, Any]:
        """What the journal keeps of it (JSON), for `from_config` on resume and fork."""
        return {"attempts": self.attempts, "backoff": self.backoff, "max_backoff_s": self.max_backoff_s,
                "per_attempt_timeout_s": self.per_attempt_timeout_s, "on": sorted(self.on)}

    @classmethod
    def from_config(cls, config: Any) -> Retry:
        return config if isinstance(config, Retry) else cls(**config)


def check_retry(value: Any) -> Retry | None:
    """A run's `retry=` option: a Retry, its journaled dict, or None."""
    if value is None or isinstance(value, Retry):
        return value
    if isinstance(value, dict):
        return Retry.from_config(value)
    raise TypeError(f"retry must be an lw.Retry or None, got {type(value).__name__}")


def model_failure(exc: BaseException) -> str | None:
    """The transient kind of a model call's failure, None when it is not one."""
    if isinstance(exc, TransientModelError):
        return exc.kind
    if isinstance(exc, Timeout | TimeoutError):
        return "timeout"
    if isinstance(exc, ConnectionError):
        return "connection"
    return None


def tool_failure(result: ToolResult) -> str | None:
    """The retry kind of a failed tool call ("tool_timeout", "tool_exception"), or None."""
    error = result.error
    if error is None:
        return None
    return {"timeout": "tool_timeout", "exception": "tool_exception"}.get(error.kind)


def attempt_record(attempt: int, kind: str, error: str, delay: float | None, model: str | None = None) -> dict[str, Any]:
    """One failed attempt as the step, the journal and the span record it; `delay_s` is the
    wait before the next attempt (None: there was none)."""
    record: dict[str, Any] = {"attempt": attempt, "kind": kind, "error": error,
                              "delay_s": None if delay is None else round(delay, 6)}
    if model is not None:
        record["model"] = model
    return record


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


__all__ = ["DEFAULT_ON", "KINDS", "Retry", "RetryOn", "attempt_record", "check_retry", "error_text",
           "model_failure", "tool_failure"]
