"""loopwright's A2A client (`lw.A2AAgent(...).as_tool()`): against a server built from
a2a-sdk's own classes (an arithmetic agent) and against loopwright's own server, in both
drivers; remote failures as tool errors; input-required as a tool error; cancelling the
parent cancels the remote task; a coordinator SIGKILLed mid-delegation and resumed follows
the remote task instead of sending it again."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from a2a.helpers import new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    GetTaskRequest,
    ListTasksRequest,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.errors import UnsupportedOperationError
from starlette.applications import Starlette

import loopwright as lw
from helpers.a2a_coordinator import policy as coordinator_policy
from helpers.a2a_coordinator import registry as coordinator_registry
from helpers.a2a_serving import client, serving
from loopwright.a2a import app
from loopwright.a2a.server import PROTOCOL_VERSION

ROOT = Path(__file__).resolve().parents[1]


def _ask(task: str) -> str:
    return f'Thought: ask it\nAction: calc\nAction Input: {{"task": "{task}"}}'


class Arithmetic(AgentExecutor):
    """An A2A agent on the SDK's own classes: `a + b` (or - or *) in, the number out; a task
    starting "wait" works until it is cancelled."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.cancelled: list[str] = []
        self.tasks: list[str] = []

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id, context.context_id
        assert task_id is not None and context_id is not None
        self.tasks.append(task_id)
        updater = TaskUpdater(event_queue, task_id, context_id)
        if context.current_task is None:
            await event_queue.enqueue_event(Task(id=task_id, context_id=context_id,
                                                 status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)))
        text = context.get_user_input().strip()
        await updater.start_work(updater.new_agent_message([new_text_part(f"computing {text}")]))
        if text.startswith("wait"):
            self.started.set()
            await asyncio.sleep(60)
            return
        match = re.fullmatch(r"(-?\d+)\s*([-+*])\s*(-?\d+)", text)
        if match is None:
            await updater.failed(updater.new_agent_message([new_text_part(f"cannot compute {text!r}")]))
            return
        a, op, b = int(match[1]), match[2], int(match[3])
        value = a + b if op == "+" else a - b if op == "-" else a * b
        await updater.add_artifact([new_text_part(str(value))], name="answer")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id, context.context_id
        assert task_id is not None
        self.cancelled.append(task_id)
        await TaskUpdater(event_queue, task_id, context_id or task_id).cancel()


class NoListing(DefaultRequestHandler):
    """The SDK's handler, but ListTasks is not served (a server may leave it out)."""

    async def on_list_tasks(self, *args: Any, **kwargs: Any) -> Any:
        raise UnsupportedOperationError("ListTasks is not served here")


def sdk_app(executor: Arithmetic, base: str, handler_class: type[DefaultRequestHandler] = DefaultRequestHandler
            ) -> Starlette:
    card = AgentCard(
        name="calc", description="Arithmetic on two integers", version="1.0",
        supported_interfaces=[AgentInterface(url=base + "/", protocol_binding="JSONRPC",
                                             protocol_version=PROTOCOL_VERSION)],
        capabilities=AgentCapabilities(streaming=True), default_input_modes=["text/plain"],
        skills=[AgentSkill(id="calc", name="calc", description="a + b, a - b, a * b", tags=["arithmetic"])],
        default_output_modes=["text/plain"])
    handler = handler_class(agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card)
    return Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/"),
                             *create_rest_routes(handler)])


def _tool_step(trace: lw.Trace) -> lw.Step:
    return next(s for s in trace.steps if s.tool == "calc")


def test_an_sdk_built_agent_answers_as_a_tool_with_its_task_in_the_step_and_events() -> None:
    executor = Arithmetic()
    with serving(lambda base: sdk_app(executor, base)) as base:
        tool = lw.A2AAgent(base, timeout_s=30).as_tool()  # name and description from the card
        assert tool.name == "calc" and "Arithmetic" in tool.description
        events = list(lw.iter_events("What is 2 + 3?", lw.ScriptedPolicy([_ask("2 + 3"), "Final Answer: 5"]),
                                     [tool], max_steps=4))
    trace = next(e.trace for e in events if isinstance(e, lw.RunFinished) and e.agent is None)
    step = _tool_step(trace)
    assert step.observation == "5" and trace.final_answer == "5"
    assert step.meta["a2a_task_id"] == executor.tasks[0]
    child = trace.children[step.meta["child_run_id"]]
    assert child.mode == "a2a" and child.final_answer == "5" and child.meta["a2a"]["task_id"] == executor.tasks[0]
    remote = [e for e in events if e.agent == "calc"]
    assert isinstance(remote[0], lw.RunStarted) and isinstance(remote[-1], lw.RunFinished)
    assert any(isinstance(e, lw.StepEvent) and e.step.observation == "computing 2 + 3" for e in remote)


def test_the_async_driver_awaits_the_remote_task_on_its_loop() -> None:
    executor = Arithmetic()
    with serving(lambda base: sdk_app(executor, base)) as base:
        tool = lw.A2AAgent(base, name="calc", description="Arithmetic", timeout_s=30).as_tool()
        trace = asyncio.run(lw.arun("6 * 7?", lw.ScriptedPolicy([_ask("6 * 7"), "Final Answer: 42"]), [tool],
                                    max_steps=4))
    assert _tool_step(trace).observation == "42" and trace.final_answer == "42"


