"""Evaluate a policy on a dataset: `lw.evaluate(dataset, policy, registry, modes=[...])`.

A dataset is a list of items, each a dict with the task (`task` or `question`) and the
expected answer (`answer` or `expected`), or a JSONL file of them. Every mode runs the
whole dataset through `arun_many` (so concurrency, journaling and failure isolation are
the batch's), and each answer is scored: "exact" (case, surrounding space and a final
period ignored), "numeric" (the first number in the answer within `tolerance` of the
expected number, absolute or relative), "contains" (the expected text inside the
answer), "answer" (`is_correct`: the answer's last number, or the expected word), or a function (answer, expected) -> bool | float in [0, 1].

The report has one summary per mode (accuracy, model and tool calls, tokens sent,
evaluated and generated, wall time, stop reasons) and one row per item and mode; it
renders as a rich table and as JSON here, and as an HTML page with each item's trace in
`loopwright.interfaces.batch_cli.report_html` (`loopwright eval --html`).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loopwright.batch.runner import PolicySource, Progress, arun_many
from loopwright.tools.toolset import Tools
from loopwright.trace import Trace

Scorer = Callable[[str | None, Any], "bool | float"]
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")


def _normal(text: Any) -> str:
    return " ".join(str(text).split()).casefold().rstrip(".")


def exact(answer: str | None, expected: Any) -> bool:
    """The answer equals the expected one, ignoring case, spacing and a final period."""
    return answer is not None and _normal(answer) == _normal(expected)


def contains(answer: str | None, expected: Any) -> bool:
    """The expected text appears in the answer (case and spacing ignored)."""
    return answer is not None and _normal(expected) in _normal(answer)


def first_number(text: str) -> float | None:
    """The first number written in `text` (thousands separators allowed), or None."""
    match = _NUMBER.search(text)
    return None if match is None else float(match.group(0).replace(",", ""))


def numeric(tolerance: float = 1e-6, *, relative: bool = False) -> Scorer:
    """A scorer: the first number in the answer is within `tolerance` of the expected
    number (|a - e| <= tolerance, or <= tolerance * |e| when relative)."""
    if not (isinstance(tolerance, (int, float)) and tolerance >= 0 and math.isfinite(tolerance)):
        raise ValueError(f"tolerance must be a finite number >= 0, got {tolerance!r}")

    def score(answer: str | None, expected: Any) -> bool:
        if answer is None:
            return False
        got = first_number(answer)
        want = expected if isinstance(expected, (int, float)) else first_number(str(expected))
        if got is None or want is None:
            return False
        limit = tolerance * abs(float(want)) if relative else tolerance
        return abs(got - float(want)) <= limit

    score.__name__ = f"numeric(tolerance={tolerance}{', relative' if relative else ''})"
    return score


def is_correct(answer: str | None, expected: Any) -> bool:
    """Whether `answer` gives `expected`. A number must be the answer's last number
    (thousands separators and a trailing .0 ignored), and an unevaluated expression is
    no answer ("144 / 12" does not give 12; "144 / 12 = 12" does). A word must appear as
    a word, case-insensitively. The benchmarks' check, and `bootstrap_examples`' default."""
    if answer is None:
        return False
    expected = str(expected)
    if re.fullmatch(r"-?\d+(\.\d+)?", expected):
        tail = answer.rsplit("=", 1)[-1]
        if re.search(r"\d\s*(?:[-+*/^%×÷])\s*\d", tail):
            return False
        numbers = re.findall(r"-?\d[\d,]*(?:\.\d+)?", tail)
        return bool(numbers) and _number(numbers[-1].rstrip(",")) == float(expected)
    return re.search(rf"\b{re.escape(expected)}\b", answer, re.IGNORECASE) is not None


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


SCORERS: dict[str, Scorer] = {"exact": exact, "contains": contains, "numeric": numeric(), "answer": is_correct}


def get_scorer(scorer: str | Scorer, tolerance: float | None = None) -> tuple[str, Scorer]:
    """A scorer by name ("exact", "numeric", "contains") or a function, with its name."""
    if callable(scorer):
        return getattr(scorer, "__name__", "custom"), scorer
    if scorer == "numeric" and tolerance is not None:
        made = numeric(tolerance)
        return made.__name__, made
    if scorer not in SCORERS:
        raise ValueError(f"scorer must be one of {sorted(SCORERS)} or a function, got {scorer!r}")
    return scorer, SCORERS[scorer]


@dataclass(frozen=True)
class EvalItem:
    task: str
    expected: Any
    id: str


def load_dataset(dataset: str | Path | Iterable[Mapping[str, Any]]) -> list[EvalItem]:
    """Items from a JSONL path or from dicts; ValueError naming the line that is wrong."""
    if isinstance(dataset, (str, Path)):
        rows: list[Any] = []
        for n, line in enumerate(Path(dataset).read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{dataset}:{n}: not JSON ({exc.msg})") from None
    else:
        rows = list(dataset)
    items = []
    for n, row in enumerate(rows, 1):
        if not isinstance(row, Mapping):
            raise ValueError(f"dataset item {n} must be an object, got {type(row).__name__}")
        task = row.get("task", row.get("question"))
        if not isinstance(task, str):
            raise ValueError(f"dataset item {n} needs a 'task' (or 'question') string")
        if "answer" not in row and "expected" not in row:
            raise ValueError(f"dataset item {n} needs an 'answer' (or 'expected')")
        expected = row["answer"] if "answer" in row else row["expected"]
        items.append(EvalItem(task, expected, str(row.get("id", n))))
    return items


@dataclass(frozen=True)
class ItemResult:
    id: str
    task: str
    expected: Any
    answer: str | None
    score: float
    stopped_reason: str | None
    llm_calls: int
    tool_calls: int
    prompt_tokens: int
    evaluated_tokens: int
    completion_tokens: int
    duration_s: float


@dataclass(frozen=True)
class ModeSummary:
    mode: str
    items: int
    accuracy: float
    llm_calls: int
    tool_calls: int
    prompt_tokens: int
    evaluated_tokens: int
    completion_tokens: int
    wall_s: float
    stopped: dict[str, int]


@dataclass(frozen=True)
class EvalReport:
    """What `evaluate` measured: a summary and the item rows per mode, and the traces."""

    scorer: str
    summaries: dict[str, ModeSummary]
    results: dict[str, list[ItemResult]]
    traces: dict[str, list[Trace]] = field(repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: scorer, a summary per mode, and every item's row per mode."""
        return {
            "scorer": self.scorer,
            "modes": {m: asdict(s) for m, s in self.summaries.items()},
            "items": {m: [_json_safe(asdict(r)) for r in rows] for m, rows in self.results.items()},
        }

    def table(self) -> Any:
        """The per-mode comparison as a rich Table."""
        from rich.table import Table

        table = Table(title=f"evaluation ({self.scorer})")
        for name in ("mode", "items", "accuracy", "llm calls", "tool calls", "tokens sent",
                     "tokens evaluated", "tokens generated", "wall s", "stopped"):
            table.add_column(name, justify="left" if name in ("mode", "stopped") else "right")
        for s in self.summaries.values():
            stopped = ", ".join(f"{k} {v}" for k, v in sorted(s.stopped.items()))
            table.add_row(s.mode, str(s.items), f"{s.accuracy:.1%}", str(s.llm_calls), str(s.tool_calls),
                          str(s.prompt_tokens), str(s.evaluated_tokens), str(s.completion_tokens),
                          f"{s.wall_s:.2f}", stopped)
        return table


