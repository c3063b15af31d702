"""lw.current_call(): a stable idempotency key for the tool call in progress, and tools
that deduplicate on it, which a resumed run runs again instead of blocking on."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from contextlib import closing
from pathlib import Path

import pytest

import loopwright as lw
from conftest import STORE_KINDS, act, final, open_journal


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path):
    with open_journal(request.param, request, tmp_path / "runs.db") as s:
        yield s


def seen_tools(seen: list[lw.CallInfo | None]) -> lw.ToolRegistry:
    @lw.tool
    def note(text: str) -> str:
        """Note the call in progress."""
        seen.append(lw.current_call())
        return text

    @lw.tool(timeout_s=5)
    def in_thread(text: str) -> str:
        """Runs in a worker thread (it has a timeout)."""
        seen.append(lw.current_call())
        return threading.current_thread().name

    @lw.tool
    async def later(text: str) -> str:
        """An async tool."""
        await asyncio.sleep(0)
        seen.append(lw.current_call())
        return text

    return lw.ToolRegistry([note, in_thread, later])


def test_a_journaled_call_knows_its_run_step_attempt_and_key(store):
    seen: list[lw.CallInfo | None] = []
    script = [act("note", '{"text": "a"}'), act("note", '{"text": "b"}'), final("ab")]
    lw.run("t", lw.ScriptedPolicy(script), seen_tools(seen), store=store, run_id="r")
    assert seen == [lw.CallInfo("r", "1", 1, "r:1", "note", True), lw.CallInfo("r", "2", 1, "r:2", "note", True)]
    assert lw.current_call() is None  # only while a tool runs


def test_worker_threads_and_async_tools_see_the_call_too(store):
    seen: list[lw.CallInfo | None] = []
    script = [act("in_thread", '{"text": "a"}'), act("later", '{"text": "b"}'), final("ab")]
    trace = lw.run("t", lw.ScriptedPolicy(script), seen_tools(seen), store=store, run_id="r")
    assert trace.steps[0].observation.startswith("loopwright-tool")  # it did run in another thread
    assert [(c.key, c.tool) for c in seen if c is not None] == [("r:1", "in_thread"), ("r:2", "later")]


def test_rewoo_workers_running_at_once_each_see_their_own_call(store):
    seen: list[lw.CallInfo | None] = []
    plan = {"plan": [{"id": f"E{i}", "tool": t, "args": {"text": str(i)}}
                     for i, t in enumerate(["note", "in_thread", "later", "note"], 1)]}
    lw.run("t", lw.ScriptedPolicy([json.dumps(plan), "done"]), seen_tools(seen), mode="rewoo",
           store=store, run_id="w")
    assert sorted((c.step, c.key, c.tool) for c in seen if c is not None) == [
        ("E1", "w:E1", "note"), ("E2", "w:E2", "in_thread"), ("E3", "w:E3", "later"), ("E4", "w:E4", "note")]


def test_plan_execute_keys_name_the_round_and_the_step(store):
    seen: list[lw.CallInfo | None] = []
    plan = {"plan": [{"id": "E1", "tool": "note", "args": {"text": "x"}}]}
    lw.run("t", lw.ScriptedPolicy([json.dumps(plan)]), seen_tools(seen), mode="plan_execute",
           store=store, run_id="p")
    assert [c.key for c in seen if c is not None] == ["p:1:E1"]


def test_a_run_without_a_store_gets_an_ephemeral_run_id_and_no_call_outside_a_run():
    seen: list[lw.CallInfo | None] = []
    script = [act("note", '{"text": "a"}'), act("note", '{"text": "b"}'), final("ab")]
    lw.run("t", lw.ScriptedPolicy(script), seen_tools(seen))
    first, second = seen
    assert first is not None and second is not None
    assert first.run_id == second.run_id and first.run_id.startswith("ephemeral-")
    assert not first.durable and (first.key, second.key) == (f"{first.run_id}:1", f"{first.run_id}:2")
    seen.clear()
    lw.run("t", lw.ScriptedPolicy(script), seen_tools(seen), run_id="named")
    assert [c.key for c in seen if c is not None] == ["named:1", "named:2"]
    assert seen_tools(seen).get("note")("direct") == "direct" and seen[-1] is None  # a plain call


def test_concurrent_workers_of_a_run_without_a_store_each_see_their_own_call():
    seen: list[lw.CallInfo | None] = []
    plan = {"plan": [{"id": f"E{i}", "tool": t, "args": {"text": str(i)}}
                     for i, t in enumerate(["note", "in_thread", "later"], 1)]}
    lw.run("t", lw.ScriptedPolicy([json.dumps(plan), "done"]), seen_tools(seen), mode="rewoo", run_id="m")
    assert sorted((c.key, c.durable) for c in seen if c is not None) == [
        ("m:E1", False), ("m:E2", False), ("m:E3", False)]


# -- a payment tool that deduplicates on the key ---------------------------------------------


def payments(db: Path, crash: dict[str, bool], executions: list[lw.CallInfo]) -> lw.ToolRegistry:
    """charge() inserts a payment keyed by the call; the table's unique key makes a second
    insert with the same key a no-op. `crash` kills the process after the insert commits."""
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS payments (key TEXT PRIMARY KEY, amount INTEGER NOT NULL)")
        conn.commit()

    @lw.tool(side_effects="write", dedupes_on_call_key=True)
    def charge(amount: int) -> str:
        """Charge the card once per call."""
        call = lw.current_call()
        assert call is not None
        executions.append(call)
        with closing(sqlite3.connect(db)) as conn:
            conn.execute("INSERT INTO payments VALUES (?, ?) ON CONFLICT (key) DO NOTHING", (call.key, amount))
            conn.commit()
        if crash.pop("now", False):
            raise SystemExit("killed after the payment committed, before the journal recorded it")
        return f"paid {amount} ({call.key})"

    return lw.ToolRegistry([charge])


def test_a_key_deduplicating_tool_killed_mid_call_is_rerun_with_the_same_key_and_pays_once(store, tmp_path):
    db, executions = tmp_path / "payments.db", []
    script = [act("charge", '{"amount": 30}'), act("charge", '{"amount": 12}'), final("paid")]
    with pytest.raises(SystemExit):
        lw.run("pay", lw.ScriptedPolicy(script), payments(db, {"now": True}, executions), store=store, run_id="r")
    assert [c.key for c in store.unsettled("r")] == ["1"]
    trace = lw.resume("r", lw.ScriptedPolicy(script[1:]), payments(db, {}, executions), store=store)
    assert trace.final_answer == "paid" and store.load_run("r").status == "finished"  # not blocked
    assert [(c.key, c.attempt) for c in executions] == [("r:1", 1), ("r:1", 2), ("r:2", 1)]
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT key, amount FROM payments ORDER BY key").fetchall() == [("r:1", 30), ("r:2", 12)]
    assert [s.observation for s in trace.steps[:2]] == ["paid 30 (r:1)", "paid 12 (r:2)"]


def test_without_the_flag_the_same_tool_blocks_for_a_person(store, tmp_path):
    db, executions = tmp_path / "payments.db", []
    registry = payments(db, {"now": True}, executions)
    registry.get("charge").dedupes_on_call_key = False
    script = [act("charge", '{"amount": 30}'), final("paid")]
    with pytest.raises(SystemExit):
        lw.run("pay", lw.ScriptedPolicy(script), registry, store=store, run_id="r")
    trace = lw.resume("r", lw.ScriptedPolicy(script[1:]), registry, store=store)
    assert trace.stopped_reason == "error" and store.load_run("r").status == "blocked"
    assert len(executions) == 1


def test_the_flag_must_be_a_bool():
    with pytest.raises(lw.ToolDefinitionError, match="dedupes_on_call_key must be True or False"):
        lw.Tool(lambda: 1, name="f", dedupes_on_call_key="yes")  # type: ignore[arg-type]
    t = lw.Tool.from_schema("f", "d", {"type": "object", "properties": {}}, lambda: 1, dedupes_on_call_key=True)
    assert t.dedupes_on_call_key and not lw.Tool(lambda: 1, name="g").dedupes_on_call_key
