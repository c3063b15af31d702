"""Worked examples for a prompt's `{examples}` field, built from the registry.

Each tool's first example (`@tool(examples=...)`, its docstring, or `bootstrap_examples`),
the registry's whole-run examples (`ToolRegistry(tools, examples=[...])`; in ReAct only the
one nearest the task, if any, alone: `PromptSet.run_examples`, prompting/nearest_run.py) or
else one built chain in which a call uses the previous call's result, within
`PromptSet.example_tokens`; a later step's thought names the value of the observation it
passes on. An example is shown whole (each call with its result, and an answer to its
question, `tools.examples.short_answer`, never the observation pasted whole) or not at all:
a call with no known result (an `e.g.` value, a schema's own values) is not shown, since
nothing is invented and an example that stops at its call reads as a transcript to continue.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from loopwright.tools.examples import RunExample, ToolExample, short_answer
from loopwright.tools.results import render_observation
from loopwright.untrusted import fence


class _ExampleTool(Protocol):
    """What a worked example needs of a tool (a loopwright Tool has all of it)."""

    name: str
    description: str
    parameters: dict[str, Any]
    examples: tuple[ToolExample, ...]

    def input_param(self) -> str | None: ...


@dataclass(frozen=True)
class _Worked:
    tool: str
    args: dict[str, Any]
    question: str
    result: str | None  # the rendered observation, None when not known
    text_arg: str | None  # the bare argument of `name[text]`, when that is how it is written
    thought: str = ""
    value: Any = None  # the result as the tool returned it (for #E references in plans)


@dataclass(frozen=True)
class _Task:
    """One worked example: a question, the calls that answer it, and the answer (None:
    not known, and the example is not shown)."""

    question: str
    calls: tuple[_Worked, ...]
    answer: str | None


def _call(tool: _ExampleTool, args: Mapping[str, Any], result: Any, question: str | None = None) -> _Worked:
    rendered = None if result is None else " ".join(render_observation(result, 300).split())
    param = tool.input_param()
    single = args.get(param) if param is not None and set(args) == {param} else None
    text_arg = single if isinstance(single, str) and single and not set(single) & set("[]\n") else None
    return _Worked(tool.name, dict(args), question or _question(tool, args), rendered, text_arg, _thought(tool), result)


_QUESTION_WORDS = frozenset({"how", "what", "which", "who", "whom", "whose", "when", "where", "whether", "why"})


def _thought(tool: _ExampleTool) -> str:
    """Why the example calls this tool, from what its description says it does:
    "Evaluate an arithmetic expression such as ..." gives "I need to evaluate an
    arithmetic expression, so I use calculate" (measured: a small model picks the right
    tool more often after a thought that says what the tool is for)."""
    summary = " ".join(tool.description.split())
    summary = re.split(r"[.;:(]|,|\be\.g\b| such as | like ", summary, maxsplit=1)[0].strip()
    if not summary:
        return f"I should use {tool.name}"
    first, _, rest = summary.partition(" ")
    word = first.lower()
    if word in _QUESTION_WORDS:  # "How many units are in stock" -> "I need to know how many ..."
        return f"I need to know {word} {rest}".rstrip() + f", so I use {tool.name}"
    if word in ("the", "a", "an"):
        lead = f"I need {word}"
    elif word.endswith("s") and not word.endswith("ss"):  # "Returns the ..." -> "to return"
        lead = f"I need to {word[:-1]}"
    else:
        lead = f"I need to {word}"
    return f"{lead} {rest}".rstrip() + f", so I use {tool.name}"


def _single(call: _Worked) -> _Task:
    answer = None if call.result is None else short_answer(call.question, call.value)
    return _Task(call.question, (call,), answer)


def example_calls(
    tools: Sequence[_ExampleTool], *, from_tools: bool = True
) -> tuple[list[list[_Worked]], list[_Worked]]:
    """Rounds of calls (round r holds each tool's r-th example), and a chain of two tools
    (or []); none with `from_tools=False`.

    A tool's calls are its examples with a known result that are not one step of a longer
    task (a question other tools' examples share). A call without a result (an `e.g.`
    value, a schema's own values) is never shown: an example stopped at its call reads as
    a transcript to continue, and an invented result would be copied. The chain is a
    question that two tools' examples share (one task, as `bootstrap_examples` records
    it) in which the second call's arguments use the first call's result; there is no
    chain otherwise (two unrelated calls in a row teach a small model nothing about using
    a result)."""
    shared: dict[str, list[tuple[_ExampleTool, ToolExample]]] = {}
    if from_tools:
        for tool in tools:
            for example in tool.examples:
                if example.question:
                    shared.setdefault(example.question, []).append((tool, example))
    multi = {q for q, found in shared.items() if len({t.name for t, _ in found}) > 1}
    rounds: list[list[_Worked]] = []
    for tool in tools:
        own = [e for e in (tool.examples if from_tools else ()) if e.question not in multi and e.result is not None]
        for r, example in enumerate(own):
            if r == len(rounds):
                rounds.append([])
            rounds[r].append(_call(tool, example.args, example.result, example.question))
    for question in multi:
        found = shared[question]
        first, second = found[0], next(f for f in found if f[0].name != found[0][0].name)
        if first[1].result is not None and _uses(first[1].args, second[1].result):
            first, second = second, first
        if first[1].result is None or second[1].result is None or not _uses(second[1].args, first[1].result):
            continue
        return rounds, [_call(tool, example.args, example.result, example.question) for tool, example in (first, second)]
    return rounds, []


def _uses(args: Mapping[str, Any], result: Any) -> bool:
    """Whether `args` contain a number or a longer word of `result` (the step that needs
    another's result goes after it)."""
    if result is None:
        return False
    text = json.dumps(args, default=str)
    tokens = re.findall(r"\d+(?:\.\d+)?|[A-Za-z]{4,}", render_observation(result, 300))
    return any(re.search(rf"(?<![\w.]){re.escape(t)}(?![\w.])", text) for t in tokens)


def _used_value(args: Mapping[str, Any], observation: str | None) -> str | None:
    """The part of an earlier observation that `args` pass on: the whole observation
    when an argument holds it, else its longest number or word (4+ letters) found in
    the arguments; None when they use none of it."""
    if not observation:
        return None
    text = json.dumps(args, ensure_ascii=False, default=str)
    whole = observation.strip().rstrip(".")
    if whole and re.search(rf"(?<![\w.]){re.escape(whole)}(?![\w.])", text):
        return whole
    tokens = re.findall(r"\d+(?:\.\d+)?|[A-Za-z]{4,}", observation)
    found = [t for t in tokens if re.search(rf"(?<![\w.]){re.escape(t)}(?![\w.])", text)]
    return max(found, key=len) if found else None


def _question(tool: _ExampleTool, args: Mapping[str, Any]) -> str:
    """A question for a call that came without one, from the tool's description."""
    summary = " ".join(tool.description.split())
    summary = re.split(r"[.;:(]|,|\be\.g\b| such as ", summary, maxsplit=1)[0].strip() or f"Use {tool.name}"
    values = ", ".join(v if isinstance(v, str) else json.dumps(v, default=str) for v in args.values())
    return f"{summary}: {values}?" if values else f"{summary}?"


def _whole(task: _Task) -> bool:
    """Whether every call's result and the answer are known: an example is shown whole
    (calls, results, answer) or not at all."""
    return task.answer is not None and all(call.result is not None for call in task.calls)


def _react_block(task: _Task, dialect: str) -> str | None:
    """The example as a transcript, call by call to the answer; None unless it is whole."""
    if task.answer is None:
        return None
    lines = ["Example:", f"Question: {task.question}"]
    for k, call in enumerate(task.calls, 1):
        thought = call.thought if k == 1 else f"Now {call.thought}"
        used = _used_value(call.args, task.calls[k - 2].result) if k > 1 else None
        if used is not None:  # say which value of the observation the call passes on
            thought = f"The observation gives {used}. {thought}"
        args = json.dumps(call.args, ensure_ascii=False, default=str)
        if dialect == "brackets":
            lines += [f"Thought {k}: {thought}",
                      f"Action {k}: {call.tool}[{call.text_arg if call.text_arg is not None else args}]"]
        else:
            lines += [f"Thought: {thought}", f"Action: {call.tool}", f"Action Input: {args}"]
        if call.result is None:
            return None
        label = f"Observation {k}" if dialect == "brackets" else "Observation"
        lines.append(f"{label}: {fence(call.result, f'{call.tool}#{k}')}")
    k = len(task.calls) + 1
    if dialect == "brackets":
        lines += [f"Thought {k}: I know the answer", f"Action {k}: finish[{task.answer}]"]
    else:
        lines += ["Thought: I know the answer", f"Final Answer: {task.answer}"]
    return "\n".join(lines)


def _plan_block(task: _Task) -> str | None:
    """A plan for the example's calls, a later call using an earlier result through an
    `#E` reference; None when a call uses an earlier result that no reference can pass
    (a value picked out of a sentence): such a plan would show a value the planner
    cannot know before any tool runs. Like a ReAct example, only a whole one (results
    and answer known) is shown."""
    if not _whole(task):
        return None
    steps = []
    for k, call in enumerate(task.calls, 1):
        args = {name: _reference(value, task.calls[: k - 1]) for name, value in call.args.items()}
        if any(earlier.value is not None and _uses(args, earlier.value) for earlier in task.calls[: k - 1]):
            return None
        steps.append({"id": f"E{k}", "tool": call.tool, "args": args})
    plan = json.dumps({"plan": steps}, ensure_ascii=False, default=str)
    return f"Example:\nQuestion: {task.question}\nPlan: {plan}"


def _reference(value: Any, earlier: Sequence[_Worked]) -> Any:
    """`value` with an earlier call's result written as its `#E` reference: the whole
    value when it is that result, or the result's text inside a longer string."""
    for j in range(len(earlier), 0, -1):
        result = earlier[j - 1].value
        if result is None or isinstance(result, (dict, list, bool)):
            continue
        if value == result and type(value) is type(result):
            return f"#E{j}"
        text = str(result)
        if isinstance(value, str) and text and re.search(rf"(?<![\w.]){re.escape(text)}(?![\w.])", value):
            return re.sub(rf"(?<![\w.]){re.escape(text)}(?![\w.])", f"#E{j}", value)
    return value


def _run_task(run: RunExample, tools: Mapping[str, _ExampleTool]) -> _Task | None:
    calls = []
    for call in run.calls:
        tool = tools.get(call.tool)
        if tool is None:
            return None
        calls.append(_call(tool, call.args, call.result, run.question))
    return _Task(run.question, tuple(calls), " ".join(render_observation(run.answer, 300).split()))


def run_block(run: RunExample, tools: Sequence[_ExampleTool], dialect: str = "json") -> str | None:
    """One whole-run example as a worked example in `dialect` ("json", "brackets", "plan"),
    or None when it names a tool not in `tools` or cannot be shown."""
    task = _run_task(run, {t.name: t for t in tools})
    return None if task is None else _plan_block(task) if dialect == "plan" else _react_block(task, dialect)


def worked_examples(
    tools: Sequence[_ExampleTool],
    dialect: str = "json",
    *,
    budget: int = 450,
    from_tools: bool = True,
    runs: Sequence[RunExample] = (),
) -> str:
    """The worked-examples text for a ReAct ("json", "brackets") or plan ("plan") prompt.

    Within `budget` (about 4 characters a token): one example per tool first, then the
    whole-run examples `runs` (a registry's `examples`), or when there are none one
    built chain that uses one call's result in the next, then each tool's further
    examples, round by round. Whole runs and the chain are placed first; within a round
    the first-registered tool's example comes last, nearest the question (a small model
    copies the nearest example most: list first the tool it should reach for first).
    Ends in a blank line, or is "" when no tool has a usable call."""
    rounds, chain = example_calls(tools, from_tools=from_tools)
    by_name = {t.name: t for t in tools}
    whole = [t for t in (_run_task(r, by_name) for r in (runs if from_tools else ())) if t is not None]
    if not whole and chain and len(tools) >= 2:
        whole = [_Task(chain[0].question, tuple(chain), short_answer(chain[0].question, chain[-1].value))]

    def render(task: _Task) -> str | None:
        return _plan_block(task) if dialect == "plan" else _react_block(task, dialect)

    head: list[str] = []
    chosen: list[list[str]] = []
    used = taken = 0
    for r, calls in enumerate(rounds or [[]]):
        chosen.append([])
        pending = [render(_single(call)) for call in calls]
        lead = len(pending)
        if r == 0:
            pending += [render(task) for task in whole]
        full = True
        for i, block in enumerate(pending):
            if block is None:
                continue
            if taken and used + len(block) // 4 > budget:
                full = False
                break
            used, taken = used + len(block) // 4, taken + 1
            (chosen[r] if i < lead else head).append(block)
        if not full:
            break
    blocks = head + [b for found in chosen for b in reversed(found)]
    return "".join(b + "\n\n" for b in blocks)
