"""The viewer's nested pictures: the Tree-of-Thoughts tree as
nested lists (node, score, which path won), Reflexion's attempts with their critiques, and
a child agent's run nested under the step that called it (`trace.children`).

The first two are rebuilt from the steps' meta, not from `trace.meta`, so a run that was
killed mid-search still draws what it recorded. Every string is escaped: it is model output.
"""

from __future__ import annotations

import html
from typing import Any

from loopwright.trace import Step, Trace


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _clip(text: str, limit: int = 140) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _TreeNode:
    __slots__ = ("children", "id", "label", "score", "step", "text")

    def __init__(self, node_id: str, text: str, step: Step | None) -> None:
        self.id = node_id
        self.text = text
        self.step = step
        self.score: Any = None
        self.label = ""
        self.children: list[_TreeNode] = []


def tot_section(trace: Trace) -> str:
    """A card with the search tree, or "" when the trace has no ToT nodes."""
    nodes: dict[str, _TreeNode] = {"n0": _TreeNode("n0", "Question", None)}
    parents: dict[str, str] = {}
    expanded: set[str] = set()
    winner_path: list[str] = []
    for step in trace.steps:
        meta = step.meta
        node_id = meta.get("node")
        if not isinstance(node_id, str):
            continue
        if step.kind == "propose":
            expanded.add(node_id)
        elif step.kind in ("value", "denied") and isinstance(meta.get("parent"), str):
            node = nodes.setdefault(node_id, _TreeNode(node_id, step.thought, step))
            node.text, node.step = step.thought, step
            node.score = meta.get("score")
            node.label = str(meta.get("label") or ("refused" if step.kind == "denied" else ""))
            parents[node_id] = meta["parent"]
        elif step.kind == "final" and isinstance(meta.get("path"), list):
            winner_path = [str(n) for n in meta["path"]]
    if len(nodes) == 1:
        return ""
    for node_id, parent in parents.items():
        nodes.setdefault(parent, _TreeNode(parent, "?", None)).children.append(nodes[node_id])
    won = set(winner_path)
    search = (trace.meta.get("tot") or {}).get("search", "")

    def item(node: _TreeNode) -> str:
        classes = ["node"]
        if node.id in won:
            classes.append("won")
        if node.id in expanded:
            classes.append("expanded")
        score = "" if node.score is None else f'<span class="score">{_esc(node.label)} {_esc(node.score)}</span>'
        link = f'<a href="#step-{node.step.index}">#{node.step.index}</a> ' if node.step is not None else ""
        head = (f'<span class="{" ".join(classes)}" data-node="{_esc(node.id)}">{link}'
                f'<code>{_esc(node.id)}</code> {_esc(_clip(node.text))} {score}</span>')
        kids = "".join(item(c) for c in node.children)
        return f"<li>{head}{f'<ul>{kids}</ul>' if kids else ''}</li>"

    return (
        f'<section class="card" id="tot-tree"><h2>Search tree · {_esc(search)} · {len(nodes) - 1} nodes</h2>'
        '<div class="sub">score after each node; bold: the path that won; underlined: expanded</div>'
        f'<ul class="tree">{item(nodes["n0"])}</ul></section>'
    )


def attempts_section(trace: Trace) -> str:
    """A card listing Reflexion's attempts and the critique after each, or ""."""
    attempts = trace.meta.get("attempts")
    if not isinstance(attempts, list) or not attempts:
        return ""
    critiques = [s for s in trace.steps if s.kind == "reflection" and "attempt" in s.meta]
    rows = []
    for record in attempts:
        if not isinstance(record, dict):
            continue
        n = record.get("attempt")
        first, last = record.get("first_step"), record.get("last_step")
        accepted = record.get("accepted")
        verdict = "" if not isinstance(accepted, bool) else ("accepted" if accepted else "rejected")
        answer = record.get("answer")
        feedback = record.get("feedback")
        after = next((c for c in critiques if c.meta.get("attempt") == n), None)
        critique = (f'<div class="critique"><a href="#step-{after.index}">#{after.index}</a> '
                    f"critique: {_esc(_clip(after.thought, 400))}</div>") if after is not None else ""
        rows.append(
            f'<li><b>attempt {_esc(n)}</b> · steps <a href="#step-{_esc(first)}">#{_esc(first)}</a>–#{_esc(last)}'
            f" · stopped <code>{_esc(record.get('stopped_reason'))}</code>"
            f"{f' · answer {_esc(_clip(str(answer), 80))}' if answer is not None else ''}"
            f"{f' · {verdict}' if verdict else ''}"
            f"{f' · feedback: {_esc(_clip(str(feedback), 200))}' if feedback else ''}"
            f"{critique}</li>"
        )
    return (f'<section class="card" id="attempts"><h2>Attempts · {len(rows)}</h2>'
            f'<ol class="attempts">{"".join(rows)}</ol></section>')


def child_run(trace: Trace, step: Step) -> str:
    """The run of the child agent a step called (`meta["child_run_id"]`, kept in
    `trace.children`), nested under the step with its own steps, prompts and raw output,
    and its own children in turn; "" for any other step."""
    child_id = step.meta.get("child_run_id")
    child = trace.children.get(child_id) if isinstance(child_id, str) else None
    if child is None:
        return ""
    agent = str(child.meta.get("agent") or "agent")
    u = child.usage
    items = "".join(_nested_step(child, s) for s in child.steps)
    answer = "none" if child.final_answer is None else _esc(child.final_answer)
    return (
        f'<details class="part nested-run" open data-child-run-id="{_esc(child_id)}" data-agent="{_esc(agent)}">'
        f"<summary>Agent <b>{_esc(agent)}</b> · run <code>{_esc(child_id)}</code> · stopped "
        f'<span data-stop-reason="{_esc(child.stopped_reason or "")}">{_esc(child.stopped_reason)}</span> · '
        f"{len(child.steps)} steps · tokens {u.prompt_tokens}/{u.evaluated_tokens}/{u.completion_tokens}</summary>"
        f"<pre>Task: {_esc(child.task)}</pre><ol class=\"nested\">{items}</ol>"
        f"<div><b>final answer</b> {answer}</div></details>"
    )


def _nested_step(trace: Trace, step: Step) -> str:
    if step.tool is not None:
        line = f"{step.tool}({_clip(str(step.args))})"
        if step.observation is not None:
            line += f" → {_clip(step.observation)}"
    else:
        line = _clip(step.error or step.observation or step.raw or "")
    parts = []
    prompt = trace.prompt_for(step)
    if prompt is not None:
        parts.append(f"<details><summary>prompt · {len(prompt)} chars</summary><pre>{_esc(prompt)}</pre></details>")
    if step.raw:
        parts.append(f"<details><summary>raw model output</summary><pre>{_esc(step.raw)}</pre></details>")
    return (f'<li data-step-kind="{_esc(step.kind)}"><span class="idx">#{step.index}</span> '
            f'<span class="kind">{_esc(step.kind)}</span> {_esc(line)}{"".join(parts)}{child_run(trace, step)}</li>')
