"""The record of a run: frozen Steps, token Usage, and the Trace that holds them.

Everything the model saw (the prompt) and said (raw text) is kept, so a trace is a
complete account of a run; `to_dict` is JSON-safe and `from_dict` round-trips it.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Final

STOP_REASONS: Final = frozenset(
    {
        "final",
        "max_steps",
        "error",
        "max_replans",
        "token_budget",
        "cost_budget",  # the run's model calls cost cost_budget_usd (see loopwright.pricing)
        "repeated_call",
        "timeout",
        "denied",
        "interrupted",
        "paused",  # waiting for an approval decision; resume() continues it
        "max_reflections",  # Reflexion: every attempt failed and no reflection is left
        "max_nodes",  # Tree-of-Thoughts: the node budget ran out before a solution
        "exhausted",  # Tree-of-Thoughts: every branch within depth was tried or pruned
        "guardrail",  # a guardrail blocked the input, a tool call or the answer (its step says which and why)
    }
)

STEP_KINDS: Final = frozenset(
    {
        "action",  # a tool call (ReAct step, or a ReWOO / plan-execute worker)
        "final",  # a final answer from the model
        "parse_error",  # model text that did not parse
        "plan",  # a planner call (ReWOO, first plan-execute plan)
        "solve",  # the ReWOO solver call
        "replan",  # a plan-execute replanner call
        "nudge",  # a repeated call that was not executed again
        "denied",  # a call refused by approval or scope
        "error",  # the policy itself raised
        "reflection",  # a critique of a failed attempt or tool call (Reflexion, on_tool_error)
        "propose",  # Tree-of-Thoughts: candidate next steps for one node
        "value",  # Tree-of-Thoughts: the score of one node (meta: node, parent, score)
        "guardrail",  # a guardrail blocked (meta: guardrail, where, reason) or held a call back (revise)
    }
)


def estimate_tokens(text: str) -> int:
    """Conservative token count for a backend that reports none: one token per 3 UTF-8
    bytes, rounded up. Real BPE tokenizers average about 4 bytes a token on English, so
    this over-counts, which keeps a token budget on the safe side."""
    # isascii() is O(1); "surrogatepass" counts a lone surrogate (a file name that was not
    # UTF-8) as the 3 bytes it would take instead of failing the run
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    return -(-size // 3)


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens of one model call, or of a whole run.

    prompt_tokens: tokens sent. evaluated_tokens: prompt tokens actually computed after
    KV-cache prefix reuse (equal to prompt_tokens without a cache). completion_tokens:
    tokens generated. estimated: counts come from `estimate_tokens`, not the backend.
    """

    prompt_tokens: int = 0
    evaluated_tokens: int = 0
    completion_tokens: int = 0
    _: KW_ONLY
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        """What a hosted API bills: prompt sent plus completion."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.evaluated_tokens + other.evaluated_tokens,
            self.completion_tokens + other.completion_tokens,
            estimated=self.estimated or other.estimated,
        )

    @classmethod
    def estimate(cls, prompt: str, completion: str) -> Usage:
        """The documented estimate (`estimate_tokens`) for a call whose backend reports none."""
        sent = estimate_tokens(prompt)
        return cls(sent, sent, estimate_tokens(completion), estimated=True)

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "evaluated_tokens": self.evaluated_tokens,
            "completion_tokens": self.completion_tokens,
            "estimated": self.estimated,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Usage:
        return cls(
            int(d.get("prompt_tokens", 0)),
            int(d.get("evaluated_tokens", 0)),
            int(d.get("completion_tokens", 0)),
            estimated=bool(d.get("estimated", False)),
        )


def json_safe(value: Any) -> Any:
    """The value as plain JSON data: anything json cannot hold is rendered with str()."""
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError, RecursionError):
        return str(value)


@dataclass(frozen=True, slots=True)
class Step:
    """One transition of a run. `raw` is the model text exactly as returned; `prompt` is
    exactly what the model was sent (None for steps with no model call)."""

    index: int
    kind: str
    raw: str = ""
    _: KW_ONLY
    thought: str = ""
    tool: str | None = None
    args: dict[str, Any] | None = None
    observation: str | None = None
    error: str | None = None
    duration_s: float = 0.0
    usage: Usage = field(default_factory=Usage)
    prompt: str | None = None
    step_id: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    prompt_chars: int | None = None  # ReAct: the prompt is trace.scratchpad[:prompt_chars]

    def __post_init__(self) -> None:
        if self.usage is None:  # a record that says none (an older trace): no tokens
            object.__setattr__(self, "usage", Usage())
        if self.meta is None:
            object.__setattr__(self, "meta", {})

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "usage":
                d["usage"] = value.to_dict()
            elif f.name in ("args", "meta"):
                safe = None if value is None else json_safe(value)
                # a mapping whose keys JSON cannot hold renders as text: keep it a mapping
                d[f.name] = {"repr": safe} if value is not None and not isinstance(safe, dict) else safe
            else:
                d[f.name] = value
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Step:
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in known}
        kwargs["usage"] = Usage.from_dict(d.get("usage") or {})
        kwargs["meta"] = dict(d.get("meta") or {})
        return cls(**kwargs)

    def with_(self, **changes: Any) -> Step:
        return replace(self, **changes)


_USAGE_LOCK: Final = threading.Lock()
"""Serialises `Trace.add_usage`: ReWOO's worker threads may add a child run's usage at once."""


@dataclass
class Trace:
    """A run's record. Mutable while the run goes on; read it, do not write it.

    scratchpad: ReAct's final prompt. It is append-only, so each ReAct step's prompt is
    a prefix of it (`prompt_for(step)`); storing lengths instead of copies keeps a long
    run's cost per step flat.
    """

    task: str
    mode: str
    steps: list[Step] = field(default_factory=list)
    final_answer: str | None = None
    stopped_reason: str | None = None
    llm_calls: int = 0
    tool_calls: int = 0
    replans: int = 0
    usage: Usage = field(default_factory=Usage)  # the total of every model call, child runs' included
    transcript: str = ""
    started_at: float = field(default_factory=time.time)
    duration_s: float = 0.0
    run_id: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    scratchpad: str = ""
    output: Any = None
    """With `run(..., output_type=T)`: the final answer validated as T (after from_dict,
    its JSON data). None otherwise, or when no answer fit."""
    outputs: dict[str, str] = field(default_factory=dict)
    """Tool results kept whole by handle ("out-3"): those past `max_observation_chars`,
    which the prompt showed as head and tail, and those a compacted prompt folded to a
    stub. `read_output(handle, offset, length)` reads them during the run."""
    children: dict[str, Trace] = field(default_factory=dict)
    """The traces of the agent runs this run started through `Agent.as_tool`, by child
    run id; the step that called one names it in `meta["child_run_id"]`. Their usage and
    cost are included in this trace's."""

    def add_usage(self, usage: Usage) -> None:
        """Add one model call's (or a child run's) usage to `usage` (the runtime's, as the run goes)."""
        with _USAGE_LOCK:
            self.usage = self.usage + usage

    @property
    def answered(self) -> bool:
        """The run ended with a real answer: stop reason "final" and an answer that is not
        empty or blank (a trace loaded from elsewhere may hold one)."""
        answer = self.final_answer
        return self.stopped_reason == "final" and answer is not None and not answer.isspace() and answer != ""

    def prompt_for(self, step: Step) -> str | None:
        """Exactly what the model was sent for this step (None if it made no call)."""
        if step.prompt is not None:
            return step.prompt
        if step.prompt_chars is not None:
            return self.scratchpad[: step.prompt_chars]
        return None

    def to_dict(self) -> dict[str, Any]:
        out = self._to_dict()
        if self.output is not None:
            out["output"] = _output_data(self.output)
        if self.outputs:
            out["outputs"] = dict(self.outputs)
        if self.children:
            out["children"] = {run_id: child.to_dict() for run_id, child in self.children.items()}
        return out

    def _to_dict(self) -> dict[str, Any]:
        return {
            "version": 1,
            "task": self.task,
            "mode": self.mode,
            "final_answer": self.final_answer,
            "stopped_reason": self.stopped_reason,
            "llm_calls": self.llm_calls,
            "tool_calls": self.tool_calls,
            "replans": self.replans,
            "usage": self.usage.to_dict(),
            "transcript": self.transcript,
            "started_at": self.started_at,
            "duration_s": self.duration_s,
            "run_id": self.run_id,
            "meta": json_safe(self.meta),
            "scratchpad": self.scratchpad,
            "steps": [s.to_dict() for s in self.steps],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Trace:
        return cls(
            task=d["task"],
            mode=d["mode"],
            steps=[Step.from_dict(s) for s in d.get("steps", [])],
            final_answer=d.get("final_answer"),
            stopped_reason=d.get("stopped_reason"),
            llm_calls=int(d.get("llm_calls", 0)),
            tool_calls=int(d.get("tool_calls", 0)),
            replans=int(d.get("replans", 0)),
            usage=Usage.from_dict(d.get("usage") or {}),
            transcript=d.get("transcript", ""),
            started_at=float(d.get("started_at", 0.0)),
            duration_s=float(d.get("duration_s", 0.0)),
            run_id=d.get("run_id"),
            meta=dict(d.get("meta") or {}),
            scratchpad=d.get("scratchpad", ""),
            output=d.get("output"),
            outputs=dict(d.get("outputs") or {}),
            children={str(k): cls.from_dict(v) for k, v in (d.get("children") or {}).items()},
        )

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Trace:
        return cls.from_dict(json.loads(text))

    def __str__(self) -> str:
        """A readable account: a line a step (a call and its result, an answer, a thought),
        an error in full when its line cut it short, each child agent run's steps indented
        under the call that started it, and the totals."""
        lines = [f"Task: {clip(self.task, 200)}  [{self.mode}]"]
        self._step_lines(lines, "")
        u = self.usage
        lines.append(
            f"Stopped: {self.stopped_reason}  answer: {self.final_answer!r}  "
            f"model calls: {self.llm_calls}  tool calls: {self.tool_calls}  "
            f"tokens sent/evaluated/completion: {u.prompt_tokens}/{u.evaluated_tokens}/"
            f"{u.completion_tokens}{' (estimated)' if u.estimated else ''}  "
            f"{self.duration_s:.2f}s"
        )
        return "\n".join(lines)

    def _step_lines(self, lines: list[str], indent: str) -> None:
        """Each step's lines, with its child runs under it (the same, indented further)."""
        answered = self.stopped_reason == "final" and self.final_answer is not None
        last = self.steps[-1] if self.steps else None
        shown: set[str] = set()
        for s in self.steps:
            head = f"{indent}  {s.index:>3} {s.kind:<11}"
            more = f"{indent}{' ' * 18}"  # continuation lines line up under the step's text
            said = ""
            if s.tool is not None:
                args = json.dumps(s.args, default=str, ensure_ascii=False)
                head += f" {s.step_id + ' = ' if s.step_id else ''}{s.tool}({clip(args, 60)})"
            if s.observation is not None:
                said = s.observation
                head += f" -> {clip(said, 80)}"
            elif s.error is not None:
                said = s.error
                head += f" !! {clip(said, 80)}"
            elif s is last and answered and s.kind in ("final", "solve"):
                head += f" => {clip(self.final_answer or '', 80)}"
            elif s.tool is None and (s.thought or s.raw):  # a plan, a critique: what the model said
                head += f" {clip(s.thought or s.raw, 80)}"
            lines.append(head)
            if s.error is not None and (s.error not in said or len(said) > 80 or "\n" in said):
                lines.append(f"{more}error: {s.error.strip()}".replace("\n", f"\n{more}       "))
            if s.meta.get("traceback"):
                lines.append(f"{more}(traceback in the step's meta['traceback'])")
            child_id = s.meta.get("child_run_id")
            child = self.children.get(child_id) if isinstance(child_id, str) else None
            if child is not None and isinstance(child_id, str):
                shown.add(child_id)
                lines.append(f"{more}child run {child_id} [{child.mode}]: {len(child.steps)} steps, "
                             f"stopped {child.stopped_reason}")
                child._step_lines(lines, more)
        for child_id, child in self.children.items():  # a child no step names (e.g. paused)
            if child_id not in shown:
                lines.append(f"{indent}  child run {child_id} [{child.mode}]: {len(child.steps)} steps, "
                             f"stopped {child.stopped_reason}")
                child._step_lines(lines, indent + " " * 6)


def clip(text: str, limit: int) -> str:
    """One line of at most `limit` characters, cut at a word boundary when one is near."""
    text = " ".join(text.split()) if "\n" in text or "\r" in text else text
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit // 2:  # else one long word (a URL, a hash): cut it
        cut = cut[:space]
    return cut.rstrip() + "…"


# --- trace files ----------------------------------------------------------------------

def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a trace written by `Trace.to_json` (or any JSON of `Trace.to_dict()`'s shape).

    Raises ValueError naming the file and what was wrong with it.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p}: not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{p}: expected a JSON object (a trace), got {type(data).__name__}")
    try:
        trace = Trace.from_dict(data)
        _check_shape(trace)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{p}: not a loopwright trace ({type(exc).__name__}: {exc})") from exc
    return trace


_TEXT_FIELDS: Final = ("kind", "raw", "thought")
_OPTIONAL_TEXT_FIELDS: Final = ("tool", "observation", "error", "prompt", "step_id")


def _check_shape(trace: Trace) -> None:
    """Raise TypeError naming the first field whose JSON type a trace cannot have (a file
    may have been written by hand or by another tool)."""
    for name in ("task", "mode", "transcript", "scratchpad"):
        if not isinstance(getattr(trace, name), str):
            raise TypeError(f"{name} must be a string")
    if not all(isinstance(h, str) and isinstance(text, str) for h, text in trace.outputs.items()):
        raise TypeError("outputs must map handles to strings")
    for step in trace.steps:
        where = f"step {step.index!r}"
        if not isinstance(step.index, int) or isinstance(step.index, bool):
            raise TypeError(f"{where}: index must be an integer")
        d = step.duration_s
        if isinstance(d, bool) or not isinstance(d, int | float) or not math.isfinite(d):
            raise TypeError(f"{where}: duration_s must be a number")
        for name in _TEXT_FIELDS:
            if not isinstance(getattr(step, name), str):
                raise TypeError(f"{where}: {name} must be a string")
        for name in _OPTIONAL_TEXT_FIELDS:
            if getattr(step, name) is not None and not isinstance(getattr(step, name), str):
                raise TypeError(f"{where}: {name} must be a string or null")
        if step.args is not None and not isinstance(step.args, dict):
            raise TypeError(f"{where}: args must be an object or null")
        if step.prompt_chars is not None and not isinstance(step.prompt_chars, int):
            raise TypeError(f"{where}: prompt_chars must be an integer or null")


def _output_data(value: Any) -> Any:
    """A typed output as JSON data: a pydantic model dumped, a dataclass as a dict."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return json_safe(dump(mode="json"))
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_safe(dataclasses.asdict(value))
    return json_safe(value)
