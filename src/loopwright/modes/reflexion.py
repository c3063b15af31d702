"""Reflexion: ReAct attempts in one run; after a failed attempt the model critiques it,
and the next attempt starts with the critiques so far in its prompt (Shinn et al., 2023:
the critiques are the agent's episodic memory).

An attempt fails when it stops with anything but `final`, or when `evaluator(task,
trace)` rejects its answer; a hard stop (token budget, wall clock, the policy raising,
a denial or pause that ends the run) ends the run instead. Every limit holds for the
whole run: `max_steps` counts every model call, critiques included, so
`llm_calls == attempt steps + reflections <= max_steps`. When `max_reflections`
critiques were written and the last attempt failed too, the run stops with
`max_reflections` (each attempt's own stop reason is in `trace.meta["attempts"]`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from loopwright.modes._critique import reflect
from loopwright.modes.machine import (
    Evaluate,
    Evaluator,
    Machine,
    Record,
    RunView,
    Settings,
    StepGen,
    Stop,
    recorded,
)
from loopwright.modes.react import _react, _Scratchpad
from loopwright.modes.react import check as react_check
from loopwright.modes.toolsearch import ToolSelection, begin, chosen
from loopwright.prompting.templates import REFLEXION_OUTCOMES
from loopwright.trace import Step
from loopwright.untrusted import first_line, neutralise

_OPEN_LABEL: Final = re.compile(r"\s*Thought(?: \d+)?:\s*$")
"""The scratchpad's open `Thought:` label, cut before the critique instruction: the
critique prompt is the attempt's last prompt plus the instruction (a cached prefix)."""

RETRIED: Final = frozenset({"final", "max_steps", "error", "repeated_call"})
"""Attempt ends that lead to a critique (a `final` only when the evaluator rejects it;
an `error` only from unusable replies, not from the policy raising)."""


def check(spec: Settings) -> None:
    """What Reflexion checks before anything is journaled beyond its settings
    (ReflexionSettings checks those): ReAct's checks, and an evaluator the journal recorded
    (True) given again."""
    react_check(spec)
    if spec.evaluator is True:  # what a journal records: resume() was not given the evaluator again
        raise TypeError("this run was made with an evaluator; pass evaluator=... again to resume it")


