"""The numbers a ReAct step may write into a tool call: those it has seen.

A small model that needs two facts often looks up one and invents the other (it restocks
by a made-up amount, or multiplies a number it never looked up). A number in a call's
arguments that is in neither the question nor any observation is such an invention, so a
grammar may hold the numbers of a call to the ones the run has seen (`grammar.py`, with
`ground_numbers`). The model then has to fetch a value before it can pass it on.

Seen means: written in the task's question or in an observation of this run (the
contents of its <untrusted> fences), not in the worked examples, the tool descriptions,
or the model's own earlier thoughts and calls, and the number a word of the question or
an observation names ("three", "twice", "a week", "a dozen"). A call that needs a number
none of those gives cannot be made at that step (not even 0 or 1: given them, the 0.5B
model restocked by 1 instead of looking the amount up).

"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final, Protocol


class Rules(Protocol):
    """grammar.py's rule set (it imports this module, so it is passed in)."""

    def add(self, name: str, body: str) -> str: ...

WORDS: Final = {
    "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
    "seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12",
    "twenty": "20", "thirty": "30", "hundred": "100", "thousand": "1000", "million": "1000000",
    "twice": "2", "double": "2", "half": "2", "triple": "3", "thrice": "3", "dozen": "12",
    "week": "7", "weeks": "7", "fortnight": "14", "year": "365", "years": "365",
}  # fmt: skip
"""Words whose number a call may need though no digit says it ("twice" 2, "a week" 7 days)."""

_NUMBER: Final = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")
_WORD: Final = re.compile(r"[a-z]+")
FENCED: Final = re.compile(r"<untrusted[^>]*>(.*?)</untrusted>", re.S)
_QUESTION: Final = re.compile(r"(?m)^Question: ")


def task_part(prompt: str) -> str | None:
    """The prompt from the task's `Question:` line on (the first one that does not open a
    worked example), or None when it has none (a template of the user's own)."""
    for found in _QUESTION.finditer(prompt):
        if not prompt[: found.start()].endswith("Example:\n"):
            return prompt[found.start() :]
    return None


def seen_texts(prompt: str) -> list[str] | None:
    """The question and each observation of the run in `prompt`; None without a question."""
    part = task_part(prompt)
    if part is None:
        return None
    question = re.split(r"\nThought|\nAction|\nPlan:", part, maxsplit=1)[0]
    return [question, *FENCED.findall(part)]


def grounded_numbers(texts: list[str]) -> frozenset[str]:
    """The numbers `texts` write, as written (thousands separators dropped) and as a JSON
    number writes them ("02" also as "2", "2000.0" also as "2000"), the numbers their
    words name (WORDS)."""
    found: set[str] = set()
    for text in texts:
        for number in _NUMBER.findall(text):
            plain = number.replace(",", "")
            found.add(plain)
            whole, _, fraction = plain.partition(".")
            if not fraction.strip("0"):
                found.add(str(int(whole)))
            else:
                found.add(f"{int(whole)}.{fraction.rstrip('0')}")
        found.update(WORDS[w] for w in _WORD.findall(text.lower()) if w in WORDS)
    return frozenset(found)


def prompt_numbers(prompt: str) -> frozenset[str] | None:
    """The grounded numbers of the run in a ReAct `prompt`; None when its question cannot
    be found (then nothing is held to them)."""
    texts = seen_texts(prompt)
    return None if texts is None else grounded_numbers(texts)


class Unseen(Exception):
    """A number value with no grounded number to write: its call cannot be made yet."""


def writable(pair: Any, key: str) -> bool:
    """Whether an optional key's value can be written (one held to unseen numbers cannot)."""
    try:
        pair(key)
    except Unseen:
        return False
    return True


def grounded_number(rules: Rules, literal: Callable[[str], str], grounded: frozenset[str], kind: str, name: str,
                    low: float | None, high: float | None) -> str:
    """A number written with one of the grounded numbers' digits (a sign allowed unless the
    schema is non-negative), within the schema's bounds where they say so; `literal` is
    grammar.py's GBNF quoting (it imports this module). Raises Unseen
    when none fits: the call (or the optional key) is left out of this step's grammar,
    so the model has to look the number up first."""
    values = []
    for text in grounded:
        if kind == "integer" and ("." in text or (len(text) > 1 and text.startswith("0"))):
            continue
        if len(text) > 1 and text.startswith("0") and not text.startswith("0."):
            continue  # "02" is no JSON number; its "2" is grounded too
        number = float(text)
        for value, written in ((number, text), (-number, f"-{text}")):
            if written == "-0" or (low is not None and value < low) or (high is not None and value > high):
                continue
            values.append(written)
    if not values:
        raise Unseen(name)
    return rules.add(f"{name}-g", " | ".join(literal(v) for v in sorted(values)))


def grounded_string(rules: Rules, literal: Callable[[str], str], max_chars: int, grounded: frozenset[str],
                    nonempty: bool, exclude: str = "") -> str:
    """A JSON string whose every run of digits is a grounded number (a date's "2024",
    "02" and "25", a formula's "26" and "3"); at most max_chars pieces, each a
    non-digit character or a grounded number and the non-digit after it. `exclude`:
    characters it may not hold either (a comma, for one thing)."""
    tag = "-x" if exclude else ""
    rules.add(f"g-char{tag}", rf'[^"\\0-9\x00-\x1f{exclude}] | json-escape')
    name = f"g-string{tag}-nonempty" if nonempty else f"g-string{tag}"
    if not grounded:  # no digit at all
        body = f"g-char{tag}{{{int(nonempty)},{max_chars}}}"
        return rules.add(name, f'"\\"" {body} "\\""')
    rules.add("g-num", " | ".join(literal(v) for v in sorted(grounded, key=lambda v: (len(v), v))))
    rules.add(f"g-seg{tag}", f"g-char{tag} | g-num g-char{tag}")
    seg = f"g-seg{tag}"
    body = f"{seg}{{1,{max_chars}}} g-num? | g-num" if nonempty else f"{seg}{{0,{max_chars}}} g-num?"
    return rules.add(name, f'"\\"" ({body}) "\\""')