def test_a_remote_failure_is_a_tool_error_the_model_reads() -> None:
    executor = Arithmetic()
    with serving(lambda base: sdk_app(executor, base)) as base:
        tool = lw.A2AAgent(base, name="calc", description="Arithmetic", timeout_s=30).as_tool()
        trace = lw.run("?", lw.ScriptedPolicy([_ask("two plus"), "Final Answer: no"]), [tool], max_steps=4)
    step = _tool_step(trace)
    assert step.observation is not None and step.observation.startswith("ERROR[calc]: the remote task")
    assert "TASK_STATE_FAILED" in step.observation and "cannot compute" in step.observation
    assert "traceback" not in step.meta and trace.final_answer == "no"


def test_an_unreachable_agent_is_a_tool_error_not_a_traceback() -> None:
    with serving(lambda base: Starlette()) as base:
        pass  # the port is free again: nothing listens there
    tool = lw.A2AAgent(base, name="calc", description="Arithmetic", timeout_s=5).as_tool()
    trace = lw.run("?", lw.ScriptedPolicy([_ask("1 + 1"), "Final Answer: no"]), [tool], max_steps=4)
    step = _tool_step(trace)
    assert step.observation is not None and step.observation.startswith("ERROR[calc]: the remote agent at")
    assert "traceback" not in step.meta


def test_cancelling_the_parent_cancels_the_remote_task() -> None:
    executor = Arithmetic()

    async def main(base: str) -> str:
        tool = lw.A2AAgent(base, name="calc", description="Arithmetic", timeout_s=30).as_tool()
        run = asyncio.create_task(lw.arun("wait", lw.ScriptedPolicy([_ask("wait for it"), "Final Answer: x"]),
                                          [tool], max_steps=4))
        assert await asyncio.to_thread(executor.started.wait, 20)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        async with client(base) as c:
            task = await c.get_task(GetTaskRequest(id=executor.tasks[0]))
        return TaskState.Name(task.status.state)

    with serving(lambda base: sdk_app(executor, base)) as base:
        state = asyncio.run(main(base))
    assert executor.cancelled == executor.tasks and state == "TASK_STATE_CANCELED"


def _worker(effects: list[str], release: threading.Event, started: threading.Event, base: str) -> Any:
    @lw.tool(side_effects="write")
    def record(note: str) -> str:
        """Record a note."""
        effects.append(note)
        started.set()
        release.wait(60)
        return "NOTE-STORED-7"

    def policy(prompt: str) -> str:
        if "NOTE-STORED-7" not in prompt:
            return 'Thought: record it\nAction: record\nAction Input: {"note": "once"}'
        return "Thought: done\nFinal Answer: recorded once"

    return app(policy, [record], name="worker", max_steps=4, url=base)


def test_a_loopwright_agent_in_another_run_answers_and_its_events_reach_the_parent() -> None:
    effects: list[str] = []
    release, started = threading.Event(), threading.Event()
    release.set()
    with serving(lambda base: _worker(effects, release, started, base)) as base:
        events = list(lw.iter_events("Have the note recorded.", coordinator_policy, coordinator_registry(base),
                                     max_steps=4))
    trace = next(e.trace for e in events if isinstance(e, lw.RunFinished) and e.agent is None)
    assert trace.final_answer == "the worker recorded it" and effects == ["once"]
    remote = [e for e in events if e.agent == "worker" and isinstance(e, lw.StepEvent)]
    assert any("record" in (e.step.observation or "") for e in remote)


def test_input_required_is_a_tool_error_and_the_remote_task_stays_open() -> None:
    @lw.tool(side_effects="destructive", requires_approval=True)
    def delete(name: str) -> str:
        """Delete a file."""
        return f"deleted {name}"

    remote = lw.ScriptedPolicy(['Thought: x\nAction: delete\nAction Input: {"name": "a.txt"}', "Final Answer: ok"])
    with serving(lambda base: app(remote, [delete], name="worker", max_steps=4, url=base)) as base:
        tool = lw.A2AAgent(base, name="worker", description="w", timeout_s=30).as_tool()
        ask = 'Thought: ask\nAction: worker\nAction Input: {"task": "delete a.txt"}'
        trace = lw.run("go", lw.ScriptedPolicy([ask, "Final Answer: waiting"]), [tool], max_steps=4)
        step = next(s for s in trace.steps if s.tool == "worker")

        async def state() -> str:
            async with client(base) as c:
                return TaskState.Name((await c.get_task(GetTaskRequest(id=step.meta["a2a_task_id"]))).status.state)

        assert asyncio.run(state()) == "TASK_STATE_INPUT_REQUIRED"
    assert step.observation is not None and "asks for input" in step.observation and "delete" in step.observation


