"""loopwright.a2a's server, driven by a2a-sdk's own client over JSON-RPC and HTTP+JSON on a
real uvicorn at 127.0.0.1: send, stream, get, list, cancel, approvals through
input-required, conversations by context id, bad input, a client leaving mid-stream."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.helpers import get_data_parts, get_message_text
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SendMessageConfiguration,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError
from google.protobuf.json_format import MessageToDict

import loopwright as lw
from helpers.a2a_serving import cli_serving, client, free_port, message, serving
from loopwright.a2a import app

ADD = 'Thought: add them\nAction: add\nAction Input: {"x": 2, "y": 3}'
FINAL = "Thought: I know it\nFinal Answer: 5"
DELETE = 'Thought: delete it\nAction: delete\nAction Input: {"name": "notes.txt"}'
BINDINGS = ("JSONRPC", "HTTP+JSON")
ROOT = Path(__file__).resolve().parents[1]
REACT_CASSETTE = str(ROOT / "tests" / "cassettes" / "react_json_17x23.jsonl")


@lw.tool
def add(x: int, y: int) -> int:
    """Add two integers."""
    return x + y


def _gated(ran: list[str]) -> lw.ToolRegistry:
    @lw.tool(side_effects="destructive", requires_approval=True)
    def delete(name: str) -> str:
        """Delete a file."""
        ran.append(name)
        return f"deleted {name}"

    return lw.ToolRegistry([delete])


async def _send(base: str, text: str, binding: str = "JSONRPC", **ids: str) -> list[Any]:
    async with client(base, binding) as c:
        return [r async for r in c.send_message(message(text, **ids))]


def _states(responses: list[Any]) -> list[str]:
    out = []
    for r in responses:
        kind = r.WhichOneof("payload")
        if kind == "task":
            out.append(TaskState.Name(r.task.status.state))
        elif kind == "status_update":
            out.append(TaskState.Name(r.status_update.status.state))
        elif kind == "artifact_update":
            out.append("artifact")
    return out


def _meta(response: Any) -> dict[str, Any]:
    return dict(MessageToDict(response.status_update.metadata).get("loopwright", {}))


def _task_id(responses: list[Any]) -> str:
    first = responses[0]
    return str(first.task.id if first.WhichOneof("payload") == "task" else first.status_update.task_id)


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_streamed_send_runs_the_task_to_its_answer(binding: str) -> None:
    policy = lw.ScriptedPolicy([ADD, FINAL])
    with serving(lambda base: app(policy, [add], max_steps=4, url=base)) as base:
        responses = asyncio.run(_send(base, "What is 2 + 3?", binding))
    states = _states(responses)
    assert states[0] == "TASK_STATE_SUBMITTED" and states[-2:] == ["artifact", "TASK_STATE_COMPLETED"]
    assert "TASK_STATE_WORKING" in states
    answer = next(r.artifact_update.artifact for r in responses if r.WhichOneof("payload") == "artifact_update")
    assert answer.name == "answer" and answer.parts[0].text == "5"
    steps = [get_data_parts(list(r.status_update.status.message.parts))[0]["step"] for r in responses
             if r.WhichOneof("payload") == "status_update" and _meta(r).get("kind") == "step"]
    assert [s["kind"] for s in steps] == ["action", "final"] and steps[0]["observation"] == "5"


@pytest.mark.parametrize("binding", BINDINGS)
def test_get_and_list_read_the_run(binding: str, tmp_path: Any) -> None:
    store = lw.SQLiteStore(str(tmp_path / "runs.db"))
    policy = lw.ScriptedPolicy([ADD, FINAL])

    async def scenario(base: str) -> tuple[Any, Any]:
        async with client(base, binding, streaming=False) as c:
            sent = [r async for r in c.send_message(message("What is 2 + 3?"))]
            task_id = sent[0].task.id
            got = await c.get_task(GetTaskRequest(id=task_id))
            listed = await c.list_tasks(ListTasksRequest(include_artifacts=True))
            return got, listed

    with serving(lambda base: app(policy, [add], max_steps=4, url=base, store=store)) as base:
        got, listed = asyncio.run(scenario(base))
    assert TaskState.Name(got.status.state) == "TASK_STATE_COMPLETED"
    assert got.artifacts[0].parts[0].text == "5"
    record = store.load_run(got.id)  # the task is the journaled run, under the task's id
    assert record.status == "finished" and record.final_answer == "5"
    assert [t.id for t in listed.tasks] == [got.id]


def test_a_blocking_send_stops_at_input_required_and_the_next_message_answers_it() -> None:
    ran: list[str] = []
    policy = lw.ScriptedPolicy([DELETE, "Thought: done\nFinal Answer: deleted"])

    async def scenario(base: str) -> tuple[Any, Any]:
        async with client(base, streaming=False) as c:
            first = [r async for r in c.send_message(message("Delete notes.txt"))][-1].task
            assert ran == []
            second = [r async for r in c.send_message(message("approve, it is mine", task_id=first.id,
                                                              context_id=first.context_id))][-1].task
            return first, second

    with serving(lambda base: app(policy, _gated(ran), max_steps=4, url=base)) as base:
        first, second = asyncio.run(scenario(base))
    assert TaskState.Name(first.status.state) == "TASK_STATE_INPUT_REQUIRED"
    ask = get_data_parts(list(first.status.message.parts))[0]["approval"]
    assert ask["tool"] == "delete" and ask["args"] == {"name": "notes.txt"}
    assert "approve" in get_message_text(first.status.message)
    assert TaskState.Name(second.status.state) == "TASK_STATE_COMPLETED" and ran == ["notes.txt"]


def test_a_denial_reaches_the_model_and_the_tool_never_runs() -> None:
    ran: list[str] = []
    policy = lw.ScriptedPolicy([DELETE, "Thought: refused\nFinal Answer: not deleted"])

    async def scenario(base: str) -> Any:
        async with client(base) as c:
            first = [r async for r in c.send_message(message("Delete notes.txt"))]
            task_id = _task_id(first)
            assert _states(first)[-1] == "TASK_STATE_INPUT_REQUIRED"
            context_id = first[0].task.context_id
            again = [r async for r in c.send_message(message("what?", task_id=task_id, context_id=context_id))]
            assert _states(again)[-1] == "TASK_STATE_INPUT_REQUIRED"  # not an answer: asked again
            return [r async for r in c.send_message(message("deny not today", task_id=task_id, context_id=context_id))]

    with serving(lambda base: app(policy, _gated(ran), max_steps=4, url=base)) as base:
        last = asyncio.run(scenario(base))
    assert _states(last)[-1] == "TASK_STATE_COMPLETED" and ran == []
    denied = [get_data_parts(list(r.status_update.status.message.parts))[0]["step"] for r in last
              if r.WhichOneof("payload") == "status_update" and _meta(r).get("kind") == "step"]
    assert denied[0]["kind"] == "denied" and "not today" in denied[0]["observation"]


@pytest.mark.parametrize("binding", BINDINGS)
def test_cancel_interrupts_the_run_and_it_stays_resumable(binding: str, tmp_path: Any) -> None:
    store = lw.SQLiteStore(str(tmp_path / "runs.db"))
    release = threading.Event()

    @lw.tool
    def slow(x: int) -> int:
        """Wait, then echo."""
        release.wait(10)
        return x

    policy = lw.ScriptedPolicy(['Thought: wait\nAction: slow\nAction Input: {"x": 1}', FINAL])

    async def scenario(base: str) -> tuple[Any, Any]:
        async with client(base, binding, streaming=False) as c:
            from a2a.types import SendMessageConfiguration
            request = message("wait")
            request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
            task = [r async for r in c.send_message(request)][-1].task
            await asyncio.sleep(0.5)
            cancelled = await c.cancel_task(CancelTaskRequest(id=task.id))
            release.set()
            return cancelled, await c.get_task(GetTaskRequest(id=task.id))

    with serving(lambda base: app(policy, [slow], max_steps=4, url=base, store=store)) as base:
        cancelled, got = asyncio.run(scenario(base))
    assert TaskState.Name(cancelled.status.state) == "TASK_STATE_CANCELED"
    assert TaskState.Name(got.status.state) == "TASK_STATE_CANCELED"
    record = store.load_run(got.id)
    assert record.status == "interrupted" and record.resumable


def test_a_task_a_client_cancelled_stays_cancelled_when_the_server_starts_again(tmp_path: Path) -> None:
    store = lw.SQLiteStore(str(tmp_path / "runs.db"))
    release, ran = threading.Event(), []

    @lw.tool
    def slow(x: int) -> int:
        """Wait, then echo."""
        ran.append(x)
        release.wait(10)
        return x

    def build(base: str) -> Any:
        policy = lw.ScriptedPolicy(['Thought: wait\nAction: slow\nAction Input: {"x": 1}', FINAL])
        return app(policy, [slow], max_steps=4, url=base, store=store)

    async def cancel(base: str) -> str:
        async with client(base, streaming=False) as c:
            request = message("wait")
            request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
            task = [r async for r in c.send_message(request)][-1].task
            for _ in range(200):
                if ran:
                    break
                await asyncio.sleep(0.05)
            await c.cancel_task(CancelTaskRequest(id=task.id))
            return str(task.id)

    with serving(build) as base:
        task_id = asyncio.run(cancel(base))
    release.set()
    with serving(build) as base:
        got = asyncio.run(_get(base, task_id))
    assert TaskState.Name(got.status.state) == "TASK_STATE_CANCELED" and ran == [1]  # not resumed
    assert store.load_run(task_id).status == "interrupted"
    assert store.trace(task_id).meta["interrupted_by"] == "cancel"


def test_cancelling_a_task_waiting_for_approval_ends_its_run() -> None:
    ran: list[str] = []
    policy = lw.ScriptedPolicy([DELETE, FINAL])
    built: dict[str, Any] = {}

    def build(base: str) -> Any:
        built["app"] = app(policy, _gated(ran), max_steps=4, url=base)
        return built["app"]

    async def scenario(base: str) -> Any:
        async with client(base, streaming=False) as c:
            task = [r async for r in c.send_message(message("Delete notes.txt"))][-1].task
            cancelled = await c.cancel_task(CancelTaskRequest(id=task.id))
            live = built["app"].state.runs.runs[task.id]
            for _ in range(200):  # the run ends on the server's loop
                if live.trace is not None:
                    break
                await asyncio.sleep(0.05)
            return cancelled, live

    with serving(build) as base:
        cancelled, live = asyncio.run(scenario(base))
    assert TaskState.Name(cancelled.status.state) == "TASK_STATE_CANCELED"
    assert live.trace is not None and live.trace.stopped_reason == "interrupted" and ran == []


def test_a_context_id_carries_the_conversation_into_the_next_task() -> None:
    prompts: list[str] = []

    def policy(prompt: str) -> str:
        prompts.append(prompt)
        return "Thought: ok\nFinal Answer: " + ("blue" if len(prompts) == 1 else "you said blue")

    async def scenario(base: str) -> None:
        first = await _send(base, "My favourite colour is blue.")
        context_id = first[0].task.context_id
        await _send(base, "What is my favourite colour?", context_id=context_id)
        await _send(base, "Unrelated question")

    with serving(lambda base: app(policy, [add], max_steps=2, url=base)) as base:
        asyncio.run(scenario(base))
    assert "My favourite colour is blue." in prompts[1] and "<untrusted" in prompts[1]
    assert "My favourite colour is blue." not in prompts[2]


def test_the_card_names_both_bindings_and_declares_only_streaming() -> None:
    with serving(lambda base: app(lw.ScriptedPolicy([FINAL]), [add], url=base, name="adder")) as base:
        card = httpx.get(f"{base}/.well-known/agent-card.json").json()
    assert card["name"] == "adder"
    assert {i["protocolBinding"] for i in card["supportedInterfaces"]} == {"JSONRPC", "HTTP+JSON"}
    assert card["capabilities"].get("streaming") is True and not card["capabilities"].get("pushNotifications")
    assert [s["id"] for s in card["skills"]] == ["add"]


def _rpc(base: str, body: bytes | str, **headers: str) -> httpx.Response:
    return httpx.post(f"{base}/", content=body, headers={"content-type": "application/json", **headers}, timeout=10)


def test_bad_json_rpc_gets_a2a_errors_and_the_server_keeps_serving() -> None:
    policy = lw.ScriptedPolicy([FINAL])
    with serving(lambda base: app(policy, [add], url=base, max_body=4096)) as base:
        parse = _rpc(base, b"{not json", **{"A2A-Version": "1.0"}).json()
        unknown = _rpc(base, json.dumps({"jsonrpc": "2.0", "id": 1, "method": "NoSuchMethod", "params": {}}),
                       **{"A2A-Version": "1.0"}).json()
        missing = _rpc(base, json.dumps({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": "nope"}}),
                       **{"A2A-Version": "1.0"}).json()
        huge = _rpc(base, json.dumps({"jsonrpc": "2.0", "id": 3, "method": "SendMessage",
                                      "params": {"message": {"parts": [{"text": "x" * 10_000}]}}}))
        with pytest.raises(TaskNotFoundError):
            asyncio.run(_get(base, "nope"))
        after = asyncio.run(_send(base, "still there?"))
    assert parse["error"]["code"] == -32700
    assert unknown["error"]["code"] == -32601
    assert missing["error"]["code"] == -32001
    assert huge.status_code == 413 and "limit" in huge.json()["error"]
    assert _states(after)[-1] == "TASK_STATE_COMPLETED"


async def _get(base: str, task_id: str) -> Any:
    async with client(base) as c:
        return await c.get_task(GetTaskRequest(id=task_id))


def test_a_foreign_host_is_refused() -> None:
    with serving(lambda base: app(lw.ScriptedPolicy([FINAL]), [add], url=base)) as base:
        response = _rpc(base, "{}", host="evil.example")
    assert response.status_code == 421


def test_a_client_leaving_mid_stream_leaves_the_run_whole(tmp_path: Any) -> None:
    store = lw.SQLiteStore(str(tmp_path / "runs.db"))
    release = threading.Event()

    @lw.tool
    def slow(x: int) -> int:
        """Wait, then echo."""
        release.wait(10)
        return x

    policy = lw.ScriptedPolicy(['Thought: wait\nAction: slow\nAction Input: {"x": 7}', "Thought: ok\nFinal Answer: 7"])

    async def leave(base: str) -> str:
        async with client(base) as c:
            async for r in c.send_message(message("wait for it")):
                return _task_id([r])  # leave after the first event
        raise AssertionError("no event")

    async def poll(base: str, task_id: str) -> Any:
        async with client(base) as c:
            for _ in range(200):
                task = await c.get_task(GetTaskRequest(id=task_id))
                if task.status.state == TaskState.TASK_STATE_COMPLETED:
                    return task
                await asyncio.sleep(0.05)
        raise AssertionError("the task never completed")

    with serving(lambda base: app(policy, [slow], max_steps=4, url=base, store=store)) as base:
        task_id = asyncio.run(leave(base))
        release.set()
        task = asyncio.run(poll(base, task_id))
        after = asyncio.run(_send(base, "again"))  # the server still serves
    assert task.artifacts[0].parts[0].text == "7"
    trace = store.trace(task_id)
    assert trace.stopped_reason == "final" and [s.kind for s in trace.steps] == ["action", "final"]
    assert _states(after)[-1] in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED")


def test_with_a_token_the_card_is_open_declares_bearer_and_calls_need_the_token() -> None:
    with serving(lambda base: app(lw.ScriptedPolicy([FINAL]), [add], url=base, token="s3cret")) as base:
        card = httpx.get(f"{base}/.well-known/agent-card.json").json()
        refused = _rpc(base, json.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}))
        allowed = _rpc(base, json.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}),
                       authorization="Bearer s3cret", **{"A2A-Version": "1.0"})
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert refused.status_code == 401
    assert allowed.json()["error"]["code"] == -32001


def test_the_cli_serves_a2a(tmp_path: Any) -> None:
    """`loopwright a2a serve` for real: a subprocess on a free port (the model a cassette),
    its card read, a message sent with a2a-sdk's client and answered, stopped by Ctrl-C."""
    db = tmp_path / "tasks.db"
    with cli_serving(["--replay", REACT_CASSETTE, "--max-steps", "4", "--db", str(db), "--name", "calc"]) as served:
        card = httpx.get(f"{served.base}/.well-known/agent-card.json").json()

        async def ask() -> Any:
            async with client(served.base, streaming=False) as c:
                return [r async for r in c.send_message(message("What is 17 * 23?"))][-1].task

        task = asyncio.run(ask())
    assert served.returncode == 0, served.stderr[-3000:]
    assert f"A2A agent 'calc' at {served.base}/" in served.stderr
    assert card["name"] == "calc" and {s["id"] for s in card["skills"]} == {"lookup", "calculate"}
    assert TaskState.Name(task.status.state) == "TASK_STATE_COMPLETED" and task.artifacts[0].parts[0].text == "391"
    record = lw.SQLiteStore(str(db)).load_run(task.id)
    assert record.status == "finished" and record.final_answer == "391"


