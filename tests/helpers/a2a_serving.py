"""For the A2A tests: serve an app built for its own URL on a real uvicorn at 127.0.0.1, or
`loopwright a2a serve` in a subprocess, and talk to it with a2a-sdk's own client
(ClientFactory)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.helpers import new_text_part
from a2a.types import Message, Role, SendMessageRequest

SRC = Path(__file__).resolve().parents[2] / "src"


@contextmanager
def serving(build: Callable[[str], Any]) -> Iterator[str]:
    """Run `build(base_url)` on uvicorn at 127.0.0.1 (a free port) in a thread; yield the
    base URL. Leaving stops the server (its lifespan shutdown runs)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(build(base), log_level="warning", lifespan="on",
                                           timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(20)
        sock.close()
        assert not thread.is_alive(), "uvicorn did not stop"


@asynccontextmanager
async def client(base: str, binding: str = "JSONRPC", streaming: bool = True):  # type: ignore[no-untyped-def]
    """a2a-sdk's client for the agent at `base`, speaking `binding` (JSONRPC or HTTP+JSON)."""
    async with httpx.AsyncClient(timeout=30) as http:
        config = ClientConfig(streaming=streaming, httpx_client=http, supported_protocol_bindings=[binding])
        made: Client = await ClientFactory(config).create_from_url(base)
        try:
            yield made
        finally:
            await made.close()


def message(text: str, task_id: str = "", context_id: str = "") -> SendMessageRequest:
    return SendMessageRequest(message=Message(message_id=f"m-{time.monotonic_ns()}", role=Role.ROLE_USER,
                                              parts=[new_text_part(text)], task_id=task_id, context_id=context_id))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Served:
    """A `loopwright a2a serve` subprocess: where it listens, and, once it stopped, its
    exit status and what it wrote to stderr."""

    base: str
    proc: subprocess.Popen[str]
    returncode: int | None = None
    stderr: str = ""


@contextmanager
def cli_serving(args: Sequence[str], start_s: float = 60, stop: int = signal.SIGINT,
                env: dict[str, str] | None = None) -> Iterator[Served]:
    """`loopwright a2a serve ARGS --port <a free one>` in a subprocess (this checkout's
    source first on its path); yields once its agent card is served, and stops it with
    `stop` on leaving (Ctrl-C by default), waiting for it to exit."""
    port = free_port()
    path = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)
    proc = subprocess.Popen([sys.executable, "-m", "loopwright", "a2a", "serve", *args, "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {}), "PYTHONPATH": path})
    served = Served(f"http://127.0.0.1:{port}", proc)
    try:
        deadline = time.monotonic() + start_s  # the embedded model loads before the server starts
        while True:
            try:
                httpx.get(f"{served.base}/.well-known/agent-card.json", timeout=5).raise_for_status()
                break
            except httpx.HTTPError:
                assert proc.poll() is None, proc.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "loopwright a2a serve did not start"
                time.sleep(0.1)
        yield served
    finally:
        if proc.poll() is None:
            proc.send_signal(stop)
        try:
            served.stderr = proc.communicate(timeout=60)[1]
        except subprocess.TimeoutExpired:
            proc.kill()
            served.stderr = proc.communicate()[1]
        served.returncode = proc.returncode
