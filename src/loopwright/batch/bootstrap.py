"""Tool examples bootstrapped from tasks with known answers (the idea of DSPy's
BootstrapFewShot): `lw.bootstrap_examples(labelled_tasks, policy, registry)`.

Each task runs to the end; when its final answer is correct, every tool call of that
run that succeeded becomes an example of its tool, `{"args": ..., "question": task,
"result": observation}`. Calls of runs that answered wrong, calls that failed, calls
that were not executed (nudges, denials) and calls the tool's schema rejects are left
out. A correct run with no failed or unusable step at all is also kept whole, as a
whole-run example (question, calls with results, answer: DSPy's demos), which the
registry's `examples` show in every mode's prompts. The result applies to a registry (a new one, the user's tools untouched) and saves
as a small versioned JSON file that `loopwright run --examples FILE` loads.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from loopwright.batch.evaluation import is_correct as default_is_correct
from loopwright.batch.evaluation import load_dataset
from loopwright.errors import ExamplesError, ToolDefinitionError
from loopwright.policy import Policy
from loopwright.runtime import run
from loopwright.tools.examples import CallExample, RunExample, ToolExample
from loopwright.tools.registry import ToolRegistry
from loopwright.tools.toolset import Tools, as_registry
from loopwright.trace import Trace

__all__ = ["FORMAT", "PLACEMENTS", "VERSION", "BootstrapResult", "bootstrap_examples", "kept_calls", "whole_run"]

FORMAT: Final = "loopwright.tool_examples"
VERSION: Final = 1
PLACEMENTS: Final = ("first", "last", "replace")
_EXAMPLE_KEYS: Final = frozenset({"args", "question", "result"})
_EVIDENCE: Final = re.compile(r"#E\d")

Checker = Callable[[str | None, Any], bool]
RegistrySource = Tools | Callable[[], ToolRegistry]


@dataclass(frozen=True)
class BootstrapResult:
    """Examples per tool name (in the order they were found), and what produced them:
    tasks run, tasks answered correctly, the mode. `kept` counts the examples."""

    examples: Mapping[str, tuple[ToolExample, ...]] = field(default_factory=dict)
    tasks_run: int = 0
    tasks_correct: int = 0
    mode: str = "react"
    runs: tuple[RunExample, ...] = ()
    """Whole correct runs, as the registry's whole-run examples."""

    @property
    def kept(self) -> int:
        return sum(len(found) for found in self.examples.values())

    def apply(self, registry: ToolRegistry, *, placement: str = "first", strict: bool = True) -> ToolRegistry:
        """A new registry (same limits) whose tools carry these examples: placement
        "first" puts them before the tools' declared examples (the default prompts show
        a tool's first examples within their budget, so these are the ones shown),
        "last" after them, "replace" instead of them; the whole runs go before, after
        or instead of the registry's own whole-run examples likewise. The given registry
        and its tools are not changed. Examples for a tool the registry lacks: ExamplesError when
        strict, else left out with a warning. An example the tool's schema rejects:
        ExamplesError."""
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
        missing = sorted(name for name in self.examples if name not in registry)
        if missing:
            message = (f"examples for tool(s) {', '.join(map(repr, missing))} that the registry does not have "
                       f"(it has {', '.join(registry.names) or 'none'})")
            if strict:
                raise ExamplesError(message)
            warnings.warn(message + "; left out", stacklevel=2)
        tools = []
        for tool in registry:
            found = self.examples.get(tool.name, ())
            if not found and placement != "replace":
                tools.append(tool)
                continue
            try:
                tools.append(tool.with_examples(found, replace=placement == "replace", first=placement == "first",
                                                source="bootstrap"))
            except ToolDefinitionError as exc:
                raise ExamplesError(str(exc)) from None
        own = () if placement == "replace" else registry.examples
        runs = [*self.runs, *own] if placement == "first" else [*own, *self.runs]
        try:
            return ToolRegistry(tools, tool_timeout_s=registry.tool_timeout_s,
                                max_observation_chars=registry.max_observation_chars, examples=runs)
        except ToolDefinitionError as exc:
            raise ExamplesError(str(exc)) from None

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "mode": self.mode,
            "tasks_run": self.tasks_run,
            "tasks_correct": self.tasks_correct,
            "tools": {name: [e.to_dict() for e in found] for name, found in self.examples.items()},
            "runs": [r.to_dict() for r in self.runs],
        }

    @classmethod
    def from_dict(cls, data: object, where: str = "examples") -> BootstrapResult:
        """The inverse of to_dict; ExamplesError naming what is wrong."""
        if not isinstance(data, Mapping):
            raise ExamplesError(f"{where}: expected a JSON object, got {type(data).__name__}")
        if data.get("format") != FORMAT:
            raise ExamplesError(f"{where}: not a tool examples file (format {data.get('format')!r}, "
                                f"expected {FORMAT!r})")
        if data.get("version") != VERSION:
            raise ExamplesError(f"{where}: unsupported version {data.get('version')!r} (this loopwright "
                                f"reads version {VERSION})")
        tools = data.get("tools")
        if not isinstance(tools, Mapping):
            raise ExamplesError(f"{where}: 'tools' must be an object of tool name -> list of examples")
        examples: dict[str, tuple[ToolExample, ...]] = {}
        for name, items in tools.items():
            if not isinstance(items, list):
                raise ExamplesError(f"{where}: tool {name!r}: expected a list of examples, got {type(items).__name__}")
            examples[str(name)] = tuple(_example(item, f"{where}: tool {name!r} example {i}")
                                        for i, item in enumerate(items, 1))
        counts = {key: data.get(key, 0) for key in ("tasks_run", "tasks_correct")}
        for key, value in counts.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ExamplesError(f"{where}: {key!r} must be a whole number >= 0, got {value!r}")
        mode = data.get("mode", "react")
        if not isinstance(mode, str):
            raise ExamplesError(f"{where}: 'mode' must be a string, got {mode!r}")
        runs = data.get("runs", [])
        if not isinstance(runs, list):
            raise ExamplesError(f"{where}: 'runs' must be a list of whole-run examples, got {type(runs).__name__}")
        whole = tuple(_run(item, f"{where}: run {i}") for i, item in enumerate(runs, 1))
        return cls(examples, counts["tasks_run"], counts["tasks_correct"], mode, whole)

    def save(self, path: str | Path) -> Path:
        """Write the examples as JSON (the versioned format `load` reads); returns the path."""
        target = Path(path)
        target.write_text(json.dumps(self.to_dict(), indent=2, ensure_ascii=False, default=str) + "\n",
                          encoding="utf-8")
        return target

    @classmethod
    def load(cls, path: str | Path) -> BootstrapResult:
        """Examples saved by `save`; ExamplesError for a missing file, bad JSON or another format."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ExamplesError(f"{path}: no such file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ExamplesError(f"{path}: cannot be read ({exc})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ExamplesError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
        return cls.from_dict(data, str(path))


def _example(item: object, where: str) -> ToolExample:
    if not isinstance(item, Mapping) or not isinstance(item.get("args"), Mapping):
        raise ExamplesError(f"{where}: expected an object with 'args' (an object), got {item!r:.80}")
    unknown = sorted(set(map(str, item)) - _EXAMPLE_KEYS)
    if unknown:
        raise ExamplesError(f"{where}: unknown key(s) {', '.join(unknown)}; accepted: args, question, result")
    question = item.get("question")
    if question is not None and not isinstance(question, str):
        raise ExamplesError(f"{where}: 'question' must be a string, got {question!r:.80}")
    return ToolExample(dict(item["args"]), question, item.get("result"), "bootstrap")


def _run(item: object, where: str) -> RunExample:
    """A whole-run example's shape; its calls are checked against the tools in `apply`."""
    if not isinstance(item, Mapping) or set(map(str, item)) != {"question", "calls", "answer"}:
        raise ExamplesError(f"{where}: expected an object with exactly 'question', 'calls', 'answer', got {item!r:.80}")
    calls = item["calls"]
    if not isinstance(item["question"], str) or not isinstance(calls, list) or not calls:
        raise ExamplesError(f"{where}: 'question' must be a string and 'calls' a non-empty list, got {item!r:.80}")
    made = []
    for k, call in enumerate(calls, 1):
        if not isinstance(call, Mapping) or set(map(str, call)) != {"tool", "args", "result"} or not isinstance(
            call["args"], Mapping
        ):
            raise ExamplesError(f"{where} call {k}: expected an object with 'tool', 'args' (an object), 'result', "
                                f"got {call!r:.80}")
        made.append(CallExample(str(call["tool"]), dict(call["args"]), call["result"]))
    return RunExample(item["question"], tuple(made), item["answer"], "bootstrap")


