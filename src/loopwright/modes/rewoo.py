"""ReWOO: plan once, run the tools without the model, solve once (two model calls).

Workers run as a dependency graph: each step starts the moment the steps it references
have finished, so independent steps run concurrently. The mode only decides what may
start (StartTool) and waits for the next call finished (NextDone); the driver runs them
(threads in a sync run, tasks on the event loop in an async one).
"""

from __future__ import annotations

import json
from typing import Any

from loopwright.errors import ParseError
from loopwright.modes.machine import (
    CallDone,
    CallTool,
    CheckClock,
    Machine,
    NextDone,
    PolicyFailed,
    Record,
    RunView,
    Settings,
    StartTool,
    StepGen,
    Stop,
)
from loopwright.modes.toolsearch import ToolSelection, begin, chosen, load_called
from loopwright.parsing.steps import PlanStep, parse_plan, substitute
from loopwright.policy import ModelRequest, Purpose
from loopwright.prompting.examples import worked_examples
from loopwright.prompting.templates import describe_tools, fill, render_evidence
from loopwright.trace import Step
from loopwright.untrusted import neutralise


def check(spec: Settings) -> None:
    """ReWOO has no settings of its own."""


def machine(view: RunView, spec: Settings) -> StepGen:
    selection = begin(view, spec, searchable=False)  # the plan is made from the K tools the task needs most
    return _rewoo(view, spec.max_tokens, selection)


def _rewoo(view: RunView, max_tokens: int | None, selection: ToolSelection | None = None) -> StepGen:
    yield from chosen(view, selection)
    tools = tuple(view.schemas)
    plan_prompt = fill(view.prompts.rewoo_planner, "rewoo_planner", tools=describe_tools(tools),
                       task=view.task, examples=plan_examples(view))
    plan, error = yield from plan_call(view, plan_prompt, "plan", max_tokens, selection)
    if plan is None:
        if error is not None:
            yield Stop("error")
        return
    if len(plan) > view.limits.max_steps:
        yield Stop("max_steps")
        return

    results = yield from run_plan(view, plan)
    evidence_lines = []
    for step in plan:
        worker = results[step.id]
        yield worker.step.with_(index=view.next_index)
        evidence_lines.append((step.id, step.tool, worker.step.observation or ""))
    if any(results[s.id].step.meta.get("substitution_error") for s in plan):
        yield Stop("error")
        return
    if (yield CheckClock()):
        yield Stop("timeout")
        return

    spec = view.output
    task = view.task if spec is None else f"{view.task}\n{spec.instruction()}"
    solve_prompt = fill(view.prompts.rewoo_solver, "rewoo_solver", task=task, evidence=render_evidence(evidence_lines))
    schema = None if spec is None else spec.schema
    # A typed answer that does not fit gets one retry of the solve call, told why: then a
    # run costs 3 model calls instead of 2; a second misfit ends it with "error".
    for _attempt in range(1 if spec is None else 2):
        try:
            call = yield ModelRequest(solve_prompt, (), "solve", tools=tools, max_tokens=max_tokens,
                                      output_schema=schema)
        except PolicyFailed as failed:
            yield Step(view.next_index, "error", error=failed.message, prompt=solve_prompt)
            yield Stop(failed.reason)
            return
        answer = solver_answer(call.text)
        error = None if answer else "the solver's reply holds no answer"
        typed = None
        if spec is not None and error is None:
            try:
                typed = spec.parse(answer)
            except ValueError as exc:
                error = f"the final answer does not fit the output type: {exc}"
        yield Step(view.next_index, "solve", raw=call.text, observation=None, error=error,
                   duration_s=call.seconds, usage=call.usage, prompt=solve_prompt)
        yield Record(transcript=_transcript(view.task, plan, evidence_lines, answer))
        if error is None:
            yield Stop("final", answer, typed)
            return
        if spec is None:  # an empty answer is not an answer: the run ends with "error"
            break
        stop = call.stop
        if stop:
            yield Stop(stop)
            return
        solve_prompt = (f"{solve_prompt} {neutralise(call.text.strip())}\n{neutralise(error)}. "
                        "Reply with the JSON only.\nFinal Answer:")
    yield Stop("error")


def plan_examples(view: RunView) -> str:
    """The planner prompt's worked examples, from the run's tools (memoised on the registry)."""
    budget, from_tools = view.prompts.example_tokens, view.prompts.tool_examples
    return view.registry.memo(
        f"plan_examples:{budget}:{from_tools}",
        lambda registry: worked_examples(list(registry), "plan", budget=budget, from_tools=from_tools,
                                         runs=registry.examples),
    )


