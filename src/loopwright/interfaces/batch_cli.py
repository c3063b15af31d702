"""`loopwright batch`, `loopwright eval` and `loopwright bootstrap`: many runs from a JSONL file.

    loopwright batch tasks.jsonl --concurrency 8 --out results.jsonl [--db runs.db]
    loopwright batch tasks.jsonl --out results.jsonl --dbos URL --queue NAME --agent NAME
    loopwright eval dataset.jsonl --modes react,rewoo --scorer numeric --tolerance 0.01 \
        [--json report.json] [--html report.html]
    loopwright bootstrap dataset.jsonl --out examples.json [--tools MODULE:ATTR]

A tasks file has one task per line: a JSON string, or an object with "task" (or
"question"). With --db the batch is journaled; the same command run again skips the
tasks that finished and resumes the others. The policy is the model the `run` command
would use (--model, --base-url, --replay), or --policy MODULE:ATTR (a policy, or a
`loopwright.policy_factory(...)`).
With --dbos the tasks go on a DBOS queue instead, and the workers serving it
(`loopwright worker`) run them with their DBOSAgent; the command waits for the results and
writes them in input order. Task i is the run `task_run_id(i, task, batch id)`, so the
same command run again waits for the same runs.
"""

from __future__ import annotations

import argparse
import html
import importlib
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from loopwright.batch import run_many
from loopwright.batch.evaluation import EvalReport
from loopwright.interfaces.common import (
    EXIT_ANSWERED,
    EXIT_NO_ANSWER,
    N_CTX_HELP,
    UsageError,
    _non_negative_int,
    _positive_int,
    add_subcommand,
    load_tools,
    make_model,
    output_path,
)
from loopwright.interfaces.dbos_cli import (  # (dbos loads only with --dbos)
    add_batch_args,
    batch_on_queue,
)
from loopwright.runtime import MODES
from loopwright.trace import Trace

BATCH_HELP = "run every task of a JSONL file, N at a time, with progress and resumption"
EVAL_HELP = "score a policy on a JSONL dataset in one or more modes; table and JSON report"
BOOTSTRAP_HELP = "run tasks with known answers and save the tool calls of the correct runs as tool examples"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--concurrency", type=_positive_int, default=4, help="runs in flight at once")
    p.add_argument("--db", metavar="PATH", help="journal every run here; a re-run resumes")
    p.add_argument("--batch-id", default=None, help="prefix of the journaled run ids")
    _policy_flags(p)


def _policy_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", metavar="MODULE:ATTR",
                   help="a policy or loopwright.policy_factory(...) to use instead of a model")
    p.add_argument("--model", metavar="PATH_OR_NAME",
                   help="a .gguf file, hf:OWNER/NAME/FILE.gguf (the Hugging Face hub), or with --base-url the model name")
    p.add_argument("--base-url", help="an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--api-key", default=None, help="API key for --base-url")
    p.add_argument("--replay", metavar="CASSETTE.jsonl", help="answer model calls from a cassette")
    p.add_argument("--tools", nargs="+", metavar="MODULE:ATTR", help="tools (default: the demo tools)")
    p.add_argument("--max-steps", type=_positive_int, default=6)
    p.add_argument("--token-budget", type=_positive_int, default=None)
    p.add_argument("--timeout-s", type=float, default=None, help="wall-clock limit of each run")
    p.add_argument("--max-replans", type=_non_negative_int, default=2)
    p.add_argument("--no-grammar", action="store_true", help="do not constrain local steps")
    p.add_argument("--n-ctx", type=_positive_int, default=None, help=N_CTX_HELP)
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def setup_batch(p: argparse.ArgumentParser) -> None:
    p.add_argument("tasks", help="a JSONL file: one task per line (a string, or {\"task\": ...})")
    p.add_argument("--out", required=True, metavar="RESULTS.jsonl", help="one result line per task, in input order")
    p.add_argument("--mode", choices=sorted(MODES), default="react")
    p.add_argument("--traces", action="store_true", help="include each full trace in --out")
    _common(p)
    add_batch_args(p)


def setup_eval(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help="a JSONL file: {\"task\" (or \"question\"), \"answer\"} per line")
    p.add_argument("--modes", default="react", help="comma-separated modes to compare (default: react)")
    p.add_argument("--scorer", default="exact",
                   help="exact, numeric, contains, answer (the last number, or the word), or MODULE:ATTR (a function (answer, expected) -> bool)")
    p.add_argument("--tolerance", type=float, default=None, help="for --scorer numeric (absolute)")
    p.add_argument("--json", metavar="REPORT.json", help="write the report as JSON here")
    p.add_argument("--html", metavar="REPORT.html", help="write the report with every trace as HTML here")
    _common(p)


