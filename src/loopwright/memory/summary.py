"""Tier 2: a rolling summary that older turns are folded into as they leave the buffer.

The summarizer is any policy: an LLM in use, a deterministic function in tests. It is
called through `call_policy` with the visible SUMMARIZE_PROMPT, so what it was asked is
always inspectable.

Inside a run the summarizer is not called here: a run files steps in its memory under
`deferred_summaries()`, which collects each summary the memory would make as a
PendingSummary, and the run's driver makes the call like any model call (journaled, held
to the run's budgets and clock, counted in its usage, off the event loop under `arun`)
and hands the text back with `PendingSummary.apply`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Final

from loopwright.policy import ModelRequest, Policy, call_policy
from loopwright.prompting.templates import SUMMARIZE_PROMPT
from loopwright.untrusted import fence

NO_SUMMARY = "(none)"


def render_summary_prompt(
    turns: Sequence[str],
    previous: str = "",
    *,
    max_sentences: int = 5,
    template: str = SUMMARIZE_PROMPT,
) -> str:
    """The exact prompt the summarizer is sent: the previous summary and the new turns,
    each turn fenced as untrusted data."""

    rendered = "\n".join(fence(turn, f"turn#{i}") for i, turn in enumerate(turns, 1))
    return template.format(
        summary=previous.strip() or NO_SUMMARY, turns=rendered, max_sentences=max_sentences
    )


def summarize_memory(
    turns: Sequence[str],
    summarizer: Policy,
    previous: str = "",
    *,
    max_sentences: int = 5,
    template: str = SUMMARIZE_PROMPT,
) -> str:
    """Fold `turns` into `previous` with one summarizer call and return the new summary.

    With no turns there is nothing to fold: `previous` comes back and the summarizer is
    not called.
    """
    if isinstance(turns, str):
        raise TypeError("turns must be a sequence of strings, not a single str")
    if not turns:
        return previous
    prompt = render_summary_prompt(turns, previous, max_sentences=max_sentences, template=template)
    return call_policy(summarizer, ModelRequest(prompt, purpose="summarize")).text.strip()


@dataclass(frozen=True, slots=True)
class PendingSummary:
    """A summary a SummaryMemory would make: its summarizer and the request to send it;
    `apply(text)` folds the answer in, as `add_many` would have."""

    memory: SummaryMemory
    summarizer: Policy
    request: ModelRequest
    turns: int

    def apply(self, text: str) -> str:
        """Fold the summarizer's answer in; the new summary."""
        self.memory.summary = text.strip()
        self.memory.folded_turns += self.turns
        return self.memory.summary


_DEFERRED: Final[ContextVar[list[PendingSummary] | None]] = ContextVar("loopwright_deferred_summaries",
                                                                       default=None)


@contextmanager
def deferred_summaries() -> Iterator[list[PendingSummary]]:
    """Within it, a SummaryMemory's `add_many` makes no summarizer call: it adds what it
    would ask to the list yielded here (in order), for the caller to make and `apply`."""
    pending: list[PendingSummary] = []
    token = _DEFERRED.set(pending)
    try:
        yield pending
    finally:
        _DEFERRED.reset(token)


class SummaryMemory:
    """A rolling summary. `add(turn)` / `add_many(turns)` fold turns in, one summarizer
    call each; `summary` is the current text ("" before anything was folded)."""

    def __init__(
        self, summarizer: Policy, *, max_sentences: int = 5, template: str = SUMMARIZE_PROMPT
    ) -> None:
        self.summarizer = summarizer
        self.max_sentences = max_sentences
        self.template = template
        self.summary = ""
        self.folded_turns = 0

    def add(self, turn: str) -> str:
        """Fold one turn into the summary; return the new summary."""
        return self.add_many([turn])

    def add_many(self, turns: Sequence[str]) -> str:
        """Fold several turns into the summary with a single summarizer call (deferred
        within `deferred_summaries()`: the summary stays as it is until applied)."""
        pending = _DEFERRED.get()
        if pending is not None and turns and not isinstance(turns, str):
            prompt = render_summary_prompt(turns, self.summary, max_sentences=self.max_sentences,
                                           template=self.template)
            pending.append(PendingSummary(self, self.summarizer, ModelRequest(prompt, purpose="summarize"),
                                          len(turns)))
            return self.summary
        self.summary = summarize_memory(
            turns,
            self.summarizer,
            self.summary,
            max_sentences=self.max_sentences,
            template=self.template,
        )
        self.folded_turns += len(turns)
        return self.summary

    def clear(self) -> None:
        self.summary = ""
        self.folded_turns = 0

    def __repr__(self) -> str:
        return f"SummaryMemory(folded_turns={self.folded_turns}, summary={self.summary[:40]!r})"
