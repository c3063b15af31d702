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
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

import loopwright as lw
from loopwright.errors import LoopwrightError
from loopwright.modes import MODES
from loopwright.trace import Step, Trace

EXIT_ANSWERED = 0
EXIT_NO_ANSWER = 1
EXIT_USAGE = 2

EXIT_CODES_HELP = """\
exit codes:
  0  the run answered (stop reason "final")
  1  the run stopped without an answer (a limit, an error, Ctrl-C)
  2  usage error (bad arguments, tools that cannot be loaded, no model)
"""


class UsageError(Exception):
    """Bad command-line input: printed without a traceback, exit code 2."""


@dataclass(frozen=True)
class Subcommand:
    """A `loopwright <name>` subcommand: `setup` adds its arguments to its parser,
    `handler` runs it and returns the exit code."""

    name: str
    help: str
    setup: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]
    epilog: str | None = None


SUBCOMMANDS: dict[str, Subcommand] = {}


def add_subcommand(
    name: str,
    help: str,
    setup: Callable[[argparse.ArgumentParser], None],
    handler: Callable[[argparse.Namespace], int],
    *,
    epilog: str | None = None,
) -> None:
    """Register a subcommand (a later registration under the same name replaces it)."""
    SUBCOMMANDS[name] = Subcommand(name, help, setup, handler, epilog)


def _register_provided() -> None:
    """Add the subcommands other modules provide, where present: `runs` (the run
    journal, loopwright.store_cli) and `view` (the trace viewer, loopwright.viewer)."""
    if "runs" not in SUBCOMMANDS:
        try:
            from loopwright import store_cli
        except ImportError:
            pass
        else:
            register = getattr(store_cli, "register", None)
            if callable(register):
                register()
    if "view" not in SUBCOMMANDS:
        try:
            from loopwright import viewer
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


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def load_tools(specs: Sequence[str] | None) -> lw.ToolRegistry:
    """A registry from `module:attr` specs; the demo tools when there are none."""
    if not specs:
        from loopwright.demo_tools import demo_registry

        return demo_registry()
    registry = lw.ToolRegistry()
    for spec in specs:
        module_name, _, attr = spec.partition(":")
        if not module_name or not attr:
            raise UsageError(f"--tools takes MODULE:ATTR, got {spec!r}")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise UsageError(f"cannot import {module_name!r} for --tools {spec}: {exc}") from None
        try:
            value: Any = getattr(module, attr)
        except AttributeError:
            raise UsageError(f"{module_name!r} has no attribute {attr!r}") from None
        items = list(value) if isinstance(value, (lw.ToolRegistry, list, tuple)) else [value]
        for item in items:
            if not (isinstance(item, lw.Tool) or callable(item)):
                raise UsageError(f"{spec}: {item!r} is not a tool or a function")
            try:
                registry.register(item)
            except LoopwrightError as exc:
                raise UsageError(f"{spec}: {exc}") from None
    return registry


def make_model(args: argparse.Namespace) -> Any:
    """The policy the run uses: a cassette with --replay, a server with --base-url, else
    the embedded model; wrapped in a Recorder with --record. Other subcommands (`runs
    resume`) call it with a subset of run's flags; absent ones take run's defaults."""
    record = getattr(args, "record", None)
    model = _base_model(args)
    return lw.models.Recorder(model, record) if record else model


def _base_model(args: argparse.Namespace) -> Any:
    replay = getattr(args, "replay", None)
    base_url = getattr(args, "base_url", None)
    name = getattr(args, "model", None)
    dialect = getattr(args, "dialect", "json")
    if replay:
        if not Path(replay).is_file():
            raise UsageError(f"--replay {replay!r} is not a file")
        try:
            return lw.models.Replay(replay)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if base_url:
        if not name:
            raise UsageError("--base-url needs --model NAME (the server's model name)")
        return lw.models.OpenAICompatible(
            base_url,
            name,
            getattr(args, "api_key", None),
            mode="chat" if dialect == "native" else "completion",
        )
    if dialect == "native":
        raise UsageError(
            "--dialect native needs --base-url: the embedded model has no tool calling"
        )
    if name and not Path(name).is_file():
        raise UsageError(f"--model {name!r} is not a file (a .gguf model is expected)")
    try:
        return lw.models.LlamaCpp(
            name,
            n_ctx=getattr(args, "n_ctx", 2048),
            grammar=not getattr(args, "no_grammar", False),
        )
    except lw.ModelNotFoundError as exc:
        raise UsageError(str(exc)) from None


def _run(args: argparse.Namespace) -> int:
    console = Console(file=sys.stderr, highlight=False, soft_wrap=True)
    registry = load_tools(args.tools)
    model = make_model(args)
    limits: dict[str, Any] = {}
    if args.max_steps is not None or args.mode not in ("reflexion", "tot"):
        limits["max_steps"] = args.max_steps or 6
    if not args.tools:
        from loopwright.demo_tools import demo_prompts

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
