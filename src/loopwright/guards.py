"""Termination guards: the limits every run is held to, checked in one place.

The step cap is the loop bound itself; the token budget and the wall clock are checked
after every model call; the repeat detector decides whether a call is executed at all.
"""

from __future__ import annotations

import json
import time
from dataclasses import KW_ONLY, dataclass
from typing import Any, Literal

OnParseError = Literal["observe", "stop"]
OnRepeat = Literal["nudge", "stop", "off"]


@dataclass(frozen=True, slots=True)
class Limits:
    """What a run may spend, the same in every mode: `lw.run(..., limits=lw.Limits(max_steps=8,
    timeout_s=60))`. None leaves the mode's default (no limit, but max_steps).

    max_steps: model calls in ReAct; the plan length in ReWOO and plan-execute.
    token_budget: prompt tokens sent plus completion tokens, checked after each call.
    timeout_s: the run's wall clock. cost_budget_usd: what the model calls may cost (see
    loopwright.pricing). max_tokens: a cap on the tokens of each model reply.
    """

    max_steps: int | None = None
    token_budget: int | None = None
    timeout_s: float | None = None
    _: KW_ONLY
    cost_budget_usd: float | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_steps", "token_budget", "max_tokens"):
            value = getattr(self, name)
            if value is not None:
                _positive_int(name, value)
        for name, unit in (("timeout_s", "or None"), ("cost_budget_usd", "of dollars")):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or not value > 0):
                raise ValueError(f"{name} must be a positive number {unit}, got {value!r}")


@dataclass(frozen=True, slots=True)
class RunLimits:
    """The limits a run is held to, its mode's defaults filled in (what the drivers and the
    machines read; built from a checked RunSpec).

    max_replans: plan-execute's recovery bound. on_parse_error / on_repeat: ReAct's.
    max_parse_errors: consecutive parse errors tolerated under "observe" before the run
    stops with "error". max_nudges: under on_repeat="nudge", identical calls nudged in a
    row before the run stops with "repeated_call" (the next identical call ends it).
    """

    max_steps: int = 10
    token_budget: int | None = None
    timeout_s: float | None = None
    _: KW_ONLY
    max_replans: int = 2
    on_parse_error: OnParseError = "observe"
    on_repeat: OnRepeat = "nudge"
    max_parse_errors: int = 3
    repeat_threshold: int = 3
    max_nudges: int = 2


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_limit(name: str, value: object, least: int = 1) -> None:
    """Raise ValueError unless `value` is an integer >= `least` (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")


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
