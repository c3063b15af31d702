"""A fork server for the crash test: imports loopwright once, then for each request
forks a child that runs the crash workload against a journal, and kills it with SIGKILL
a given delay after the run is under way.

    stdin:  one JSON request a line: {"db", "run_id", "effects", "executions", "delay_s",
            "variant": "idempotent" | "non_idempotent"}, or for the payments trial
            {"workload": "payments", "db" (a SQLite path or a postgresql:// DSN), "run_id",
            "mode", "ledger" (the payments table's path or DSN), "delay_s"}
    stdout: one JSON reply a line: {"killed": bool, "status": int, "error": str | None,
            "elapsed_s": seconds from the run being under way to the child's end}
    A request with "delay_s": null is a calibration: the child runs to its end.

Forking from this clean, single-threaded process (rather than from pytest) keeps each
trial cheap without inheriting another program's threads or open databases.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
import traceback
from pathlib import Path

import crash_workload as work
import payments_workload as pay

import loopwright as lw
from loopwright.durable.sqlite import SQLiteStore
from loopwright.interfaces.common import open_store


def payments_child(request: dict, fd: int) -> None:
    pay.signal_fd = fd
    policy = pay.PaymentsPolicy(request["mode"], signal_on_first_call=True)
    with open_store(request["db"]) as store:
        lw.run(pay.TASK, policy, pay.registry(pay.Ledger(request["ledger"])), mode=request["mode"],
               max_steps=pay.PAYMENTS + 2, store=store, run_id=request["run_id"])


def child(request: dict, fd: int) -> None:
    if request.get("workload") == "payments":
        payments_child(request, fd)
        return
    work.signal_fd = fd
    variant = request["variant"]
    registry = work.registry(Path(request["effects"]), Path(request["executions"]),
                             idempotent=variant == "idempotent", signal_in_tool=variant == "non_idempotent")
    policy = work.StepPolicy(signal_on_first_call=variant == "idempotent")
    with SQLiteStore(request["db"]) as store:
        lw.run(work.TASK, policy, registry, max_steps=work.STEPS + 2, store=store, run_id=request["run_id"])


def trial(request: dict) -> dict:
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the server's loop
        code = 0
        try:
            os.close(read_end)
            child(request, write_end)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    ready, _, _ = select.select([read_end], [], [], 60.0)
    signalled = bool(ready) and os.read(read_end, 1) == b"s"
    os.close(read_end)
    started = time.perf_counter()
    if signalled and request["delay_s"] is None:  # a calibration run: let it finish
        _, status = os.waitpid(pid, 0)
    else:
        if signalled:
            time.sleep(request["delay_s"])
        os.kill(pid, signal.SIGKILL)  # not reaped yet, so the pid is still this child's
        _, status = os.waitpid(pid, 0)
    elapsed = time.perf_counter() - started
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    error = None if signalled else "the child never signalled that its run was under way"
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) != 0:
        error = f"the child failed with exit status {os.WEXITSTATUS(status)}"
    return {"killed": killed, "status": status, "error": error, "elapsed_s": elapsed}


def main() -> None:
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(trial(json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
