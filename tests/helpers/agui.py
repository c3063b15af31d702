"""For the ui tests: serve an ASGI app on a real uvicorn, read a run's AG-UI stream with a
real HTTP client, and check a stream against AG-UI's ordering rules."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx2
import uvicorn
from ag_ui.core import Event
from pydantic import TypeAdapter

EVENT = TypeAdapter(Event)


@contextmanager
def serving(app: Any, host: str = "127.0.0.1") -> Iterator[str]:
    """Run `app` on uvicorn at `host` (a free port) in a thread; yield its base URL on
    127.0.0.1. Leaving stops the server (its lifespan shutdown runs) and joins the thread."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    # open event streams would hold a graceful shutdown forever: give them a second
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)
        sock.close()
        assert not thread.is_alive(), "uvicorn did not stop"


def start_run(base: str, task: str) -> str:
    response = httpx2.post(f"{base}/runs", json={"task": task}, timeout=10)
    assert response.status_code == 201, response.text
    assert response.json()["events"] == f"/runs/{response.json()['run_id']}/events"
    return str(response.json()["run_id"])


def read_stream(response: Any, on_event: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Every event of an SSE response, each validated as an AG-UI event, until the stream ends."""
    assert response.status_code == 200, response.read()
    assert response.headers["content-type"].startswith("text/event-stream")
    events: list[dict[str, Any]] = []
    for line in response.iter_lines():
        if not line or line.startswith("id: "):
            continue
        assert line.startswith("data: "), line
        event = json.loads(line[len("data: "):])
        EVENT.validate_python(event)  # a valid AG-UI event by the package's own models
        events.append(event)
        if on_event is not None:
            on_event(event)
    return events


def watch(base: str, run_id: str, on_event: Callable[[dict[str, Any]], None] | None = None,
          read_timeout: float = 30.0, last_event_id: int | None = None) -> list[dict[str, Any]]:
    """The run's whole stream (after `last_event_id`, as a reconnecting EventSource asks);
    `read_timeout`: the longest wait for the next bytes."""
    timeout = httpx2.Timeout(10.0, read=read_timeout)
    headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
    with httpx2.stream("GET", f"{base}/runs/{run_id}/events", timeout=timeout, headers=headers) as response:
        return read_stream(response, on_event)


def answer(base: str, run_id: str, key: str, approved: bool, reason: str | None = None) -> httpx2.Response:
    body: dict[str, Any] = {"approved": approved}
    if reason is not None:
        body["reason"] = reason
    return httpx2.post(f"{base}/runs/{run_id}/approvals/{key}", json=body, timeout=10)


def check_order(events: list[dict[str, Any]]) -> None:
    """AG-UI's sequencing rules (as the protocol's own client verifies them): one run
    started first and ended last; text content only inside its open message; tool args and
    end only inside their open call, and a result after it ended; steps finish by name
    once started; nothing left open at the end."""
    types = [e["type"] for e in events]
    assert types[0] == "RUN_STARTED", types
    assert types[-1] in ("RUN_FINISHED", "RUN_ERROR"), types
    assert types.count("RUN_STARTED") == 1 and types.count("RUN_FINISHED") + types.count("RUN_ERROR") == 1, types
    messages: set[str] = set()
    calls: set[str] = set()
    ended: set[str] = set()
    steps: set[str] = set()
    for e in events:
        t = e["type"]
        if t == "TEXT_MESSAGE_START":
            assert e["messageId"] not in messages, e
            messages.add(e["messageId"])
        elif t == "TEXT_MESSAGE_CONTENT":
            assert e["messageId"] in messages, f"content outside its message: {e}"
        elif t == "TEXT_MESSAGE_END":
            messages.remove(e["messageId"])
        elif t == "TOOL_CALL_START":
            assert e["toolCallId"] not in calls | ended, e
            calls.add(e["toolCallId"])
        elif t == "TOOL_CALL_ARGS":
            assert e["toolCallId"] in calls, f"args outside their call: {e}"
        elif t == "TOOL_CALL_END":
            calls.remove(e["toolCallId"])
            ended.add(e["toolCallId"])
        elif t == "TOOL_CALL_RESULT":
            assert e["toolCallId"] in ended, f"a result before its call ended: {e}"
        elif t == "STEP_STARTED":
            assert e["stepName"] not in steps, e
            steps.add(e["stepName"])
        elif t == "STEP_FINISHED":
            steps.remove(e["stepName"])
    assert not messages and not calls and not steps, (messages, calls, steps)


def texts(events: list[dict[str, Any]]) -> dict[str, str]:
    """Each text message's content, joined from its deltas."""
    out: dict[str, str] = {}
    for e in events:
        if e["type"] == "TEXT_MESSAGE_CONTENT":
            out[e["messageId"]] = out.get(e["messageId"], "") + e["delta"]
    return out


def custom(events: list[dict[str, Any]], name: str) -> list[Any]:
    return [e["value"] for e in events if e["type"] == "CUSTOM" and e["name"] == name]
