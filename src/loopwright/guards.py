"""Termination guards: the limits every run is held to, checked in one place.

The step cap is the loop bound itself; the token budget and the wall clock are checked
after every model call; the repeat detector decides whether a call is executed at all.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Literal

OnParseError = Literal["observe", "stop"]
OnRepeat = Literal["nudge", "stop", "off"]


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits a run is held to; the same names in every mode.

    max_steps: model calls in ReAct; the plan length in ReWOO and plan-execute.
    token_budget: prompt tokens sent plus completion tokens, checked after each call.
    timeout_s: the run's wall clock. max_replans: plan-execute's recovery bound.
    on_parse_error / on_repeat: ReAct only. max_parse_errors: consecutive parse errors
    tolerated under "observe" before the run stops with "error". max_nudges: under
    on_repeat="nudge", identical calls nudged in a row before the run stops with
    "repeated_call" (the next identical call ends it).
    """

    max_steps: int = 10
    token_budget: int | None = None
    timeout_s: float | None = None
    max_replans: int = 2
    on_parse_error: OnParseError = "observe"
    on_repeat: OnRepeat = "nudge"
    max_parse_errors: int = 3
    repeat_threshold: int = 3
    max_nudges: int = 2

    def __post_init__(self) -> None:
        _positive_int("max_steps", self.max_steps)
        if self.token_budget is not None:
            _positive_int("token_budget", self.token_budget)
        if self.timeout_s is not None and (
            isinstance(self.timeout_s, bool)
            or not isinstance(self.timeout_s, (int, float))
            or not self.timeout_s > 0
        ):
            raise ValueError(f"timeout_s must be a positive number or None, got {self.timeout_s!r}")
        if isinstance(self.max_replans, bool) or not isinstance(self.max_replans, int) or self.max_replans < 0:
            raise ValueError(f"max_replans must be an integer >= 0, got {self.max_replans!r}")
        if self.on_parse_error not in ("observe", "stop"):
            raise ValueError(
                f"on_parse_error must be 'observe' or 'stop', got {self.on_parse_error!r}"
            )
        if self.on_repeat not in ("nudge", "stop", "off"):
            raise ValueError(f"on_repeat must be 'nudge', 'stop' or 'off', got {self.on_repeat!r}")
        _positive_int("max_parse_errors", self.max_parse_errors)
        if isinstance(self.max_nudges, bool) or not isinstance(self.max_nudges, int) or self.max_nudges < 0:
            raise ValueError(f"max_nudges must be an integer >= 0, got {self.max_nudges!r}")
        if isinstance(self.repeat_threshold, bool) or not isinstance(self.repeat_threshold, int) or self.repeat_threshold < 2:
            raise ValueError(f"repeat_threshold must be an integer >= 2, got {self.repeat_threshold!r}")


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


class Deadline:
    """The run's wall clock. `remaining()` is None when no limit is set."""

    __slots__ = ("_end",)

    def __init__(self, timeout_s: float | None) -> None:
        self._end = None if timeout_s is None else time.monotonic() + timeout_s

    def remaining(self) -> float | None:
        if self._end is None:
            return None
        return max(0.0, self._end - time.monotonic())

    def expired(self) -> bool:
        return self._end is not None and time.monotonic() >= self._end


def call_key(tool: str, args: Any) -> str:
    """A canonical identity for a call: same tool and same args give the same key."""
    try:
        return tool + "\x00" + json.dumps(args, sort_keys=True, default=str)
    except (TypeError, ValueError, RecursionError):
        return tool + "\x00" + repr(args)


class RepeatDetector:
    """Counts consecutive identical calls (same tool, same args).

    Parse errors do not reset the streak (a model stuck in a loop often alternates
    garbage with the same call); any different call does. Only consecutive calls are
    compared, so plain equality does: no serialisation on the hot path.
    """

    __slots__ = ("_tool", "_args", "count", "last_observation")

    def __init__(self) -> None:
        self._tool: str | None = None
        self._args: Any = None
        self.count = 0
        self.last_observation: str | None = None

    def see(self, tool: str, args: Any) -> int:
        """Record a proposed call; return how many times in a row it has now been proposed."""
        try:
            same = tool == self._tool and args == self._args
        except Exception:  # an exotic value whose __eq__ raises: treat as different
            same = False
        if same:
            self.count += 1
        else:
            self._tool, self._args = tool, args
            self.count = 1
            self.last_observation = None
        return self.count

    def executed(self, observation: str) -> None:
        self.last_observation = observation
