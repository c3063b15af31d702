"""The whole-run example nearest a task, shown only when it fits (DSPy's KNNFewShot idea).

A registry's whole-run examples (`ToolRegistry(tools, examples=[...])`) are not part of
the ReAct prompt's shared head: that head is the prompt a registry without them gets
(instructions, tools, single-call examples), the same for every task, so a KV cache reuses
it. For each run the example whose question is most like the task is chosen, and only
when it is more like the task than every single-call example's question (a tool's own
examples, not a chain's; else its description) and shares at least MIN_LIKENESS of its
words with it: a plain question gets exactly the default prompt. A chosen run is shown
just before the question, in place of the single-call examples (`PromptSet.run_examples`
"only", the default: instructions and tools stay the shared prefix), or after them
("nearest"); "all" shows every whole-run example there. Measured on the 135M model
(docs/benchmarks.md): every run shown with every question made it restock on
plain stock questions; on the development chain questions the chosen run alone was copied
more often (4 of 15 answered) than after the single-call examples (1 of 15).

Likeness is the Jaccard overlap of the two questions' words, stemmed, with the small
words kept ("as many ... as there are", "by the number of": how a question chains is
written in them) and numbers dropped (they are values, not the question's kind).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from loopwright.prompting.examples import run_block, worked_examples
from loopwright.prompting.templates import PromptSet
from loopwright.tools.registry import ToolRegistry

__all__ = ["RunChoice", "check_run_examples_setting", "choose_run", "chosen_blocks", "likeness", "with_run_example"]

_NUMBER: Final = re.compile(r"\d+(?:[.,]\d+)*")
CHOICES: Final = ("nearest", "only", "all")
MIN_LIKENESS: Final = 0.2
"""A run shares at least this part of its words with the task to be shown. Below it, the
nearest run is only the least unlike one: on the development questions of
benchmarks/quality.py, "Restock 3 hinges. What is the new stock level?" is nearer a
stock-then-restock run (0.16) than the single-call examples (0.12), and shown it, the model
looked up the stock and restocked by it."""


def _words(tokenize: Callable[[str], list[str]], text: str) -> frozenset[str]:
    return frozenset(tokenize(_NUMBER.sub(" ", text)))


def likeness(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard overlap of two word sets (0 when either is empty)."""
    return len(a & b) / len(a | b) if a and b else 0.0


@dataclass(frozen=True)
class RunChoice:
    """A registry's whole-run examples ready to be chosen from: each one's words and
    block, and the words of every single-call example's question."""

    runs: tuple[tuple[frozenset[str], str], ...]
    singles: tuple[frozenset[str], ...]
    tokenize: Callable[[str], list[str]]

    def nearest(self, task: str) -> tuple[int, float, float] | None:
        """(index, its likeness, the best single-call likeness) of the run nearest `task`,
        or None when no run is more like it than every single-call example."""
        words = _words(self.tokenize, task)
        best = max((likeness(words, s) for s in self.singles), default=0.0)
        scored = [likeness(words, w) for w, _ in self.runs]
        top = max(range(len(scored)), key=lambda i: (scored[i], -i), default=None)
        if top is None or scored[top] <= best or scored[top] < MIN_LIKENESS:
            return None
        return top, scored[top], best


def choose_run(registry: ToolRegistry, dialect: str) -> RunChoice:
    """The registry's choice of whole-run examples for `dialect`, built once per registry."""

    def build(registry: ToolRegistry) -> RunChoice:
        from loopwright.memory.lexical import Tokenizer  # stemming: only with whole-run examples

        tokenize = Tokenizer(stopwords=())
        tools = list(registry)
        runs = []
        for run in registry.examples:
            block = run_block(run, tools, dialect)
            if block is not None:
                runs.append((_words(tokenize, run.question), block))
        asked: dict[str, set[str]] = {}  # a question two tools' examples share is a chain's
        for tool in tools:
            for example in tool.examples:
                if example.question:
                    asked.setdefault(example.question, set()).add(tool.name)
        singles = []
        for tool in tools:
            questions = [e.question for e in tool.examples if e.question and len(asked[e.question]) == 1]
            singles += [_words(tokenize, q) for q in questions or [tool.description]]
        return RunChoice(tuple(runs), tuple(singles), tokenize)

    return registry.memo(("nearest_run", dialect), build)


def check_run_examples_setting(prompts: PromptSet) -> None:
    """Raise for a `PromptSet.run_examples` that is not one of CHOICES (the ReAct and
    Reflexion checks call this before a run is journaled)."""
    if prompts.run_examples not in CHOICES:
        raise ValueError(f"PromptSet.run_examples must be one of {CHOICES}, got {prompts.run_examples!r}")


def chosen_blocks(registry: ToolRegistry, task: str, prompts: PromptSet, dialect: str) -> list[str]:
    """The whole-run examples' blocks to show with `task`: the nearest when it fits
    ("nearest", "only"), every one ("all"), none without whole-run examples or tool examples."""
    if not registry.examples or not prompts.tool_examples:
        return []
    choice = choose_run(registry, dialect)
    if prompts.run_examples == "all":
        return [block for _, block in choice.runs]
    found = choice.nearest(task)
    return [] if found is None else [choice.runs[found[0]][1]]


def with_run_example(text: str, task: str, registry: ToolRegistry, prompts: PromptSet, dialect: str) -> str:
    """The filled prompt `text` with the chosen whole-run example(s) just before its
    `Question: {task}` line (after the shared head, so a KV cache keeps reusing it);
    `text` itself when none is chosen. "only": a chosen run also takes the place of the
    single-call examples (the head then differs from the default one)."""
    blocks: Sequence[str] = chosen_blocks(registry, task, prompts, dialect)
    at = text.rfind(f"Question: {task}") if blocks else -1
    if at < 0:
        return text
    head = text[:at]
    if prompts.run_examples == "only":
        shown = registry.memo(
            ("nearest_run_head", dialect, prompts.example_tokens),
            lambda registry: worked_examples(list(registry), dialect, budget=prompts.example_tokens),
        )
        head = head.replace(shown, "", 1) if shown else head
    return head + "".join(b + "\n\n" for b in blocks) + text[at:]