def plan_call(
    view: RunView, prompt: str, kind: str, max_tokens: int | None, selection: ToolSelection | None = None
) -> Machine[tuple[list[PlanStep] | None, str | None]]:
    """Ask for a plan (use with `yield from`). Returns (plan, None) on success,
    (None, message) when the reply is not a usable plan, and (None, None) after the run
    was stopped (the policy failed, or the budget or clock ran out). With tool search, the
    registered tools the plan names that were not loaded are loaded (the plan step's
    meta["tools_loaded"])."""
    purpose: Purpose = "plan" if kind == "plan" else "replan"
    try:
        call = yield ModelRequest(prompt, (), purpose, tools=tuple(view.schemas), max_tokens=max_tokens)
    except PolicyFailed as failed:
        yield Step(view.next_index, "error", error=failed.message, prompt=prompt)
        yield Stop(failed.reason)
        return None, None
    raw = call.text
    plan: list[PlanStep] | None
    try:
        plan, error = parse_plan(raw), None
    except ParseError as exc:
        plan, error = None, str(exc)
    meta: dict[str, Any] = {"plan": [[s.id, s.tool, s.args] for s in plan]} if plan else {}
    loaded: list[str] = []
    if selection is not None:
        for planned in plan or ():
            loaded += yield from load_called(selection, planned.tool)
    if loaded:
        meta["tools_loaded"] = loaded
    yield Step(view.next_index, kind, raw=raw, error=error, duration_s=call.seconds,
               usage=call.usage, prompt=prompt, meta=meta)
    stop = call.stop
    if stop:
        yield Stop(stop)
        return None, None
    return plan, error


class WorkerOutcome:
    """A worker's step record plus its raw value (the typed evidence)."""

    __slots__ = ("ok", "step", "value")

    def __init__(self, step: Step, value: Any, ok: bool) -> None:
        self.step = step
        self.value = value
        self.ok = ok


def run_plan(view: RunView, plan: list[PlanStep]) -> Machine[dict[str, WorkerOutcome]]:
    """Execute every plan step as soon as its references are done (use with `yield
    from`); never raises for tool behaviour. A step whose reference failed is not
    executed and says why."""
    outcomes: dict[str, WorkerOutcome] = {}
    waiting = list(plan)  # parse_plan guarantees references point backwards
    running: dict[str, CallTool] = {}
    while waiting or running:
        ready_now = [s for s in waiting if s.refs <= outcomes.keys()]
        if not ready_now and not running:
            raise ValueError(f"plan steps {[s.id for s in waiting]} reference steps that never run")
        for step in ready_now:
            waiting.remove(step)
            ready = _ready(view, step, outcomes)
            if isinstance(ready, WorkerOutcome):  # skipped, or its references did not fit
                outcomes[step.id] = ready
            else:
                running[step.id] = ready
                yield StartTool(ready)
        if not running:
            continue  # a step settled without a call may unblock others
        finished: CallDone = yield NextDone()
        call = running.pop(finished.key)
        executed = finished.executed
        result = executed.result
        outcomes[finished.key] = WorkerOutcome(
            Step(0, executed.kind, tool=call.name, args=call.args, observation=result.observation,
                 error=None if result.error is None else result.error.message,
                 duration_s=result.duration_s, step_id=finished.key,
                 meta={"tool_s": result.duration_s, **(executed.meta or {})}),
            result.value,
            result.error is None,
        )
    return outcomes


def _ready(view: RunView, step: PlanStep, outcomes: dict[str, WorkerOutcome]) -> CallTool | WorkerOutcome:
    """The call of a step whose references are done, or its outcome when it cannot run."""
    refs = sorted(step.refs)
    failed = [ref for ref in refs if not outcomes[ref].ok]
    if failed:
        note = f"not executed: depends on {', '.join('#' + f for f in failed)}, which failed"
        return WorkerOutcome(Step(0, "action", tool=step.tool, args=step.args, observation=note,
                                  error=note, step_id=step.id, meta={"skipped": True}), None, False)
    try:
        args = substitute(step.args, {ref: outcomes[ref].value for ref in refs})
    except ValueError as exc:
        return WorkerOutcome(Step(0, "action", tool=step.tool, args=step.args, observation=str(exc),
                                  error=str(exc), step_id=step.id, meta={"substitution_error": True}), None, False)
    if step.tool in view.registry:
        args = view.registry.bind(step.tool, args)
    return CallTool(step.tool, args, step.id)


def solver_answer(text: str) -> str:
    """The solver's answer: what follows 'Final Answer:' if present, else the text."""
    marker = "final answer:"
    lower = text.lower()
    at = lower.rfind(marker)
    return (text[at + len(marker):] if at >= 0 else text).strip()


def _transcript(task: str, plan: list[PlanStep], evidence: list[tuple[str, str, str]], answer: str) -> str:
    lines = [f"Question: {task}", "Plan:"]
    lines += [f"  {s.id} = {s.tool}({json.dumps(s.args, default=str)})" for s in plan]
    lines.append("Evidence:")
    lines += [f"  {sid} = {obs}" for sid, _tool, obs in evidence]
    lines.append(f"Final Answer: {answer}")
    return "\n".join(lines)
