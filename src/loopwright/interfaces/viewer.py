"""A trace as one self-contained HTML page: timeline, prompts, raw output, token chart.

The page has no network dependency (CSS, JS and SVG are inline) and embeds no trace data
in script: every piece of trace text is model or tool output, so it is untrusted and goes
into the page only through `html.escape`. `loopwright view TRACE.json|RUN_ID` is
`run_view` (registered with the CLI) or, as a plain function, `view_main(argv)`.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
import sys
import webbrowser
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Final

from loopwright.errors import LoopwrightError
from loopwright.interfaces.common import ArgumentParser, UsageError, output_path
from loopwright.interfaces.viewer_tree import attempts_section, child_run, tot_section
from loopwright.trace import STEP_KINDS, Step, Trace, load_trace

__all__ = ["load_trace", "render_html", "run_view", "setup_view_parser", "view_main", "write_html"]

ISSUE_KINDS: Final = frozenset({"parse_error", "error"})
"""Steps drawn red: the model or the policy failed."""
GUARD_KINDS: Final = frozenset({"nudge", "denied", "guardrail"})
"""Steps drawn amber: a guard or a gate stepped in."""
MODEL_KINDS_WITHOUT_PROMPT: Final = frozenset({"plan", "solve", "replan", "reflection", "propose", "value"})

_PREVIEW_CHARS: Final = 160


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _asset(name: str) -> str:
    text = resources.files("loopwright.interfaces").joinpath("data", "viewer", name).read_text("utf-8")
    # Our own files, but inlined raw: they must not be able to close their element.
    if "</" in text:
        raise RuntimeError(f"viewer asset {name} contains '</', which would end its element")
    return text


def _fmt_s(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1.0:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def _fmt_n(n: int) -> str:
    return f"{n:,}"


def _clip(text: str, limit: int = _PREVIEW_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass(frozen=True, slots=True)
class _ModelCall:
    """One model call, for the token chart."""

    number: int
    step: Step


def _is_model_call(step: Step) -> bool:
    return step.prompt is not None or step.prompt_chars is not None or step.usage.prompt_tokens > 0


def _common_prefix_len(a: str, b: str) -> int:
    """Length of the longest common prefix, at C speed: the usual case (an append-only
    scratchpad) is one startswith; otherwise a binary search over slices."""
    if b.startswith(a):
        return len(a)
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True, slots=True)
class _PromptRef:
    """The previous model call's prompt, which this one may extend."""

    index: int
    text: str


def _tool_latency(step: Step) -> float | None:
    """Seconds the tool itself took: `meta["tool_s"]` when the loop recorded it, else the
    step's duration. None for steps that did not execute a tool."""
    if step.tool is None or step.kind != "action":
        return None
    measured = _number(step.meta.get("tool_s"))
    return measured if measured is not None else max(step.duration_s, 0.0)


def _failed(step: Step) -> bool:
    return step.error is not None or (step.observation or "").startswith("ERROR[")


def _step_class(step: Step) -> str:
    kind = step.kind if step.kind in STEP_KINDS else "unknown"
    classes = ["step", f"k-{kind}"]
    if step.kind in ISSUE_KINDS or _failed(step):
        classes.append("flagged")
    elif step.kind in GUARD_KINDS:
        classes.append("guard")
    return " ".join(classes)


def _axis(value: float) -> tuple[float, int]:
    """A readable y axis reaching value: (tick step, tick count), the step a 1/2/2.5/5 x
    10^k and at most 5 steps."""
    if value <= 0 or not math.isfinite(value):
        return 1.0, 1
    exp = 10.0 ** math.floor(math.log10(value / 5))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0, 20.0):
        step = m * exp
        if math.ceil(value / step) <= 5:
            return step, max(1, math.ceil(value / step))
    return 20.0 * exp, 5


