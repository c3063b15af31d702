"""What a hostile or careless caller costs `loopwright serve` in memory: the server (the app
on uvicorn, in a child process) is measured from /proc while

- `body`: one POST /runs of --body-mb megabytes (declared in Content-Length, then sent
  until the server answers), and the same sent chunked (no length given);
- `readers`: --readers clients open the event stream of a finished run of about --run-mb
  megabytes and read nothing.

Prints the server's peak resident memory (VmHWM) and resident memory (VmRSS) after each, in
MiB, next to its resident memory when idle.

    python benchmarks/serve_memory.py [--body-mb 300] [--run-mb 6] [--readers 50]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path


def serve(port: int, run_mb: float) -> None:
    """The child: the app on uvicorn, its one scripted answer about a third of `run_mb` MB
    (the answer is in the text deltas, the recorded step and RUN_FINISHED)."""
    import uvicorn

    import loopwright as lw
    from loopwright.ui import app

    answer = "x" * int(run_mb * 1024 * 1024 / 3)
    served = app(lw.ScriptedPolicy([f"Thought: t\nFinal Answer: {answer}"] * 4), lw.ToolRegistry(), max_steps=1)
    uvicorn.run(served, host="127.0.0.1", port=port, log_level="error")


def memory(pid: int) -> dict[str, float]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            out[name] = int(value.split()[0]) / 1024
    return out


def send_body(port: int, mb: float, chunked: bool) -> str:
    """POST a body of `mb` MB, piece by piece until the server answers; its status line."""
    size = int(mb * 1024 * 1024)
    piece = b" " * (1024 * 1024)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}"
    head = (f"POST /runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"{framing}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(head)
        for _ in range(size // len(piece)):
            if select.select([sock], [], [], 0)[0]:
                break
            try:
                sock.sendall(b"100000\r\n" + piece + b"\r\n" if chunked else piece)
            except OSError:
                break
        else:
            sock.sendall(b"0\r\n\r\n" if chunked else b"")
        reply = sock.recv(4096)
    return reply.split(b"\r\n", 1)[0].decode()


def readers(port: int, run_id: str, count: int) -> list[socket.socket]:
    """`count` clients that ask for the run's events and read nothing."""
    out = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(f"GET /runs/{run_id}/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        out.append(sock)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--body-mb", type=float, default=300)
    parser.add_argument("--run-mb", type=float, default=6)
    parser.add_argument("--readers", type=int, default=50)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.run_mb)
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    child = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--run-mb", str(args.run_mb)],
                             env=os.environ.copy())
    try:
        import httpx2

        deadline = time.monotonic() + 60
        while True:
            try:
                httpx2.get(f"http://127.0.0.1:{port}/", timeout=5)
                break
            except httpx2.HTTPError:
                assert time.monotonic() < deadline and child.poll() is None, "the server did not start"
                time.sleep(0.1)
        print(f"idle: {memory(child.pid)}")
        status = send_body(port, args.body_mb, chunked=False)
        print(f"{args.body_mb:g} MB body, Content-Length: {status}; {memory(child.pid)}")
        status = send_body(port, args.body_mb, chunked=True)
        print(f"{args.body_mb:g} MB body, chunked: {status}; {memory(child.pid)}")
        started = httpx2.post(f"http://127.0.0.1:{port}/runs", json={"task": "go"}, timeout=30).json()
        with httpx2.stream("GET", f"http://127.0.0.1:{port}{started['events']}", timeout=60) as response:
            size = sum(len(chunk) for chunk in response.iter_bytes())
        before = memory(child.pid)
        held = readers(port, started["run_id"], args.readers)
        time.sleep(3)
        print(f"run of {size / 2**20:.1f} MiB finished: {before}; {args.readers} readers that read nothing: "
              f"{memory(child.pid)}")
        for sock in held:
            sock.close()
    finally:
        child.terminate()
        child.wait(30)
    print(json.dumps({"python": sys.version.split()[0]}))


if __name__ == "__main__":
    main()