def whole_run(trace: Trace, registry: ToolRegistry) -> RunExample | None:
    """A run as a whole-run example: its question, every tool call with its result, and
    its answer; None when any step failed or was not a plain call or answer (a parse
    error, a nudge, a denial, a replan, a call the schema rejects) or no tool was called.
    Whether the answer is correct is the caller's to check."""
    calls = kept_calls(trace, registry)
    actions = [s for s in trace.steps if s.kind == "action"]
    clean = all(s.kind in ("action", "final", "plan", "solve") and s.error is None for s in trace.steps)
    if not clean or not calls or len(calls) != len(actions) or trace.final_answer is None:
        return None
    return RunExample(trace.task, tuple(CallExample(name, e.args, e.result) for name, e in calls),
                      trace.final_answer, "bootstrap")


def kept_calls(trace: Trace, registry: ToolRegistry, *, validate: bool = True) -> list[tuple[str, ToolExample]]:
    """The successful tool calls of one run, as (tool name, example): executed calls of
    a tool in `registry` that returned without an error (and, with validate, whose
    arguments the tool's schema accepts)."""
    out = []
    for step in trace.steps:
        if step.kind != "action" or step.tool is None or step.error is not None or step.observation is None:
            continue
        tool = registry.get(step.tool)
        if tool is None or not isinstance(step.args, dict) or _EVIDENCE.search(json.dumps(step.args, default=str)):
            continue  # a ReWOO plan's "#E1" is no argument another task can reuse
        if validate:
            try:
                tool.validate(step.args)
            except ValueError:
                continue
        out.append((tool.name, ToolExample(dict(step.args), trace.task, step.observation, "bootstrap")))
    return out


