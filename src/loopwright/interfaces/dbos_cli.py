"""The command line on DBOS (`pip install 'loopwright[dbos]'`): `loopwright worker`, and
the `--dbos URL` of `batch`, `runs` and `view`.

    loopwright worker --dbos URL --agents MODULE[:ATTR] ... --executor-id ID --app-version V
                      [--queue NAME] [--concurrency N] [--global-concurrency N]
    loopwright batch tasks.jsonl --out results.jsonl --dbos URL --queue NAME --agent NAME
    loopwright runs list|show|export|settle ... --dbos URL
    loopwright view RUN_ID --dbos URL

A worker imports the modules that make the DBOSAgents, launches DBOS as the application
`loopwright` (loopwright.durable.dbos.APP_NAME) with the given executor id and version,
registers the queue and serves it until SIGTERM or SIGINT. The other commands read and
write the system database through a DBOSClient, so they need none of the agents' code.
dbos itself is imported only when one of these runs.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from loopwright.errors import LoopwrightError
from loopwright.interfaces.common import (
    EXIT_ANSWERED,
    UsageError,
    _import,
    _positive_int,
    _seconds,
    add_subcommand,
    import_module,
)
from loopwright.trace import Trace

if TYPE_CHECKING:
    from dbos import DBOSClient

    from loopwright.durable.dbos import DBOSAgent

WORKER_HELP = "serve DBOSAgents' runs from a DBOS queue, as one of any number of worker processes"
WORKER_EPILOG = """\
Every worker of a queue runs on the same system database (PostgreSQL for workers on several
machines; a SQLite file for processes of one machine). Enqueue runs with
`loopwright batch TASKS --dbos URL --queue NAME --agent NAME`, with
loopwright.durable.dbos.enqueue (a DBOSClient), or DBOSAgent.enqueue in your own DBOS app.

Recovery: a worker that dies leaves its runs PENDING, and DBOS gives them to no other worker.
Relaunch it with the same --executor-id (and --app-version): it recovers them at launch. Two
live workers must never share an executor id: each would recover the other's runs.
--app-version names the code: a worker recovers and dequeues only runs of its own version
(runs enqueued without one go to the workers of the latest version), so a new deploy gets a
new version, and the old version's workers finish the old runs.

