"""The live line of `loopwright run`: a spinner on stderr naming the call in flight (the
model, or a tool and its arguments) and how long it has run, so a slow or hung call is
visible. Shown only when stderr is a terminal; it reads `Run.in_flight`, which the run's
choke points keep, and disappears when the run ends."""

from __future__ import annotations

import json
from types import TracebackType
from typing import Any

from rich.console import Console, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.spinner import Spinner

from loopwright.modes import Run


def describe_in_flight(calls: list[dict[str, Any]], limit: int = 100) -> str:
    """One line for the calls in flight: `lookup({"query": "x"}) 2.1s`, `model call 0.4s`."""
    if not calls:
        return "working"
    parts = []
    for call in calls[:3]:
        if call["call"] == "model":
            what = "model call"
        else:
            args = json.dumps(call["args"], ensure_ascii=False, default=str)
            what = f"{call['tool']}({clip(args, limit)})"
        parts.append(f"{what} {call['elapsed_s']:.1f}s")
    more = f" (+{len(calls) - 3} more)" if len(calls) > 3 else ""
    return ", ".join(parts) + more


def clip(text: str, limit: int) -> str:
    """One line, at most `limit` characters (an ellipsis marks the cut)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _InFlight:
    """Renders the spinner with what the run is doing now (read at every refresh)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.spinner = Spinner("dots", style="cyan")

    def __rich__(self) -> RenderableType:
        self.spinner.update(text=f"[dim]{escape(describe_in_flight(self.run.in_flight))}[/]")
        return self.spinner


class LiveLine:
    """A context manager: the in-flight line while the run goes on (a no-op when stderr
    is not a terminal or `enabled` is False)."""

    def __init__(self, console: Console, run: Run, *, enabled: bool = True) -> None:
        self._live: Live | None = None
        if enabled and console.is_terminal:
            self._live = Live(_InFlight(run), console=console, refresh_per_second=8, transient=True)

    def __enter__(self) -> LiveLine:
        if self._live is not None:
            self._live.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.stop()
