"""For the A2A tests: serve an app built for its own URL on a real uvicorn at 127.0.0.1,
and talk to it with a2a-sdk's own client (ClientFactory)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
import uvicorn
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.helpers import new_text_part
from a2a.types import Message, Role, SendMessageRequest


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
