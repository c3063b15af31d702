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

A thing is used when a call that did not fail writes it in its arguments (a number as
JSON writes it; a word, stemmed, or a short argument that abbreviates it: "ft" for feet;
a number with the unit or thing after it, "5 mi", both in one call) or an observation
holds it (a word only). An argument that lists several things ("washer, hinge", "Earth
and Mars") uses only the first: the tool's parameter takes one. Each reason holds one
step, twice when the call it held did not use it, and only between the first call and
the HOLD_CALLS-th: a question's word that no tool needs must not keep a run from
answering. A call held for a number writes that number in its number values; one held
for a thing is not made with a tool that failed on the thing written into a formula
("Oxygen * 5").

A question that asks for a total or a difference ("together", "in total", "the sum",
"more ... than") is answered from the values its calls looked up: its first step must
call a tool, and its held calls use the tool the last call used, each with one thing
(no comma in a string); its answer's thought starts with the values and the operation
("I know the answer, 75 + 12 ="), and the model writes the result.
"""

from __future__ import annotations

import json
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
_CALL: Final = re.compile(r"(?m)^Action: ([A-Za-z0-9_.-]+)\nAction Input: (.*)$|^Action \d+: ([A-Za-z0-9_.-]+)\[(.*)\]$")
_ACTION: Final = re.compile(r"(?m)^Action(?: \d+)?: ([A-Za-z0-9_.-]+)")
_LIST: Final = re.compile(r",|;| and | plus | minus | times ", re.I)
"""What separates the things an argument lists: only the first is used."""
_NUMBER: Final = re.compile(r"\d{4}-\d{2}-\d{2}|(?<![\w.])-?\d+(?:\.\d+)?(?![\w]|\.\d|-\d)")
_WORD_FORMULA: Final = re.compile(r"[A-Za-z]\s*[-+*/]\s*[\w(]|[\w)]\s*[-+*/]\s*[A-Za-z]")
_TOTAL: Final = re.compile(r"\b(?:together|total|sum|in all|combined|altogether)\b", re.I)
_DIFFERENCE: Final = re.compile(r"\b(?:than|difference)\b|\bminus (?:that|those|the)\b", re.I)
COMBINE_TEXT: Final = " I know the answer, {formula} ="
"""How the answer's thought starts when the question asks for a total or a difference."""
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
    once: its numbers and dates (a number with the word after it, "5 mi", "3 hinges",
    unless that word is skipped), and its other words but the words it asks with
    (SCAFFOLD) and the words of the tools' names and parameters (compared stemmed)."""
    skip = set(SCAFFOLD)
    for tool in tools:
        skip.update(_stem(p) for p in re.split(r"[_\W]+", str(tool.get("name", ""))) if p)
        properties = (tool.get("parameters") or {}).get("properties") or {}
        skip.update(_stem(p) for name in properties for p in re.split(r"[_\W]+", name) if p)
    names: list[str] = []
    keys: set[str] = set()
    unit_end = -1
    for found in _NAME.finditer(question):
        token = found.group()
        if found.start() < unit_end:
            continue  # the unit of the number before it
        if token[0].isdigit() and "-" not in token:
            unit = re.match(r" ([A-Za-z]+)\b", question[found.end():])
            if unit and unit.group(1).lower() not in skip and _stem(unit.group(1)) not in skip:
                token, unit_end = f"{token} {unit.group(1)}", found.end() + unit.end()
        key = token if token[0].isdigit() else _stem(token)
        if token.lower() in skip or key in skip or (token.isalpha() and len(token) < 3) or key in keys:
            continue
        keys.add(key)
        names.append(token)
    return names


@dataclass(frozen=True)
class Call:
    """One call of the run: its tool, its argument values as text (a listing argument
    cut to its first thing), and its observation."""

    tool: str
    values: tuple[str, ...]
    observation: str

    @property
    def failed(self) -> bool:
        return self.observation.lstrip().startswith("ERROR[")


def _values(args: str) -> tuple[str, ...]:
    try:
        parsed = json.loads(args)
    except ValueError:
        parsed = args
    items = list(parsed.values()) if isinstance(parsed, dict) else [parsed]
    return tuple(_LIST.split(v)[0].strip() if isinstance(v, str) else json.dumps(v) for v in items)


def run_calls(prompt: str) -> list[Call]:
    """The calls of the run in a ReAct `prompt`, each with its observation."""
    part = task_part(prompt) or ""
    observations = FENCED.findall(part)
    calls = []
    for (tool, args, btool, bargs), observation in zip(_CALL.findall(part), observations, strict=False):
        calls.append(Call(tool or btool, _values(args if tool else bargs), observation))
    return calls


def _writes_number(text: str, number: str) -> bool:
    forms = {number} if "-" in number else {number, str(float(number)).removesuffix(".0")}
    return any(re.search(rf"(?<![\d.]){re.escape(f)}(?![\d]|\.\d)", text) for f in forms)


def _writes_word(text: str, word: str) -> bool:
    """Whether `text` holds `word` (stemmed), or abbreviates it; a word of at most 3
    letters ("mi", "km") is itself short, so only the word counts."""
    key, words = _stem(word), re.findall(r"[a-z0-9]+", text)
    if len(word) <= 3:
        return key in words
    return key in text or any(_abbreviates(s, key) for s in words if len(s) <= 3)


def _used(name: str, calls: Sequence[Call]) -> bool:
    number, _, unit = name.partition(" ")
    for call in calls:
        if call.failed:
            continue
        written = " ".join(call.values).lower()
        if not number[0].isdigit():
            if _writes_word(f"{written} {call.observation.lower()}", name):
                return True
        elif _writes_number(written, number) and (not unit or _writes_word(written, unit.lower())):
            return True
    return False


def unused_names(prompt: str, tools: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the task's question names (question_names) that no call of the run in the
    ReAct `prompt` has used: a number or date no call's arguments write (with its unit,
    when the question writes one after it), a word that no call's arguments hold or
    abbreviate and no observation holds; a call that failed uses nothing. [] without a
    question."""
    texts = seen_texts(prompt)
    if not texts:
        return []
    calls = run_calls(prompt)
    return [n for n in question_names(texts[0].removeprefix("Question: "), tools) if not _used(n, calls)]


def calls_made(prompt: str) -> int:
    """How many calls the run in a ReAct `prompt` has made."""
    part = task_part(prompt) or ""
    return len(_ACTION.findall(part))


def combination(question: str) -> str | None:
    """The operation a question asks for over the values it names: "+" for a total
    ("together", "in total", "the sum"), "-" for a difference ("more ... than", "the
    difference", "minus that of"), else None."""
    if _DIFFERENCE.search(question):
        return "-"
    return "+" if _TOTAL.search(question) else None


def _plain(number: str) -> str:
    return number[:-2] if number.endswith(".0") else number


def looked_up_values(calls: Sequence[Call]) -> list[str]:
    """The values the run's calls looked up: the one number of each observation that
    holds one (not a date), in call order."""
    values = []
    for call in calls:
        numbers = [] if call.failed else _NUMBER.findall(call.observation)
        if len(numbers) == 1 and "-" not in numbers[0][1:]:
            values.append(_plain(numbers[0]))
    return values


def combined(operation: str, values: Sequence[str]) -> str:
    """The formula over `values`: their sum, or the largest less the others (a question
    asks how much more, never a negative)."""
    if operation == "+":
        return " + ".join(values)
    ordered = sorted(values, key=float, reverse=True)
    return " - ".join(ordered)


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
    """What a held ReAct step must write: the start of its thought, then a call (`act`,
    with `tool` when only one may be called, `number` when the held thing is a number)
    or the final answer."""

    thought: str
    act: bool = True
    tool: str | None = None
    """The one tool the call may use (None: any)."""
    number: str | None = None
    """The one number the call's number values may write (None: any)."""
    not_tools: frozenset[str] = frozenset()
    """Tools the call may not use: their calls wrote a thing into a formula, and failed."""
    one_thing: bool = False
    """The call's strings hold no comma: the question lists things to look up one by one."""


def _last_thought(part: str) -> str:
    """The thought of the run's last call."""
    thoughts = re.findall(r"(?m)^Thought(?: \d+)?:(.*)\nAction", part)
    return thoughts[-1] if thoughts else ""


def _hold_for(name: str, text: str, calls: Sequence[Call], operation: str | None) -> Hold:
    """The hold of a call for `name`: for a number, that number; for a thing, not a tool
    that failed with a thing in a formula; in a total or a difference, the last tool
    that worked, one thing at a time."""
    done = [c.tool for c in calls if not c.failed]
    if name[0].isdigit():
        number = None if "-" in name else name.split(" ")[0]
        return Hold(text, tool=done[-1] if operation and done else None, number=number, one_thing=bool(operation))
    formulas = frozenset(c.tool for c in calls if c.failed and any(_WORD_FORMULA.search(v) for v in c.values))
    return Hold(text, tool=done[-1] if operation and done else None, not_tools=formulas, one_thing=bool(operation))


def held_step(prompt: str, tools: Sequence[Mapping[str, Any]]) -> Hold | None:
    """How a ReAct step is held, or None when it is free.

    Before the first call of a question that asks for a total or a difference: to a
    call of one thing. Once the run has made a call and while it has made fewer than
    HOLD_CALLS: to a call for the first thing the question names that no call has used
    (_hold_for), each once, or twice when the call it held did not use it; else to the
    tool the question names when the last call was another one. Then, unless the last
    call failed: a total or a difference of two or more looked-up values is answered
    from them; after any held step, the step answers."""
    calls = run_calls(prompt)
    question = (seen_texts(prompt) or [""])[0]
    operation = combination(question)
    if not calls:
        return Hold("", one_thing=True) if operation else None
    part = task_part(prompt) or ""
    if len(calls) < HOLD_CALLS:
        for name in unused_names(prompt, tools):
            text = HOLD_TEXT.format(name=name)
            if text not in part or (_last_thought(part).startswith(text) and part.count(text) < 2):
                return _hold_for(name, text, calls, operation)
        tool = named_tool(question, tools)
        actions = _ACTION.findall(part)
        if tool is not None and actions and actions[-1] != tool["name"]:
            text = ASKS_TEXT.format(words=str(tool["name"]).replace("_", " "), tool=tool["name"])
            if text not in part:
                return Hold(text)
    if calls[-1].failed:
        return None
    values = looked_up_values(calls)
    if operation and len(values) >= 2:
        return Hold(COMBINE_TEXT.format(formula=combined(operation, values)), act=False)
    held = HOLD_TEXT.split("{")[0] in part or ASKS_TEXT.split("{")[0] in part
    if held:
        return Hold(ANSWER_TEXT, act=False)
    return None