def _bar_chart(
    chart_id: str,
    title: str,
    bars: Sequence[tuple[str, str, str, list[tuple[float, str]]]],
    y_label: str,
    fmt: Any,
    width: int = 760,
) -> str:
    """An inline SVG bar chart. bars: (x label, href, tooltip, [(value, css class), ...])
    where the values of one bar are overlaid, largest first, from a common baseline."""
    height, left, right, top, bottom = 230, 58, 10, 12, 28
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max((v for *_, parts in bars for v, _ in parts), default=0.0)
    step, ticks = _axis(peak)
    y_max = step * ticks
    out = [
        f'<svg class="chart" id="{chart_id}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{_esc(title)}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for i in range(ticks + 1):
        value = step * i
        y = top + plot_h - plot_h * i / ticks
        out.append(f'<line class="axis" x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_esc(fmt(value))}</text>')
    out.append(
        f'<text x="12" y="{top + plot_h / 2:.0f}" transform="rotate(-90 12 {top + plot_h / 2:.0f})" '
        f'text-anchor="middle">{_esc(y_label)}</text>'
    )
    n = len(bars)
    slot = min(plot_w / max(n, 1), 56.0)
    gap = min(slot * 0.2, 8.0)
    label_every = max(1, math.ceil(n / 16))
    for i, (label, href, tip, parts) in enumerate(bars):
        x = left + i * slot + gap / 2
        w = max(slot - gap, 0.6)
        out.append(f'<a href="{_esc(href)}"><title>{_esc(tip)}</title>')
        for value, css in sorted(parts, key=lambda p: -p[0]):
            h = plot_h * max(value, 0.0) / y_max
            out.append(
                f'<rect class="{css}" x="{x:.2f}" y="{top + plot_h - h:.2f}" '
                f'width="{w:.2f}" height="{h:.2f}" rx="1"/>'
            )
        out.append("</a>")
        if i % label_every == 0 or i == n - 1:
            out.append(
                f'<text x="{x + w / 2:.1f}" y="{height - bottom + 14}" '
                f'text-anchor="middle">{_esc(label)}</text>'
            )
    out.append("</svg>")
    return "".join(out)


def _token_section(calls: list[_ModelCall], trace: Trace) -> str:
    u = trace.usage
    sent = u.prompt_tokens or sum(c.step.usage.prompt_tokens for c in calls)
    evaluated = u.evaluated_tokens or sum(c.step.usage.evaluated_tokens for c in calls)
    share = f" ({100 * evaluated / sent:.0f}% of sent)" if sent else ""
    estimated = " · estimated counts" if u.estimated or any(c.step.usage.estimated for c in calls) else ""
    bars = [
        (
            str(c.number),
            f"#step-{c.step.index}",
            f"call {c.number} (step {c.step.index}, {c.step.kind}): sent "
            f"{c.step.usage.prompt_tokens}, evaluated {c.step.usage.evaluated_tokens}, "
            f"completion {c.step.usage.completion_tokens}",
            [(float(c.step.usage.prompt_tokens), "sent"), (float(c.step.usage.evaluated_tokens), "eval")],
        )
        for c in calls
    ]
    chart = (
        _bar_chart("token-chart", "prompt tokens sent and evaluated per model call", bars,
                   "tokens", lambda v: f"{v:,.0f}")
        if calls
        else '<p class="empty" id="token-chart">No model calls recorded.</p>'
    )
    return (
        '<section class="card" id="tokens"><h2>Prompt tokens per model call</h2>'
        '<div class="legend"><span><i style="background:var(--accent-soft)"></i>sent '
        f"{_fmt_n(sent)}</span><span><i style=\"background:var(--accent)\"></i>evaluated after "
        f"prefix reuse {_fmt_n(evaluated)}{share}</span><span>completion "
        f"{_fmt_n(u.completion_tokens)}{estimated}</span></div>{chart}"
        '<div class="sub">x: model call number (click a bar to open its step)</div></section>'
    )


def _latency_section(steps: Sequence[Step]) -> str:
    timed = [(s, lat) for s in steps if (lat := _tool_latency(s)) is not None]
    if not timed:
        return ('<section class="card" id="latency"><h2>Tool latency</h2>'
                '<p class="empty" id="latency-chart">No tool calls executed.</p></section>')
    bars = [
        (f"#{s.index}", f"#step-{s.index}", f"step {s.index}: {s.tool} {_fmt_s(lat)}",
         [(lat * 1e3, "lat failed" if _failed(s) else "lat")])
        for s, lat in timed
    ]
    chart = _bar_chart("latency-chart", "tool latency per call", bars, "ms", lambda v: f"{v:.3g}",
                       width=480)
    per_tool: dict[str, list[float]] = {}
    errors: dict[str, int] = {}
    for s, lat in timed:
        name = str(s.tool)
        per_tool.setdefault(name, []).append(lat)
        errors[name] = errors.get(name, 0) + int(_failed(s))
    rows = "".join(
        f"<tr><td>{_esc(name)}</td><td>{len(v)}</td><td>{errors[name]}</td>"
        f"<td>{_fmt_s(sum(v) / len(v))}</td><td>{_fmt_s(max(v))}</td><td>{_fmt_s(sum(v))}</td></tr>"
        for name, v in sorted(per_tool.items(), key=lambda kv: -sum(kv[1]))
    )
    return (
        f'<section class="card" id="latency"><h2>Tool latency</h2>{chart}'
        '<div class="sub">x: step number (click a bar to open its step)</div>'
        '<table id="tool-table"><thead><tr><th>tool</th><th>calls</th><th>errors</th>'
        f"<th>mean</th><th>max</th><th>total</th></tr></thead><tbody>{rows}</tbody></table></section>"
    )


def _plan_lines(step: Step) -> list[str] | None:
    """A plan step's plan, one `E1 = tool(args)` line per step, from `meta["plan"]`
    ([[id, tool, args], ...]); None when there is none of that shape."""
    plan = step.meta.get("plan")
    if not isinstance(plan, list) or not plan:
        return None
    lines = []
    for item in plan:
        if not (isinstance(item, list | tuple) and len(item) == 3):
            return None
        sid, tool, args = item
        lines.append(f"{sid} = {tool}({json.dumps(args, ensure_ascii=False, default=str)})")
    return lines


def _summary_line(step: Step, final_answer: str | None) -> str:
    parts: list[str] = []
    plan = _plan_lines(step)
    if plan is not None:
        parts.append(_esc(_clip(f"{len(plan)}-step plan: " + "; ".join(plan), 200)))
    if step.tool is not None:
        args = json.dumps(step.args, ensure_ascii=False, default=str) if step.args is not None else ""
        label = f"{step.step_id} = " if step.step_id else ""
        parts.append(_esc(_clip(f"{label}{step.tool}({args})", 90)))
    if step.kind == "final" and final_answer is not None:
        parts.append(_esc(_clip(f"answer: {final_answer}")))
    if step.error is not None:
        parts.append(f'<span class="err">{_esc(_clip(step.error))}</span>')
    elif step.observation is not None:
        cls = ' class="err"' if _failed(step) else ""
        parts.append(f"<span{cls}>{_esc(_clip(step.observation))}</span>")
    if not parts:
        parts.append(_esc(_clip(step.thought or step.raw or "(empty)")))
    return '<span class="arrow">→</span>'.join(parts)


def _prompt_block(index: int, prompt: str, previous: _PromptRef | None) -> str:
    """The prompt of step `index`. Where it extends the previous call's prompt only the
    new part is written, so a long run's page grows linearly, not quadratically; the
    page's script rebuilds the shared prefix from the earlier steps when it is opened."""
    shared = _common_prefix_len(previous.text, prompt) if previous else 0
    head = f"Prompt · {_fmt_n(len(prompt))} chars"
    if previous is None or not shared:
        return (f'<details class="part prompt" id="prompt-{index}"><summary>{head}</summary>'
                f'<pre class="prompt-new">{_esc(prompt)}</pre></details>')
    head += f" · {_fmt_n(len(prompt) - shared)} new since the previous call"
    return (
        f'<details class="part prompt" id="prompt-{index}" data-extends="{previous.index}" '
        f'data-shared="{shared}"><summary>{head}</summary>'
        f'<details class="prefix"><summary>the first {_fmt_n(shared)} chars: the prompt of '
        f'<a href="#prompt-{previous.index}">step #{previous.index}</a>'
        f'{"" if shared == len(previous.text) else " (its start)"}</summary>'
        '<pre class="prompt-prefix"></pre></details>'
        f'<pre class="new-part"><span class="new prompt-new">{_esc(prompt[shared:])}</span></pre>'
        "</details>"
    )


def _step_item(step: Step, previous_prompt: _PromptRef | None, start: float, total: float,
               trace: Trace) -> str:
    final = trace.final_answer if step.kind == "final" else None
    attrs = f'class="{_step_class(step)}" id="step-{step.index}" data-step-kind="{_esc(step.kind)}"'
    attrs += f' data-step-index="{step.index}"'
    if _is_model_call(step):
        attrs += " data-model-call"
    if step.tool is not None:
        attrs += f' data-tool="{_esc(step.tool)}"'
    left = 100 * start / total if total > 0 else 0.0
    width = 100 * max(step.duration_s, 0.0) / total if total > 0 else 0.0
    summary = (
        f'<summary><span class="idx">#{step.index}</span><span class="kind">{_esc(step.kind)}</span>'
        f'<span class="line">{_summary_line(step, final)}</span>'
        f'<span class="dur">{_fmt_s(step.duration_s)}</span>'
        f'<span class="tl" title="starts {_fmt_s(start)} into the run"><i style="left:{left:.2f}%;'
        f'width:{width:.2f}%"></i></span></summary>'
    )
    rows: list[str] = []
    if step.thought:
        rows.append(f"<b>thought</b><div><pre>{_esc(step.thought)}</pre></div>")
    plan = _plan_lines(step)
    if plan is not None:
        rows.append(f"<b>parsed plan</b><div><pre>{_esc(chr(10).join(plan))}</pre></div>")
    if step.tool is not None:
        args = json.dumps(step.args, ensure_ascii=False, default=str)
        if len(args) > 100:
            args = _json(step.args)
        label = f"{step.step_id} = " if step.step_id else ""
        rows.append(f"<b>parsed action</b><div><pre>{_esc(f'{label}{step.tool}({args})')}</pre></div>")
    if final is not None:
        rows.append(f"<b>final answer</b><div><pre>{_esc(final)}</pre></div>")
    if step.observation is not None:
        cls = ' class="error"' if _failed(step) else ""
        rows.append(f"<b>observation</b><div><pre{cls}>{_esc(step.observation)}</pre></div>")
    if step.error is not None:
        rows.append(f'<b>error</b><div><pre class="error">{_esc(step.error)}</pre></div>')
    u = step.usage
    timing = f"{_fmt_s(step.duration_s)} (starts {_fmt_s(start)} into the run)"
    model_s, tool_s = _number(step.meta.get("model_s")), _number(step.meta.get("tool_s"))
    if model_s is not None:
        timing += f" · model {_fmt_s(model_s)}"
    if tool_s is not None:
        timing += f" · tool {_fmt_s(tool_s)}"
    rows.append(f"<b>timing</b><div>{timing}</div>")
    if _is_model_call(step):
        rows.append(
            f"<b>tokens</b><div>sent {_fmt_n(u.prompt_tokens)} · evaluated "
            f"{_fmt_n(u.evaluated_tokens)} · completion {_fmt_n(u.completion_tokens)}"
            f"{' (estimated)' if u.estimated else ''}</div>"
        )
    parts = [f'<div class="kv">{"".join(rows)}</div>']
    prompt = trace.prompt_for(step)
    if prompt is not None:
        parts.append(_prompt_block(step.index, prompt, previous_prompt))
    if step.raw or _is_model_call(step) or step.kind in MODEL_KINDS_WITHOUT_PROMPT:
        parts.append(
            f'<details class="part" open><summary>Raw model output · {_fmt_n(len(step.raw))} chars'
            f"</summary><pre>{_esc(step.raw)}</pre></details>"
        )
    if step.meta:
        parts.append(
            f'<details class="part"><summary>meta</summary><pre>{_esc(_json(step.meta))}</pre></details>'
        )
    if step.meta.get("child_run_id") is not None:  # a child agent's run, nested under its step
        parts.append(child_run(trace, step))
    open_attr = " open" if step.kind in ISSUE_KINDS else ""
    return (
        f'<li {attrs}><details{open_attr}>{summary}<div class="body">{"".join(parts)}</div>'
        "</details></li>"
    )


def _timeline(trace: Trace) -> str:
    steps = trace.steps
    total = max(sum(max(s.duration_s, 0.0) for s in steps), trace.duration_s, 0.0)
    kinds = sorted({s.kind for s in steps if s.kind in STEP_KINDS})
    issues = sum(1 for s in steps if s.kind in ISSUE_KINDS | GUARD_KINDS or _failed(s))
    buttons = ['<button data-filter="all" aria-pressed="true">all</button>']
    if issues:
        buttons.append(f'<button data-filter="issues" aria-pressed="false">issues ({issues})</button>')
    buttons += [f'<button data-filter="{k}" aria-pressed="false">{k}</button>' for k in kinds]
    items: list[str] = []
    elapsed = 0.0
    previous_prompt: _PromptRef | None = None
    for step in steps:
        items.append(_step_item(step, previous_prompt, elapsed, total, trace))
        elapsed += max(step.duration_s, 0.0)
        prompt = trace.prompt_for(step)
        if prompt is not None:
            previous_prompt = _PromptRef(step.index, prompt)
    body = "".join(items) or '<li class="empty">No steps recorded.</li>'
    return (
        f'<section class="card"><h2>Timeline · {_fmt_n(len(steps))} steps</h2>'
        f'<div class="toolbar">{"".join(buttons)}<span class="sep"></span>'
        '<button id="expand-all">expand all</button><button id="collapse-all">collapse all</button>'
        f'</div><ol class="timeline" id="timeline">{body}</ol></section>'
    )


def _issue_chips(steps: Sequence[Step]) -> str:
    """Links to the first step of each kind of trouble, with counts."""
    groups: dict[str, list[Step]] = {}
    for s in steps:
        if s.kind in ISSUE_KINDS | GUARD_KINDS:
            groups.setdefault(s.kind.replace("_", " "), []).append(s)
        elif _failed(s):
            groups.setdefault("failed tool call" if s.tool else "failed step", []).append(s)
    chips = "".join(
        f'<a class="chip {"guard" if group[0].kind in GUARD_KINDS else "flagged"}" '
        f'href="#step-{group[0].index}">{len(group)} {_esc(label)}</a>'
        for label, group in sorted(groups.items())
    )
    return f'<div class="chips" id="issues">{chips}</div>' if chips else ""


def _header(trace: Trace, calls: int) -> str:
    reason = trace.stopped_reason
    cls = "none" if reason is None else ("ok" if reason == "final" else "bad")
    stop = (
        '<div class="stopbox"><div class="l">stop reason</div>'
        f'<span class="stop {cls}" id="stop-reason" data-stop-reason="{_esc(reason or "")}">'
        f"{_esc(reason or 'not stopped')}</span></div>"
    )
    if trace.final_answer is not None:
        answer = f'<div class="answer" id="final-answer"><b>final answer</b>{_esc(trace.final_answer)}</div>'
    else:
        answer = '<div class="answer missing" id="final-answer"><b>final answer</b>none</div>'
    u = trace.usage
    stats = [
        ("model calls", _fmt_n(trace.llm_calls or calls)),
        ("tool calls", _fmt_n(trace.tool_calls)),
        ("replans", _fmt_n(trace.replans)),
        ("tokens sent", _fmt_n(u.prompt_tokens)),
        ("evaluated", _fmt_n(u.evaluated_tokens)),
        ("completion", _fmt_n(u.completion_tokens)),
        ("wall clock", _fmt_s(trace.duration_s)),
    ]
    cards = "".join(f'<div class="stat"><div class="v">{v}</div><div class="l">{k}</div></div>' for k, v in stats)
    cards += _issue_chips(trace.steps)
    run = f" · run <code>{_esc(trace.run_id)}</code>" if trace.run_id else ""
    forked = trace.meta.get("forked_from")
    if isinstance(forked, Mapping):
        run += (f' · <span id="forked-from">forked from <code>{_esc(str(forked.get("run_id")))}</code> '
                f'at step {_esc(str(forked.get("at_step")))}</span>')
    return (
        f'<header class="card"><div><div class="sub">loopwright trace · mode <b>{_esc(trace.mode)}</b>'
        f'{run}</div><h1>Task</h1><p class="task" id="task">{_esc(trace.task)}</p></div>'
        f'<div>{stop}</div>{answer}<div class="stats" id="stats">{cards}</div></header>'
    )


def _guardrails_part(trace: Trace) -> str:
    """The guardrails' verdicts other than a plain allow (trace.meta["guardrails"]): which
    guardrail, where, what it did and why."""
    entries = trace.meta.get("guardrails")
    if not isinstance(entries, list) or not entries:
        return ""
    rows = "".join(
        f'<li data-guardrail="{_esc(e.get("guardrail"))}"><b>{_esc(e.get("guardrail"))}</b> '
        f'{_esc(e.get("action"))} · {_esc(e.get("where"))}'
        f'{" · " + _esc(_clip(str(e.get("reason")))) if e.get("reason") else ""}'
        f'{" · failed open: " + _esc(_clip(str(e.get("failed")))) if e.get("fail_open") else ""}</li>'
        for e in entries if isinstance(e, Mapping))
    return (f'<details class="part card" id="guardrails" open><summary>Guardrails ({len(entries)} verdicts)'
            f"</summary><ul>{rows}</ul></details>")


def render_html(trace: Trace | Mapping[str, Any]) -> str:
    """The trace as one self-contained HTML document (inline CSS, JS and SVG)."""
    if not isinstance(trace, Trace):
        trace = Trace.from_dict(trace)
    calls = [_ModelCall(n, s) for n, s in enumerate((s for s in trace.steps if _is_model_call(s)), 1)]
    extras = ""
    if trace.scratchpad:
        extras += (f'<details class="part card"><summary>Scratchpad (the last prompt, '
                   f"{_fmt_n(len(trace.scratchpad))} chars)</summary>"
                   f'<pre id="scratchpad">{_esc(trace.scratchpad)}</pre></details>')
    extras += _guardrails_part(trace)
    if trace.transcript:
        extras += (f'<details class="part card"><summary>Transcript</summary>'
                   f"<pre>{_esc(trace.transcript)}</pre></details>")
    if trace.meta:
        extras += (f'<details class="part card"><summary>Run meta</summary>'
                   f"<pre>{_esc(_json(trace.meta))}</pre></details>")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
        f"<title>{_esc(_clip(trace.task, 80))} · loopwright trace</title>"
        f"<style>{_asset('viewer.css')}</style></head><body><main>"
        f"{_header(trace, len(calls))}"
        f'<div class="grid2">{_token_section(calls, trace)}{_latency_section(trace.steps)}</div>'
        f"{attempts_section(trace)}{tot_section(trace)}{_timeline(trace)}{extras}"
        f"<footer>Written by loopwright's viewer. Every string above is model or tool output, "
        f"shown as text.</footer></main><script>{_asset('viewer.js')}</script></body></html>\n"
    )


