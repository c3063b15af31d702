"""The live line of `loopwright run`: a spinner on stderr naming the call in flight (the
model, or a tool and its arguments) and how long it has run, so a slow or hung call is
visible, and under it the text the model is producing for the current step, as it comes
(the run's model_delta events). Shown only when stderr is a terminal; it reads
`Run.in_flight`, which the run's choke points keep, and disappears when the run ends."""

from __future__ import annotations

import json
import time
from types import TracebackType
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.spinner import Spinner
from rich.text import Text

from loopwright.events import Event, ModelDelta, StepEvent
from loopwright.runtime import Run

TEXT_LINES = 6  # lines of the model's text the live display keeps
REFRESH_S = 1 / 30  # a delta redraws at most this often (the display also redraws 8 times a second)


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


class ModelText:
    """An EventSink keeping the text the model is producing for the current step (its
    last TEXT_LINES lines); the step's record clears it. Called from the run's threads."""

    def __init__(self) -> None:
        self.key: tuple[str | None, int] = (None, 0)
        self.parts: list[str] = []
        self.redraw: Any = None  # set by LiveLine: redraw now (rate-limited)
        self._drawn = 0.0

    def __call__(self, event: Event) -> None:
        if type(event) is ModelDelta:
            key = (event.agent, event.step)
            if key != self.key:
                self.key, self.parts = key, []
            self.parts.append(event.text)
            now = time.monotonic()
            if self.redraw is not None and now - self._drawn >= REFRESH_S:
                self._drawn = now
                self.redraw()
        elif type(event) is StepEvent:
            self.parts = []

    def tail(self) -> str:
        return "\n".join("".join(self.parts).splitlines()[-TEXT_LINES:])


class _InFlight:
    """Renders the spinner with what the run is doing now (read at every refresh), and
    the model's text under it."""

    def __init__(self, run: Run, text: ModelText | None) -> None:
        self.run = run
        self.text = text
        self.spinner = Spinner("dots", style="cyan")

    def __rich__(self) -> RenderableType:
        self.spinner.update(text=f"[dim]{escape(describe_in_flight(self.run.in_flight))}[/]")
        tail = self.text.tail() if self.text is not None else ""
        return Group(self.spinner, Text(tail, style="dim")) if tail else self.spinner


class LiveLine:
    """A context manager: the in-flight line while the run goes on (a no-op when stderr
    is not a terminal or `enabled` is False)."""

    def __init__(self, console: Console, run: Run, *, enabled: bool = True, text: ModelText | None = None) -> None:
        self._live: Live | None = None
        if enabled and console.is_terminal:
            self._live = Live(_InFlight(run, text), console=console, refresh_per_second=8, transient=True)
            if text is not None:
                text.redraw = self._live.refresh

    def __enter__(self) -> LiveLine:
        if self._live is not None:
            self._live.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.stop()