def machine(view: RunView, spec: Settings) -> StepGen:
    """The Reflexion machine for a run.

    max_steps: model calls of the whole run (attempt steps and critiques).
    attempt_steps: model calls one attempt may make; default
    `(max_steps - max_reflections) // (max_reflections + 1)` (at least 1), so every
    attempt and critique fits; an attempt never gets more than max_steps has left.
    evaluator: see `Evaluator`; without one an attempt that answers is accepted.
    """
    # every attempt starts from the K tools the task needs most, and what earlier attempts loaded
    selection = begin(view, spec, searchable=False)
    max_steps, max_reflections = view.limits.max_steps, spec.setting("max_reflections")
    per_attempt = spec.attempt_steps or max(1, (max_steps - max_reflections) // (max_reflections + 1))
    judge = spec.evaluator if callable(spec.evaluator) else None
    settings = _Settings(spec.setting("dialect"), max_reflections, per_attempt, judge, spec.setting("on_tool_error"),
                         spec.max_tokens, spec.memory, spec.context_tokens, selection)
    if selection is None:  # bad options fail now (with tool search, once the K tools are chosen)
        _Scratchpad(view, settings.dialect, spec.memory, spec.context_tokens)
    return _reflexion(view, settings)


@dataclass(frozen=True, slots=True)
class _Settings:
    dialect: str
    max_reflections: int
    per_attempt: int
    evaluator: Evaluator | None
    on_tool_error: str
    max_tokens: int | None
    memory: Any
    context_tokens: int | None
    selection: ToolSelection | None


def _reflexion(view: RunView, s: _Settings) -> StepGen:
    yield from chosen(view, s.selection)
    trace = view.trace
    max_steps = view.limits.max_steps
    critiques: list[str] = []
    attempts: list[dict[str, Any]] = []  # trace.meta["attempts"]
    yield Record(meta={"attempts": attempts})
    transcripts: list[str] = []
    while True:
        n = len(attempts) + 1
        cap = min(s.per_attempt, max_steps - trace.llm_calls)
        notes = ""
        if critiques:
            lines = "\n".join(f"- Attempt {i}: {neutralise(c)}" for i, c in enumerate(critiques, 1))
            notes = view.prompts.reflexion_memory.format(reflections=lines)
        pad = _Scratchpad(view, s.dialect, s.memory, s.context_tokens, notes=notes)
        first_step = view.next_index
        record: dict[str, Any] = {"attempt": n, "first_step": first_step}
        attempts.append(record)
        yield Record(meta={"attempts": attempts})
        yield from recorded(_react(view, pad, s.max_tokens, max_steps=cap, keep_prompts=True,
                                   on_tool_error=s.on_tool_error, selection=s.selection),
                            partial(_attempt_ended, view, pad, record, attempts, transcripts))
        reason, answer = trace.stopped_reason, trace.final_answer
        record["answer"] = answer
        yield Record(meta={"attempts": attempts})
        if reason == "final":
            verdict = yield from _judge(s.evaluator)
            if isinstance(verdict, str):  # the evaluator failed: a defect in user code, said plainly
                yield Step(view.next_index, "error", error=verdict)
                yield Stop("error")
                return
            ok, feedback = verdict
            record["accepted"] = ok
            if feedback:
                record["feedback"] = feedback
            yield Record(meta={"attempts": attempts})
            if ok:
                return
        elif reason not in RETRIED or _policy_failed(view, first_step):
            return  # a hard stop: its reason is the run's
        outcome = _outcome(view, reason, answer, record.get("feedback", ""), cap, first_step)
        if len(critiques) >= s.max_reflections:
            yield Stop("max_reflections")
            return
        if max_steps - trace.llm_calls < 2:  # no room for a critique and another attempt
            yield Stop("max_steps")
            return
        yield Stop(None)  # the run goes on: a Ctrl-C now is "interrupted"
        prompt = view.prompts.reflexion_critique.format(attempt=_OPEN_LABEL.sub("", pad.text), outcome=outcome)
        critique = yield from reflect(view, prompt, s.max_tokens, {"attempt": n, "failure": reason})
        if critique is None:
            return
        critiques.append(critique)
        transcripts.append(f"Reflection {len(critiques)}: {critique}")
        yield Record(transcript="\n".join(transcripts))


def _attempt_ended(view: RunView, pad: _Scratchpad, record: dict[str, Any], attempts: list[dict[str, Any]],
                   transcripts: list[str]) -> Record:
    """How an attempt ended (however it ended): its record completed, its transcript added."""
    record["last_step"] = view.next_index - 1
    record["stopped_reason"] = view.trace.stopped_reason
    transcripts.append(f"Attempt {record['attempt']}:\n{pad.transcript}")
    return Record(transcript="\n".join(transcripts), meta={"attempts": attempts})


def _judge(evaluator: Evaluator | None) -> Machine[tuple[bool, str] | str]:
    """The evaluator's verdict on the answer in the trace (the driver asks it), or why it
    could not give one."""
    if evaluator is None:
        return True, ""
    verdict = yield Evaluate(evaluator)
    if isinstance(verdict, Exception):  # user code: the run ends with a clear error, not a traceback
        return f"evaluator raised {type(verdict).__name__}: {verdict}"
    if isinstance(verdict, bool):
        return verdict, ""
    if (isinstance(verdict, tuple) and len(verdict) == 2 and isinstance(verdict[0], bool)
            and isinstance(verdict[1], str)):
        return verdict
    return f"evaluator must return (ok: bool, feedback: str) or a bool, got {first_line(repr(verdict), 200)}"


def _policy_failed(view: RunView, first_step: int) -> bool:
    """Whether the attempt ended on an `error` step (the policy raised or timed out, a
    side effect of unknown outcome): not something a critique can fix."""
    steps = view.trace.steps
    return len(steps) >= first_step and steps[-1].kind == "error"


def _outcome(view: RunView, reason: str | None, answer: str | None, feedback: str, cap: int,
             first_step: int) -> str:
    if reason == "final":
        return REFLEXION_OUTCOMES["rejected"].format(answer=neutralise(repr(answer)),
                                                     feedback=neutralise(feedback) or "(no feedback)")
    if reason == "error":
        errors = [s.error for s in view.trace.steps[first_step - 1:] if s.error]
        return REFLEXION_OUTCOMES["error"].format(error=neutralise(first_line(errors[-1] if errors else "", 300)))
    return REFLEXION_OUTCOMES.get(str(reason), "{reason}").format(steps=cap, reason=reason)
