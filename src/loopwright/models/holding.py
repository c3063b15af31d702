"""Holding the answer back while the question names something no call has used.

A small model that needs two calls makes the first and answers ("10 days after
2024-02-25": it asks the weekday of 2024-02-25 and answers; "as many nuts as there are
bolts": it looks the bolts up and answers their count). The question itself says so: it
names a number, a date or a thing that no call has taken yet, or it spells out a tool's
name ("What day of the week") that the run has not called last. A grammar may then hold
the step to a call, its thought starting with what is left ("The question also names
nuts, which no call has used"), and once every such reason was met, to the answer
(`react_grammar(hold=...)`, `LlamaCpp(hold_answer=True)`). The thought is the model's own
text in the trace, so the trace shows why the step was held.

A thing is used when a call's arguments write it (a number as JSON writes it; a word,
stemmed, or a short argument that abbreviates it: "ft" for feet) or an observation holds
it (a word only). Each reason holds one step, and only between the first call and the
HOLD_CALLS-th: a question's word that no tool needs must not keep a run from answering.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from loopwright.models.grounding import FENCED, seen_texts, task_part

HOLD_CALLS: Final = 3
"""After this many calls the answer is free whatever the question still names: a word no
tool needs must not keep a run from answering."""
HOLD_TEXT: Final = " The question also names {name}, which no call has used"
ASKS_TEXT: Final = " The question asks for {words}, so I use {tool}"
ANSWER_TEXT: Final = " I know the answer"
"""How a held step's thought starts: a call for something named, for the named tool, or
the answer (the worked examples' own words)."""

_DATE_OR_NUMBER: Final = r"\d{4}-\d{2}-\d{2}|(?<![A-Za-z\d.])\d+(?:\.\d+)?(?![A-Za-z\d])"
_NAME: Final = re.compile(rf"{_DATE_OR_NUMBER}|[A-Za-z][A-Za-z0-9]*")
_CALL: Final = re.compile(r"(?m)^(?:Action Input: (.*)|Action \d+: [^\[\n]*\[(.*)\])$")
_ACTION: Final = re.compile(r"(?m)^Action(?: \d+)?: ([A-Za-z0-9_.-]+)")
SCAFFOLD: Final = frozenset("""
a an the of in on at to for by with from and or than then as is are was were be been being do does did
has have had how many much more less fewer what which who whom when where why whose there their that this
these those it its now new total together sum all each both per after before into over under up down about
times plus minus divided multiplied add added take taken give given find tell me please
unit units number numbers value values level amount result answer higher lower longer shorter bigger smaller
high low long short big small tall far
""".split())
"""Words a question asks with, not the things it asks about ("how many more ... than")."""


def _stem(word: str) -> str:
    word = word.lower()
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _abbreviates(short: str, word: str) -> bool:
    """Whether `short` (an argument of at most 3 letters) abbreviates `word`: its first
    letter, then its letters in order ("ft" for feet, "cm" for centimetres, "m" for metres)."""
    if not short.isalpha() or short[0] != word[0]:
        return False
    rest = iter(word[1:])
    return all(letter in rest for letter in short[1:])


def question_names(question: str, tools: Sequence[Mapping[str, Any]]) -> list[str]:
    """What `question` names that a tool call could take, as written, in order, each
    once: its numbers and dates, and its other words but the words it asks with
    (SCAFFOLD) and the words of the tools' names and parameters (compared stemmed)."""
    skip = set(SCAFFOLD)
    for tool in tools:
        skip.update(_stem(p) for p in re.split(r"[_\W]+", str(tool.get("name", ""))) if p)
        properties = (tool.get("parameters") or {}).get("properties") or {}
        skip.update(_stem(p) for name in properties for p in re.split(r"[_\W]+", name) if p)
    names: list[str] = []
    keys: set[str] = set()
    for token in _NAME.findall(question):
        key = token if token[0].isdigit() else _stem(token)
        if token.lower() in skip or key in skip or (token.isalpha() and len(token) < 3) or key in keys:
            continue
        keys.add(key)
        names.append(token)
    return names


def unused_names(prompt: str, tools: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the task's question names (question_names) that no call of the run in the
    ReAct `prompt` has used: a number or date no call's arguments write, a word that no
    call's arguments hold or abbreviate and no observation holds. [] without a question."""
    part = task_part(prompt)
    texts = seen_texts(prompt)
    if part is None or not texts:
        return []
    calls = [a or b for a, b in _CALL.findall(part)]
    written = " ".join(calls).lower()
    observed = " ".join(texts[1:]).lower()
    short = {w for w in re.findall(r"[a-z]+", f"{written} {observed}") if len(w) <= 3}
    unused = []
    for name in question_names(texts[0].removeprefix("Question: "), tools):
        key = _stem(name)
        if name[0].isdigit():
            forms = {name} if "-" in name else {name, str(float(name)).removesuffix(".0")}
            if not any(re.search(rf"(?<![\d.]){re.escape(f)}(?![\d]|\.\d)", written) for f in forms):
                unused.append(name)
        elif key not in written and key not in observed and not any(_abbreviates(s, key) for s in short):
            unused.append(name)
    return unused


def calls_made(prompt: str) -> int:
    """How many calls the run in a ReAct `prompt` has made."""
    part = task_part(prompt) or ""
    return len(_ACTION.findall(part))




def named_tool(question: str, tools: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The tool whose name the question spells out in words ("What day of the week" for
    day_of_week, "the new stock level" for stock_level), the last one it names if several."""
    words = {_stem(w) for w in re.findall(r"[A-Za-z]+", question)}
    found = None
    for tool in tools:
        parts = [_stem(p) for p in re.split(r"[_\W]+", str(tool.get("name", ""))) if p]
        if len(parts) > 1 and all(p in words for p in parts):
            found = tool
    return found


@dataclass(frozen=True)
class Hold:
    """What a held ReAct step must write: the start of its thought, then a call (`act`)
    or the final answer."""

    thought: str
    act: bool = True


def held_step(prompt: str, tools: Sequence[Mapping[str, Any]]) -> Hold | None:
    """How a ReAct step is held, or None when it is free. Once the run has made a call
    and while it has made fewer than HOLD_CALLS, for each reason once: the first thing
    the question names that no call has used, else the tool the question names when the
    last call was another one, must be called for. When an earlier step was held, none
    is left and the last call did not fail, the step answers."""
    calls = calls_made(prompt)
    if calls < 1:
        return None
    part = task_part(prompt) or ""
    if calls < HOLD_CALLS:
        for name in unused_names(prompt, tools):
            text = HOLD_TEXT.format(name=name)
            if text not in part:
                return Hold(text)
        texts = seen_texts(prompt) or [""]
        tool = named_tool(texts[0], tools)
        actions = _ACTION.findall(part)
        if tool is not None and actions and actions[-1] != tool["name"]:
            text = ASKS_TEXT.format(words=str(tool["name"]).replace("_", " "), tool=tool["name"])
            if text not in part:
                return Hold(text)
    held = HOLD_TEXT.split("{")[0] in part or ASKS_TEXT.split("{")[0] in part
    observations = FENCED.findall(part)
    if held and observations and not observations[-1].lstrip().startswith("ERROR["):
        return Hold(ANSWER_TEXT, act=False)
    return None
