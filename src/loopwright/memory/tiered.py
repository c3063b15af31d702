"""The three tiers together: recent turns verbatim, older turns summarised, every turn
filed for semantic recall, assembled into one context slice that fits a token budget."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from loopwright.memory.buffer import BufferMemory
from loopwright.memory.semantic import Recalled
from loopwright.memory.summary import SummaryMemory
from loopwright.trace import estimate_tokens

TRIM_MARKER = " …[trimmed]"
MIN_KEPT_CHARS = 24  # a trimmed part shorter than this says nothing useful: leave it out

TokenCounter = Callable[[str], int]


def _as_item(text: str) -> str:
    return "- " + text.replace("\n", "\n  ")


def _render(summary: str, recalled: Sequence[str], recent: Sequence[str]) -> str:
    parts: list[str] = []
    if summary:
        parts += ["Summary:", summary]
    if recalled:
        parts += ["Recalled:", *(_as_item(r) for r in recalled)]
    if recent:
        parts += ["Recent:", *recent]
    return "\n".join(parts)


def trim_to_fit(text: str, fits: Callable[[str], bool], marker: str = TRIM_MARKER) -> str:
    """The longest prefix of `text`, with `marker` appended, that `fits`; "" when fewer
    than MIN_KEPT_CHARS of it would. `fits` must be monotone in the text's length."""
    if fits(text):
        return text
    if len(text) <= MIN_KEPT_CHARS or not fits(text[:MIN_KEPT_CHARS] + marker):
        return ""
    lo, hi = MIN_KEPT_CHARS, len(text)  # invariant: lo fits, hi does not
    while lo < hi - 1:
        mid = (lo + hi) // 2
        if fits(text[:mid] + marker):
            lo = mid
        else:
            hi = mid
    return text[:lo] + marker


@runtime_checkable
class Memory(Protocol):
    """What a run or a Session needs of a memory: file a turn, and give back a context
    slice for a query within a token budget. TieredMemory is the standard one."""

    def add(self, turn: str, metadata: Mapping[str, Any] | None = None) -> None: ...

    def context(self, query: str, budget_tokens: int) -> str: ...


@runtime_checkable
class Archive(Protocol):
    """The recall tier of a TieredMemory: SemanticMemory, BM25Memory or HybridMemory."""

    def add_many(
        self, texts: Sequence[str], metadatas: Sequence[Mapping[str, Any] | None] | None = None
    ) -> list[int]: ...

    def recall(self, query: str, k: int = 5) -> list[Recalled]: ...


