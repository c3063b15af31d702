"""The long-run recall check, shared by tests/test_memory_recall.py and benchmarks/recall.py.

A 170-step ReAct run in a 900-token window: five facts are noted at steps 4, 38, 72, 106
and 140 among routine notes, and at the end the run is asked for one of them, in the
fact's own words or paraphrased. In the second form ("pages"), the run reads a page a
step and the facts are in what the tool returns, among routine notes of the same page, at
the page's start for the first fact and further in for each next one (the last one ends
its page): only the observation holds the fact, so memory must bring back a step's
result, not just its call. The policy is scripted (the filler steps are not what
is under test); the memory, the folding of old steps and the token counting are real.
The final answer is the fact's answer only if the last prompt contains it, so the run
answers exactly when memory brought the fact back. The question is part of the task, as
a user's task names what they want, and the last thought repeats it; memory is asked
with the task and the latest thought each time the run folds old steps away.

The filler is written to be hard for recall without term weighting: it shares the
common words of the questions ("customer", "account", "release", "branch", "database",
"password", "flight", "project", "code") and only the rare words tell the fact apart.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import loopwright as lw

STEPS = 170
WINDOW = 900
PLANTED_AT = (4, 38, 72, 106, 140)
TASK = "Work through the team's backlog, noting what you learn; at the end, answer: {question}"


@dataclass(frozen=True)
class Fact:
    note: str  # what the agent wrote down, mid-run
    answer: str  # the part the final answer must contain
    asked: str  # the question, in the fact's own words
    paraphrased: str  # the same question in other words


FACTS = (
    Fact(
        "the staging database password was rotated to kestrel-4417 this morning",
        "kestrel-4417",
        "What was the staging database password rotated to?",
        "Which secret lets us log in to the pre-production data store now?",
    ),
    Fact(
        "Mara's flight to Lisbon lands at 16:40 on Friday",
        "16:40",
        "When does Mara's flight to Lisbon land?",
        "At what time does Mara arrive in Portugal?",
    ),
    Fact(
        "the customer account ID for Northwind Traders is 80-4471-2390",
        "80-4471-2390",
        "What is the customer account ID for Northwind Traders?",
        "Which billing reference does the Northwind client have with us?",
    ),
    Fact(
        "the release branch is frozen at commit 9f3c2e1 for the external audit",
        "9f3c2e1",
        "Which commit is the release branch frozen at for the external audit?",
        "What revision did we lock the shipping line on for the auditors?",
    ),
    Fact(
        "Dr. Okafor has a penicillin allergy, noted in her intake form",
        "penicillin",
        "What allergy does Dr. Okafor have, according to her intake form?",
        "Which medicine must the physician never be given?",
    ),
)

_PEOPLE = ["Ada", "Bram", "Chen", "Dara", "Emil", "Farah", "Goran", "Hiro", "Ines", "Jonas"]
_MODULES = ["billing", "search", "auth", "reports", "exports", "payments", "inbox", "admin"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]


def filler(n: int) -> tuple[str, str]:
    """A routine note for step n (thought, note): project and code chatter that shares
    the questions' common words, with numbers that look like answers."""
    who, mod, day = _PEOPLE[n % 10], _MODULES[(n // 3) % 8], _DAYS[n % 5]
    notes = [
        ("log the review", f"reviewed the project code for the {mod} module with {who}; the team "
         f"agreed the build passes and the change can ship on {day}"),
        ("update the customer", f"customer account for client {n + 300} moved to the annual plan; "
         f"{who} will send the new invoice on {day}"),
        ("note the merge", f"merged {n % 7 + 2} fixes into the release branch for the {mod} "
         f"project; commit {n * 7919 % 65536:04x} passed the code checks"),
        ("record the ops change", f"the database migration for {mod} ran at {n % 12 + 8}:15; the "
         f"team reset the test account password for {who} afterwards"),
        ("book the travel", f"booked {who}'s flight for the project offsite on {day}; it lands "
         f"at {n % 10 + 9}:{n % 6}0 and the hotel is near the office"),
        ("write up the standup", f"standup: {who} is on the {mod} project code, the customer "
         f"demo is {day}, and the team needs an account for the new contractor"),
    ]
    return notes[n % len(notes)]


def _step(thought: str, note: str) -> str:
    return f"Thought: {thought}\nAction: note\nAction Input: {json.dumps({'text': note})}"


def note_registry() -> lw.ToolRegistry:
    @lw.tool
    def note(text: str) -> str:
        """Write a note down; returns the note as filed.

        Args:
            text: the note, e.g. hello world
        """
        return f"filed: {text}"

    return lw.ToolRegistry([note])


PAGE_NOTES = 6  # routine notes a page holds besides its fact (about 700 characters a page)


def page(n: int, size: int = PAGE_NOTES) -> str:
    """Page n of the backlog: `size` routine notes, and at a planted step its fact among them."""
    notes = [filler(n * size + j)[1] for j in range(size)]
    if n in PLANTED_AT:
        j = PLANTED_AT.index(n)
        notes.insert(j * size // (len(PLANTED_AT) - 1), FACTS[j].note)
    return f"Page {n}. " + ". ".join(notes) + "."


def page_registry(size: int = PAGE_NOTES) -> lw.ToolRegistry:
    @lw.tool
    def read_page(n: int) -> str:
        """Read one page of the team's backlog, by its number."""
        return page(n, size)

    return lw.ToolRegistry([read_page])


def _read(thought: str, n: int) -> str:
    return f"Thought: {thought}\nAction: read_page\nAction Input: {json.dumps({'n': n})}"


class LongRunPolicy:
    """Scripted for STEPS steps: the five facts at PLANTED_AT, filler elsewhere, the
    question as the thought of step STEPS - 1, and at step STEPS a final answer that is
    the fact's answer only if the prompt it is shown contains it."""

    def __init__(self, fact: Fact, question: str) -> None:
        self.fact = fact
        self.question = question
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        n = len(self.prompts)
        if n in PLANTED_AT:
            return _step("I should write this down", FACTS[PLANTED_AT.index(n)].note)
        if n == STEPS - 1:
            return _step(f"The backlog is done; now the question: {self.question}", "wrap up")
        if n == STEPS:
            answer = self.fact.answer if self.fact.answer in prompt else "not in my context"
            return f"Thought: I can answer now\nFinal Answer: {answer}"
        return _step(*filler(n))


class ReadingPolicy(LongRunPolicy):
    """The same run reading page n at step n: the facts come in the observations of
    steps PLANTED_AT; the question is the thought of step STEPS - 1."""

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        n = len(self.prompts)
        if n == STEPS - 1:
            return _read(f"The backlog is done; now the question: {self.question}", n)
        if n == STEPS:
            answer = self.fact.answer if self.fact.answer in prompt else "not in my context"
            return f"Thought: I can answer now\nFinal Answer: {answer}"
        return _read(f"reading page {n} next", n)


@dataclass(frozen=True)
class Outcome:
    fact: Fact
    question: str
    trace: lw.Trace
    prompts: list[str]

    @property
    def recalled(self) -> bool:
        return self.trace.final_answer == self.fact.answer


KINDS = ("notes", "pages")


def run_long(
    fact: Fact, question: str, memory: Any = None, kind: str = "notes", page_notes: int = PAGE_NOTES
) -> Outcome:
    """One 170-step run asked `question` about `fact`; memory=None is the default memory.
    kind "notes": the facts are in the run's own calls; "pages": in the tool's results,
    pages of `page_notes` routine notes."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    policy = (LongRunPolicy if kind == "notes" else ReadingPolicy)(fact, question)
    registry = note_registry() if kind == "notes" else page_registry(page_notes)
    options: dict[str, Any] = {"context_tokens": WINDOW}
    if memory is not None:
        options["memory"] = memory
    task = TASK.format(question=question)
    trace = lw.run(task, policy, registry, max_steps=STEPS, on_repeat="off", **options)
    return Outcome(fact, question, trace, policy.prompts)


def run_all(
    paraphrased: bool = False, make_memory: Callable[[], Any] | None = None, kind: str = "notes"
) -> list[Outcome]:
    """The check for each of the five facts, asked in its own words or paraphrased."""
    return [
        run_long(
            f, f.paraphrased if paraphrased else f.asked, make_memory() if make_memory else None, kind
        )
        for f in FACTS
    ]