CRASH_SERVER = str(ROOT / "tests" / "helpers" / "a2a_crash_server.py")


def _crash_server(tmp_path: Path, port: int, block: bool) -> subprocess.Popen[bytes]:
    """tests/helpers/a2a_crash_server.py on `port`, journaling to tmp_path/a.db; once its card is served."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, CRASH_SERVER, str(tmp_path / "a.db"), str(port), str(tmp_path),
                             "1" if block else "0"], env=env)
    for _ in range(400):
        try:
            httpx.get(f"http://127.0.0.1:{port}/.well-known/agent-card.json", timeout=1)
            return proc
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("the server did not start")


def _wait_for(path: Path) -> None:
    for _ in range(400):
        if path.exists():
            return
        time.sleep(0.05)
    raise AssertionError(f"{path.name} never appeared")


async def _send_and_leave(base: str) -> str:
    async with client(base, streaming=False) as c:
        request = message("Record a note")
        request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
        return str([r async for r in c.send_message(request)][-1].task.id)


def _stop(proc: subprocess.Popen[bytes], sig: int) -> None:
    proc.send_signal(sig)
    proc.wait(30)


@pytest.mark.slow
def test_a_server_sigkilled_mid_task_resumes_it_on_restart_and_the_tool_runs_once(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    async def poll(task_id: str) -> tuple[list[str], Any]:
        seen = []
        async with client(base) as c:
            for _ in range(400):
                task = await c.get_task(GetTaskRequest(id=task_id))
                seen.append(TaskState.Name(task.status.state))
                if task.status.state == TaskState.TASK_STATE_COMPLETED:
                    return seen, task
                await asyncio.sleep(0.05)
        raise AssertionError(f"never completed: {seen[-5:]}")

    first = _crash_server(tmp_path, port, block=True)
    try:
        task_id = asyncio.run(_send_and_leave(base))
        _wait_for(tmp_path / "waiting")
    finally:
        _stop(first, signal.SIGKILL)
    assert lw.SQLiteStore(str(tmp_path / "a.db")).load_run(task_id).status == "running"
    second = _crash_server(tmp_path, port, block=False)
    try:
        seen, task = asyncio.run(poll(task_id))
    finally:
        _stop(second, signal.SIGTERM)
    assert task.artifacts[0].parts[0].text == "recorded once"
    assert (tmp_path / "effects").read_text() == "once\n"  # the tool's effect is not repeated
    assert set(seen) <= {"TASK_STATE_WORKING", "TASK_STATE_COMPLETED"}
    record = lw.SQLiteStore(str(tmp_path / "a.db")).load_run(task_id)
    assert record.status == "finished" and record.resumes == 1


@pytest.mark.slow
def test_a_task_resumed_after_a_restart_can_be_subscribed_to(tmp_path: Path) -> None:
    """The restarted server resumes the task in the background; SubscribeToTask streams it
    from where it stands to its answer, as for a task this process started."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    async def subscribe(task_id: str) -> list[Any]:
        got = []
        async with client(base) as c:
            async for event in c.subscribe(SubscribeToTaskRequest(id=task_id)):
                got.append(event)
                (tmp_path / "go").touch()  # subscribed: let the resumed run answer
        return got

    first = _crash_server(tmp_path, port, block=True)
    try:
        task_id = asyncio.run(_send_and_leave(base))
        _wait_for(tmp_path / "waiting")
    finally:
        _stop(first, signal.SIGKILL)
    (tmp_path / "waiting").unlink()
    second = _crash_server(tmp_path, port, block=True)
    try:
        _wait_for(tmp_path / "waiting")  # resumed, and waiting in its second model call
        events = asyncio.run(asyncio.wait_for(subscribe(task_id), 60))
    finally:
        _stop(second, signal.SIGTERM)
    assert events[0].WhichOneof("payload") == "task" and events[0].task.id == task_id
    assert _states(events)[0] == "TASK_STATE_WORKING" and _states(events)[-2:] == ["artifact", "TASK_STATE_COMPLETED"]
    answer = next(e.artifact_update.artifact for e in events if e.WhichOneof("payload") == "artifact_update")
    assert answer.parts[0].text == "recorded once" and (tmp_path / "effects").read_text() == "once\n"


