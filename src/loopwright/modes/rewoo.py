"""ReWOO: plan once, run the tools without the model, solve once (two model calls).

Workers run as a dependency graph: each step starts the moment the steps it references
have finished, so independent steps run concurrently (async tools on one event loop,
sync tools on a thread pool sized to the plan). No polling: each step awaits the
futures of its references.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from loopwright.errors import ParseError
from loopwright.guards import Limits
from loopwright.modes._core import PolicyFailed, Run, RunContext, StepGen, open_context
from loopwright.policy import ModelRequest, Policy, Purpose
from loopwright.prompts import describe_tools, fill, render_evidence, worked_examples
from loopwright.trace import Step
from loopwright.untrusted import neutralise
from loopwright.wire.parsing import PlanStep, parse_plan, substitute
from loopwright.wire.tools import ToolRegistry

T = TypeVar("T")


def iter_rewoo(
    task: str,
    policy: Policy,
    registry: ToolRegistry,
    *,
    max_steps: int = 10,
    token_budget: int | None = None,
    timeout_s: float | None = None,
    max_replans: int | None = None,
    on_parse_error: str | None = None,
    on_repeat: str | None = None,
    max_nudges: int | None = None,
    dialect: str | None = None,
    **options: Any,
) -> Run:
    """Start a ReWOO run; iterate the result to get each Step as it happens.

    max_replans, on_parse_error, on_repeat, max_nudges and dialect are ReAct / plan-execute limits,
    accepted and ignored here so one set of limits works in every mode.
    """
    limits = Limits(max_steps=max_steps, token_budget=token_budget, timeout_s=timeout_s)
    config = {"max_steps": max_steps, "token_budget": token_budget, "timeout_s": timeout_s,
              "max_tokens": options.get("max_tokens")}
    ctx = open_context(task, "rewoo", policy, registry, limits, config, options)
    return Run(ctx, _rewoo(ctx, options.get("max_tokens")))


def run_rewoo(task: str, policy: Policy, registry: ToolRegistry, **limits: Any) -> Any:
    """Run ReWOO to the end and return its Trace."""
    return iter_rewoo(task, policy, registry, **limits).run()


def _rewoo(ctx: RunContext, max_tokens: int | None) -> StepGen:
    tools = tuple(ctx.schemas)
    plan_prompt = fill(ctx.prompts.rewoo_planner, "rewoo_planner", tools=describe_tools(tools),
                       task=ctx.task, examples=plan_examples(ctx))
    plan, error = yield from plan_call(ctx, plan_prompt, "plan", max_tokens)
    if plan is None:
        if error is not None:
            ctx.stop("error")
        return
    if len(plan) > ctx.limits.max_steps:
        ctx.stop("max_steps")
        return

    results = run_plan(ctx, plan)
    evidence_lines = []
    for step in plan:
        worker = results[step.id]
        yield ctx.record(worker.step.with_(index=ctx.next_index))
        evidence_lines.append((step.id, step.tool, worker.step.observation or ""))
    if any(results[s.id].step.meta.get("substitution_error") for s in plan):
        ctx.stop("error")
        return
    if ctx.deadline.expired():
        ctx.stop("timeout")
        return

    spec = ctx.output
    task = ctx.task if spec is None else f"{ctx.task}\n{spec.instruction()}"
    solve_prompt = fill(ctx.prompts.rewoo_solver, "rewoo_solver", task=task, evidence=render_evidence(evidence_lines))
    schema = None if spec is None else spec.schema
    # A typed answer that does not fit gets one retry of the solve call, told why: then a
    # run costs 3 model calls instead of 2; a second misfit ends it with "error".
    for _attempt in range(1 if spec is None else 2):
        t0 = time.perf_counter()
        try:
            call = ctx.call_model(ModelRequest(solve_prompt, (), "solve", tools, (), max_tokens, output_schema=schema))
        except PolicyFailed as failed:
            yield ctx.record(Step(ctx.next_index, "error", error=failed.message, prompt=solve_prompt))
            ctx.stop(failed.reason)
            return
        answer = solver_answer(call.text)
        error = None if answer else "the solver's reply holds no answer"
        if spec is not None and error is None:
            try:
                ctx.trace.output = spec.parse(answer)
            except ValueError as exc:
                error = f"the final answer does not fit the output type: {exc}"
        yield ctx.record(
            Step(ctx.next_index, "solve", raw=call.text, observation=None, error=error,
                 duration_s=time.perf_counter() - t0, usage=call.usage, prompt=solve_prompt)
        )
        ctx.trace.transcript = _transcript(ctx.task, plan, evidence_lines, answer)
        if error is None:
            ctx.stop("final", answer)
            return
        if spec is None:  # an empty answer is not an answer: the run ends with "error"
            break
        stop = ctx.guard_after_call()
        if stop:
            ctx.stop(stop)
            return
        solve_prompt = (f"{solve_prompt} {neutralise(call.text.strip())}\n{neutralise(error)}. "
                        "Reply with the JSON only.\nFinal Answer:")
    ctx.stop("error")


def plan_examples(ctx: RunContext) -> str:
    """The planner prompt's worked examples, from the run's tools (memoised on the registry)."""
    budget, from_tools = ctx.prompts.example_tokens, ctx.prompts.tool_examples
    return ctx.registry.memo(
        f"plan_examples:{budget}:{from_tools}",
        lambda registry: worked_examples(list(registry), "plan", budget=budget, from_tools=from_tools,
                                         runs=registry.examples),
    )


def plan_call(ctx: RunContext, prompt: str, kind: str, max_tokens: int | None) -> Any:
    """Ask for a plan (use with `yield from`). Returns (plan, None) on success,
    (None, message) when the reply is not a usable plan, and (None, None) after the run
    was stopped (the policy failed, or the budget or clock ran out)."""
    t0 = time.perf_counter()
    purpose: Purpose = "plan" if kind == "plan" else "replan"
    try:
        call = ctx.call_model(ModelRequest(prompt, (), purpose, tuple(ctx.schemas), (), max_tokens))
    except PolicyFailed as failed:
        yield ctx.record(Step(ctx.next_index, "error", error=failed.message, prompt=prompt))
        ctx.stop(failed.reason)
        return None, None
    raw = call.text
    plan: list[PlanStep] | None
    try:
        plan, error = parse_plan(raw), None
    except ParseError as exc:
        plan, error = None, str(exc)
    yield ctx.record(
        Step(ctx.next_index, kind, raw=raw, error=error, duration_s=time.perf_counter() - t0,
             usage=call.usage, prompt=prompt,
             meta={"plan": [[s.id, s.tool, s.args] for s in plan]} if plan else {})
    )
    stop = ctx.guard_after_call()
    if stop:
        ctx.stop(stop)
        return None, None
    return plan, error


class WorkerOutcome:
    """A worker's step record plus its raw value (the typed evidence)."""

    __slots__ = ("ok", "step", "value")

    def __init__(self, step: Step, value: Any, ok: bool) -> None:
        self.step = step
        self.value = value
        self.ok = ok


