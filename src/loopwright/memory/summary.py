"""Tier 2: a rolling summary that older turns are folded into as they leave the buffer.

The summarizer is any policy: an LLM in use, a deterministic function in tests. It is
called through `call_policy` with the visible SUMMARIZE_PROMPT, so what it was asked is
always inspectable.
"""

from __future__ import annotations

from collections.abc import Sequence

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
        """Fold several turns into the summary with a single summarizer call."""
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