def write_html(trace: Trace | Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Render the trace and write it to path (parent folders made); returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(trace), encoding="utf-8")
    return out


VIEW_HELP: Final = "write a trace as one self-contained HTML page (timeline, prompts, token chart)"


def setup_view_parser(parser: argparse.ArgumentParser) -> None:
    """The arguments of `loopwright view` (for `loopwright.interfaces.cli.add_subcommand`)."""
    parser.add_argument("trace", metavar="TRACE", help="a trace JSON file (Trace.to_json), or a run id in the journal")
    parser.add_argument("--out", help="where to write the page (default: TRACE with .html, or RUN_ID.html)")
    parser.add_argument("--open", action="store_true", help="open the page in a web browser")
    parser.add_argument("--db", help="the run journal, for a run id (default: $LOOPWRIGHT_DB or ./loopwright.db)")
    parser.add_argument("--dbos", metavar="URL", help="a DBOS system database, for the id of a run executed under "
                        "DBOS (sqlite:///PATH or postgresql://...)")


def run_view(args: argparse.Namespace) -> int:
    """`loopwright view`: write the page and print its path. 0 written, 2 unreadable input."""
    source = Path(args.trace)
    try:
        if getattr(args, "dbos", None):
            from loopwright.interfaces.dbos_cli import view_trace

            trace = view_trace(args.trace, args.dbos)
            default_out = Path(f"{_safe_name(args.trace)}.html")
        elif source.is_file():
            trace = load_trace(source)
            default_out = source.with_suffix(".html")
        else:
            trace = _journal_trace(args.trace, args.db)
            default_out = Path(f"{_safe_name(args.trace)}.html")
        out = write_html(trace, output_path(args.out, "--out") if args.out else default_out)
    except (OSError, ValueError, LoopwrightError, UsageError) as exc:
        print(f"loopwright view: {exc}", file=sys.stderr)
        return 2
    print(out)
    if args.open:
        webbrowser.open(out.resolve().as_uri())
    return 0


def view_main(argv: Sequence[str] | None = None) -> int:
    """`loopwright view TRACE.json|RUN_ID [--out PATH] [--open] [--db PATH]` as a function."""
    parser = ArgumentParser(prog="loopwright view", description=VIEW_HELP)
    setup_view_parser(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse already printed
        return exc.code if isinstance(exc.code, int) else 2
    return run_view(args)


def _journal_trace(run_id: str, db: str | None) -> Trace:
    """A journaled run's trace; a missing journal is an error naming both readings of
    the argument (it is read as a run id only when no such file exists)."""
    target = db or os.environ.get("LOOPWRIGHT_DB") or "loopwright.db"
    from loopwright.durable.postgres import (
        is_postgres_dsn,  # the journal only when a run id is asked for
    )
    from loopwright.interfaces.common import open_store

    if not is_postgres_dsn(target) and not Path(target).is_file():
        raise ValueError(f"no such trace file: {run_id} (and no run journal at {target} to look it up as a run id)")
    with open_store(target) as store:
        return store.trace(run_id)  # type: ignore[no-any-return]


def _safe_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:100] or "trace"
