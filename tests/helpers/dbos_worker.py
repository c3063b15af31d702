"""A worker process of the DBOS trials (tests/test_dbos.py): it makes the payments agent a
DBOSAgent, launches DBOS on the given system database (recovering what a killed worker
left pending), starts or rejoins the run, and prints its outcome as one JSON line. It can
SIGKILL itself inside the n-th model call, inside the n-th tool call (after the tool's
effect), or after a delay (anywhere: between steps, inside a DBOS write).

    python dbos_worker.py '{"db": URL, "mode": "react", "run_id": "r", "ledger": PATH,
                            "keyed": true, "kill": ["tool", 2] | ["timer", 0.3] | null,
                            "action": "run" | "settle" | "approve" | "wait", ...}'

The tool appends `<call key> <invoice>` to the ledger file; a keyed tool first looks for
its call key there (it dedupes on it). Each entry into the tool is written to
`<ledger>.entered` first, so a test can tell where the tool really started.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import loopwright as lw
from helpers import payments_workload as payments

logging.getLogger("dbos").setLevel(logging.ERROR)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def append(path: Path, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def registry(ledger: Path, keyed: bool, kill: list[Any] | None, approval: bool = False) -> lw.ToolRegistry:
    calls = [0]

    @lw.tool(side_effects="destructive" if approval else "write", dedupes_on_call_key=keyed)
    def pay(invoice: str, amount: int) -> str:
        """Pay an invoice."""
        call = lw.current_call()
        assert call is not None
        calls[0] += 1
        append(Path(str(ledger) + ".entered"), call.key)
        time.sleep(payments.TOOL_SLEEP_S)
        done = ledger.exists() and any(line.split()[0] == call.key for line in ledger.read_text().splitlines())
        if not (keyed and done):
            append(ledger, f"{call.key} {invoice}")
        if kill is not None and kill[0] == "tool" and calls[0] == kill[1]:
            die()
        time.sleep(payments.TOOL_SLEEP_S)
        return f"receipt {invoice}"

    return lw.ToolRegistry([pay])


class KillingPolicy(payments.PaymentsPolicy):
    def __init__(self, mode: str, kill: list[Any] | None) -> None:
        super().__init__(mode)
        self.kill = kill

    def __call__(self, prompt: str) -> str:
        reply = super().__call__(prompt)
        if self.kill is not None and self.kill[0] == "model" and self.calls == self.kill[1]:
            die()
        return reply


def delegate(prompt: str) -> str:
    if payments.ANSWER in prompt.split("Question:")[-1]:
        return "Thought: the payer is done\nFinal Answer: delegated"
    return f'Thought: delegate\nAction: payer\nAction Input: {{"task": "{payments.TASK}"}}'


def main(request: dict[str, Any]) -> dict[str, Any]:
    from dbos import DBOS

    from loopwright.durable import dbos as lwdbos

    kill = request.get("kill")
    if kill is not None and kill[0] == "timer":
        threading.Timer(float(kill[1]), die).start()
    ledger = Path(request["ledger"])
    approval = bool(request.get("approval"))
    agent = lw.Agent("payer", KillingPolicy(request["mode"], kill),
                     registry(ledger, bool(request.get("keyed")), kill, approval), mode=request["mode"],
                     max_steps=12)
    runner = lwdbos.DBOSAgent(agent, approvals=approval, approval_timeout_s=60)
    if request.get("family"):  # the payer is a child agent of a parent that delegates once
        runner = lwdbos.DBOSAgent(lw.Agent("parent", delegate, [runner.as_tool()], max_steps=4))
    DBOS(config={"name": "lwtrial", "system_database_url": request["db"], "application_version": "1", "log_level": "ERROR"})
    DBOS.launch()
    action, run_id = request.get("action", "run"), request["run_id"]
    if action == "settle":
        lwdbos.settle(run_id, request["key"], **request["settlement"])
    elif action == "approve":
        for pending in lwdbos.pending_approvals(run_id):
            lwdbos.approve(run_id, pending.key, True, "checked")
    if action == "pending":  # start the run, print what it waits on once it asks, and exit
        runner.start(payments.TASK, run_id=run_id)
        for _ in range(200):
            asked = lwdbos.pending_approvals(run_id)
            if asked:
                return {"pending": [a.key for a in asked]}
            time.sleep(0.05)
        return {"pending": []}
    trace = runner.start(payments.TASK, run_id=run_id).result()
    last = trace.steps[-1] if trace.steps else None
    return {"stopped_reason": trace.stopped_reason, "final_answer": trace.final_answer,
            "in_doubt": None if last is None or last.kind != "error" else {"tool": last.tool, "error": last.error},
            "unsettled": [c.key for c in lwdbos.unsettled(run_id)], "steps": len(trace.steps),
            "children": sorted(trace.children)}


if __name__ == "__main__":
    out = main(json.loads(sys.argv[1]))
    print(json.dumps(out), flush=True)
    os._exit(0)  # no DBOS.destroy: a worker's end is a process exit
