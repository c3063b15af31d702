"""Tree-of-Thoughts: search a tree of candidate steps (Yao et al., 2023).

A node is a path of steps from the question. Expanding a node is one `propose` call
(up to `branching` candidate next steps, one per line: a thought, a tool call written
`tool[argument]`, or `Final Answer: ...`); each candidate becomes a child, its tool call
(if any) runs through the run's execution choke point, and one `value` call scores it
(sure / likely / impossible, or 1-10; an unreadable reply scores lowest). The search
keeps the best: BFS keeps the `breadth` best children of each level down to `depth`;
DFS goes best child first and backtracks from any node scored below `threshold`.
A final answer scored at or above `threshold` is a solution: BFS takes the best of its
level, DFS the first it reaches.

Branches are speculative: most are thrown away. A tool that is not idempotent or that
needs approval is therefore refused inside the search (a `denied` step; the branch is
dead) unless `allow_side_effects=True`.

Cost: `llm_calls == propose steps + value steps <= max_steps`; nodes <= `max_nodes`.
Prompts are ordered so that calls made one after another share their longest prefix
(the node's state first, the instruction last): a KV-cached model evaluates a node's
state once for its proposal and its children's values. The tree is in the steps' meta
(`node`, `parent`, `depth`, `score`) and `trace.meta["tot"]` (winner and its path).
"""

from __future__ import annotations

import re
from typing import Any, Final

from loopwright.errors import ParseError
from loopwright.modes.machine import (
    CallTool,
    Machine,
    ModelCall,
    PolicyFailed,
    Record,
    RunView,
    Settings,
    StepGen,
    Stop,
    recorded,
)
from loopwright.modes.toolsearch import ToolSelection, begin, chosen, load_called
from loopwright.parsing.steps import Action, FinalAnswer, parse_react_step
from loopwright.policy import ModelRequest, Purpose
from loopwright.prompting.templates import describe_tools
from loopwright.tools.registry import ToolRegistry
from loopwright.trace import Step
from loopwright.untrusted import fence, neutralise

LABELS: Final = {"sure": 1.0, "likely": 0.5, "impossible": 0.0}
_LABEL: Final = re.compile(r"\b(sure|likely|impossible)\b", re.IGNORECASE)
_NUMBER: Final = re.compile(r"\s*(10|[0-9])(?:\s*/\s*10)?(?!\d|\.\d|\s*[-+*/=x×÷(])")
_BULLET: Final = re.compile(r"^\s*(?:[-*•]\s*|\(?\d{1,2}[.):]\s*|step\s*\d+\s*[.:]\s*)", re.IGNORECASE)
_CALL: Final = re.compile(r"^([A-Za-z0-9_.-]{1,64})\[(.*)\]$", re.DOTALL)


def parse_value(text: str) -> tuple[float, str]:
    """A value reply as (score in [0, 1], label): the first of sure (1.0) / likely (0.5)
    / impossible (0.0) anywhere in it, else a number 0-10 (n / 10) that starts it and
    is not the start of arithmetic (`10 + 12 = 22` is the model going on with the
    problem, not a score; so is a number later on). Raises ParseError otherwise."""
    m = _LABEL.search(text)
    if m is not None:
        label = m.group(1).lower()
        return LABELS[label], label
    n = _NUMBER.match(text)
    if n is None:
        raise ParseError(f"no value in the reply {text[:80]!r}: expected sure, likely, impossible or 1-10")
    return int(n.group(1)) / 10, n.group(1)


def parse_candidates(text: str, k: int) -> list[str]:
    """The proposal reply's candidate steps: one per non-empty line, numbering and
    bullets removed, duplicates dropped, at most k."""
    out: list[str] = []
    seen: set[str] = set()
    for line in text.splitlines():
        step = _BULLET.sub("", line, count=1).strip()
        if step and step.lower() not in seen:
            seen.add(step.lower())
            out.append(step)
        if len(out) >= k:
            break
    return out


class _Node:
    """One state of the search. (A slots class, not a frozen record: its value is set
    after it is made, and it never leaves the search.)"""

    __slots__ = ("action", "answer", "depth", "id", "observation", "parent", "score", "state", "step")

    def __init__(self, node_id: str, parent: _Node | None, step: str, state: str) -> None:
        self.id = node_id
        self.parent = parent
        self.depth: int = 0 if parent is None else parent.depth + 1
        self.step = step
        self.state = state  # the prompt prefix: header, question, the path's steps
        self.action: Action | None = None
        self.answer: str | None = None
        self.observation: str | None = None
        self.score: float | None = None

    def path(self) -> list[_Node]:
        nodes: list[_Node] = []
        node: _Node | None = self
        while node is not None and node.parent is not None:
            nodes.append(node)
            node = node.parent
        return nodes[::-1]