def context_within(
    memory: Memory,
    query: str,
    budget_tokens: int,
    render: Callable[[str], str],
    count_tokens: TokenCounter = estimate_tokens,
) -> str:
    """`render(memory.context(query, b))` within `budget_tokens` ("" if nothing fits):
    b starts at the budget and shrinks in proportion to the overshoot until it fits.

    The memory counts the text it returns; the caller then wraps it (a label, an
    untrusted fence whose escaping can make `&`-heavy text several times longer).
    """
    asked = budget_tokens
    while asked > 0:
        recalled = memory.context(query, asked)
        if not recalled:
            return ""
        shown = render(recalled)
        used = count_tokens(shown)
        if used <= budget_tokens:
            return shown
        asked = min(asked - 1, asked * budget_tokens // used)
    return ""


class TieredMemory:
    """Buffer, rolling summary and semantic archive behind one `add` / `context` pair.

    `add` files every turn in semantic memory and folds the turn the buffer evicts into
    the summary. `context(query, budget_tokens)` assembles

        Summary:  the rolling summary
        Recalled: the turns most similar to the query, not already among Recent
        Recent:   the newest turns, verbatim, oldest first

    never passing the budget as counted by `count_tokens` (estimate_tokens by default;
    pass the model's own tokenizer count to be exact). Recent turns are placed first,
    then recalled ones, then the summary; a part that does not fit whole is trimmed.
    Either the summary or the semantic tier may be None. The semantic tier is any
    Archive: SemanticMemory (cosine), BM25Memory, or HybridMemory (BM25 fused with dense
    recall, the default of `lw.Session`); `min_score` compares with its scores.
    """

    def __init__(
        self,
        buffer: BufferMemory,
        summary: SummaryMemory | None = None,
        semantic: Archive | None = None,
        *,
        recall_k: int = 3,
        min_score: float | None = None,
        count_tokens: TokenCounter = estimate_tokens,
    ) -> None:
        if recall_k < 0:
            raise ValueError(f"recall_k must be >= 0, got {recall_k!r}")
        self.buffer = buffer
        self.summary = summary
        self.semantic = semantic
        self.recall_k = recall_k
        self.min_score = min_score
        self.count_tokens = count_tokens

    def add(self, turn: str, metadata: Mapping[str, Any] | None = None) -> None:
        """Remember one turn."""
        self.add_many([turn], None if metadata is None else [metadata])

    def add_many(
        self, turns: Sequence[str], metadatas: Sequence[Mapping[str, Any] | None] | None = None
    ) -> None:
        """Remember several turns; they are embedded in one batch, and whatever they evict
        from the buffer is folded into the summary with a single summarizer call.

        Filed in semantic memory first: if the summarizer then fails, the evicted turns
        can still be recalled."""
        if isinstance(turns, str):
            raise TypeError("turns must be a sequence of strings, not a single str")
        if self.semantic is not None and turns:
            self.semantic.add_many(turns, metadatas)
        evicted = [e for e in (self.buffer.add(t) for t in turns) if e is not None]
        if evicted and self.summary is not None:
            self.summary.add_many(evicted)

    def context(self, query: str, budget_tokens: int) -> str:
        """The memory slice for a prompt about `query`, at most `budget_tokens` tokens as
        counted by `count_tokens` ("" when nothing fits or nothing is remembered)."""
        if isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int):
            raise TypeError(f"budget_tokens must be an int, got {budget_tokens!r}")
        if budget_tokens < 0:
            raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}")

        def fits(summary: str, recalled: Sequence[str], recent: Sequence[str]) -> bool:
            return self.count_tokens(_render(summary, recalled, recent)) <= budget_tokens

        # Recent turns first: the newest that fit, oldest first; the newest alone is
        # trimmed if it does not fit whole.
        recent: list[str] = []
        turns = self.buffer.turns
        for turn in reversed(turns):
            if fits("", [], [turn, *recent]):
                recent.insert(0, turn)
                continue
            if not recent:
                head = trim_to_fit(turn, lambda t: fits("", [], [t]))
                recent = [head] if head else []
            break
        shown = set(turns[len(turns) - len(recent) :])

        # Then recalled turns not already shown, best first.
        recalled: list[str] = []
        for text in self._recall(query, exclude=shown):
            if fits("", [*recalled, text], recent):
                recalled.append(text)
                continue
            head = trim_to_fit(text, lambda t: fits("", [*recalled, t], recent))
            if head:
                recalled.append(head)
            break

        # Then the summary, in whatever room is left.
        summary = self.summary.summary.strip() if self.summary is not None else ""
        if summary:
            summary = trim_to_fit(summary, lambda t: fits(t, recalled, recent))

        text = _render(summary, recalled, recent)
        if self.count_tokens(text) > budget_tokens:
            raise RuntimeError(
                f"context of {self.count_tokens(text)} tokens exceeds the budget of "
                f"{budget_tokens}: count_tokens must grow with the text"
            )
        return text

    def _recall(self, query: str, exclude: set[str]) -> list[str]:
        """Up to recall_k distinct recalled texts, none of them in `exclude`."""
        if self.semantic is None or self.recall_k == 0:
            return []
        out: list[str] = []
        seen = set(exclude)
        for hit in self.semantic.recall(query, k=self.recall_k + len(self.buffer)):
            if len(out) == self.recall_k:
                break
            if hit.text in seen or (self.min_score is not None and hit.score < self.min_score):
                continue
            seen.add(hit.text)
            out.append(hit.text)
        return out

    def __repr__(self) -> str:
        return (
            f"TieredMemory(buffer={self.buffer!r}, summary={self.summary!r}, "
            f"semantic={self.semantic!r})"
        )
