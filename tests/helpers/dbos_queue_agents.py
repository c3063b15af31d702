"""The agent module of the DBOS queue trials (tests/test_dbos_queue.py, test_dbos_cli.py),
as `loopwright worker --agents helpers.dbos_queue_agents` imports it: one DBOSAgent,
`queue-payer`, that pays the invoice its task names and answers "paid inv-N".

Its tool dedupes on its call key through the ledger file $LW_QUEUE_LEDGER (a line
`<call key> <invoice>` per payment), and writes `enter <worker> <call key>` and
`exit <worker> <call key>` around its work to `<ledger>.entered` ($LW_WORKER names the
process), so a test can kill a worker while it is inside the tool; while the file
`<ledger>.hold-<worker>` exists, the tool waits there, after its payment.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import loopwright as lw
from loopwright.durable.dbos import DBOSAgent

TOOL_SLEEP_S = 0.15


def _append(path: Path, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


@lw.tool(side_effects="write", dedupes_on_call_key=True)
def pay(invoice: str) -> str:
    """Pay an invoice."""
    call = lw.current_call()
    assert call is not None
    ledger = Path(os.environ["LW_QUEUE_LEDGER"])
    entered, worker = Path(f"{ledger}.entered"), os.environ.get("LW_WORKER", "-")
    _append(entered, f"enter {worker} {call.key}")
    time.sleep(TOOL_SLEEP_S)
    if not (ledger.exists() and any(line.split()[0] == call.key for line in ledger.read_text().splitlines())):
        _append(ledger, f"{call.key} {invoice}")
    while Path(f"{ledger}.hold-{worker}").exists():  # a test holds this worker here, after the payment
        time.sleep(0.01)
    time.sleep(TOOL_SLEEP_S)
    _append(entered, f"exit {worker} {call.key}")
    return f"receipt {invoice}"


def policy(prompt: str) -> str:
    """Pay the invoice the task names, then say so (from the prompt: a replay gets the same)."""
    number = re.findall(r"pay invoice (\d+)", prompt)[0]
    if f"receipt inv-{number}" in prompt:
        return f"Thought: paid\nFinal Answer: paid inv-{number}"
    return f'Thought: pay it\nAction: pay\nAction Input: {{"invoice": "inv-{number}"}}'


PAYER = DBOSAgent(lw.Agent("queue-payer", policy, [pay], max_steps=4))
