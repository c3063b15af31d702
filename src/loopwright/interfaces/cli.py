"""The `loopwright` command.

    loopwright run "What is 17 * 23?"                       embedded local model, demo tools
    loopwright run "..." --mode rewoo --json                trace as JSON on stdout
    loopwright run "..." --base-url http://127.0.0.1:8000/v1 --model NAME
    loopwright serve --tools mytools:registry --port 8000   a page that watches runs live

The answer goes to stdout, alone (`--json`: the whole trace as JSON instead); the header,
each step as it happens, a live line naming the call in flight with the model's text as it
is produced (when stderr is a terminal: the run then streams), the summary and errors go to
stderr. `--quiet` leaves only stdout.
Exit codes: 0 the run answered (stop "final", a non-empty answer); 1 it stopped without
an answer (a limit, an error, Ctrl-C); 2 usage error (bad arguments, an empty task,
unknown tools, a model that does not load, an existing --run-id), always one line on
stderr and always before any model call. Files the run writes (--save, --record, --db)
have their folders created before the run; a path that cannot be written is a usage
error then.

Subcommands register themselves through `add_subcommand`, so other modules can add
their own (`runs`, `view`, ...) without editing the parser here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

import loopwright as lw
from loopwright.errors import LoopwrightError
from loopwright.interfaces import mcp_cli
from loopwright.interfaces.common import (
    EXIT_ANSWERED,
    EXIT_CODES_HELP,
    EXIT_NO_ANSWER,
    EXIT_USAGE,
    SUBCOMMANDS,
    ArgumentParser,
    UsageError,
    _non_negative_int,
    _positive_int,
    _seconds,
    add_access_args,
    add_model_args,
    add_prompt_args,
    add_subcommand,
    add_tool_args,
    apply_examples,
    load_prompts,
    load_tools,
    make_model,
    open_store,
    output_path,
    serve_access,
)
from loopwright.interfaces.live import LiveLine, ModelText, describe_in_flight
from loopwright.runtime import MODES
from loopwright.runtime.front import start
from loopwright.safety import NO_APPROVER
from loopwright.trace import Step, Trace, clip


def _register_provided() -> None:
    """Add the subcommands other modules provide, where present: `runs` (the run
    journal, loopwright.interfaces.runs), `batch` and `eval` (loopwright.interfaces.batch_cli),
    `worker` (DBOS, loopwright.interfaces.dbos_cli) and `view` (the trace viewer,
    loopwright.interfaces.viewer)."""
    if "runs" not in SUBCOMMANDS:
        try:
            from loopwright.interfaces import runs as store_cli
        except ImportError:
            pass
        else:
            register = getattr(store_cli, "register", None)
            if callable(register):
                register()
    if "mcp" not in SUBCOMMANDS:
        from loopwright.interfaces import mcp_cli

        mcp_cli.register()
    if "batch" not in SUBCOMMANDS:
        from loopwright.interfaces import batch_cli

        batch_cli.register()
    if "worker" not in SUBCOMMANDS:
        from loopwright.interfaces import dbos_cli

        dbos_cli.register()
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
    parser = ArgumentParser(
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
        print(f"loopwright {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return code


# ------------------------------------------------------------------------------ run


def _setup_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("task", help="the question or task for the agent (not empty)")
    p.add_argument("--mode", choices=sorted(MODES), default="react")
    add_model_args(p)
    add_tool_args(p)
    mcp_cli.add_run_flags(p)
    add_prompt_args(p)
    add_limit_args(p)
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
    p.add_argument("--run-id", help="the journaled run's id (default: a new one; an existing one is refused)")
    p.add_argument("--json", action="store_true", help="print the whole trace as JSON on stdout instead of the answer")
    p.add_argument("--save", metavar="TRACE.json", help="write the trace as JSON here")
    p.add_argument("--quiet", action="store_true", help="no header, live steps or summary: only the answer")


def add_limit_args(p: argparse.ArgumentParser) -> None:
    """The limits and mode settings of a run (`run` and `serve` take the same)."""
    p.add_argument("--max-steps", type=_positive_int, default=None,
                   help="model calls (ReAct, reflexion, tot) or plan length (default 6; reflexion 20, tot 60)")
    p.add_argument("--token-budget", type=_positive_int, default=None)
    p.add_argument("--timeout-s", type=_seconds, default=None, help="wall-clock limit of the run")
    p.add_argument("--max-replans", type=_non_negative_int, default=2)
    p.add_argument("--max-reflections", type=_non_negative_int, default=2, help="reflexion: critiques at most")
    p.add_argument("--on-tool-error", choices=("observe", "reflect"), default="observe",
                   help="react, reflexion: reflect asks for a critique after a tool error")
    p.add_argument("--search", choices=("bfs", "dfs"), default="bfs", help="tot: the search")
    p.add_argument("--breadth", type=_positive_int, default=2, help="tot: nodes BFS keeps per level")
    p.add_argument("--depth", type=_positive_int, default=3, help="tot: the longest path")
    p.add_argument("--max-nodes", type=_positive_int, default=24, help="tot: the node budget")
    p.add_argument(
        "--on-repeat", choices=("nudge", "stop", "off"), default=None,
        help="ReAct: what an identical call for the third time in a row gets (default: nudge)",
    )
    p.add_argument(
        "--dialect",
        choices=("json", "brackets", "native"),
        default="json",
        help="ReAct step format (native: the server's tool calling; needs --base-url)",
    )


def run_options(args: argparse.Namespace) -> dict[str, Any]:
    """The limits and run options `loopwright run` passes to lw.iter_run for these flags
    (no store, no approver: those need the terminal and the journal)."""
    options: dict[str, Any] = {}
    if args.max_steps is not None or args.mode not in ("reflexion", "tot"):  # their own defaults
        options["max_steps"] = args.max_steps or 6
    prompts = load_prompts(args.prompts)
    if prompts is not None:
        options["prompts"] = prompts
    if args.token_budget is not None:
        options["token_budget"] = args.token_budget
    if args.timeout_s is not None:
        options["timeout_s"] = args.timeout_s
    if args.mode in ("react", "reflexion"):
        options["dialect"] = args.dialect
        options["on_tool_error"] = args.on_tool_error
        if args.on_repeat is not None:
            options["on_repeat"] = args.on_repeat
    if args.mode == "reflexion":
        options["max_reflections"] = args.max_reflections
    if args.mode == "tot":
        options.update(search=args.search, breadth=args.breadth, depth=args.depth, max_nodes=args.max_nodes)
    if args.mode == "plan_execute":
        options["max_replans"] = args.max_replans
    return options


def journal_meta(args: argparse.Namespace) -> dict[str, Any]:
    """What a journaled CLI run records of its flags, so `runs resume` can load the same
    tools, examples and prompts again."""
    return {"cli": {"tools": list(args.tools) if args.tools else None, "prompts": args.prompts,
                    "examples": args.examples}}


def _check_outputs(args: argparse.Namespace) -> None:
    """Every file the run will write, checked (and its folder made) before the run."""
    for flag in ("save", "record", "db"):
        value = getattr(args, flag)
        if value:
            output_path(value, f"--{flag.replace('_', '-')}")


def _open_store(args: argparse.Namespace) -> Any:
    """The journal for --db, refusing an existing --run-id before any model loads."""
    if not args.db:
        if args.run_id:
            raise UsageError("--run-id needs --db")
        return None
    try:
        store = open_store(args.db)
    except LoopwrightError as exc:
        raise UsageError(str(exc)) from None
    if args.run_id:
        try:
            store.load_run(args.run_id)
        except LoopwrightError:
            return store  # a new id: good
        store.close()
        raise UsageError(
            f"run id {args.run_id!r} already exists in {args.db}; continue it with "
            f"`loopwright runs resume {args.run_id} --db {args.db}` or pick another id"
        )
    return store


def _run(args: argparse.Namespace) -> int:
    console = Console(file=sys.stderr, highlight=False, soft_wrap=True)
    if not args.task.strip():
        raise UsageError('the task is empty; give the question to run, e.g. loopwright run "What is 17 * 23?"')
    _check_outputs(args)
    servers = mcp_cli.mcp_servers(args.mcp, args.mcp_url)
    registry = load_tools(args.tools, args.tool_timeout_s) if args.tools or not servers else lw.ToolRegistry()
    mcp_cli.add_mcp_tools(registry, servers)
    registry = apply_examples(registry, args.examples)
    limits = run_options(args)
    if args.approve:
        from loopwright.safety import terminal_approver

        limits["approver"] = terminal_approver(write=lambda text: console.print(escape(text), end=""))
    from loopwright.durable.postgres import is_postgres_dsn  # (psycopg itself loads only for a DSN)

    new_db = bool(args.db) and not is_postgres_dsn(args.db) and not Path(args.db).exists()
    store = _open_store(args)
    try:
        model = make_model(args)
    except BaseException:
        if store is not None:
            store.close()
            if new_db:  # no run started: leave no empty journal behind
                for leftover in (args.db, f"{args.db}-wal", f"{args.db}-shm", f"{args.db}-journal"):
                    Path(leftover).unlink(missing_ok=True)
        raise
    if store is not None:
        limits.update(store=store, journal_meta=journal_meta(args))
        if args.run_id:
            limits["run_id"] = args.run_id
    started = time.perf_counter()
    # not with --approve: its questions use the terminal, which the live line redraws
    live = not (args.quiet or args.approve) and console.is_terminal
    text = ModelText() if live else None  # the model's text as it comes: the run streams
    try:  # starting the run journals it: a run id the journal refuses is a usage error
        run = start(lw.RunSpec(args.task, args.mode, **limits), model, registry, sinks=() if text is None else (text,))
    except LoopwrightError as exc:
        if store is not None:
            store.close()
        raise UsageError(str(exc)) from None
    if not args.quiet:
        console.print(
            f"[bold]{escape(clip(args.task, TASK_SHOWN))}[/]"
            + (f" [dim]({len(args.task):,} characters)[/]" if len(args.task) > TASK_SHOWN else "")
            + f"  [dim]mode {args.mode} · model {escape(str(getattr(model, 'name', model)))} · "
            f"tools {', '.join(registry.names)}[/]"
        )
    interrupted = False
    try:
        with LiveLine(console, run, enabled=live, text=text):
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
    if store is not None:
        store.close()
    if args.save:
        Path(args.save).write_text(trace.to_json(), encoding="utf-8")
    if args.json:
        sys.stdout.write(trace.to_json() + "\n")
    elif trace.answered:
        sys.stdout.write(f"{trace.final_answer}\n")
    sys.stdout.flush()
    if not args.quiet:
        if interrupted:
            cut = trace.meta.get("in_flight") or []
            during = f" during {describe_in_flight(cut)}" if cut else ""
            console.print(f"[yellow]interrupted{escape(during)}: partial trace below[/]")
            console.print(escape(str(trace)))
        print_summary(console, trace, wall, args.save)
        approval_hint(console, trace)  # (with --approve a call is never denied for want of an approver)
    return EXIT_ANSWERED if trace.answered else EXIT_NO_ANSWER


TASK_SHOWN = 200  # characters of the task the header shows


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
        lines.append(f"[dim]{escape(clip(step.thought, 160))}[/]")
    if step.tool is not None:
        args = json.dumps(step.args, ensure_ascii=False, default=str)
        label = f"{step.step_id} = " if step.step_id else ""
        lines.append(f"{escape(label + step.tool)}({escape(clip(args, 120))})")
    elif step.raw.strip() and (step.kind != "final" or not step.thought):
        lines.append(escape(clip(step.raw.strip(), 200)))
    if step.observation is not None:
        lines.append(f"→ {escape(clip(step.observation, 200))}")
    if step.error is not None and step.error != step.observation:
        lines.append(f"[red]! {escape(clip(step.error, 200))}[/]")
    head = f"[{colour}]{step.index:>2} {step.kind:<11}[/]"
    indent = " " * 14
    for i, line in enumerate(lines or [""]):
        console.print(f"{head if i == 0 else indent} {line}")


def print_summary(console: Console, trace: Trace, wall_s: float, saved: str | None) -> None:
    """Stop reason, calls, tokens and time of a finished run (the answer itself goes to
    stdout)."""
    u = trace.usage
    console.print(
        ("[green]answered[/] · " if trace.answered else "[yellow]no answer[/] · ")
        + f"stopped: {trace.stopped_reason} · model calls {trace.llm_calls} · "
        f"tool calls {trace.tool_calls} · tokens sent {u.prompt_tokens}, evaluated "
        f"{u.evaluated_tokens}, generated {u.completion_tokens}"
        f"{' (estimated)' if u.estimated else ''} · {wall_s:.2f}s"
        + (f" · saved {escape(saved)}" if saved else "")
        + (f" · run id {escape(trace.run_id)}" if trace.run_id else "")
    )


def approval_hint(console: Console, trace: Trace) -> None:
    """Say how to allow the calls this run denied for want of an approver."""
    gated = dict.fromkeys(s.tool for s in trace.steps if s.kind == "denied" and s.error == NO_APPROVER)
    if gated:
        names = ", ".join(str(name) for name in gated)
        needs = "they need" if len(gated) > 1 else "it needs"
        console.print(f"[yellow]denied {escape(names)}: {needs} approval and nothing was there to give it; "
                      "run again with --approve to be asked at the terminal before each such call[/]")


add_subcommand(
    "run",
    "run an agent on a task and print its trace",
    _setup_run,
    _run,
    epilog=EXIT_CODES_HELP,
)


# ------------------------------------------------------------------------------ serve


def _setup_serve(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", choices=sorted(MODES), default="react")
    add_model_args(p)
    add_tool_args(p)
    add_prompt_args(p)
    add_limit_args(p)
    p.add_argument("--port", type=_positive_int, default=8000, help="serve on this port (default 8000)")
    p.add_argument("--host", default="127.0.0.1",
                   help="the address to bind (default 127.0.0.1; any other needs --token)")
    add_access_args(p)
    p.add_argument("--approval-timeout-s", type=_seconds, default=300.0, metavar="S",
                   help="how long a tool that needs approval waits for an answer from the page "
                   "before it is denied (default 300)")


def _serve(args: argparse.Namespace) -> int:
    """`loopwright serve`: the page and the AG-UI event stream (loopwright.ui) on uvicorn."""
    try:
        import uvicorn

        from loopwright.ui import app
    except ImportError as exc:
        raise UsageError(f"serving needs the ui extra ({exc.name} is missing): pip install 'loopwright[ui]'") from None
    access = serve_access(args)
    if args.record:
        output_path(args.record, "--record")
    registry = apply_examples(load_tools(args.tools, args.tool_timeout_s), args.examples)
    options = run_options(args)
    model = make_model(args)
    served = app(model, registry, args.mode, approval_timeout_s=args.approval_timeout_s, token=access.token,
                 allowed_hosts=access.hosts, allowed_origins=access.origins, **options)
    where = f"[{args.host}]" if ":" in args.host else args.host
    print(f"loopwright: watch runs at http://{where}:{args.port}/ (mode {args.mode}, model "
          f"{getattr(model, 'name', model)}, tools {', '.join(registry.names)})"
          f"{'; requests need the token' if access.token else ''}; Ctrl-C stops",
          file=sys.stderr, flush=True)
    # an open event stream would hold a graceful shutdown forever: Ctrl-C gives them 2 s
    uvicorn.run(served, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=2)
    return EXIT_ANSWERED


add_subcommand(
    "serve",
    "serve a page that runs tasks and shows each run live (AG-UI events over SSE)",
    _setup_serve,
    _serve,
)



# ------------------------------------------------------------------------------ a2a serve


def _setup_a2a(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="a2a_command", metavar="COMMAND", required=True)
    serve = sub.add_parser("serve", help="serve runs as A2A tasks (JSON-RPC and HTTP+JSON, agent card)")
    _setup_serve(serve)
    serve.add_argument("--db", metavar="PATH", help="journal every task's run in this SQLite file; a server "
                       "started on it again lists its tasks and resumes those a crash left running")
    serve.add_argument("--name", default="loopwright", help="the agent's name on its card")
    serve.add_argument("--description", help="the agent's description on its card (default: its mode and tools)")


def _serve_a2a(args: argparse.Namespace) -> int:
    """`loopwright a2a serve`: runs as A2A tasks (loopwright.a2a) on uvicorn."""
    try:
        import uvicorn

        from loopwright.a2a import app
    except ImportError as exc:
        raise UsageError(f"A2A needs the a2a extra ({exc.name} is missing): pip install 'loopwright[a2a]'") from None
    access = serve_access(args)
    registry = apply_examples(load_tools(args.tools, args.tool_timeout_s), args.examples)
    options = run_options(args)
    if args.db:
        options["store"] = open_store(args.db)
    model = make_model(args)
    where = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{where}:{args.port}"
    served = app(model, registry, args.mode, name=args.name, description=args.description, url=url,
                 approval_timeout_s=args.approval_timeout_s, token=access.token, allowed_hosts=access.hosts,
                 allowed_origins=access.origins, **options)
    print(f"loopwright: A2A agent {args.name!r} at {url}/ (card at {url}/.well-known/agent-card.json; mode "
          f"{args.mode}, tools {', '.join(registry.names)})"
          f"{'; requests need the token' if access.token else ''}; Ctrl-C stops", file=sys.stderr, flush=True)
    uvicorn.run(served, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=2)
    return EXIT_ANSWERED


add_subcommand("a2a", "serve runs as tasks of the A2A protocol to agents of other frameworks",
               _setup_a2a, _serve_a2a)


if __name__ == "__main__":
    raise SystemExit(main())
