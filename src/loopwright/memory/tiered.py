"""The three tiers together: recent turns verbatim, older turns summarised, every turn
filed for semantic recall, assembled into one context slice that fits a token budget."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from loopwright.memory.buffer import BufferMemory
from loopwright.memory.semantic import Recalled
from loopwright.memory.summary import SummaryMemory
from loopwright.trace import estimate_tokens

TRIM_MARKER = " …[trimmed]"
MIN_KEPT_CHARS = 24  # a trimmed part shorter than this says nothing useful: leave it out
RESULT_LINE = "\nObservation:"  # where a step's turn, as a run files it, gives its result

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


def trim_turn(text: str, fits: Callable[[str], bool], marker: str = TRIM_MARKER) -> str:
    """`text` shortened until it `fits` ("" when too little of it would). A step's turn
    (its thought and action, then its result after an `Observation:` line, as a ReAct run
    files it) keeps its result first: the thought and action are shortened, down to the
    step's first MIN_KEPT_CHARS, before the result is. Any other text keeps its prefix."""
    if fits(text):
        return text
    at = text.find(RESULT_LINE)
    if at < 0:
        return trim_to_fit(text, fits, marker)
    head, result = text[:at], text[at:]
    short = trim_to_fit(head, lambda h: fits(h + result), marker)
    if short:
        return short + result
    least = head if len(head) <= MIN_KEPT_CHARS else head[:MIN_KEPT_CHARS] + marker
    kept = trim_to_fit(result, lambda r: fits(least + r), marker)
    return least + kept if kept else ""


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
    *,
    exclude: Collection[str] = (),
) -> str:
    """`render(memory.context(query, b))` within `budget_tokens` ("" if nothing fits):
    b starts at the budget and shrinks in proportion to the overshoot until it fits.

    The memory counts the text it returns; the caller then wraps it (a label, an
    untrusted fence whose escaping can make `&`-heavy text several times longer).
    `exclude`: turns the caller's prompt already holds; a TieredMemory leaves them out
    (another Memory's `context` takes no such list, and is asked as it is).
    """
    tiered = memory if exclude and isinstance(memory, TieredMemory) else None
    asked = budget_tokens
    while asked > 0:
        if tiered is not None:
            recalled = tiered.context(query, asked, exclude=exclude)
        else:
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
    then recalled ones (recalled first with `recall_first`: for a run, whose scratchpad
    holds its newest steps already), then the summary; a part that does not fit whole is
    trimmed (a step's turn keeps its result first: `trim_turn`). Turns in `context`'s
    `exclude` (those the prompt holds already) are in neither Recent nor Recalled.
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
        recall_first: bool = False,
    ) -> None:
        if recall_k < 0:
            raise ValueError(f"recall_k must be >= 0, got {recall_k!r}")
        self.buffer = buffer
        self.summary = summary
        self.semantic = semantic
        self.recall_k = recall_k
        self.min_score = min_score
        self.count_tokens = count_tokens
        self.recall_first = recall_first

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

    def context(self, query: str, budget_tokens: int, *, exclude: Collection[str] = ()) -> str:
        """The memory slice for a prompt about `query`, at most `budget_tokens` tokens as
        counted by `count_tokens` ("" when nothing fits or nothing is remembered);
        turns in `exclude` (the prompt holds them already) are left out."""
        if isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int):
            raise TypeError(f"budget_tokens must be an int, got {budget_tokens!r}")
        if budget_tokens < 0:
            raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}")

        def fits(summary: str, recalled: Sequence[str], recent: Sequence[str]) -> bool:
            return self.count_tokens(_render(summary, recalled, recent)) <= budget_tokens

        # Recent turns, then recalled ones not shown already (the other way round with
        # recall_first), then the summary in whatever room is left.
        shown = set(exclude)  # turns placed so far, and those the prompt holds
        if self.recall_first:
            recalled = self._fit_recalled(query, shown, lambda r: fits("", r, []))
            recent = self._fit_recent(shown, lambda t: fits("", recalled, t))
        else:
            recent = self._fit_recent(shown, lambda t: fits("", [], t))
            recalled = self._fit_recalled(query, shown, lambda r: fits("", r, recent))
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

    def _fit_recent(self, shown: set[str], fits: Callable[[list[str]], bool]) -> list[str]:
        """The newest turns not in `shown` that fit, oldest first (added to `shown`); the
        newest alone is trimmed if it does not fit whole."""
        skip = frozenset(shown)  # not the turns placed here: a turn said twice is shown twice
        recent: list[str] = []
        for turn in reversed(self.buffer.turns):
            if turn in skip:
                continue
            if fits([turn, *recent]):
                recent.insert(0, turn)
                shown.add(turn)
                continue
            if not recent:
                head = trim_turn(turn, lambda t: fits([t]))
                if head:
                    recent = [head]
                    shown.add(turn)
            break
        return recent

    def _fit_recalled(
        self, query: str, shown: set[str], fits: Callable[[list[str]], bool]
    ) -> list[str]:
        """Recalled turns not in `shown` that fit, best first (added to `shown`); the first
        that does not fit whole is trimmed into the room left."""
        recalled: list[str] = []
        for text in self._recall(query, exclude=shown):
            if fits([*recalled, text]):
                recalled.append(text)
                shown.add(text)
                continue
            head = trim_turn(text, lambda t: fits([*recalled, t]))
            if head:
                recalled.append(head)
                shown.add(text)
            break
        return recalled

    def _recall(self, query: str, exclude: set[str]) -> list[str]:
        """Up to recall_k distinct recalled texts, none of them in `exclude`."""
        if self.semantic is None or self.recall_k == 0:
            return []
        out: list[str] = []
        seen = set(exclude)
        for hit in self.semantic.recall(query, k=self.recall_k + len(exclude)):
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