def setup_bootstrap(p: argparse.ArgumentParser) -> None:
    p.add_argument("tasks", help="a JSONL file: {\"task\" (or \"question\"), \"answer\"} per line")
    p.add_argument("--out", required=True, metavar="EXAMPLES.json",
                   help="where to write the examples (`loopwright run --examples` reads it)")
    p.add_argument("--mode", choices=sorted(MODES), default="react")
    p.add_argument("--scorer", default="answer",
                   help="when an answer is correct: answer (the last number, or the word; default), exact, "
                   "numeric, contains, or MODULE:ATTR (a function (answer, expected) -> bool)")
    p.add_argument("--max-per-tool", type=_positive_int, default=4, help="examples kept per tool at most")
    _policy_flags(p)


def run_bootstrap(args: argparse.Namespace) -> int:
    from loopwright.batch.bootstrap import bootstrap_examples
    from loopwright.batch.evaluation import get_scorer, load_dataset

    out = output_path(args.out, "--out")
    scorer: Any = args.scorer if ":" not in args.scorer else _import(args.scorer, "--scorer")
    try:
        items = load_dataset(args.tasks)
        _, check = get_scorer(scorer)
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    policy, registry = _policy(args), load_tools(args.tools)
    result = bootstrap_examples([(i.task, i.expected) for i in items], policy, registry, mode=args.mode,
                                is_correct=lambda answer, expected: bool(check(answer, expected) >= 1),
                                max_per_tool=args.max_per_tool, **_limits(args))
    result.save(out)
    if not args.quiet:
        counts = ", ".join(f"{name} {len(found)}" for name, found in result.examples.items()) or "none"
        print(f"{result.tasks_correct} of {result.tasks_run} tasks answered correctly; kept {result.kept} "
              f"example(s) ({counts}) and {len(result.runs)} whole run(s) in {out}", file=sys.stderr)
    return EXIT_ANSWERED if result.kept else EXIT_NO_ANSWER


def _import(spec: str, flag: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"{flag} takes MODULE:ATTR, got {spec!r}")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"cannot load {flag} {spec}: {exc}") from None


def _policy(args: argparse.Namespace) -> Any:
    if args.policy:
        return _import(args.policy, "--policy")
    return make_model(args)


def _limits(args: argparse.Namespace) -> dict[str, Any]:
    limits: dict[str, Any] = {"max_steps": args.max_steps, "max_replans": args.max_replans}
    if args.token_budget is not None:
        limits["token_budget"] = args.token_budget
    if args.timeout_s is not None:
        limits["timeout_s"] = args.timeout_s
    return limits


def read_tasks(path: str) -> list[str]:
    """Tasks from a JSONL file; UsageError naming the line that is not a task."""
    if not Path(path).is_file():
        raise UsageError(f"{path!r} is not a file")
    tasks = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}:{n}: not JSON ({exc.msg})") from None
        task = item.get("task", item.get("question")) if isinstance(item, dict) else item
        if not isinstance(task, str):
            raise UsageError(f"{path}:{n}: expected a string or an object with \"task\", got {line[:80]!r}")
        tasks.append(task)
    return tasks


class _Bar:
    """A rich progress bar: done of total, failed, tokens, ETA."""

    def __init__(self, total: int, quiet: bool, label: str = "runs") -> None:
        self.console = Console(file=sys.stderr, highlight=False)
        self.failed = self.tokens = 0
        self.progress = Progress(
            TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("failed {task.fields[failed]}"), TextColumn("tokens {task.fields[tokens]}"),
            TextColumn("ETA"), TimeRemainingColumn(),
            console=self.console, disable=quiet,
        )
        self.task = self.progress.add_task(label, total=total, failed=0, tokens=0)

    def update(self, index: int, trace: Trace) -> None:
        if trace.stopped_reason != "final":
            self.failed += 1
        self.tokens += trace.usage.total_tokens
        self.progress.update(self.task, advance=1, failed=self.failed, tokens=self.tokens)


def _store(args: argparse.Namespace) -> Any:
    if not args.db:
        return None
    from loopwright.durable.sqlite import SQLiteStore

    return SQLiteStore(args.db)


def _result_line(index: int, trace: Trace, full: bool) -> dict[str, Any]:
    error = next((s.error for s in reversed(trace.steps) if s.kind == "error" and s.error), None)
    line: dict[str, Any] = {
        "index": index, "task": trace.task, "final_answer": trace.final_answer,
        "stopped_reason": trace.stopped_reason, "llm_calls": trace.llm_calls,
        "tool_calls": trace.tool_calls, "prompt_tokens": trace.usage.prompt_tokens,
        "evaluated_tokens": trace.usage.evaluated_tokens,
        "completion_tokens": trace.usage.completion_tokens, "duration_s": trace.duration_s,
        "run_id": trace.run_id, "error": error,
    }
    if full:
        line["trace"] = trace.to_dict()
    return line