exit codes: 0 stopped by SIGTERM or SIGINT; 2 usage error (an agent module that cannot be
imported or makes no DBOSAgent, a system database DBOS cannot launch on), one line on stderr.
"""
DEFAULT_QUEUE = "loopwright"


def dbos_module() -> Any:
    """loopwright.durable.dbos, or a UsageError saying how to install the extra."""
    try:
        from loopwright.durable import dbos as lwdbos
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    return lwdbos


def check_url(url: str) -> str:
    """`url` when it is a system database URL DBOS takes (sqlite:///PATH, postgresql://...)."""
    if not url.startswith(("sqlite:///", "postgresql://", "postgresql+psycopg://", "postgres://")):
        raise UsageError(f"--dbos takes a system database URL, sqlite:///PATH or postgresql://USER@HOST/DB, "
                         f"got {url!r}")
    return url


def shown(url: str) -> str:
    """The URL as messages show it: without its password."""
    if "@" not in url:
        return url
    from sqlalchemy.engine import make_url

    return str(make_url(url).render_as_string(hide_password=True))


@contextmanager
def open_client(url: str, app_name: str | None = None) -> Iterator[DBOSClient]:
    """A DBOSClient on an existing system database; UsageError when there is none there.
    `app_name`: the application whose queues it enqueues on (None: it reads every one's runs)."""
    check_url(url)
    dbos_module()  # the extra, or a usage error saying how to install it
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        raise UsageError(f"no DBOS system database at {url.removeprefix('sqlite:///')} (a worker or your DBOS "
                         "app makes it when it launches)")
    from dbos import DBOSClient

    try:
        client = DBOSClient(system_database_url=url, application_name=app_name)
    except Exception as exc:
        raise UsageError(f"cannot open the DBOS system database {shown(url)}: {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    try:
        yield client
    finally:
        client.destroy()


# ------------------------------------------------------------------------------ worker


def setup_worker(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dbos", required=True, metavar="URL",
                   help="the DBOS system database: sqlite:///PATH or postgresql://USER@HOST/DB")
    p.add_argument("--agents", required=True, nargs="+", metavar="MODULE[:ATTR]",
                   help="modules that make DBOSAgents when imported (every one they make is served), or "
                   "MODULE:ATTR naming one DBOSAgent (or a list of them)")
    p.add_argument("--executor-id", required=True, metavar="ID",
                   help="this worker's name in the system database, unique among live workers; relaunch a "
                   "dead worker with its id to recover its runs")
    p.add_argument("--app-version", required=True, metavar="VERSION",
                   help="the version of the agents' code (a worker serves only runs of its version)")
    p.add_argument("--queue", default=DEFAULT_QUEUE, metavar="NAME", help=f"the queue to serve (default {DEFAULT_QUEUE})")
    p.add_argument("--concurrency", type=_positive_int, default=4, metavar="N",
                   help="runs of the queue this worker runs at once (default 4)")
    p.add_argument("--global-concurrency", type=_positive_int, default=None, metavar="N",
                   help="runs of the queue all workers run at once (default: no limit)")
    p.add_argument("--polling-interval-s", type=_seconds, default=1.0, metavar="S",
                   help="how often the worker looks for queued runs (default 1)")


def load_agents(specs: Sequence[str]) -> list[DBOSAgent]:
    """The DBOSAgents the --agents specs make or name, in order; UsageError when one makes none."""
    lwdbos = dbos_module()
    agents: list[DBOSAgent] = []
    for spec in specs:
        if ":" in spec:
            value = _import(spec, "--agents")
            found = list(value) if isinstance(value, (list, tuple)) else [value]
            wrong = [v for v in found if not isinstance(v, lwdbos.DBOSAgent)]
            if wrong or not found:
                raise UsageError(f"--agents {spec}: expected a DBOSAgent (or a list of them), got "
                                 f"{type(wrong[0] if wrong else value).__name__}")
        else:
            before = set(lwdbos._REGISTERED)
            import_module(spec, "--agents", spec)
            found = [a for name, a in lwdbos._REGISTERED.items() if name not in before]
            if not found:
                raise UsageError(f"--agents {spec}: importing it made no DBOSAgent (a worker serves the DBOSAgents "
                                 "its modules make when imported, or name one with MODULE:ATTR)")
        agents += [a for a in found if a not in agents]
    return agents


def launch(url: str, executor_id: str, app_version: str) -> None:
    """DBOS launched as APP_NAME on `url`; UsageError (one line) when it cannot be."""
    lwdbos = dbos_module()
    from dbos import DBOS

    # DBOS logs a failed launch with its traceback: quiet until it is up, then its warnings
    config: Any = {"name": lwdbos.APP_NAME, "system_database_url": url, "application_version": app_version,
                   "executor_id": executor_id, "log_level": "CRITICAL"}
    try:
        DBOS(config=config)
        DBOS.launch()
    except Exception as exc:
        DBOS.destroy()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise UsageError(f"cannot launch DBOS on {shown(url)}: {type(exc).__name__}: {first}") from None
    logging.getLogger("dbos").setLevel(logging.WARNING)


def run_worker(args: argparse.Namespace) -> int:
    """`loopwright worker`: serve the queue until SIGTERM or SIGINT, then DBOS.destroy()."""
    check_url(args.dbos)
    agents = load_agents(args.agents)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    from dbos import DBOS

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        launch(args.dbos, args.executor_id, args.app_version)
        DBOS.register_queue(args.queue, worker_concurrency=args.concurrency,
                            global_concurrency=args.global_concurrency,
                            polling_interval_sec=args.polling_interval_s)
        print(f"loopwright worker {args.executor_id}: serving queue {args.queue!r} (agents "
              f"{', '.join(a.name for a in agents)}; version {args.app_version}; {args.concurrency} at once) on "
              f"{shown(args.dbos)}; SIGTERM or Ctrl-C stops", file=sys.stderr, flush=True)
        stop.wait()
    finally:
        DBOS.destroy()
        for s, handler in previous.items():
            signal.signal(s, handler)
    print(f"loopwright worker {args.executor_id}: stopped", file=sys.stderr, flush=True)
    return EXIT_ANSWERED


# ------------------------------------------------------------------------------ batch --dbos


def add_batch_args(p: argparse.ArgumentParser) -> None:
    """`loopwright batch`'s flags for enqueuing on a DBOS queue instead of running here."""
    p.add_argument("--dbos", metavar="URL", help="enqueue each task on a DBOS queue of this system database and "
                   "wait for the workers' results (`loopwright worker`); needs --queue and --agent")
    p.add_argument("--queue", metavar="NAME", help="with --dbos: the queue (a worker registered it)")
    p.add_argument("--agent", metavar="NAME", help="with --dbos: the DBOSAgent that runs each task (its name)")
    p.add_argument("--app-version", metavar="VERSION",
                   help="with --dbos: only workers of this version take the runs (default: the latest version's)")


def batch_on_queue(args: argparse.Namespace, tasks: Sequence[str], done: Callable[[int, Trace], None],
                   waiting: Callable[[], AbstractContextManager[Any]]) -> list[Trace]:
    """Enqueue task i as run `task_run_id(i, task, batch id)` (a batch enqueued again waits
    for the same runs), then wait for each inside `waiting()` (the progress bar); the
    traces in input order."""
    lwdbos = dbos_module()
    from loopwright.durable.base import task_run_id

    if not args.queue or not args.agent:
        raise UsageError("--dbos needs --queue NAME (the workers' queue) and --agent NAME (the DBOSAgent to run)")
    local = [flag for flag in ("db", "policy", "model", "base_url", "replay", "tools") if getattr(args, flag, None)]
    if local:
        raise UsageError(f"--dbos runs each task on the workers' agent {args.agent!r}, so --"
                         f"{local[0].replace('_', '-')} has no use here")
    with open_client(args.dbos, lwdbos.APP_NAME) as client:
        try:
            ids = [lwdbos.enqueue(client, args.agent, task, queue=args.queue, app_version=args.app_version,
                                  run_id=task_run_id(i, task, args.batch_id or "batch"))
                   for i, task in enumerate(tasks)]
        except LoopwrightError as exc:
            raise UsageError(str(exc)) from None
        traces = []
        with waiting():
            for i, run_id in enumerate(ids):
                traces.append(lwdbos.wait(run_id, client=client))
                done(i, traces[-1])
    return traces


def view_trace(run_id: str, url: str) -> Trace:
    """`loopwright view RUN_ID --dbos URL`: the run's trace as `runs export` gives it."""
    lwdbos = dbos_module()
    with open_client(url) as client:
        trace: Trace = lwdbos.run_trace(run_id, client=client)
    return trace


def register() -> None:
    """Add `worker` to the `loopwright` command."""
    add_subcommand("worker", WORKER_HELP, setup_worker, run_worker, epilog=WORKER_EPILOG)
