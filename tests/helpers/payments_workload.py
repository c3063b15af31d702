"""The payments crash trial's runs: PAYMENTS charges in ReAct, ReWOO or plan-execute,
each made by a tool that deduplicates on `lw.current_call().key` through a payments table
with a unique key (a SQLite file, or a PostgreSQL table).

Shared by the forking child (crash_child.py) and the test that resumes the killed runs.
The policies answer from the prompt, so the same policy serves a fresh run and a resumed
one from any point.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import closing
from typing import Any

import loopwright as lw

PAYMENTS = 5
TASK = f"Make {PAYMENTS} payments, one per invoice."
POLICY_SLEEP_S = 0.002
TOOL_SLEEP_S = 0.002  # before the payment commits and after it: a kill lands in either
ANSWER = f"{PAYMENTS} invoices paid"
signal_fd: int | None = None  # set in a forked child: written once when the run is under way


def _signal() -> None:
    global signal_fd
    if signal_fd is not None:
        os.write(signal_fd, b"s")
        os.close(signal_fd)
        signal_fd = None


def _plan() -> str:
    return json.dumps({"plan": [{"id": f"E{k}", "tool": "pay", "args": {"invoice": f"inv-{k}", "amount": 10 * k}}
                                for k in range(1, PAYMENTS + 1)]})


class PaymentsPolicy:
    """ReAct: invoice k is paid at step k, then the answer. ReWOO and plan-execute: one
    plan of every payment (ReWOO's solver answers once it sees the receipts)."""

    def __init__(self, mode: str, signal_on_first_call: bool = False) -> None:
        self.mode = mode
        self.calls = 0
        self.signal = signal_on_first_call

    def __call__(self, prompt: str) -> str:
        self.calls += 1
        if self.signal:
            _signal()
        time.sleep(POLICY_SLEEP_S)
        if self.mode == "react":
            done = prompt.count("receipt inv-")
            if done >= PAYMENTS:
                return f"Thought: all paid\nFinal Answer: {ANSWER}"
            k = done + 1
            args = json.dumps({"invoice": f"inv-{k}", "amount": 10 * k})
            return f"Thought: pay invoice {k}\nAction: pay\nAction Input: {args}"
        if self.mode == "rewoo" and "receipt inv-" in prompt:
            return f"Final Answer: {ANSWER}"
        return _plan()


def final_answer(mode: str) -> str:
    """What the uninterrupted run answers (plan-execute: the last step's observation)."""
    return ANSWER if mode != "plan_execute" else f"receipt inv-{PAYMENTS}"


class Ledger:
    """The payments table: `payments(key PRIMARY KEY, invoice, amount)` in a SQLite file or
    a PostgreSQL database (a `postgresql://` DSN)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.pg = target.startswith("postgresql://")
        self.execute("CREATE TABLE IF NOT EXISTS payments (key TEXT PRIMARY KEY, invoice TEXT NOT NULL, "
                     "amount INTEGER NOT NULL)")

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.pg:
            import psycopg

            with psycopg.connect(self.target, autocommit=True) as conn:
                cur = conn.execute(sql.replace("?", "%s"), params)
                return cur.fetchall() if cur.description else []
        with closing(sqlite3.connect(self.target, timeout=30)) as conn:
            rows = conn.execute(sql, params).fetchall()
            conn.commit()
            return rows

    def invoices(self, run_id: str) -> list[str]:
        """The invoices paid by run `run_id`, one entry per payment row."""
        return sorted(r[0] for r in self.execute("SELECT invoice FROM payments WHERE key LIKE ?", (run_id + ":%",)))


def registry(ledger: Ledger) -> lw.ToolRegistry:
    @lw.tool(side_effects="write", dedupes_on_call_key=True)
    def pay(invoice: str, amount: int) -> str:
        """Pay an invoice; the payments table ignores a second payment with the same key."""
        call = lw.current_call()
        assert call is not None and call.durable
        time.sleep(TOOL_SLEEP_S)
        ledger.execute("INSERT INTO payments VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING",
                       (call.key, invoice, amount))
        time.sleep(TOOL_SLEEP_S)
        return f"receipt {invoice}"

    return lw.ToolRegistry([pay])
