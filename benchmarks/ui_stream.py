"""What serving a run to a web page adds per token: the same scripted run (one step that
streams N deltas) read three ways, best of --repeats:

- `aiter_events`: the run's events in process (the floor);
- `map+encode`: plus each event mapped to AG-UI events and SSE-encoded (loopwright.ui.agui);
- `HTTP SSE`: POST /runs to the app on a real uvicorn at 127.0.0.1, the stream read with an
  HTTP client until RUN_FINISHED (the client only splits lines: no JSON parsing).

    python benchmarks/ui_stream.py [--deltas 2000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import threading
import time

import httpx2
import uvicorn
from ag_ui.encoder import EventEncoder

import loopwright as lw
from loopwright.ui import AGUIMapper, app


def script(deltas: int) -> tuple[str, ...]:
    return ("Thought: t\nFinal Answer: ", *(f"w{i} " for i in range(deltas)))


async def in_process(deltas: int, encode: bool) -> float:
    mapper, encoder = AGUIMapper("t"), EventEncoder()
    started = time.perf_counter()
    async for event in lw.aiter_events("go", lw.ScriptedPolicy([script(deltas)]), lw.ToolRegistry(), max_steps=1):
        if encode:
            for out in mapper.map(event):
                encoder.encode(out)
    return time.perf_counter() - started


def over_http(deltas: int, repeats: int) -> float:
    policy = lw.ScriptedPolicy([script(deltas)] * (repeats + 1))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app(policy, lw.ToolRegistry(), max_steps=1), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    best = float("inf")
    try:
        with httpx2.Client(timeout=60) as client:
            for i in range(repeats + 1):  # the first warms up
                started = time.perf_counter()
                run_id = client.post(f"{base}/runs", json={"task": "go"}).json()["run_id"]
                with client.stream("GET", f"{base}/runs/{run_id}/events") as response:
                    frames = sum(1 for line in response.iter_lines() if line)
                if i:
                    best = min(best, time.perf_counter() - started)
        assert frames >= deltas
    finally:
        server.should_exit = True
        thread.join(10)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deltas", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n = args.deltas + 1
    plain = min(asyncio.run(in_process(args.deltas, False)) for _ in range(args.repeats))
    mapped = min(asyncio.run(in_process(args.deltas, True)) for _ in range(args.repeats))
    http = over_http(args.deltas, args.repeats)
    print(f"{n} deltas, best of {args.repeats}")
    for label, seconds in (("aiter_events", plain), ("map+encode", mapped), ("HTTP SSE", http)):
        print(f"  {label:<13} {seconds * 1e3:8.1f} ms  {seconds / n * 1e6:6.1f} us/delta  x{seconds / plain:.2f}")


if __name__ == "__main__":
    main()
