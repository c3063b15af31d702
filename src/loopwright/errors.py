"""Exception types. Two families: errors the caller must fix (typed, raised at once),
and the run's own control signals (which carry the partial trace)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from loopwright.trace import Trace


class LoopwrightError(Exception):
    """Base class for every error loopwright raises on purpose."""


class ParseError(ValueError, LoopwrightError):
    """Model text that is not a valid step or plan; the message says what was expected."""


class ToolDefinitionError(TypeError, LoopwrightError):
    """A tool that cannot be built: bad name, unsupported annotation, invalid schema."""


class UntypedParameterWarning(UserWarning):
    """A Python tool with a parameter that has no type annotation: the model is shown no
    type for it and any value passes. `warnings.simplefilter("error", UntypedParameterWarning)`
    refuses such tools."""


class ScriptExhaustedError(LoopwrightError):
    """A ScriptedPolicy was called more often than it was scripted."""


class ModelError(LoopwrightError):
    """A model backend failed (server unreachable after retries, bad response)."""


TransientKind = Literal["rate_limit", "server", "timeout", "connection", "context"]


class TransientModelError(ModelError):
    """A model call that failed for a reason that may pass: the server was busy (HTTP 429:
    `rate_limit`), failed (HTTP 5xx: `server`), did not answer in time (`timeout`), could
    not be reached (`connection`), or the prompt did not fit the model's context window
    (`context`: the same request fails again on the same model, but another model may take
    it). `status` is the HTTP status when there was one; `retry_after_s` the wait the server
    asked for (its Retry-After header), if any. A run's `retry=` and `lw.models.Fallback`
    decide on `kind`."""

    def __init__(self, message: str, kind: TransientKind, *, status: int | None = None,
                 retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.kind: TransientKind = kind
        self.status = status
        self.retry_after_s = retry_after_s


class ModelNotFoundError(ModelError):
    """The model weights are not installed where they were looked for."""


class ModelChecksumError(ModelError):
    """A model file whose sha256 is not the one asked for; it is refused before loading.
    `path`, `expected` and `actual` say which file and both hashes."""

    def __init__(self, path: object, expected: str, actual: str) -> None:
        self.path, self.expected, self.actual = path, expected, actual
        super().__init__(
            f"model file {str(path)!r} has sha256 {actual}, not the expected {expected}; "
            f"refusing to load it (delete it to fetch it again, or check the expected hash)"
        )


class ReplayMissError(ModelError):
    """A Replay cassette holds no recorded completion for this prompt."""


class StoreError(LoopwrightError):
    """A run journal that cannot be used: corrupt, foreign, newer schema, unknown run id."""


class EngineError(LoopwrightError):
    """A run on a durable-execution engine (DBOS) that cannot be started or answered: the
    engine not launched, a workflow name taken, a call that is not waiting to be settled."""


class ExamplesError(ValueError, LoopwrightError):
    """Tool examples that cannot be used: an examples file that is not one (bad JSON,
    another format or version, a malformed example), or examples for tools a registry
    lacks."""


class ToolSetChangedError(LoopwrightError):
    """A resume was given other tools than the journaled run recorded. `added`,
    `removed` and `changed` name the tools; `resume(..., allow_tool_changes=True)`
    resumes anyway."""

    def __init__(
        self,
        run_id: str,
        added: tuple[str, ...] = (),
        removed: tuple[str, ...] = (),
        changed: tuple[str, ...] = (),
    ) -> None:
        self.run_id, self.added, self.removed, self.changed = run_id, added, removed, changed
        parts = [f"{label} {', '.join(names)}" for label, names in
                 (("added", added), ("removed", removed), ("changed", changed)) if names]
        super().__init__(
            f"run {run_id!r} was journaled with other tools than this resume has "
            f"({'; '.join(parts)}); resume it with the tools it started with, "
            f"or pass allow_tool_changes=True"
        )


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run. Still a KeyboardInterrupt, but it carries the partial trace,
    whose stopped_reason is "interrupted"."""

    def __init__(self, trace: Trace) -> None:
        super().__init__("run interrupted")
        self.trace = trace


def describe(value: Any, limit: int = 80) -> str:
    """A short repr for error messages: enough to see the offending value, never a wall."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
