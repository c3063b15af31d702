"""Agents, and agents as tools.

`lw.Agent(name, policy, registry, mode, instructions, <options of run>)` names what a run
starts from; `agent.as_tool()` makes it one tool of another agent's registry. Instructions
are put at the head of each of the mode's prompt templates, so they are in every prompt
the trace records (nothing is hidden from the model's record).

A run of the agent started inside another run's tool call (through `as_tool`, or by a tool
body calling `agent.run`) is that run's child. It finds its parent through the tool call in
progress (`loopwright.runtime.calls.bound_call`: both drivers bind each tool call) and takes
from it:
- what is left of the parent's token budget, cost budget and wall clock: the child stops
  within them, and its usage and cost are added to the parent's when it ends (a parent
  whose children spent a budget stops before its next model call);
- the parent's store: the child is journaled there under `<parent run id>:<call key>` (the
  call's idempotency key), so resuming the parent re-enters the call and the child resumes
  where it stopped: its recorded model calls and tool results are replayed, not paid for or
  run again (an agent tool declares `dedupes_on_call_key`: it is never "in doubt");
- the parent's approver (the request's meta names the agent), its tracer (the child's
  `invoke_agent` span sits under the parent's `execute_tool`);
- the parent's cancellation: Ctrl-C reaches the child on the same thread, and under the
  async driver the child is awaited on the parent's loop, so cancelling the parent cancels
  it (the child's journal is closed "interrupted", resumable like any run).
The child's trace is kept in the parent's `trace.children[child_run_id]`; the parent's step
names it in `meta["child_run_id"]`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Coroutine, Mapping, Sequence
from functools import partial
from typing import Any, Unpack

from loopwright import otel
from loopwright.durable.base import StoreBase
from loopwright.durable.resume import iter_resume
from loopwright.errors import StoreError
from loopwright.events import EventSink
from loopwright.policy import Policy
from loopwright.prompting.templates import DEFAULT_PROMPTS, PromptSet
from loopwright.runtime.adriver import AsyncRun
from loopwright.runtime.calls import bound_call
from loopwright.runtime.context import RunContext
from loopwright.runtime.driver import Run
from loopwright.runtime.front import start
from loopwright.runtime.spec import MODES, RunOptions, RunSpec
from loopwright.runtime.watch import AsyncEvents, Events
from loopwright.tools.registry import SideEffects, Tool, ToolError, ToolRegistry
from loopwright.tools.toolset import Tools, as_registry
from loopwright.trace import Trace


class Agent:
    """A named policy, registry, mode, instructions and run options: `run`, `arun`,
    `iter_events`, `aiter_events`, `start` (a Run to iterate for Steps), and `as_tool` to
    make it a tool of another agent.
    Read-only once made."""

    __slots__ = ("instructions", "mode", "name", "policy", "registry", "spec")

    name: str
    policy: Policy
    registry: ToolRegistry
    mode: str
    instructions: str | None
    spec: RunSpec  # the options every run of the agent starts from (task left empty)

    def __init__(self, name: str, policy: Policy, registry: Tools, mode: str = "react",
                 instructions: str | None = None, **options: Unpack[RunOptions]) -> None:
        """`options`: what every run of the agent starts from (a RunSpec's options; each
        run is named when it starts, so not run_id)."""
        if "run_id" in options:
            raise TypeError("an agent's runs are named when they start (agent.run(task, run_id=...)), not here")
        if not isinstance(name, str) or not name:
            raise TypeError(f"an agent's name must be a non-empty str, got {name!r}")
        if instructions is not None and not isinstance(instructions, str):
            raise TypeError(f"instructions must be a str or None, got {type(instructions).__name__}")
        registry = as_registry(registry)  # a list of tools is made a registry once, here
        options["prompts"] = instructed(options.get("prompts") or DEFAULT_PROMPTS, instructions)
        spec = RunSpec("", mode, **options)  # a bad mode or option fails here, not at the first run
        MODES[mode].check(spec)
        for field, value in (("name", name), ("policy", policy), ("registry", registry), ("mode", mode),
                             ("instructions", instructions), ("spec", spec)):
            object.__setattr__(self, field, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"an Agent is read-only; make another (cannot set {name!r})")

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, mode={self.mode!r}, tools={list(self.registry.names)})"

    # -- running --------------------------------------------------------------------

    def start(self, task: str, *, run_id: str | None = None, sinks: Sequence[EventSink] = ()) -> Run:
        """Start a run of the agent on `task` (a child of the run whose tool call is in
        progress here, if any: then `run_id` and `sinks` are its parent's); iterate it for
        its Steps or call `.run()`. `sinks`: where its events go, tagged with its name."""
        bound = bound_call()
        parent = bound[0] if bound is not None and isinstance(bound[0], RunContext) else None
        if parent is None:
            spec = self.spec.replace(task=task, run_id=run_id)
            run = start(spec, self.policy, self.registry, sinks=sinks, agent=self.name)
            run.context.agent = self.name
            otel_name(run, self.name)
            return run
        assert bound is not None
        return self._child(task, parent, bound[1])

    def run(self, task: str, *, run_id: str | None = None) -> Trace:
        """Run the agent on `task` to the end and return its trace."""
        run = self.start(task, run_id=run_id)
        return self._adopted(run, run.run())

    async def arun(self, task: str, *, run_id: str | None = None) -> Trace:
        """`run`, awaited on this event loop (see `lw.arun`)."""
        run = self.start(task, run_id=run_id)
        return self._adopted(run, await AsyncRun(run).run())

    def iter_events(self, task: str, *, run_id: str | None = None) -> Events:
        """Run the agent on `task` and watch it: its events as they happen, tagged with its
        name, and its child agents' events tagged with theirs (see `lw.iter_events`)."""
        return Events(partial(self._watched, task, run_id))

    def aiter_events(self, task: str, *, run_id: str | None = None) -> AsyncEvents:
        """`iter_events` on an event loop (see `lw.aiter_events`)."""
        return AsyncEvents(partial(self._watched, task, run_id))

    def _watched(self, task: str, run_id: str | None, sinks: Sequence[EventSink]) -> Run:
        return self.start(task, run_id=run_id, sinks=sinks)

    def as_tool(self, description: str | None = None, name: str | None = None,
                examples: Sequence[Mapping[str, Any]] | None = None) -> Tool:
        """The agent as a tool: it takes a `task` (and optional `context`) and returns the
        agent's final answer; a run that ends without one is a tool error the caller's
        model reads. Each call is a child run (see the module's docstring). `examples`:
        tool examples (`{"question", "args": {"task": ...}, "result"}`), checked like any
        tool's, so a small model sees a worked delegation."""
        return AgentTool(self, description, name, examples)

    # -- a child run ----------------------------------------------------------------

    def _child(self, task: str, parent: RunContext, key: str) -> Run:
        """Start (or resume, when the parent's store has it) the child run of tool call
        `key` of `parent`, held to what is left of the parent's budgets."""
        parent_id, _ = parent.call_run_id()
        base = child_run_id(parent, key)
        earlier = sum(1 for c in parent.trace.children if c == base or c.startswith(base + "."))
        child_id = child_run_id(parent, key, earlier + 1)
        own = self.spec.store
        store = _store(parent) or (own if isinstance(own, StoreBase) else None)
        limits = self._limits_left(parent)
        spans = otel_spans(parent)
        attached = None if spans is None else otel.attach(spans.open_tool(key, _tool_name(parent, key)))
        try:
            if store is not None and _has_run(store, child_id):
                run = iter_resume(
                    child_id, self.policy, self.registry, store=store, approver=limits.pop("approver"),
                    prompts=self.spec.prompts, memory=self.spec.memory, context_tokens=self.spec.context_tokens,
                    output_type=self.spec.output_type, **limits,
                )
            else:
                meta = {**(self.spec.journal_meta or {}), "agent": self.name, "parent_run_id": parent_id}
                spec = self.spec.replace(task=task, run_id=child_id, store=store, journal_meta=meta, **limits)
                run = start(spec, self.policy, self.registry)
        finally:
            if attached is not None:
                otel.detach(attached)
        ctx = run.context
        ctx.agent = self.name
        ctx.parent = (parent, key)
        if parent.events is not None:  # the child's events go to the parent's sinks, tagged with its name
            ctx.events = parent.events.child(child_id, self.name)
            ctx.observers.append(ctx.events)
            ctx.events.started(ctx.task, ctx.trace.mode)
        ctx.trace.meta["agent"] = self.name
        ctx.trace.meta["parent_run_id"] = parent_id
        otel_name(run, self.name)
        return run

    def _limits_left(self, parent: RunContext) -> dict[str, Any]:
        """The child's limits: its own, capped by what is left of the parent's; the
        parent's approver and tracer."""
        spec, out = self.spec, dict[str, Any]()
        budget = parent.limits.token_budget
        if budget is not None:
            left = max(1, budget - parent.trace.usage.total_tokens)
            out["token_budget"] = left if spec.token_budget is None else min(spec.token_budget, left)
        remaining = parent.deadline.remaining()
        if remaining is not None:  # a little less: the child ends and reports before the parent's call times out
            remaining = max(remaining - min(0.1, remaining / 10), 1e-3)
            out["timeout_s"] = remaining if spec.timeout_s is None else min(spec.timeout_s, remaining)
        cost = parent.cost
        money = None if cost is None else cost.left()
        if cost is not None and money is not None:
            money = max(money, 1e-12)
            out["cost_budget_usd"] = money if spec.cost_budget_usd is None else min(spec.cost_budget_usd, money)
            out["prices"] = spec.prices if spec.prices is not None else cost.price
        elif spec.prices is not None:
            out["prices"] = spec.prices
        out["approver"] = parent.gate.approver  # none is a denial: a child's own cannot approve past it
        spans = otel_spans(parent)
        if spans is not None:
            out["tracer"] = spans.tracer
        return out

    def _adopted(self, run: Run, trace: Trace) -> Trace:
        """A child's trace, taken into its parent's (usage, cost, children)."""
        parent = run.context.parent
        if parent is not None and trace.run_id is not None:
            ctx, key = parent
            if key in ctx.in_flight:  # not when the parent gave up on the call (its timeout)
                ctx.adopt(key, trace.run_id, trace)
        return trace


class AgentTool(Tool):
    """An Agent as a Tool (`Agent.as_tool`): a `task` and an optional `context` in, the
    agent's final answer out. Its calls are resumable: a resumed parent re-enters the
    child run, so the gate never holds one as in doubt."""

    agent: Agent

    def __init__(self, agent: Agent, description: str | None, name: str | None,
                 examples: Sequence[Mapping[str, Any]] | None = None) -> None:
        safe = all(t.idempotent and not t.requires_approval for t in agent.registry)
        side_effects: SideEffects = "read" if safe else "write"  # what its run may do

        def call(task: str, context: str = "") -> Any:
            text = task if not context else f"{task}\n\nContext: {context}"
            run = agent.start(text)
            parent = run.context.parent
            if parent is not None and parent[0].asynchronous:
                return _aanswer(agent, run)  # awaited on the parent's loop: its cancel reaches the child
            return _answer(agent, agent._adopted(run, run.run()))

        call.__doc__ = "Give the agent a task.\n\nArgs:\n    task: what to do, in plain words\n" \
                       "    context: anything the agent should know (optional)"
        summary = description or _summary(agent)
        super().__init__(call, name=name or agent.name, description=summary, side_effects=side_effects,
                         dedupes_on_call_key=True, examples=examples)
        self.agent = agent

    def recorded_child(self, ctx: RunContext, key: str) -> str | None:
        """A resumed parent replays this call's recorded result: keep the child's trace
        (from the store) in the parent's, as when it ran."""
        store = _store(ctx)
        child_id = child_run_id(ctx, key)
        if store is None or not _has_run(store, child_id):
            return None
        ctx.adopt(key, child_id, store.trace(child_id))
        ctx.gate.children.pop(key, None)
        return child_id


def _answer(agent: Agent, trace: Trace) -> Any:
    if trace.answered:
        return trace.final_answer
    return ToolError(agent.name, f"agent {agent.name!r} stopped ({trace.stopped_reason}) without an answer"
                     + (f": {trace.steps[-1].error}" if trace.steps and trace.steps[-1].error else ""))


def _aanswer(agent: Agent, run: Run) -> Coroutine[Any, Any, Any]:
    async def drive() -> Any:
        return _answer(agent, agent._adopted(run, await AsyncRun(run).run()))

    return drive()


def _summary(agent: Agent) -> str:
    if agent.instructions:
        first = agent.instructions.strip().splitlines()[0]
        return f"Ask the {agent.name} agent ({first})"
    return f"Ask the {agent.name} agent; it can use: {', '.join(agent.registry.names)}"


def instructed(prompts: PromptSet, instructions: str | None) -> PromptSet:
    """The prompt set with `instructions` at the head of each template that states the
    task (braces in them are taken literally)."""
    if not instructions:
        return prompts
    head = instructions.strip().replace("{", "{{").replace("}", "}}") + "\n\n"
    changes: dict[str, Any] = {f.name: head + value for f in dataclasses.fields(prompts)
               if isinstance(value := getattr(prompts, f.name), str) and "{task}" in value}
    return dataclasses.replace(prompts, **changes)


def child_run_id(parent: RunContext, key: str, nth: int = 1) -> str:
    """The run id of the child started by tool call `key`: the call's idempotency key,
    `<parent run id>:<key>` (the same on every resume of the parent); a tool body that runs
    agents more than once numbers the later ones `<...>:<key>.2`, `.3`, in order."""
    base = f"{parent.call_run_id()[0]}:{key}"
    return base if nth == 1 else f"{base}.{nth}"


def _store(ctx: RunContext) -> StoreBase | None:
    store = getattr(ctx.journal, "store", None)
    return store if isinstance(store, StoreBase) else None


def _has_run(store: StoreBase, run_id: str) -> bool:
    try:
        store.load_run(run_id)
    except StoreError:
        return False
    return True


def _tool_name(parent: RunContext, key: str) -> str:
    flight = parent.in_flight.get(key)
    return flight[0] or "agent" if flight is not None else "agent"


def otel_spans(ctx: RunContext) -> otel.RunSpans | None:
    for observer in ctx.observers:
        if isinstance(observer, otel.RunSpans):
            return observer
    return None


def otel_name(run: Run, name: str) -> None:
    spans = otel_spans(run.context)
    if spans is not None:
        spans.span.set_attribute("gen_ai.agent.name", name)


__all__ = ["Agent", "AgentTool", "child_run_id", "instructed"]