def test_the_run_record_counts_the_delegation_once_while_it_runs_and_after(tmp_path: Path) -> None:
    """The remote task's id is journaled as a note on the call while the call runs; the
    run's record counts calls, not notes: 0 until the call's result, then 1."""
    effects: list[str] = []
    release, started = threading.Event(), threading.Event()
    store = lw.SQLiteStore(str(tmp_path / "coord.db"))
    with serving(lambda base: _worker(effects, release, started, base)) as base:
        done: list[lw.Trace] = []
        runner = threading.Thread(target=lambda: done.append(lw.run(
            "Have the note recorded.", coordinator_policy, coordinator_registry(base), max_steps=4, store=store,
            run_id="coord")))
        runner.start()
        try:
            assert started.wait(60) and _journaled_task(tmp_path / "coord.db")
            during = store.load_run("coord")
        finally:
            release.set()
            runner.join(60)
    assert (during.status, during.tool_calls) == ("running", 0)
    assert done[0].tool_calls == 1 and store.load_run("coord").tool_calls == 1


def _journaled_task(db: Path) -> bool:
    """Whether the coordinator's journal holds the remote task's id (it is written when the
    first response arrives, which may come after the remote tool started)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.closing(sqlite3.connect(db)) as con:
            if con.execute("SELECT count(*) FROM tool_calls WHERE key LIKE '%@a2a'").fetchone()[0]:
                return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("journaled", [True, False], ids=["task-id-journaled", "found-by-context-id"])
def test_a_coordinator_killed_mid_delegation_resumes_by_following_the_remote_task(
        tmp_path: Path, journaled: bool) -> None:
    effects: list[str] = []
    release, started = threading.Event(), threading.Event()
    db = tmp_path / "coord.db"
    with serving(lambda base: _worker(effects, release, started, base)) as base:
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT / 'tests'}"}
        child = subprocess.Popen([sys.executable, str(ROOT / "tests/helpers/a2a_coordinator.py"), str(db), base],
                                 env=env)
        try:
            assert started.wait(60), "the remote tool never started"
            assert _journaled_task(db), "the coordinator never journaled the remote task's id"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(30)
        assert lw.SQLiteStore(db).load_run("coord").tool_calls == 0  # the task's note is not a call
        if not journaled:  # as if the crash fell between the send and the journal's row
            with sqlite3.connect(db) as con:
                assert con.execute("DELETE FROM tool_calls WHERE key LIKE '%@a2a'").rowcount == 1
        release.set()
        trace = lw.resume("coord", coordinator_policy, coordinator_registry(base), store=lw.SQLiteStore(db))

        async def tasks() -> list[str]:
            async with client(base) as c:
                return [t.id for t in (await c.list_tasks(ListTasksRequest())).tasks]

        remote_tasks = asyncio.run(tasks())
    assert trace.final_answer == "the worker recorded it"
    assert effects == ["once"] and len(remote_tasks) == 1  # sent once, followed after the crash
    step = next(s for s in trace.steps if s.tool == "worker")
    assert step.meta["a2a_task_id"] == remote_tasks[0] and step.observation == "recorded once"


def test_as_tool_takes_worked_examples_checked_like_any_tools() -> None:
    agent = lw.A2AAgent("http://127.0.0.1:9", name="calc", description="Arithmetic")
    tool = agent.as_tool(examples=[{"question": "What is 6 times 7?", "args": {"task": "6 * 7"}, "result": "42"}])
    assert [(e.question, e.args) for e in tool.examples] == [("What is 6 times 7?", {"task": "6 * 7"})]
    with pytest.raises(lw.ToolDefinitionError):
        agent.as_tool(examples=[{"question": "?", "args": {"sum": "6 * 7"}, "result": "42"}])


def test_a_resumed_call_the_server_cannot_look_up_stops_the_run_in_doubt_saying_why(tmp_path: Path) -> None:
    """The crash fell between the send and the task id's row, and the server cannot list
    tasks: nothing is sent again, and the run stops for a person with the real reason,
    not as a call that ran out of time."""
    store = lw.SQLiteStore(str(tmp_path / "coord.db"))

    @lw.tool(name="calc", side_effects="write")
    def crashing(task: str, context: str = "") -> str:
        """Stands for the remote call the process died in."""
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        lw.run("2 + 3?", lw.ScriptedPolicy([_ask("2 + 3"), "Final Answer: 5"]), [crashing], store=store, run_id="r")
    executor = Arithmetic()
    with serving(lambda base: sdk_app(executor, base, NoListing)) as base:
        tool = lw.A2AAgent(base, name="calc", description="Arithmetic", timeout_s=30).as_tool()
        trace = lw.resume("r", lw.ScriptedPolicy(["Final Answer: 5"]), [tool], store=store,
                          allow_tool_changes=True)  # the stand-in's schema is not the real tool's
    step = trace.steps[-1]
    assert executor.tasks == [] and trace.stopped_reason == "error" and step.meta["in_doubt"] is True
    assert step.error is not None and step.error.startswith(
        f"calc cannot tell whether it took effect: this call may have reached the remote agent at {base} before "
        "the run stopped; its task id was not recorded, and the server could not list the tasks of context ")
    assert "UnsupportedOperationError" in step.error and "did not finish in time" not in step.error
    assert store.load_run("r").status == "blocked"