def _labelled(tasks: Iterable[Any]) -> list[tuple[str, Any]]:
    """(task, expected) pairs from pairs or from dicts with task/question and answer/expected."""
    pairs: list[tuple[str, Any]] = []
    for n, item in enumerate(tasks, 1):
        if isinstance(item, Mapping):
            try:
                found = load_dataset([item])[0]
            except ValueError as exc:
                raise ValueError(f"labelled task {n}: {str(exc).removeprefix('dataset item 1 ')}") from None
            pairs.append((found.task, found.expected))
        elif isinstance(item, Sequence) and not isinstance(item, str) and len(item) == 2 and isinstance(item[0], str):
            pairs.append((item[0], item[1]))
        else:
            raise ValueError(f"labelled task {n} must be a (task, expected) pair or a dict with 'task' and "
                             f"'answer', got {item!r:.80}")
    return pairs


def bootstrap_examples(
    labelled_tasks: Iterable[tuple[str, Any] | Mapping[str, Any]],
    policy: Policy,
    registry: RegistrySource,
    *,
    is_correct: Checker | None = None,
    mode: str = "react",
    max_steps: int = 6,
    max_per_tool: int | None = 4,
    dedupe: bool = True,
    validate: bool = True,
    max_runs: int | None = 4,
    **limits: Any,
) -> BootstrapResult:
    """Run each (task, expected) and keep the successful tool calls of the runs whose
    answer is correct, as examples per tool.

    registry: the tools, or a function making a fresh registry for each task (tools
    with state, say an inventory a task changes). is_correct(answer, expected) -> bool:
    default the normalised match `loopwright.batch.evaluation.is_correct` (the answer's
    last number, or the expected word). max_per_tool: examples kept per tool at most
    (None: all), in task order. dedupe: a call with the same arguments is kept once.
    validate: drop a call the tool's schema rejects. max_runs: correct runs kept whole
    (`whole_run`) at most, in task order (0: none; None: all). Other keyword arguments
    are the run's limits (prompts, dialect, on_repeat, ...)."""
    if max_per_tool is not None and (not isinstance(max_per_tool, int) or max_per_tool < 1):
        raise ValueError(f"max_per_tool must be a whole number >= 1 or None, got {max_per_tool!r}")
    if max_runs is not None and (not isinstance(max_runs, int) or isinstance(max_runs, bool) or max_runs < 0):
        raise ValueError(f"max_runs must be a whole number >= 0 or None, got {max_runs!r}")
    check = is_correct or default_is_correct
    make: Callable[[], Any] | None = None
    tools: Any = None
    if callable(registry) and not isinstance(registry, ToolRegistry):
        make = registry
    else:
        tools = as_registry(registry)  # a list of tools is made a registry once
    examples: dict[str, list[ToolExample]] = {}
    seen: set[tuple[str, str]] = set()
    runs: list[RunExample] = []
    run_count = correct = 0
    for task, expected in _labelled(labelled_tasks):
        if make is not None:
            tools = make()
        if not isinstance(tools, ToolRegistry):
            raise TypeError(f"the registry function must return a ToolRegistry, got {type(tools).__name__}")
        trace = run(task, policy, tools, mode=mode, max_steps=max_steps, **limits)
        run_count += 1
        if not (trace.answered and check(trace.final_answer, expected)):
            continue
        correct += 1
        whole = whole_run(trace, tools) if max_runs is None or len(runs) < max_runs else None
        if whole is not None and whole.question not in {r.question for r in runs}:
            runs.append(whole)
        for name, example in kept_calls(trace, tools, validate=validate):
            key = (name, json.dumps(example.args, sort_keys=True, default=str))
            found = examples.setdefault(name, [])
            if (dedupe and key in seen) or (max_per_tool is not None and len(found) >= max_per_tool):
                continue
            seen.add(key)
            found.append(example)
    return BootstrapResult({k: tuple(v) for k, v in examples.items()}, run_count, correct, mode, tuple(runs))
