"""ReAct's compaction under `context_tokens`: which older steps fold, in what order.

When the next prompt would pass the budget, older steps fold in this order, each only when
the one before is not enough: (1) old tool results become one-line stubs (the text kept
whole under a handle for read_output, tools/handles.py, and filed in memory); (2) old
thoughts are dropped; (3) the oldest steps go into memory (its summary tier, when it has
one) and the prompt gets what memory recalls for the task and the latest thought, leaving
out the steps the prompt still holds, plus a line naming the kept results whose steps it
folded away. The newest step is never stubbed or dropped, and stays in the prompt when
it fits in half the room. Each fold is reported (kind, steps, tokens before and after) for
`trace.meta["folds"]`. Pure: memory is the user's object (it may reach a store, an
embedder or a model), so filing steps in it and recalling from it are requests the driver
serves (Remember, Recall), and a result kept whole is a Record; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from loopwright.modes.machine import Machine, Recall, Record, Remember, Summarize
from loopwright.tools.handles import handle_for, stub
from loopwright.trace import estimate_tokens
from loopwright.untrusted import fence, neutralise

MEMORY_OVERHEAD: Final = 64  # the "Memory of earlier steps" label, the fence, and rounding
_SHRINKS: Final = ("stub_results", "drop_thoughts")  # the folds before summarising, in order
_LISTED_HANDLES: Final = 8  # kept results a summarised prompt names (the newest), whose steps it folded


def step_block(dialect: str, k: int, thought: str, action: str, observation: str, cue: bool = False) -> str:
    """Step k's part of the scratchpad, up to and including its observation; with `cue`,
    also what follows it (the cue for the model's next thought). The thought is the
    model's text: neutralised; `action` and `observation` come placed already."""
    if dialect == "brackets":
        block = f" {neutralise(thought)}\nAction {k}: {action}\nObservation {k}: {observation}"
        return f"{block}\nThought {k + 1}:" if cue else block
    block = f" {neutralise(thought)}\n{action}\nObservation: {observation}"
    return f"{block}\nThought:" if cue else block


@dataclass(slots=True)
class _Entry:
    """One step's block, kept in parts so a fold can re-render it with its result stubbed
    or its thought dropped. (Not frozen: folds change it.)"""

    k: int  # the step's trace index
    n: int  # the dialect's step number
    thought: str  # as the model wrote it (neutralised when rendered)
    action: str  # placed
    observation: str  # placed (fenced)
    plain: str  # the observation without its fence
    key: str | None  # the tool call's key, when the observation is a tool result
    handle: str | None  # where the result is kept whole, once it is
    offset: int  # where in it this observation starts (a page read with read_output)
    text: str = ""
    tokens: int = 0
    stubbed: bool = False
    dropped: bool = False
    turn: str = ""  # the step as filed in memory, once it is


class Folding:
    """The steps of one budgeted scratchpad and how they fold. The prompt is always
    head + section (recalled memory, after a summary) + question + the steps' blocks."""

    def __init__(self, dialect: str, task: str, head: str, question: str, budget: int, memory: Any,
                 outputs: Mapping[str, str]) -> None:
        self.dialect, self.task, self.head, self.question = dialect, task, head, question
        self.budget, self.memory, self.outputs = budget, memory, outputs
        self.entries: list[_Entry] = []
        self.kept: dict[str, int] = {}  # handles of results past the cap, and their sizes
        self.section = ""  # what memory recalled at the last summary
        self.summaries: list[int] = []  # tokens of each summarizer call since the last fold was noted
        self.stop: str | None = None  # a limit a summarizer call reached: the run ends with it

    def add(self, k: int, n: int, thought: str, action: str, observation: str, plain: str, text: str,
            key: str | None, handle: str | None, offset: int) -> None:
        """Step k, appended to the prompt as `text` (see `_Scratchpad.append` for the rest)."""
        if handle is not None and key is not None and handle == handle_for(key):
            self.kept[handle] = len(self.outputs.get(handle, ""))
        self.entries.append(_Entry(k, n, thought, action, observation, plain, key, handle, offset, text,
                                   estimate_tokens(text)))

    def fit(self, prompt: str) -> Machine[tuple[str, list[dict[str, Any]]]]:
        """The prompt folded to fit the budget, and a record of each kind of fold made (the
        prompt unchanged and none when it fits). Stubs and dropped thoughts go down to half
        the room below the budget, so the next fold is some steps away (each one rewrites the
        prompt, which a KV cache then evaluates again from the first change); the summary
        comes when they leave the prompt above what a summary leaves (an eighth of the room
        below the budget)."""
        budget = self.budget
        if estimate_tokens(prompt) <= budget:
            return prompt, []
        room = budget - estimate_tokens(self.head) - estimate_tokens(self.question) - MEMORY_OVERHEAD
        target = budget - room // 2  # half the room to grow before the next fold
        folds = []
        text = prompt
        for kind in _SHRINKS:
            fold = yield from self._shrink(kind, target, text)
            if fold is not None:
                text = self._text()
                folds.append(self._noted({**fold, "prompt_tokens_after": estimate_tokens(text)}))
            if self._tokens() <= target or self.stop is not None:
                return text, folds
        if self._tokens() > budget - room // 8:  # not even within what a summary leaves
            folds.append(self._noted((yield from self._summarise(budget, room, text))))
            text = self._text()
        return text, folds

    def _noted(self, fold: dict[str, Any]) -> dict[str, Any]:
        """The fold's record, with the summarizer calls it made (their tokens count in the
        run's usage) and the limit one of them reached."""
        if self.summaries:
            fold["summary_calls"], fold["summary_tokens"] = len(self.summaries), sum(self.summaries)
            self.summaries.clear()
        if self.stop is not None:
            fold["stop"] = self.stop
        return fold

    def _text(self) -> str:
        return self.head + self.section + self.question + "".join(e.text for e in self.entries)

    def _tokens(self) -> int:
        """The prompt's size, counted by parts (each rounded up: never under the whole)."""
        return (estimate_tokens(self.head) + estimate_tokens(self.section) + estimate_tokens(self.question)
                + sum(e.tokens for e in self.entries))

    def _render(self, e: _Entry) -> None:
        if e.stubbed and e.handle is not None:
            own = e.key is not None and e.handle == handle_for(e.key)  # its own result, not a page read from one
            chars = len(self.outputs.get(e.handle, e.plain)) if own else len(e.plain)
            observation = stub(e.handle, chars, e.offset)
        else:
            observation = e.observation
        thought = "…" if e.dropped else e.thought
        e.text = step_block(self.dialect, e.n, thought, e.action, observation, True)
        e.tokens = estimate_tokens(e.text)

    def _remember(self, entries: list[_Entry]) -> Machine[None]:
        """File these steps in memory (once each): one summarizer call, one embedding batch."""
        entries = [e for e in entries if not e.turn]
        if not entries:
            return
        turns = [f"Step {e.k}. Thought: {e.thought}\n{e.action}\nObservation: {e.plain}\n" for e in entries]
        metas: list[dict[str, Any]] = [{"step": e.k} if e.handle is None else {"step": e.k, "output": e.handle}
                                       for e in entries]
        pending = _answered((yield Remember(self.memory, turns, metas)))
        for e, turn in zip(entries, turns, strict=True):
            e.turn = turn
        for summary in pending or ():  # the driver calls the summarizer: a journaled, budgeted model call
            call = _answered((yield Summarize(summary)))
            self.summaries.append(call.usage.total_tokens)
            if call.stop is not None and self.stop is None:
                self.stop = call.stop

    def _shrink(self, kind: str, target: int, prompt: str) -> Machine[dict[str, Any] | None]:
        """Stub old results ("stub_results") or drop old thoughts ("drop_thoughts"), oldest
        first, until the prompt is within `target`; None when nothing changed."""
        total = self._tokens()
        changed: list[_Entry] = []
        for e in self.entries[:-1]:  # the newest step stays whole
            if total <= target:
                break
            if kind == "stub_results":
                if e.key is None or e.stubbed:
                    continue
                handle = e.handle if e.handle is not None and e.handle in self.outputs else handle_for(e.key)
                if len(stub(handle, len(e.plain), e.offset)) >= len(e.observation):
                    continue  # the stub would be no shorter
                if handle not in self.outputs:  # kept whole for read_output
                    yield Record(outputs={handle: e.plain})
                e.handle = handle
                e.stubbed = True
            else:
                if e.dropped or len(e.thought) <= 1:
                    continue
                e.dropped = True
            old = e.tokens
            self._render(e)
            total += e.tokens - old
            changed.append(e)
        if not changed:
            return None
        if kind == "stub_results":
            yield from self._remember(changed)  # readable in memory, and whole under the handle
        return {"kind": kind, "folded_steps": [e.k for e in changed], "prompt_tokens_before": estimate_tokens(prompt)}

    def _summarise(self, budget: int, room: int, prompt: str) -> Machine[dict[str, Any]]:
        """Move the oldest steps into memory and recall from it: the prompt's section."""
        keep = room // 4  # recent steps a quarter, an eighth to grow, recalled memory the rest
        folded: list[_Entry] = []
        while self.entries and sum(e.tokens for e in self.entries) > keep:
            if len(self.entries) == 1 and self.entries[0].tokens <= room // 2:
                break  # the newest step stays where the model continues from, when it fits in half the room
            folded.append(self.entries.pop(0))
        yield from self._remember(folded)
        recent = "".join(e.text for e in self.entries)
        last = self.entries[-1].thought if self.entries else ""  # the latest thought, with the task
        shown = {e.handle for e in self.entries}
        gone = [f"{h} ({n} chars)" for h, n in self.kept.items() if h not in shown][-_LISTED_HANDLES:]
        kept = f"Results kept whole, read_output(handle, offset, length) reads them: {', '.join(gone)}\n\n" if gone else ""
        fixed = (estimate_tokens(self.head) + estimate_tokens(self.question) + estimate_tokens(recent)
                 + estimate_tokens(kept))
        recall = Recall(  # budgeted after fencing: escaping can lengthen the text
            self.memory, f"{self.task}\n{last}", max(0, budget - fixed - 4 - room // 8), _memory_section,
            exclude={e.turn for e in self.entries if e.turn},  # steps the prompt still holds
        )
        self.section = kept + _answered((yield recall))
        return {"kind": "summarise", "folded_steps": [e.k for e in folded], "prompt_tokens_before": estimate_tokens(prompt),
                "prompt_tokens_after": estimate_tokens(self._text()), "memory_tokens": estimate_tokens(self.section)}


def _memory_section(recalled: str) -> str:
    return f"Memory of earlier steps:\n{fence(recalled, 'memory')}\n\n"


def _answered(answer: Any) -> Any:
    """What a memory request was answered with; what the memory raised is raised here (a
    defect in user code: the run ends with an error step)."""
    if isinstance(answer, Exception):
        raise answer
    return answer


__all__ = ["MEMORY_OVERHEAD", "Folding", "step_block"]
