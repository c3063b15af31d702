"""`loopwright runs ...`: list, show, resume, settle, fork and export journaled runs.

    loopwright runs list [--status S] [--limit N]
    loopwright runs show ID
    loopwright runs resume ID [--model M] [--base-url URL] [--tools MOD:ATTR ...] [--approve KEY] [--deny KEY]
                              [--allow-tool-changes]
    loopwright runs settle ID KEY --result JSON | --error TEXT
    loopwright runs fork ID --at K [--new-id ID] [--max-steps N] [--model M] [--base-url URL] [--tools ...]
    loopwright runs export ID [--out FILE]

Every command takes `--db PATH|DSN` (default: $LOOPWRIGHT_DB, else ./loopwright.db); a
`postgresql://` DSN opens a PostgresStore. `--dbos URL` reads the runs of DBOSAgents in a
DBOS system database instead (list, show, export, settle; loopwright.durable.dbos): an
ended run's trace is its workflow's output, a run still going is rebuilt from its step
records.
`resume` builds its model and tools with the same flags, and the same code, as
`loopwright run`. Without --tools (or --prompts) it loads the ones the run was started
with, as the journal recorded them (a run journaled before that was recorded: the demo
tools and their prompts); the ReAct dialect comes from the journal. Tools that differ
from the recorded tool set are refused (exit 2) unless --allow-tool-changes. Like `run`,
the resumed run's answer goes to stdout and its account to stderr.

Exit status: 0 done (resume: the run answered), 1 resume ended without an answer
(paused, blocked, a limit), 2 a usage or journal error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from loopwright.durable.base import RunRecord, StoreBase
from loopwright.durable.fork import fork
from loopwright.durable.resume import check_tools, resume
from loopwright.errors import LoopwrightError, ToolSetChangedError
from loopwright.interfaces.common import (
    ArgumentParser,
    UsageError,
    add_prompt_args,
    add_subcommand,
    add_tool_args,
    apply_examples,
    load_prompts,
    load_tools,
    make_model,
    open_store,
    output_path,
)
from loopwright.interfaces.common import add_model_args as _model_flags
from loopwright.policy import Policy
from loopwright.safety import Decision
from loopwright.tools.registry import ToolRegistry

PolicyFactory = Callable[[argparse.Namespace], Policy]
RegistryFactory = Callable[[argparse.Namespace], ToolRegistry]
HELP = "list, show, resume, settle, fork and export journaled runs"
EPILOG = """\
exit codes:
  0  done (resume: the run answered)
  1  the resumed run stopped without an answer (paused, blocked, a limit)
  2  usage or journal error (no journal, unknown run id, bad arguments, other tools)
