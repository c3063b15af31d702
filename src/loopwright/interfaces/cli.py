"""The `loopwright` command.

    loopwright run "What is 17 * 23?"                       embedded local model, demo tools
    loopwright run "..." --mode rewoo --json                trace as JSON on stdout
    loopwright run "..." --base-url http://127.0.0.1:8000/v1 --model NAME

Each step is printed as it happens (on stderr, so `--json` output stays clean), then a
summary. Exit codes: 0 the run answered; 1 it stopped without an answer (a limit, an
error, Ctrl-C); 2 usage error (bad arguments, unknown tools, no model).

Subcommands register themselves through `add_subcommand`, so other modules can add
their own (`runs`, `view`, ...) without editing the parser here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

import loopwright as lw
from loopwright.errors import LoopwrightError
from loopwright.interfaces.common import (
    EXIT_ANSWERED,
    EXIT_CODES_HELP,
    EXIT_NO_ANSWER,
    EXIT_USAGE,
    SUBCOMMANDS,
    UsageError,
    _non_negative_int,
    _positive_int,
    add_subcommand,
    load_tools,
    make_model,
)
from loopwright.modes import MODES
from loopwright.trace import Step, Trace


def _register_provided() -> None:
    """Add the subcommands other modules provide, where present: `runs` (the run
    journal, loopwright.interfaces.runs) and `view` (the trace viewer, loopwright.interfaces.viewer)."""
    if "runs" not in SUBCOMMANDS:
        try:
            from loopwright.interfaces import runs as store_cli
        except ImportError:
            pass
        else:
            register = getattr(store_cli, "register", None)
            if callable(register):
                register()
    if "view" not in SUBCOMMANDS:
        try:
            from loopwright.interfaces import viewer
        except ImportError:
            return
        setup = getattr(viewer, "setup_view_parser", None)
        handler = getattr(viewer, "run_view", None)
        text = getattr(viewer, "VIEW_HELP", "write a trace as an HTML page")
        if callable(setup) and callable(handler):
            add_subcommand("view", str(text), setup, handler)


def build_parser() -> argparse.ArgumentParser:
    _register_provided()
    parser = argparse.ArgumentParser(
        prog="loopwright",
        description="A bounded, debuggable agent runtime.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"loopwright {lw.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in SUBCOMMANDS.values():
        p = sub.add_parser(
            command.name,
            help=command.help,
            description=command.help,
            epilog=command.epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.setup(p)
        p.set_defaults(_handler=command.handler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    handler = getattr(args, "_handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        code: int = handler(args)
    except UsageError as exc:
        print(f"loopwright: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return code


# ------------------------------------------------------------------------------ run


def _setup_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("task", help="the question or task for the agent")
    p.add_argument("--mode", choices=sorted(MODES), default="react")
    p.add_argument(
        "--model",
        metavar="PATH_OR_NAME",
        help="a .gguf file for the embedded runtime (default: the bundled SmolLM2-135M), "
        "or with --base-url the server's model name",
    )
    p.add_argument("--base-url", help="an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1")
    p.add_argument(
        "--api-key",
        default=os.environ.get("LOOPWRIGHT_API_KEY"),
        help="API key for --base-url (default: $LOOPWRIGHT_API_KEY)",
    )
    p.add_argument(
        "--tools",
        nargs="+",
        metavar="MODULE:ATTR",
        help="tools to load: a Tool, a function, a list of them or a ToolRegistry "
        "(default: the demo tools lookup and calculate)",
    )
    p.add_argument("--max-steps", type=_positive_int, default=None,
                   help="model calls (ReAct, reflexion, tot) or plan length (default 6; reflexion 20, tot 60)")
    p.add_argument("--token-budget", type=_positive_int, default=None)
    p.add_argument("--timeout-s", type=float, default=None, help="wall-clock limit of the run")
    p.add_argument("--max-replans", type=_non_negative_int, default=2)
    p.add_argument("--max-reflections", type=_non_negative_int, default=2, help="reflexion: critiques at most")
    p.add_argument("--on-tool-error", choices=("observe", "reflect"), default="observe",
                   help="react, reflexion: reflect asks for a critique after a tool error")
    p.add_argument("--search", choices=("bfs", "dfs"), default="bfs", help="tot: the search")
    p.add_argument("--breadth", type=_positive_int, default=2, help="tot: nodes BFS keeps per level")
    p.add_argument("--depth", type=_positive_int, default=3, help="tot: the longest path")
    p.add_argument("--max-nodes", type=_positive_int, default=24, help="tot: the node budget")
    p.add_argument("--no-grammar", action="store_true", help="do not constrain local steps")
    p.add_argument(
        "--dialect",
        choices=("json", "brackets", "native"),
        default="json",
        help="ReAct step format (native: the server's tool calling; needs --base-url)",
    )
    p.add_argument("--n-ctx", type=_positive_int, default=2048, help="local context size")
    p.add_argument("--record", metavar="CASSETTE.jsonl", help="append every model call here")
    p.add_argument(
        "--replay",
        metavar="CASSETTE.jsonl",
        help="answer model calls from a recorded cassette instead of a model",
    )
    p.add_argument(
        "--approve",
        action="store_true",
        help="ask at the terminal before any tool that needs approval (destructive tools); "
        "without it such calls are denied",
    )
    p.add_argument(
        "--db",
        metavar="PATH",
        help="journal the run in this SQLite file, so `loopwright runs resume` can continue it",
    )
    p.add_argument("--run-id", help="the journaled run's id (default: a new one)")
    p.add_argument("--json", action="store_true", help="print the trace as JSON on stdout")
    p.add_argument("--save", metavar="TRACE.json", help="write the trace as JSON here")
    p.add_argument("--quiet", action="store_true", help="no live steps and no summary")


def _run(args: argparse.Namespace) -> int:
    console = Console(file=sys.stderr, highlight=False, soft_wrap=True)
    registry = load_tools(args.tools)
    model = make_model(args)
    limits: dict[str, Any] = {}
    if args.max_steps is not None or args.mode not in ("reflexion", "tot"):
        limits["max_steps"] = args.max_steps or 6
    if not args.tools:
        from loopwright.interfaces.demo_tools import demo_prompts

        limits["prompts"] = demo_prompts()
    if args.token_budget is not None:
        limits["token_budget"] = args.token_budget
    if args.timeout_s is not None:
        limits["timeout_s"] = args.timeout_s
    if args.mode in ("react", "reflexion"):
        limits["dialect"] = args.dialect
        limits["on_tool_error"] = args.on_tool_error
    if args.mode == "reflexion":
        limits["max_reflections"] = args.max_reflections
    if args.mode == "tot":
        limits.update(search=args.search, breadth=args.breadth, depth=args.depth, max_nodes=args.max_nodes)
    if args.mode == "plan_execute":
        limits["max_replans"] = args.max_replans
    if args.approve:
        from loopwright.safety import terminal_approver

        limits["approver"] = terminal_approver(write=lambda text: console.print(escape(text), end=""))
    if args.db:
        try:
            limits["store"] = lw.SQLiteStore(args.db)
        except LoopwrightError as exc:
            raise UsageError(str(exc)) from None
        if args.run_id:
            limits["run_id"] = args.run_id
    elif args.run_id:
        raise UsageError("--run-id needs --db")
    if not args.quiet:
        console.print(
            f"[bold]{escape(args.task)}[/]  [dim]mode {args.mode} · "
            f"model {escape(str(getattr(model, 'name', model)))} · "
            f"tools {', '.join(registry.names)}[/]"
        )
    started = time.perf_counter()
    run = lw.iter_run(args.task, model, registry, mode=args.mode, **limits)
    interrupted = False
    try:
        for step in run:
            if not args.quiet:
                print_step(console, step)
        trace = run.trace
    except lw.RunInterrupted as exc:
        trace, interrupted = exc.trace, True
    except KeyboardInterrupt:  # Ctrl-C outside a step: keep what the run has
        trace, interrupted = run.trace, True
        if trace.stopped_reason is None:
            trace.stopped_reason = "interrupted"
    wall = time.perf_counter() - started
    if "store" in limits:
        limits["store"].close()
    if args.save:
        Path(args.save).write_text(trace.to_json(), encoding="utf-8")
    if args.json:
        sys.stdout.write(trace.to_json() + "\n")
        sys.stdout.flush()
    if not args.quiet:
        if interrupted:
            console.print("[yellow]interrupted: partial trace below[/]")
            console.print(escape(str(trace)))
        print_summary(console, trace, wall, args.save)
    return EXIT_ANSWERED if trace.answered else EXIT_NO_ANSWER


def print_step(console: Console, step: Step) -> None:
    """One step, as it happens: its thought, its call, what came back."""
    colour = {
        "final": "green",
        "solve": "green",
        "action": "cyan",
        "plan": "magenta",
        "replan": "magenta",
        "reflection": "magenta",
        "propose": "blue",
        "value": "blue",
        "nudge": "yellow",
        "parse_error": "red",
        "error": "red",
    }.get(step.kind, "white")
    lines: list[str] = []
    if step.thought:
        lines.append(f"[dim]{escape(_clip(step.thought, 160))}[/]")
    if step.tool is not None:
        args = json.dumps(step.args, ensure_ascii=False, default=str)
        label = f"{step.step_id} = " if step.step_id else ""
        lines.append(f"{escape(label + step.tool)}({escape(_clip(args, 120))})")
    elif step.raw.strip() and (step.kind != "final" or not step.thought):
        lines.append(escape(_clip(step.raw.strip(), 200)))
    if step.observation is not None:
        lines.append(f"→ {escape(_clip(step.observation, 200))}")
    if step.error is not None and step.error != step.observation:
        lines.append(f"[red]! {escape(_clip(step.error, 200))}[/]")
    head = f"[{colour}]{step.index:>2} {step.kind:<11}[/]"
    indent = " " * 14
    for i, line in enumerate(lines or [""]):
        console.print(f"{head if i == 0 else indent} {line}")


def print_summary(console: Console, trace: Trace, wall_s: float, saved: str | None) -> None:
    """Answer, stop reason, calls, tokens and time of a finished run."""
    u = trace.usage
    answer = trace.final_answer if trace.final_answer is not None else "(none)"
    console.print(f"[bold]Answer:[/] {escape(answer)}")
    console.print(
        f"stopped: {trace.stopped_reason} · model calls {trace.llm_calls} · "
        f"tool calls {trace.tool_calls} · tokens sent {u.prompt_tokens}, evaluated "
        f"{u.evaluated_tokens}, generated {u.completion_tokens}"
        f"{' (estimated)' if u.estimated else ''} · {wall_s:.2f}s"
        + (f" · saved {escape(saved)}" if saved else "")
        + (f" · run id {escape(trace.run_id)}" if trace.run_id else "")
    )


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


add_subcommand(
    "run",
    "run an agent on a task and print its trace",
    _setup_run,
    _run,
    epilog=EXIT_CODES_HELP,
)


if __name__ == "__main__":
    raise SystemExit(main())