@pytest.mark.slow
def test_a_task_interrupted_by_a_graceful_stop_resumes_on_restart(tmp_path: Path) -> None:
    """SIGTERM stops the server gracefully mid-task: the run ends interrupted, marked as the
    server's shutdown (not a client's cancel), and the server started again resumes it to
    its answer, the tool not run again."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    store = lw.SQLiteStore(str(tmp_path / "a.db"))
    first = _crash_server(tmp_path, port, block=True)
    try:
        task_id = asyncio.run(_send_and_leave(base))
        _wait_for(tmp_path / "waiting")
        first.send_signal(signal.SIGTERM)
        for _ in range(400):  # the run ends interrupted while its model call still waits
            if store.load_run(task_id).status != "running":
                break
            time.sleep(0.05)
    finally:
        (tmp_path / "go").touch()  # the abandoned model call's thread ends, and the process with it
        first.wait(30)
    record = store.load_run(task_id)
    assert (record.status, store.trace(task_id).meta.get("interrupted_by")) == ("interrupted", "shutdown")
    second = _crash_server(tmp_path, port, block=False)
    try:
        task = asyncio.run(_completed(base, task_id))
    finally:
        _stop(second, signal.SIGTERM)
    assert task.artifacts[0].parts[0].text == "recorded once"
    assert (tmp_path / "effects").read_text() == "once\n"
    assert store.load_run(task_id).status == "finished" and store.load_run(task_id).resumes == 1


async def _completed(base: str, task_id: str) -> Any:
    async with client(base) as c:
        for _ in range(400):
            task = await c.get_task(GetTaskRequest(id=task_id))
            if task.status.state == TaskState.TASK_STATE_COMPLETED:
                return task
            await asyncio.sleep(0.05)
    raise AssertionError(f"never completed: {TaskState.Name(task.status.state)}")