class _Search:
    """The search's settings and counters, and the calls that grow the tree."""

    def __init__(self, view: RunView, search: str, branching: int, breadth: int, depth: int,
                 max_nodes: int, threshold: float, allow_side_effects: bool, max_tokens: int | None,
                 selection: ToolSelection | None = None) -> None:
        self.view = view
        self.selection = selection  # tool search: a step naming a registered tool not loaded loads it
        self.search = search
        self.branching = branching
        self.breadth = breadth
        self.depth = depth
        self.max_nodes = max_nodes
        self.threshold = threshold
        self.allow_side_effects = allow_side_effects
        self.max_tokens = max_tokens
        self.nodes = 0
        self.expanded = 0
        self.budget: str | None = None  # "max_steps" or "max_nodes" once one ran out
        self.summary: dict[str, Any] = {"search": search, "winner": None, "path": []}  # trace.meta["tot"]

    def counted(self) -> Record:
        """The search's summary with its counts, for trace.meta["tot"] when the search ends."""
        self.summary.update(nodes=self.nodes, expanded=self.expanded)
        return Record(meta={"tot": self.summary})

    def spent(self) -> bool:
        if self.view.trace.llm_calls >= self.view.limits.max_steps:
            self.budget = "max_steps"
        elif self.nodes >= self.max_nodes:
            self.budget = "max_nodes"
        return self.budget is not None

    def _call(self, prompt: str, purpose: Purpose, stop: tuple[str, ...], max_tokens: int,
              meta: dict[str, Any]) -> Machine[ModelCall | None]:
        """One model call; None when the run stopped on it (the error step recorded)."""
        view = self.view
        try:
            call: ModelCall = yield ModelRequest(prompt, stop, purpose, max_tokens=max_tokens)
        except PolicyFailed as failed:
            yield Step(view.next_index, "error", error=failed.message, prompt=prompt,
                       duration_s=failed.seconds, meta=meta)
            yield Stop(failed.reason)
            return None
        return call

    def expand(self, node: _Node) -> Machine[list[_Node] | None]:
        """Propose children of `node`, run their tool calls and score them. Returns the
        children made (fewer when a budget ran out), or None when the run stopped."""
        view = self.view
        prompts = view.prompts
        if self.spent():
            return []
        prompt = node.state + prompts.tot_propose.format(k=self.branching)
        meta: dict[str, Any] = {"node": node.id, "depth": node.depth}
        max_tokens = self.max_tokens or 48 * self.branching
        call = yield from self._call(prompt, "propose", prompts.stop_propose, max_tokens, meta)
        if call is None:
            return None
        raw, usage, seconds = call.text, call.usage, call.seconds
        candidates = parse_candidates(raw, self.branching)
        self.expanded += 1
        meta["candidates"] = candidates
        yield Step(view.next_index, "propose", raw=raw, prompt=prompt, usage=usage,
                   duration_s=seconds, meta=meta)
        stop = call.stop
        if stop:
            yield Stop(stop)
            return None
        children: list[_Node] = []
        for text in candidates:
            if self.spent():
                break
            child = yield from self._child(node, text)
            if child is None:
                return None
            children.append(child)
        return children

    def _child(self, parent: _Node, text: str) -> Machine[_Node | None]:
        view = self.view
        prompts = view.prompts
        self.nodes += 1
        n = parent.depth + 1
        node_id = f"n{self.nodes}"
        where = {"node": node_id, "parent": parent.id, "depth": n}
        state = parent.state + prompts.tot_step.format(n=n, step=neutralise(text))
        child = _Node(node_id, parent, text, state)
        selection = self.selection
        parsed = _classify(text, view.registry if selection is None else selection.full)
        if isinstance(parsed, FinalAnswer):
            child.answer = parsed.answer
        elif parsed is not None:
            child.action = parsed
            name = parsed.name
            found = yield from load_called(selection, name)
            loaded = {"tools_loaded": found} if found else {}
            args = view.registry.bind(name, parsed.args)
            tool = view.registry.get(name)
            if tool is not None and (not tool.idempotent or tool.requires_approval) and not self.allow_side_effects:
                refusal = prompts.tot_refused.format(tool=name)
                child.score = 0.0  # a dead branch: not scored, never expanded
                yield Step(view.next_index, "denied", thought=text, tool=name, args=args,
                           observation=refusal, error=refusal, meta={**where, **loaded, "score": 0.0})
                return child
            executed = yield CallTool(name, args, f"tot:{node_id}")
            result = executed.result
            child.observation = result.observation
            yield Step(view.next_index, executed.kind, thought=text, tool=name, args=args,
                       observation=result.observation,
                       error=None if result.error is None else result.error.message,
                       duration_s=result.duration_s,
                       meta={**where, **loaded, "tool_s": result.duration_s, **(executed.meta or {})})
            child.state += prompts.tot_observation.format(
                n=n, observation=fence(result.observation, f"{name}#{node_id}"))
        prompt = child.state + prompts.tot_value
        call = yield from self._call(prompt, "value", prompts.stop_value, min(self.max_tokens or 12, 12), where)
        if call is None:
            return None
        raw, usage, seconds = call.text, call.usage, call.seconds
        meta: dict[str, Any] = {**where, "step": text}
        try:
            score, label = parse_value(raw)
        except ParseError as exc:
            score, label = 0.0, "unreadable"
            meta["value_error"] = str(exc)
        child.score = score
        meta.update(score=score, label=label)
        if child.answer is not None:
            meta["answer"] = child.answer
        yield Step(view.next_index, "value", raw=raw, thought=text, prompt=prompt, usage=usage,
                   duration_s=seconds, meta=meta)
        stop = call.stop
        if stop:
            yield Stop(stop)
            return None
        return child

    def alive(self, node: _Node) -> bool:
        """Whether the node may be expanded: not an answer, not dead, scored high enough."""
        return (node.answer is None and node.score is not None and node.score >= self.threshold
                and not (node.action is not None and node.observation is None))

    def solution(self, node: _Node) -> bool:
        return node.answer is not None and node.score is not None and node.score >= self.threshold


