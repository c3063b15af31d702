"""What durability costs a step: loopwright's SQLite and PostgreSQL journals against an
in-memory run, side by side in one process, at N = 10 and N = 200 steps; and, for
comparison, what LangGraph's in-memory checkpointer costs on the same workload.

    .venv/bin/python benchmarks/journal.py [--repeats 9] [--ns 10,200] [--no-postgres]

PostgreSQL: a server of the benchmark's own (Debian's postgresql, initdb in a temporary
folder, a unix socket, fsync on as in production; tests/helpers/pgserver.py), stopped at
the end. Its CPU is another process's, so for it the wall clock is the figure that counts.

The workload is the peer benchmarks' (benchmarks/peers/common.py): a scripted model
calls add(previous, k) N times, reading the previous result from the history, then
answers; a step is one model call (N + 1 a run). Runs with and without the journal
alternate, so a noisy machine hits both alike; medians are reported. Each journaled run
is a new run in one journal file that grows over the benchmark, as a real one does.

LangGraph runs in its own virtual environment (benchmarks/peers/.venvs/langgraph, made
by benchmarks/peers/setup.sh); this file re-runs itself there with --langgraph and
compares `create_agent` with `InMemorySaver` against `create_agent` without one. Skipped,
with a note, when that environment is absent.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers"
LANGGRAPH_PYTHON = PEERS / ".venvs" / "langgraph" / "bin" / "python"
sys.path.insert(0, str(PEERS))

from common import TASK, Script, expected_answer, last_int  # noqa: E402

Runner = Callable[[int], None]


def per_step_us(runners: dict[str, Runner], n: int, repeats: int) -> dict[str, dict[str, float]]:
    """Median microseconds per step of each runner at size n, wall clock and CPU time
    (user + system) of this process, runs interleaved. On a shared machine the CPU time
    is the steadier figure: the wall clock also counts waiting for a core."""
    for run in runners.values():  # warm up at this size
        run(n)
    wall: dict[str, list[float]] = {name: [] for name in runners}
    cpu: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(repeats):
        for name, run in runners.items():
            gc.collect()
            c0, t0 = time.process_time(), time.perf_counter()
            run(n)
            wall[name].append((time.perf_counter() - t0) / (n + 1) * 1e6)
            cpu[name].append((time.process_time() - c0) / (n + 1) * 1e6)
    return {name: {"wall": statistics.median(wall[name]), "cpu": statistics.median(cpu[name])}
            for name in runners}


def check(script: Script, answer: object) -> None:
    if str(answer).strip() != str(expected_answer(script.n)) or script.tool_calls != script.n:
        raise AssertionError(f"wrong run: answer {answer!r}, {script.tool_calls} tool calls, n={script.n}")


# -- loopwright --------------------------------------------------------------------------


def loopwright_runners(directory: Path, pg_dsn: str | None = None) -> tuple[dict[str, Runner], list[Any]]:
    import loopwright as lw
    from loopwright.durable.sqlite import SQLiteStore

    current: dict[str, Script] = {}

    @lw.tool
    def add(x: int, y: int) -> int:
        """Add two integers."""
        return current["script"].add(x, y)

    registry = lw.ToolRegistry([add])

    class Policy:
        def complete(self, request: Any) -> str:
            script = current["script"]
            previous = last_int(request.prompt) if script.calls else 0
            kind, value = script.next_call(previous)
            if kind == "final":
                return f"Thought: done\nFinal Answer: {value}"
            return f" add the next number\nAction: add\nAction Input: {json.dumps(value)}"

    stores: dict[str, Any] = {
        "journal NORMAL": SQLiteStore(directory / "normal.db", synchronous="NORMAL"),
        "journal FULL": SQLiteStore(directory / "full.db", synchronous="FULL"),
    }
    if pg_dsn is not None:
        stores["journal Postgres"] = lw.PostgresStore(pg_dsn)
        stores["Postgres async"] = lw.PostgresStore(pg_dsn, synchronous_commit="off")

    def runner(store: Any) -> Runner:
        def run(n: int) -> None:
            script = current["script"] = Script(n)
            trace = lw.run(TASK, Policy(), registry, max_steps=n + 1, store=store)
            check(script, trace.final_answer)

        return run

    runners = {"in-memory": runner(None)} | {name: runner(s) for name, s in stores.items()}
    return runners, list(stores.values())


def start_postgres() -> Any:
    """A durable PostgreSQL server of the benchmark's own, or None (saying why)."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from helpers.pgserver import PostgresServer

    try:
        return PostgresServer().start(durable=True)
    except RuntimeError as exc:
        print(f"Postgres: skipped ({str(exc).splitlines()[0]})")
        return None


