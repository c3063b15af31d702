"""Plan-execute-replan: plan once, run the plan step by step without the model, and on
the first failure (a ToolError, an unresolved reference, an unusable plan) ask for a
new plan that sees the failure and the evidence so far. `llm_calls == 1 + replans`;
after `max_replans` recoveries the run stops with "max_replans".

The answer is the result of the last step of a plan whose every step succeeded (the
prompts say so). A failed step is never the answer: its ToolError text goes to the
replanner as evidence, and when no replan is left the run stops with "max_replans" and
no final_answer. A last step whose result is empty counts as a failure too.
"""

from __future__ import annotations

from typing import Any

from loopwright.modes.machine import (
    CallTool,
    CheckClock,
    Machine,
    Record,
    RunView,
    Settings,
    StepGen,
    Stop,
)
from loopwright.modes.rewoo import plan_call, plan_examples
from loopwright.modes.toolsearch import ToolSelection, begin, chosen, searched
from loopwright.parsing.steps import PlanStep, substitute
from loopwright.prompting.templates import describe_tools, fill, render_evidence
from loopwright.trace import Step
from loopwright.untrusted import fence, neutralise


def check(spec: Settings) -> None:
    """Plan-execute has nothing to check beyond its setting (PlanExecuteSettings checks it)."""


def machine(view: RunView, spec: Settings) -> StepGen:
    # tool search: the plan gets the K tools the task needs most; a plan that names a registered
    # tool not loaded loads it (plan_call); each replan also loads the tools that best match the
    # failure (a step that named a tool that does not exist finds its kin)
    selection = begin(view, spec, searchable=False)
    return _plan_execute(view, spec.max_tokens, selection)


def _plan_execute(view: RunView, max_tokens: int | None, selection: ToolSelection | None = None) -> StepGen:
    yield from chosen(view, selection)
    tools_text = describe_tools(view.schemas)
    task = view.task if view.output is None else f"{view.task}\n{view.output.instruction()}"
    prompt = fill(view.prompts.planner, "planner", tools=tools_text, task=task, examples=plan_examples(view))
    kind = "plan"
    history: list[tuple[str, str, str]] = []  # (label, tool, observation) across attempts
    transcript = [f"Question: {view.task}"]
    while True:
        plan, plan_error = yield from plan_call(view, prompt, kind, max_tokens, selection)
        if plan is None and plan_error is None:
            return  # the policy failed or a guard fired; the run is already stopped
        failed_step, error = "plan", neutralise(plan_error or "")  # quotes the model's JSON
        if plan is not None and len(plan) > view.limits.max_steps:
            error = f"the plan has {len(plan)} steps; at most max_steps={view.limits.max_steps} are allowed"
            plan = None
        if plan is not None:
            transcript.append(f"{kind.capitalize()}: " + "; ".join(f"{s.id}={s.tool}" for s in plan))
            outcome = yield from _execute(view, plan, history, view.trace.replans)
            if outcome is None:
                return
            failed_step, error, answer, done = outcome
            typed = None
            if done and view.output is not None:  # a typed answer that does not fit: replan
                try:
                    typed = view.output.parse(answer)
                except ValueError as exc:
                    failed_step, done = "the answer", False
                    error = neutralise(f"the last step's result does not fit the output type: {exc}")
            if done:
                transcript.append(f"Final Answer: {answer}")
                yield Record(transcript="\n".join(transcript))
                yield Stop("final", answer, typed)
                return
        transcript.append(f"FAILED at {failed_step}: {error}")
        yield Record(transcript="\n".join(transcript))
        if view.trace.replans >= view.limits.max_replans:
            yield Stop("max_replans")
            return
        yield Record(replans=view.trace.replans + 1)
        kind = "replan"
        if selection is not None:
            yield from searched(view, selection, f"{failed_step} {error}")
            tools_text = describe_tools(view.schemas)
        prompt = view.prompts.replanner.format(
            tools=tools_text, task=task, failed_step=neutralise(failed_step), error=error,  # made prompt-safe where it was set
            evidence=render_evidence(history),
        )


def _execute(
    view: RunView, plan: list[PlanStep], history: list[tuple[str, str, str]], attempt: int
) -> Machine[tuple[str, str, Any, bool] | None]:
    """Run the plan in order. Returns (failed_step, error, last_value, done) or None if
    the wall clock ran out."""
    evidence: dict[str, Any] = {}
    answer = ""
    for step in plan:
        if (yield CheckClock()):
            yield Stop("timeout")
            return None
        label = step.id if attempt == 0 else f"{step.id} (plan {attempt + 1})"
        try:
            args = substitute(step.args, evidence)
        except ValueError as exc:
            yield Step(view.next_index, "action", tool=step.tool, args=step.args, error=str(exc),
                       observation=str(exc), step_id=step.id, meta={"substitution_error": True})
            return step.id, neutralise(str(exc)), None, False
        if step.tool in view.registry:
            args = view.registry.bind(step.tool, args)
        executed = yield CallTool(step.tool, args, f"{attempt + 1}:{step.id}")
        result = executed.result
        yield Step(view.next_index, executed.kind, tool=step.tool, args=args,
                   observation=result.observation,
                   error=None if result.error is None else result.error.message,
                   duration_s=result.duration_s, step_id=step.id,
                   meta={"tool_s": result.duration_s, "attempt": attempt + 1, **(executed.meta or {})})
        history.append((label, step.tool, result.observation))
        if result.error is not None:  # its text is the tool's (or the approver's): fenced like evidence
            failure = result.observation if executed.kind == "denied" else result.error.as_observation()
            return step.id, fence(failure, f"{step.tool}#{step.id}"), None, False
        evidence[step.id] = result.value
        answer = result.observation
    if not answer.strip():  # an empty result is no answer: replan, as after a failure
        last = plan[-1].id if plan else "plan"
        return last, f"{last} gave an empty result, and the last step's result is the answer", None, False
    return "", "", answer, True