def _json_safe(row: dict[str, Any]) -> dict[str, Any]:
    safe: dict[str, Any] = json.loads(json.dumps(row, default=str))
    return safe


def _score(scorer: Scorer, answer: str | None, expected: Any) -> float:
    value = scorer(answer, expected)
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)) and 0 <= value <= 1:
        return float(value)
    raise ValueError(f"a scorer must return a bool or a number in [0, 1], got {value!r}")


def _row(item: EvalItem, trace: Trace, scorer: Scorer) -> ItemResult:
    u = trace.usage
    return ItemResult(item.id, item.task, item.expected, trace.final_answer,
                      _score(scorer, trace.final_answer, item.expected), trace.stopped_reason,
                      trace.llm_calls, trace.tool_calls, u.prompt_tokens, u.evaluated_tokens,
                      u.completion_tokens, trace.duration_s)


def _summary(mode: str, rows: Sequence[ItemResult], wall: float) -> ModeSummary:
    return ModeSummary(
        mode, len(rows), sum(r.score for r in rows) / len(rows) if rows else 0.0,
        sum(r.llm_calls for r in rows), sum(r.tool_calls for r in rows),
        sum(r.prompt_tokens for r in rows), sum(r.evaluated_tokens for r in rows),
        sum(r.completion_tokens for r in rows), round(wall, 6),
        dict(Counter(str(r.stopped_reason) for r in rows)),
    )


async def aevaluate(
    dataset: str | Path | Iterable[Mapping[str, Any]],
    policy: PolicySource,
    registry: Tools,
    *,
    modes: Sequence[str] = ("react",),
    scorer: str | Scorer = "exact",
    tolerance: float | None = None,
    concurrency: int = 4,
    progress: Callable[[str, int, Trace], None] | None = None,
    **options: Any,
) -> EvalReport:
    """`evaluate`, awaited."""
    items = load_dataset(dataset)
    name, score = get_scorer(scorer, tolerance)
    if isinstance(modes, str):
        modes = [modes]
    summaries: dict[str, ModeSummary] = {}
    results: dict[str, list[ItemResult]] = {}
    traces: dict[str, list[Trace]] = {}
    base_id = options.pop("batch_id", "eval")
    for mode in modes:
        each: Progress | None = None
        if progress is not None:
            def each(index: int, trace: Trace, mode: str = mode) -> None:
                progress(mode, index, trace)
        started = time.perf_counter()
        got = await arun_many([i.task for i in items], policy, registry, mode=mode,
                              concurrency=concurrency, progress=each,
                              batch_id=f"{base_id}-{mode}",
                              **options)
        wall = time.perf_counter() - started
        rows = [_row(item, trace, score) for item, trace in zip(items, got, strict=True)]
        summaries[mode], results[mode], traces[mode] = _summary(mode, rows, wall), rows, got
    return EvalReport(name, summaries, results, traces)


def evaluate(
    dataset: str | Path | Iterable[Mapping[str, Any]],
    policy: PolicySource,
    registry: Tools,
    **options: Any,
) -> EvalReport:
    """Run every item of `dataset` in each of `modes` and score the answers.

    scorer: "exact", "numeric" (with `tolerance`), "contains", or a function
    (answer, expected) -> bool | float. concurrency, store, executor and every limit of
    `run` are passed to `run_many`. progress(mode, index, trace) is called as each run
    ends. Returns an EvalReport (`.summaries`, `.results`, `.table()`, `.to_dict()`,
    `.html()`).
    """
    from loopwright.offload import run_until_complete

    report: EvalReport = run_until_complete(aevaluate(dataset, policy, registry, **options))
    return report


__all__ = ["EvalReport", "ItemResult", "ModeSummary", "aevaluate", "contains", "evaluate",
           "exact", "get_scorer", "load_dataset", "numeric"]