"""


def default_db() -> str:
    return os.environ.get("LOOPWRIGHT_DB") or "loopwright.db"


def setup(parser: argparse.ArgumentParser) -> None:
    """Add the `runs` subcommands to `parser`."""
    db = argparse.ArgumentParser(add_help=False)
    db.add_argument("--db", default=None, metavar="PATH|DSN",
                    help="the run journal: a SQLite file or a postgresql:// DSN "
                         "(default: $LOOPWRIGHT_DB or ./loopwright.db)")
    db.add_argument("--dbos", default=None, metavar="URL",
                    help="read runs executed under DBOS in this system database (sqlite:///PATH or "
                         "postgresql://...) instead of a journal; list, show, export and settle")
    sub = parser.add_subparsers(dest="runs_command", metavar="COMMAND", required=True)
    listing = sub.add_parser("list", parents=[db], help="runs, newest first")
    listing.add_argument("--status", help="only runs with this status (running, paused, interrupted, blocked, finished; "
                         "with --dbos DBOS's: ENQUEUED, PENDING, SUCCESS, ERROR, CANCELLED)")
    listing.add_argument("--limit", type=int, default=50)
    show = sub.add_parser("show", parents=[db], help="a run's record, steps and pending approvals")
    show.add_argument("run_id")
    export = sub.add_parser("export", parents=[db], help="a run's trace as JSON")
    export.add_argument("run_id")
    export.add_argument("--out", help="write here instead of stdout")
    again = sub.add_parser("resume", parents=[db], help="continue a run from its journal")
    again.add_argument("run_id")
    add_model_args(again)
    again.add_argument("--approve", action="append", default=[], metavar="KEY", help="approve a pending call")
    again.add_argument("--deny", action="append", default=[], metavar="KEY", help="deny a pending call")
    again.add_argument("--reason", default="", help="the reason recorded with --approve/--deny")
    again.add_argument("--rerun-unfinished", action="store_true",
                       help="run again a non-idempotent call whose outcome is unknown (check it first)")
    again.add_argument("--allow-tool-changes", action="store_true",
                       help="resume even though the tools differ from the ones the run recorded")
    settle = sub.add_parser("settle", parents=[db], help="record the outcome of a call left in doubt by a crash")
    settle.add_argument("run_id")
    settle.add_argument("key", help="the call's key, as `runs show` lists it")
    outcome = settle.add_mutually_exclusive_group(required=True)
    outcome.add_argument("--result", metavar="JSON", help="what the tool returned (JSON; a bare word is a string)")
    outcome.add_argument("--error", metavar="TEXT", help="what went wrong (the model reads it as the tool's error)")
    outcome.add_argument("--rerun", action="store_true",
                         help="with --dbos: the call did not take effect; run it again (journals: "
                         "`runs resume --rerun-unfinished`)")
    branch = sub.add_parser("fork", parents=[db], help="a new run replaying the first K steps of a run, then live")
    branch.add_argument("run_id")
    branch.add_argument("--at", type=int, required=True, metavar="K", help="how many recorded steps to replay")
    branch.add_argument("--new-id", help="the new run's id (default: a new one)")
    branch.add_argument("--max-steps", type=int, help="the new run's step cap (default: the recorded one)")
    add_model_args(branch)


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """The flags `loopwright run` takes to pick a model, tools and prompts, as `runs resume` takes them."""
    _model_flags(parser, for_resume=True)
    add_tool_args(parser, for_resume=True)
    add_prompt_args(parser, for_resume=True)


def make_policy(args: argparse.Namespace) -> Policy:
    """The model `loopwright run` would build from these flags."""
    policy: Policy = make_model(args)
    return policy


def make_registry(args: argparse.Namespace) -> ToolRegistry:
    """The tools `loopwright run` would load from these flags."""
    return apply_examples(load_tools(args.tools, getattr(args, "tool_timeout_s", None)),
                          getattr(args, "examples", None))


def handler(args: argparse.Namespace) -> int:
    """`loopwright runs ...` as registered with the `loopwright` command."""
    return _dispatch(args, make_policy, make_registry, sys.stdout)


def register() -> None:
    """Add `runs` to the `loopwright` command."""
    add_subcommand("runs", HELP, setup, handler, epilog=EPILOG)


def runs_main(
    argv: Sequence[str] | None = None,
    *,
    policy_factory: PolicyFactory = make_policy,
    registry_factory: RegistryFactory = make_registry,
    out: TextIO | None = None,
) -> int:
    """`loopwright runs ...` on its own (`python -m loopwright.interfaces.runs`); returns the
    exit status. The factories build the policy and tools `resume` uses."""
    parser = ArgumentParser(prog="loopwright runs", description=HELP, epilog=EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    setup(parser)
    return _dispatch(parser.parse_args(argv), policy_factory, registry_factory, out or sys.stdout)


def _dispatch(args: argparse.Namespace, policy_factory: PolicyFactory, registry_factory: RegistryFactory,
              out: TextIO) -> int:
    try:
        if args.dbos:
            if args.db:
                raise UsageError("--db and --dbos name two places to read runs from; give one")
            return runs_on_dbos(args, out)
        if getattr(args, "rerun", False):
            raise UsageError("--rerun settles a run under DBOS (with --dbos); a journaled run's call is run again "
                             f"with `loopwright runs resume {args.run_id} --rerun-unfinished`")
        with open_store(args.db or default_db(), must_exist=True) as store:
            if args.runs_command == "list":
                return _list(store, args, out)
            if args.runs_command == "show":
                return _show(store, args.run_id, out)
            if args.runs_command == "export":
                return _export(store, args, out)
            if args.runs_command == "settle":
                return _settle(store, args, out)
            if args.runs_command == "fork":
                return _fork(store, args, policy_factory, registry_factory, out)
            return _resume(store, args, policy_factory, registry_factory, out)
    except Exception as exc:
        if not isinstance(exc, (LoopwrightError, UsageError)):
            raise
        print(f"loopwright runs: {exc}", file=sys.stderr)
        return 2


def runs_on_dbos(args: argparse.Namespace, out: TextIO) -> int:
    """`loopwright runs list|show|export|settle --dbos URL`."""
    from loopwright.interfaces.dbos_cli import dbos_module, open_client

    lwdbos = dbos_module()
    if args.runs_command in ("resume", "fork"):
        raise UsageError(f"runs under DBOS are not {args.runs_command}d from here: a worker relaunched with the "
                         "dead one's --executor-id recovers them (`loopwright worker --help`)")
    with open_client(args.dbos) as client:
        if args.runs_command == "list":
            return _list_dbos(lwdbos.list_runs(client, status=args.status, limit=args.limit), out)
        if args.runs_command == "settle":
            return _settle_dbos(lwdbos, client, args, out)
        trace = lwdbos.run_trace(args.run_id, client=client)
        if args.runs_command == "export":
            text = trace.to_json()
            if args.out:
                output_path(args.out, "--out").write_text(text + "\n", encoding="utf-8")
                print(args.out, file=out)
            else:
                print(text, file=out)
            return 0
        return _show_dbos(lwdbos, client, args.run_id, trace, out)


def _list_dbos(runs: Sequence[Any], out: TextIO) -> int:
    if not runs:
        print("no runs", file=out)
        return 0
    print(f"{'ID':<36} {'AGENT':<16} {'STATUS':<10} {'STEPS':>5}  {'CREATED':<19}  {'QUEUE':<12} TASK", file=out)
    for r in runs:
        status = "IN DOUBT" if r.in_doubt else r.status
        print(f"{r.run_id:<36} {r.agent:<16} {status:<10} {r.steps:>5}  {_when(r.created_at):<19}  "
              f"{r.queue or '-':<12} {_clip(r.task, 50)}", file=out)
    return 0


def _show_dbos(lwdbos: Any, client: Any, run_id: str, trace: Any, out: TextIO) -> int:
    rebuilt = (trace.meta.get("dbos") or {}).get("from") == "step records"
    print(f"Run {run_id}  stopped: {trace.stopped_reason or '-'}"
          + ("  (not ended: rebuilt from its step records)" if rebuilt else ""), file=out)
    print(trace, file=out)
    pending = lwdbos.pending_approvals(run_id, client=client)
    if pending:
        print("Pending approvals (answer with loopwright.durable.dbos.approve(run_id, key, ...)):", file=out)
        for p in pending:
            print(f"  {p.key}  {p.tool}({_clip(json.dumps(p.args, default=str), 80)})", file=out)
    unsettled = lwdbos.unsettled(run_id, client=client)
    if unsettled:
        print(f"Calls in doubt (check each, then `loopwright runs settle {run_id} KEY --result JSON | --error TEXT "
              "| --rerun --dbos URL`; the run then goes on):", file=out)
        for c in unsettled:
            print(f"  {c.key}  {c.tool}({_clip(json.dumps(c.args, default=str), 80)})  attempts {c.attempts}  "
                  f"call key {c.call_key}", file=out)
    return 0


def _settle_dbos(lwdbos: Any, client: Any, args: argparse.Namespace, out: TextIO) -> int:
    if args.rerun:
        lwdbos.settle(args.run_id, args.key, rerun=True, client=client)
    elif args.error is not None:
        lwdbos.settle(args.run_id, args.key, error=args.error, client=client)
    else:
        try:
            value = json.loads(args.result)
        except json.JSONDecodeError:
            value = args.result  # a bare word: the text itself
        lwdbos.settle(args.run_id, args.key, result=value, client=client)
    print(f"settled {args.key} of run {args.run_id}; its workflow goes on (a worker of its version runs it)",
          file=out)
    return 0


def _list(store: StoreBase, args: argparse.Namespace, out: TextIO) -> int:
    runs = store.list_runs(status=args.status, limit=args.limit)
    if not runs:
        print("no runs", file=out)
        return 0
    print(f"{'ID':<24} {'MODE':<12} {'STATUS':<11} {'STOPPED':<13} {'STEPS':>5} {'CALLS':>5}  "
          f"{'CREATED':<19}  TASK", file=out)
    for r in runs:
        print(f"{r.id:<24} {r.mode:<12} {r.status:<11} {r.stopped_reason or '-':<13} {r.step_count:>5} "
              f"{r.llm_calls:>5}  {_when(r.created_at):<19}  {_clip(r.task, 50)}", file=out)
    return 0


def _show(store: StoreBase, run_id: str, out: TextIO) -> int:
    record = store.load_run(run_id)
    print(_describe(record), file=out)
    print(store.trace(run_id), file=out)
    pending = store.pending_approvals(run_id)
    if pending:
        print("Pending approvals (resume with --approve KEY or --deny KEY):", file=out)
        for p in pending:
            print(f"  {p.key}  step {p.step}: {p.tool}({_clip(str(p.args), 80)})  [{p.side_effects}]", file=out)
    unsettled = store.unsettled(run_id)
    if unsettled:
        print("Calls started and never recorded (check each, then `runs settle ID KEY --result JSON | "
              "--error TEXT`, and resume):", file=out)
        for c in unsettled:
            print(f"  {c.key}  {c.tool}({_clip(json.dumps(c.args, default=str), 80)})  attempts {c.attempts}  "
                  f"call key {c.call_key}", file=out)
    if record.forked_from is not None:
        print(f"Forked from {record.forked_from} at step {record.forked_at_step}", file=out)
    return 0


def _settle(store: StoreBase, args: argparse.Namespace, out: TextIO) -> int:
    if args.error is not None:
        store.settle(args.run_id, args.key, error=args.error)
    else:
        try:
            value = json.loads(args.result)
        except json.JSONDecodeError:
            value = args.result  # a bare word: the text itself
        store.settle(args.run_id, args.key, result=value)
    print(f"settled {args.key} of run {args.run_id}; `loopwright runs resume {args.run_id}` goes on from it",
          file=out)
    return 0


def _fork(
    store: StoreBase,
    args: argparse.Namespace,
    policy_factory: PolicyFactory,
    registry_factory: RegistryFactory,
    out: TextIO,
) -> int:
    record = store.load_run(args.run_id)  # an unknown id fails before a model loads
    _recorded_flags(record, args)
    options: dict[str, Any] = {}
    prompts = load_prompts(getattr(args, "prompts", None))
    if prompts is not None:
        options["prompts"] = prompts
    if args.max_steps is not None:
        options["max_steps"] = args.max_steps
    args.dialect = record.config.get("dialect") or "json"  # what make_model reads
    trace = fork(args.run_id, args.at, policy_factory(args), registry_factory(args), store=store,
                 new_run_id=args.new_id, **options)
    print(trace, file=sys.stderr)
    print(f"forked run: {trace.run_id} (from {args.run_id} at step {args.at})", file=sys.stderr)
    if trace.answered:
        print(trace.final_answer, file=out)
    return 0 if trace.answered else 1


def _recorded_flags(record: RunRecord, args: argparse.Namespace) -> None:
    """Fill --tools, --examples and --prompts, when not given, with what the run was
    started with."""
    recorded_cli = (record.config.get("meta") or {}).get("cli") or {}
    if not args.tools and recorded_cli.get("tools"):
        args.tools = list(recorded_cli["tools"])
    if not getattr(args, "prompts", None) and recorded_cli.get("prompts"):
        args.prompts = recorded_cli["prompts"]
    if not getattr(args, "examples", None) and recorded_cli.get("examples"):
        args.examples = recorded_cli["examples"]


def _export(store: StoreBase, args: argparse.Namespace, out: TextIO) -> int:
    target = output_path(args.out, "--out") if args.out else None
    text = store.trace(args.run_id).to_json()
    if target is not None:
        target.write_text(text + "\n", encoding="utf-8")
        print(args.out, file=out)
    else:
        print(text, file=out)
    return 0


def _resume(
    store: StoreBase,
    args: argparse.Namespace,
    policy_factory: PolicyFactory,
    registry_factory: RegistryFactory,
    out: TextIO,
) -> int:
    record = store.load_run(args.run_id)  # an unknown id fails before a model loads
    _recorded_flags(record, args)
    if getattr(args, "record", None):
        output_path(args.record, "--record")
    registry = registry_factory(args)
    if not args.allow_tool_changes:
        try:
            check_tools(record, registry)  # before any decision is written or a model loads
        except ToolSetChangedError as exc:
            changes = "; ".join(f"{label} {', '.join(names)}" for label, names in
                                (("added", exc.added), ("removed", exc.removed), ("changed", exc.changed)) if names)
            raise UsageError(f"run {args.run_id!r} was started with other tools than these ({changes}); "
                             "give the --tools it was started with, or pass --allow-tool-changes") from None
    options: dict[str, Any] = {}
    prompts = load_prompts(getattr(args, "prompts", None))
    if prompts is not None:
        options["prompts"] = prompts
    args.dialect = record.config.get("dialect") or "json"  # what make_model reads
    policy = policy_factory(args)
    for key in args.approve:
        store.decide(args.run_id, key, Decision(True, args.reason or "approved"))
    for key in args.deny:
        store.decide(args.run_id, key, Decision(False, args.reason or "denied by approver"))
    trace = resume(args.run_id, policy, registry, store=store, rerun_unfinished=args.rerun_unfinished,
                   allow_tool_changes=args.allow_tool_changes, **options)
    print(trace, file=sys.stderr)
    record = store.load_run(args.run_id)
    if record.status == "paused":
        for p in store.pending_approvals(args.run_id):
            print(f"waiting for approval: {p.key}  {p.tool}({_clip(str(p.args), 80)})", file=sys.stderr)
    elif record.status == "blocked" and trace.steps and trace.steps[-1].error:
        print(trace.steps[-1].error, file=sys.stderr)
    if trace.answered:
        print(trace.final_answer, file=out)
    return 0 if trace.answered else 1


def _describe(r: RunRecord) -> str:
    u = r.usage
    return (f"Run {r.id}  [{r.mode}]  status: {r.status}  stopped: {r.stopped_reason or '-'}\n"
            f"  created {_when(r.created_at)}  updated {_when(r.updated_at)}  resumes: {r.resumes}\n"
            f"  model calls: {r.llm_calls}  tool calls: {r.tool_calls}  steps: {r.step_count}  "
            f"tokens sent/evaluated/completion: {u.prompt_tokens}/{u.evaluated_tokens}/{u.completion_tokens}\n"
            f"  config: {_shown_config(r.config)}")


def _shown_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config as `show` prints it: the tool set as names (fingerprints are for resume)."""
    shown = dict(config)
    if isinstance(shown.get("tool_set"), dict):
        shown["tool_set"] = sorted(shown["tool_set"])
    return shown


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _clip(text: str, limit: int) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


if __name__ == "__main__":
    raise SystemExit(runs_main())