def run_batch(args: argparse.Namespace) -> int:
    tasks = read_tasks(args.tasks)
    if args.dbos:
        return _run_batch_on_queue(args, tasks)
    policy, registry = _policy(args), load_tools(args.tools)
    store = _store(args)
    bar = _Bar(len(tasks), args.quiet)
    options: dict[str, Any] = {"batch_id": args.batch_id} if args.batch_id else {}
    try:
        with bar.progress:
            traces = run_many(tasks, policy, registry, mode=args.mode, concurrency=args.concurrency,
                              store=store, progress=bar.update, **options, **_limits(args))
    finally:
        if store is not None:
            store.close()
    return _write_results(args, traces, bar)


def _run_batch_on_queue(args: argparse.Namespace, tasks: list[str]) -> int:
    output_path(args.out, "--out")
    bar = _Bar(len(tasks), args.quiet)
    traces = batch_on_queue(args, tasks, bar.update, lambda: bar.progress)
    return _write_results(args, traces, bar)


def _write_results(args: argparse.Namespace, traces: list[Trace], bar: _Bar) -> int:
    with open(args.out, "w", encoding="utf-8") as out:
        for i, trace in enumerate(traces):
            out.write(json.dumps(_result_line(i, trace, args.traces), default=str) + "\n")
    answered = sum(t.stopped_reason == "final" for t in traces)
    if not args.quiet:
        bar.console.print(f"{answered} of {len(traces)} answered; results in {args.out}")
    return EXIT_ANSWERED if answered == len(traces) else EXIT_NO_ANSWER


def run_eval(args: argparse.Namespace) -> int:
    from loopwright.batch.evaluation import evaluate, load_dataset

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise UsageError(f"--modes takes a comma-separated list of {sorted(MODES)}, got {args.modes!r}")
    scorer: Any = args.scorer if ":" not in args.scorer else _import(args.scorer, "--scorer")
    try:
        items = load_dataset(args.dataset)
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    policy, registry = _policy(args), load_tools(args.tools)
    store = _store(args)
    bar = _Bar(len(items) * len(modes), args.quiet, "eval")
    options: dict[str, Any] = {"batch_id": args.batch_id} if args.batch_id else {}
    try:
        with bar.progress:
            report = evaluate([{"task": i.task, "answer": i.expected, "id": i.id} for i in items],
                              policy, registry, modes=modes, scorer=scorer, tolerance=args.tolerance,
                              concurrency=args.concurrency, store=store,
                              progress=lambda mode, i, t: bar.update(i, t), **options, **_limits(args))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    finally:
        if store is not None:
            store.close()
    Console(highlight=False).print(report.table())
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=2, default=str), encoding="utf-8")
    if args.html:
        Path(args.html).write_text(report_html(report), encoding="utf-8")
    return EXIT_ANSWERED


def report_html(report: EvalReport) -> str:
    """A self-contained HTML page: the comparison, then every item per mode with its
    trace rendered by the trace viewer."""
    from loopwright.interfaces.viewer import render_html

    head = "".join(f"<th>{html.escape(h)}</th>" for h in
                   ("mode", "items", "accuracy", "llm calls", "tool calls", "tokens sent",
                    "tokens evaluated", "wall s"))
    rows = "".join(
        f"<tr><td>{html.escape(s.mode)}</td><td>{s.items}</td><td>{s.accuracy:.1%}</td>"
        f"<td>{s.llm_calls}</td><td>{s.tool_calls}</td><td>{s.prompt_tokens}</td>"
        f"<td>{s.evaluated_tokens}</td><td>{s.wall_s:.2f}</td></tr>"
        for s in report.summaries.values()
    )
    parts = [f"<h1>Evaluation ({html.escape(report.scorer)})</h1><table border=1><tr>{head}</tr>{rows}</table>"]
    for mode, items in report.results.items():
        parts.append(f"<h2>{html.escape(mode)}</h2>")
        for row, trace in zip(items, report.traces[mode], strict=True):
            mark = "correct" if row.score >= 1 else "wrong" if row.score <= 0 else f"{row.score:.2f}"
            parts.append(
                f"<details><summary>{html.escape(row.id)}: {mark}: {html.escape(row.task)} "
                f"(expected {html.escape(str(row.expected))}, got {html.escape(str(row.answer))})</summary>"
                f"<iframe style='width:100%;height:480px' srcdoc=\"{html.escape(render_html(trace), quote=True)}\">"
                f"</iframe></details>"
            )
    return "<!doctype html><meta charset=utf-8><title>loopwright evaluation</title>" + "".join(parts)


def register() -> None:
    add_subcommand("batch", BATCH_HELP, setup_batch, run_batch)
    add_subcommand("eval", EVAL_HELP, setup_eval, run_eval)
    add_subcommand("bootstrap", BOOTSTRAP_HELP, setup_bootstrap, run_bootstrap)