def check(spec: Settings) -> None:
    """The search has nothing to check beyond its settings (ToTSettings checks those)."""


def machine(view: RunView, spec: Settings) -> StepGen:
    """The search for a run. max_steps: model calls of the whole search (proposals and
    values). branching: candidates per expanded node. breadth: nodes BFS keeps per level.
    depth: the longest path. max_nodes: nodes the search may make. threshold: the least
    score a node needs to be expanded, or an answer to be accepted (sure 1.0, likely 0.5,
    impossible 0.0, n/10 for a number). allow_side_effects: let branches call tools that
    are not idempotent or need approval (see the module docstring)."""
    selection = begin(view, spec, searchable=False)  # branches use the K tools the task needs most
    tree = _Search(view, spec.setting("search"), spec.setting("branching"), spec.setting("breadth"),
                   spec.setting("depth"), spec.setting("max_nodes"), float(spec.setting("threshold")),
                   spec.setting("allow_side_effects"), spec.max_tokens, selection)
    return _tot(tree)


def _tot(tree: _Search) -> StepGen:
    view = tree.view
    yield from chosen(view, tree.selection)  # the root state lists the K tools the task needs most
    root = _Node("n0", None, "", view.prompts.tot_state.format(tools=describe_tools(view.schemas), task=view.task))
    summary = tree.summary
    yield Record(meta={"tot": summary})
    found = yield from recorded(_bfs(tree, root) if tree.search == "bfs" else _dfs(tree, root), tree.counted)
    if view.trace.stopped_reason is not None:
        return  # the run stopped inside the search (policy failed, budget, clock)
    if found is None:
        yield Record(transcript=f"Question: {view.task}\n(no solution found)")
        yield Stop(tree.budget or "exhausted")
        return
    path = found.path()
    summary.update(winner=found.id, path=[n.id for n in path], score=found.score)
    lines = [f"Question: {view.task}"]
    for node in path:
        lines.append(f"Step {node.depth}: {node.step}")
        if node.observation is not None:
            lines.append(f"Observation {node.depth}: {node.observation}")
    yield Record(transcript="\n".join(lines), meta={"tot": summary})
    yield Step(view.next_index, "final", thought=found.step,
               meta={"node": found.id, "path": [n.id for n in path], "score": found.score})
    yield Stop("final", found.answer)


def _bfs(tree: _Search, root: _Node) -> Machine[_Node | None]:
    frontier = [root]
    for _level in range(tree.depth):
        children: list[_Node] = []
        for node in frontier:
            made = yield from tree.expand(node)
            if made is None:
                return None
            children += made
        solutions = [c for c in children if tree.solution(c)]
        if solutions:
            return max(solutions, key=lambda c: c.score or 0.0)  # the first of the best
        ranked = sorted((c for c in children if tree.alive(c)), key=lambda c: -(c.score or 0.0))
        frontier = ranked[: tree.breadth]
        tree.summary.setdefault("beams", []).append([c.id for c in frontier])
        yield Record(meta={"tot": tree.summary})
        if not frontier or tree.budget is not None:
            return None
    return None


def _dfs(tree: _Search, root: _Node) -> Machine[_Node | None]:
    made = yield from tree.expand(root)
    if made is None:
        return None
    for child in sorted(made, key=lambda c: -(c.score or 0.0)):
        if tree.solution(child):
            return child
        if tree.alive(child) and child.depth < tree.depth:
            found = yield from _dfs(tree, child)
            if found is not None or tree.view.trace.stopped_reason is not None:
                return found
        if tree.budget is not None:
            return None
    return None  # every child below threshold or explored: backtrack


def _classify(text: str, registry: ToolRegistry) -> Action | FinalAnswer | None:
    """A candidate step as a final answer, a call of a registered tool, or (None) a thought."""
    if text.lower().startswith(("final answer", "finish[")):
        try:
            parsed = parse_react_step(text if text.lower().startswith("final") else f"Action 1: {text}")
        except ParseError:
            return None
        return parsed if isinstance(parsed, FinalAnswer) else None
    m = _CALL.match(text)
    if m is None or m.group(1) not in registry:
        return None
    try:
        parsed = parse_react_step(f"Action 1: {text}", dialect="brackets")
    except ParseError:
        return None
    return parsed if isinstance(parsed, Action) else None