def bench_loopwright(ns: list[int], repeats: int, full: bool, postgres: bool) -> None:
    server = start_postgres() if postgres else None
    try:
        _bench_loopwright(ns, repeats, full, None if server is None else server.dsn())
    finally:
        if server is not None:
            server.stop()


def _bench_loopwright(ns: list[int], repeats: int, full: bool, pg_dsn: str | None) -> None:
    from loopwright.durable.sqlite import SQLiteStore

    with tempfile.TemporaryDirectory() as tmp:
        runners, stores = loopwright_runners(Path(tmp), pg_dsn)
        if not full:
            runners.pop("journal FULL")
        pg = next((s for s in stores if not isinstance(s, SQLiteStore)), None)
        if pg is not None:  # what one round trip to this server costs now, for scale
            t0 = time.perf_counter()
            for _ in range(200):
                pg._one("SELECT 1")
            print(f"Postgres round trip (SELECT 1 on a unix socket): {(time.perf_counter() - t0) / 200 * 1e6:.0f} us")
        print("loopwright ReAct, scripted policy, trivial tool: us per step, wall / CPU, median of "
              f"{repeats} interleaved runs (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
        journals = [name for name in ("journal NORMAL", "journal Postgres", "Postgres async") if name in runners]
        print(f"{'N':>5} " + " ".join(f"{name:>17}" for name in runners)
              + "".join(f" {name.replace('journal ', '') + ' extra':>17}" for name in journals))
        rows = {}
        for n in ns:
            us = per_step_us(runners, n, repeats)
            rows[n] = us
            cells = [f"{us[name]['wall']:>8.1f} /{us[name]['cpu']:>7.1f}" for name in runners]
            for name in journals:
                extra = {k: us[name][k] - us["in-memory"][k] for k in ("wall", "cpu")}
                cells.append(f"{extra['wall']:>8.1f} /{extra['cpu']:>7.1f}")
            print(f"{n:>5} " + " ".join(cells))
        for name in ("journal Postgres", "Postgres async"):
            if name not in runners:
                continue
            for n in ns:
                pg = rows[n][name]["wall"] - rows[n]["in-memory"]["wall"]
                lite = rows[n]["journal NORMAL"]["wall"] - rows[n]["in-memory"]["wall"]
                print(f"N={n}: {name} costs {pg:.0f} us a step (wall), {pg / max(lite, 1e-9):.1f}x "
                      f"SQLite NORMAL's {lite:.0f} us; the bare loop takes {rows[n]['in-memory']['wall']:.0f} us")
        if len(ns) > 1:
            lo, hi = ns[0], ns[-1]
            for name in journals:
                for k in ("wall", "cpu"):
                    growth = (rows[hi][name][k] - rows[hi]["in-memory"][k]) / max(
                        1e-9, rows[lo][name][k] - rows[lo]["in-memory"][k])
                    print(f"{name} overhead per step ({k}) at N={hi} vs N={lo}: {growth:.2f}x (flat is 1.0)")
        sizes = {Path(s.path).name: Path(s.path).stat().st_size for s in stores if isinstance(s, SQLiteStore)}
        for s in stores:
            s.close()
        print(f"journal files after the benchmark: {sizes}")


# -- LangGraph (run inside its own virtual environment) ---------------------------------


def langgraph_runners() -> dict[str, Runner]:
    from langchain.agents import create_agent
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import StructuredTool
    from langgraph.checkpoint.memory import InMemorySaver

    current: dict[str, Script] = {}

    class ScriptedChatModel(BaseChatModel):  # type: ignore[misc]
        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> Any:
            script = current["script"]
            previous = last_int(str(messages[-1].content)) if script.calls else 0
            kind, value = script.next_call(previous)
            if kind == "final":
                message = AIMessage(content=value)
            else:
                message = AIMessage(content="", tool_calls=[
                    {"name": "add", "args": value, "id": f"call_{script.calls}"}])
            return ChatResult(generations=[ChatGeneration(message=message)])

    def add(x: int, y: int) -> int:
        """Add two integers."""
        return current["script"].add(x, y)

    tool = StructuredTool.from_function(add)
    plain = create_agent(ScriptedChatModel(), tools=[tool], system_prompt="Use the add tool.")
    saved = create_agent(ScriptedChatModel(), tools=[tool], system_prompt="Use the add tool.",
                         checkpointer=InMemorySaver())

    def runner(agent: Any, checkpointed: bool) -> Runner:
        def run(n: int) -> None:
            script = current["script"] = Script(n)
            config: dict[str, Any] = {"recursion_limit": 2 * n + 10}
            if checkpointed:  # a fresh thread per run, as a fresh loopwright run id
                config["configurable"] = {"thread_id": uuid.uuid4().hex}
            out = agent.invoke({"messages": [HumanMessage(content=TASK)]}, config=config)
            check(script, out["messages"][-1].content)

        return run

    return {"no checkpointer": runner(plain, False), "InMemorySaver": runner(saved, True)}


def bench_langgraph_here(ns: list[int], repeats: int) -> None:
    from importlib import metadata

    runners = langgraph_runners()
    rows = {n: per_step_us(runners, n, repeats) for n in ns}
    print(json.dumps({"langgraph": metadata.version("langgraph"),
                      "langgraph-checkpoint": metadata.version("langgraph-checkpoint"),
                      "rows": rows}))


def bench_langgraph(ns: list[int], repeats: int) -> None:
    print()
    if not LANGGRAPH_PYTHON.exists():
        print(f"LangGraph: skipped, no environment at {LANGGRAPH_PYTHON} "
              "(create it with benchmarks/peers/setup.sh)")
        return
    out = subprocess.run(
        [str(LANGGRAPH_PYTHON), __file__, "--langgraph", "--ns", ",".join(map(str, ns)),
         "--repeats", str(repeats)],
        capture_output=True, text=True, check=False,
    )
    if out.returncode != 0:
        print(f"LangGraph: failed to run ({out.stderr.strip().splitlines()[-1:]})")
        return
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"LangGraph {result['langgraph']} (langgraph-checkpoint {result['langgraph-checkpoint']}), "
          "create_agent, same workload (us per step)")
    print(f"{'N':>5} {'no checkpointer':>17} {'InMemorySaver':>17} {'saver overhead':>17}")
    for n, us in result["rows"].items():
        extra = {k: us["InMemorySaver"][k] - us["no checkpointer"][k] for k in ("wall", "cpu")}
        cells = [f"{us[name]['wall']:>8.1f} /{us[name]['cpu']:>7.1f}" for name in ("no checkpointer", "InMemorySaver")]
        print(f"{n:>5} " + " ".join(cells) + f" {extra['wall']:>8.1f} /{extra['cpu']:>7.1f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ns", default="10,200")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--no-full", action="store_true", help="skip synchronous=FULL")
    parser.add_argument("--no-langgraph", action="store_true")
    parser.add_argument("--no-postgres", action="store_true", help="skip the PostgreSQL journal")
    parser.add_argument("--langgraph", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    ns = [int(x) for x in args.ns.split(",")]
    if args.langgraph:
        bench_langgraph_here(ns, args.repeats)
        return
    bench_loopwright(ns, args.repeats, full=not args.no_full, postgres=not args.no_postgres)
    if not args.no_langgraph:
        bench_langgraph(ns, args.repeats)


if __name__ == "__main__":
    main()
