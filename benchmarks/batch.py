"""Many concurrent ReAct runs against a real HTTP server speaking the OpenAI API.

    .venv/bin/python benchmarks/batch.py [--runs 1000] [--latency 0.05] [--markdown out.md]

The server (a separate process, stdlib asyncio, HTTP/1.1 keep-alive) answers
`/v1/completions` and `/v1/chat/completions` after a fixed simulated latency with
scripted replies: three `add` tool calls, then a final answer, so every run makes 4
model calls and 3 tool calls. Each measurement runs in a fresh process (so its peak RSS
is its own): loopwright (`lw.arun_many` through `OpenAICompatible.acomplete`) at
concurrency 1, 16, 64 and 256; pydantic-ai and LangGraph's async APIs on the same
server and workload, each in its own pinned venv (benchmarks/peers/setup.sh
pydantic_ai_http langgraph_http); and `lw.run_many(..., executor=lw.RayExecutor())`
with 2 workers.

Reported per row: throughput (runs/s) and its share of the limit
concurrency / (4 x latency), p50 / p99 run latency, CPU seconds per run (client process,
all threads), and peak RSS above the idle process per run in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers" / ".venvs"
CALLS_PER_RUN = 4  # 3 tool calls, then the answer
TASK = "Add 1 three times, starting from {i}."


# -- the server ---------------------------------------------------------------------


def _reply_text(prompt: str) -> str:
    done = prompt.split("Question:")[-1].count("Observation:")
    if done >= CALLS_PER_RUN - 1:
        return "Thought: done\nFinal Answer: 3"
    return "Thought: add\nAction: add\nAction Input: " + json.dumps({"x": done, "y": 1})


def _reply_chat(messages: list[dict[str, Any]]) -> dict[str, Any]:
    done = sum(1 for m in messages if m.get("role") == "tool")
    if done >= CALLS_PER_RUN - 1:
        return {"role": "assistant", "content": "3"}
    call = {"id": f"call_{done}", "type": "function",
            "function": {"name": "add", "arguments": json.dumps({"x": done, "y": 1})}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, latency: float) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"(?i)content-length:\s*(\d+)", head)
            if length is None:  # a GET: OpenAICompatible's one probe of the server's kind (/v1/models)
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                continue
            body = json.loads(await reader.readexactly(int(length.group(1))))
            await asyncio.sleep(latency)
            usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
            if b"/chat/completions" in head.split(b"\r\n", 1)[0]:
                out = {"id": "c", "object": "chat.completion", "created": 0, "model": "bench",
                       "choices": [{"index": 0, "message": _reply_chat(body["messages"]),
                                    "finish_reason": "stop"}], "usage": usage}
            else:
                out = {"id": "c", "object": "text_completion", "created": 0, "model": "bench",
                       "choices": [{"index": 0, "text": _reply_text(body["prompt"]),
                                    "finish_reason": "stop", "logprobs": None}], "usage": usage}
            data = json.dumps(out).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def serve(port: int, latency: float) -> None:
    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: _handle(r, w, latency), "127.0.0.1", port,
                                            backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def start_server(latency: float) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--latency", str(latency)])
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            break
        except OSError:
            time.sleep(0.05)
    return process, f"http://127.0.0.1:{port}/v1"


# -- the clients (each in its own process) -------------------------------------------


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _measure(run_all: Any, runs: int, concurrency: int) -> dict[str, Any]:
    idle = _rss_kb()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    latencies = run_all()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    latencies.sort()
    return {"runs": runs, "concurrency": concurrency, "wall_s": wall, "runs_per_s": runs / wall,
            "p50_s": statistics.median(latencies), "p99_s": latencies[int(0.99 * (len(latencies) - 1))],
            "cpu_ms_per_run": 1000 * cpu / runs,
            "rss_kb_per_in_flight": max(0, peak - idle) / min(concurrency, runs)}


def client_loopwright(url: str, runs: int, concurrency: int, ray: bool) -> dict[str, Any]:
    import loopwright as lw

    @lw.tool
    def add(x: int, y: int) -> int:
        """Add two integers."""
        return x + y

    registry = lw.ToolRegistry([add])
    model = lw.models.OpenAICompatible(url, "bench", pool_size=concurrency)
    tasks = [TASK.format(i=i) for i in range(runs)]
    lw.run("warm up", model, registry)  # imports and first connection, outside the measurement

    def run_all() -> list[float]:
        if ray:
            executor = lw.RayExecutor(num_workers=2, init_options={
                "num_cpus": 2, "include_dashboard": False, "log_to_driver": False})
            traces = lw.run_many(tasks, lw.policy_factory(lambda: lw.models.OpenAICompatible(url, "bench"),
                                                          per="worker"),
                                 registry, concurrency=concurrency, executor=executor)
        else:
            traces = asyncio.run(lw.arun_many(tasks, model, registry, concurrency=concurrency))
        bad = [t for t in traces if t.final_answer != "3" or t.llm_calls != CALLS_PER_RUN]
        assert not bad, bad[0].to_dict()
        return [t.duration_s for t in traces]

    return _measure(run_all, runs, concurrency)


def client_pydantic_ai(url: str, runs: int, concurrency: int) -> dict[str, Any]:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    agent = Agent(OpenAIChatModel("bench", provider=OpenAIProvider(base_url=url, api_key="x")),
                  instructions="Use the add tool.")

    @agent.tool_plain
    def add(x: int, y: int) -> int:
        """Add two integers."""
        return x + y

    async def one(i: int, gate: asyncio.Semaphore) -> float:
        async with gate:
            start = time.perf_counter()
            result = await agent.run(TASK.format(i=i))
            assert str(result.output).strip() == "3", result.output
            return time.perf_counter() - start

    async def main() -> list[float]:
        await agent.run("warm up")
        gate = asyncio.Semaphore(concurrency)
        return list(await asyncio.gather(*(one(i, gate) for i in range(runs))))

    return _measure(lambda: asyncio.run(main()), runs, concurrency)


def client_langgraph(url: str, runs: int, concurrency: int) -> dict[str, Any]:
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    @tool
    def add(x: int, y: int) -> int:
        """Add two integers."""
        return x + y

    graph = create_react_agent(ChatOpenAI(model="bench", base_url=url, api_key="x", max_retries=0), [add])

    async def one(i: int, gate: asyncio.Semaphore) -> float:
        async with gate:
            start = time.perf_counter()
            out = await graph.ainvoke({"messages": [("user", TASK.format(i=i))]})
            assert out["messages"][-1].content == "3"
            return time.perf_counter() - start

    async def main() -> list[float]:
        await graph.ainvoke({"messages": [("user", "warm up")]})
        gate = asyncio.Semaphore(concurrency)
        return list(await asyncio.gather(*(one(i, gate) for i in range(runs))))

    return _measure(lambda: asyncio.run(main()), runs, concurrency)


def client_sdk(url: str, runs: int, concurrency: int) -> dict[str, Any]:
    """The floor: the same 4 requests per run straight through openai.AsyncOpenAI, with
    no agent runtime at all (what the model client alone costs on this machine)."""
    import openai

    client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0)

    async def one(i: int, gate: asyncio.Semaphore) -> float:
        async with gate:
            start = time.perf_counter()
            prompt = f"Question: {TASK.format(i=i)}\nThought:"
            for _ in range(CALLS_PER_RUN):
                out = await client.completions.create(model="bench", prompt=prompt, max_tokens=64)
                prompt += out.choices[0].text + "\nObservation: 1\nThought:"
            return time.perf_counter() - start

    async def main() -> list[float]:
        await client.completions.create(model="bench", prompt="warm up", max_tokens=1)
        gate = asyncio.Semaphore(concurrency)
        return list(await asyncio.gather(*(one(i, gate) for i in range(runs))))

    return _measure(lambda: asyncio.run(main()), runs, concurrency)


CLIENTS = {"sdk": client_sdk, "loopwright": client_loopwright, "pydantic_ai": client_pydantic_ai, "langgraph": client_langgraph}


def run_client(python: str, name: str, url: str, runs: int, concurrency: int, ray: bool = False) -> dict[str, Any]:
    cmd = [python, __file__, "--client", name, "--url", url, "--runs", str(runs),
           "--concurrency", str(concurrency)] + (["--ray"] if ray else [])
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


# -- the report -----------------------------------------------------------------------


def markdown(rows: list[tuple[str, dict[str, Any]]], latency: float) -> str:
    lines = ["| client | runs | concurrency | runs/s | limit | of limit | p50 run s | p99 run s | CPU ms/run | RSS KiB per in-flight run |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, r in rows:
        if "error" in r:
            lines.append(f"| {label} | | | failed: {r['error'][:120]} | | | | | | |")
            continue
        limit = r["concurrency"] / (CALLS_PER_RUN * latency)
        lines.append(
            f"| {label} | {r['runs']} | {r['concurrency']} | {r['runs_per_s']:.1f} | {limit:.0f} | "
            f"{r['runs_per_s'] / limit:.0%} | {r['p50_s']:.3f} | {r['p99_s']:.3f} | "
            f"{r['cpu_ms_per_run']:.2f} | {r['rss_kb_per_in_flight']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--serial-runs", type=int, default=50, help="runs at concurrency 1 (1,000 would take 200 s)")
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--levels", default="1,16,64,256")
    parser.add_argument("--peers", default="pydantic_ai,langgraph,sdk",
                        help="sdk: the bare openai client, no runtime (the floor)")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--markdown", metavar="PATH")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ray", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.latency)
        return
    if args.client:
        extra = {"ray": args.ray} if args.client == "loopwright" else {}
        print(json.dumps(CLIENTS[args.client](args.url, args.runs, args.concurrency, **extra)))
        return

    server, url = start_server(args.latency)
    rows: list[tuple[str, dict[str, Any]]] = []
    try:
        levels = [int(x) for x in args.levels.split(",")]
        for c in levels:
            n = args.serial_runs if c == 1 else args.runs
            rows.append(("loopwright", run_client(sys.executable, "loopwright", url, n, c)))
            print(markdown(rows[-1:], args.latency).splitlines()[-1], flush=True)
        top = max(levels)
        for peer in [p for p in args.peers.split(",") if p]:
            python = Path(sys.executable) if peer == "sdk" else PEERS / f"{peer}_http" / "bin" / "python"
            if not python.exists():
                rows.append((peer, {"error": f"no venv: run benchmarks/peers/setup.sh {peer}_http"}))
            else:
                label = "openai SDK alone (no runtime)" if peer == "sdk" else peer
                rows.append((label, run_client(str(python), peer, url, args.runs, top)))
            print(markdown(rows[-1:], args.latency).splitlines()[-1], flush=True)
        if not args.no_ray:
            rows.append(("loopwright + Ray (2 workers)", run_client(sys.executable, "loopwright", url, args.runs, top, True)))
            print(markdown(rows[-1:], args.latency).splitlines()[-1], flush=True)
    finally:
        server.terminate()
        server.wait()
    table = markdown(rows, args.latency)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps([{"client": label, **r} for label, r in rows], indent=2))


if __name__ == "__main__":
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # no token written to ~/.ray
    main()