def run_plan(ctx: RunContext, plan: list[PlanStep]) -> dict[str, WorkerOutcome]:
    """Execute every plan step as soon as its references are done; never raises for tool
    behaviour. A step whose reference failed is not executed and says why."""
    return _run_coroutine(_schedule(ctx, plan))


async def _schedule(ctx: RunContext, plan: list[PlanStep]) -> dict[str, WorkerOutcome]:
    loop = asyncio.get_running_loop()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(32, len(plan))),
                                                 thread_name_prefix="loopwright-worker")
    loop.set_default_executor(pool)
    futures: dict[str, asyncio.Future[WorkerOutcome]] = {}

    async def work(step: PlanStep) -> WorkerOutcome:
        deps = [await futures[ref] for ref in sorted(step.refs)]
        failed = [ref for ref, dep in zip(sorted(step.refs), deps, strict=True) if not dep.ok]
        start = time.perf_counter()
        if failed:
            note = f"not executed: depends on {', '.join('#' + f for f in failed)}, which failed"
            return WorkerOutcome(
                Step(0, "action", tool=step.tool, args=step.args, observation=note,
                     error=note, step_id=step.id, meta={"skipped": True}),
                None,
                False,
            )
        evidence = {ref: dep.value for ref, dep in zip(sorted(step.refs), deps, strict=True)}
        try:
            args = substitute(step.args, evidence)
        except ValueError as exc:
            return WorkerOutcome(
                Step(0, "action", tool=step.tool, args=step.args, observation=str(exc),
                     error=str(exc), step_id=step.id, meta={"substitution_error": True}),
                None,
                False,
            )
        if step.tool in ctx.registry:
            args = ctx.registry.bind(step.tool, args)
        executed = await ctx.aexecute(step.tool, args, step.id)
        result = executed.result
        meta = {"tool_s": result.duration_s, **(executed.meta or {})}
        return WorkerOutcome(
            Step(0, executed.kind, tool=step.tool, args=args, observation=result.observation,
                 error=None if result.error is None else result.error.message,
                 duration_s=time.perf_counter() - start, step_id=step.id, meta=meta),
            result.value,
            result.error is None,
        )

    try:
        for step in plan:  # parse_plan guarantees references point backwards
            futures[step.id] = asyncio.ensure_future(work(step))
        await asyncio.gather(*futures.values())
        return {sid: fut.result() for sid, fut in futures.items()}
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _run_coroutine(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, also from a thread that already runs an event loop (Jupyter)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: list[Any] = []

    def target() -> None:
        try:
            box.append(asyncio.run(coro))
        except BaseException as exc:
            box.append(exc)

    thread = threading.Thread(target=target, name="loopwright-rewoo")
    thread.start()
    thread.join()
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]  # type: ignore[no-any-return]


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
