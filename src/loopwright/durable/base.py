"""What every run journal store does, whatever database holds it: runs, traces, prompts,
approvals, settling in-doubt calls, forks and the lease that keeps two workers off one
run. SQLiteStore (`store`) and PostgresStore (`postgres`) add the connection, the schema
and its migrations; the SQL here is written once, with `?` placeholders, in the subset
both databases read the same way.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Final, Self

from loopwright.durable.journal import (
    _MODEL_CALL_SUMMED,
    _RUN_END_SUMMED,
    _RUN_SUMMED,
    _STEP_SUMMED,
    _TOOL_CALL_SUMMED,
    NOTE_MARK,
    RunJournal,
    _dumps,
    checksum,
    escape_text,
    loads,
    observation_of,
    verify,
)
from loopwright.errors import StoreError, describe
from loopwright.safety import ApprovalRequest, Decision
from loopwright.tools.handles import handle_for
from loopwright.tools.results import ToolError, render_observation
from loopwright.trace import Step, Trace, Usage

RESUMABLE: Final = frozenset({"running", "paused", "interrupted", "blocked"})
SCHEMA_NAME: Final = "loopwright-journal"
DEFAULT_LEASE_S: Final = 300.0
_MISSING: Final = object()
_HOST: Final = socket.gethostname()
_OWNER: list[str] = []


def lease_owner() -> str:
    """Who holds a run's lease from this process: the host, the pid and a tag (the
    process's start time where the system says it, then random hex), so a new process,
    even one that reuses the pid or was forked from this one, is another owner."""
    if not _OWNER:
        started = _start_time(os.getpid())
        tag = secrets.token_hex(4) if started is None else f"{started}-{secrets.token_hex(4)}"
        _OWNER.append(f"{_HOST}:{os.getpid()}:{tag}")
    return _OWNER[0]


def _start_time(pid: int) -> str | None:
    """When process `pid` started, in clock ticks since boot (Linux /proc), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()  # after the command name, which may hold spaces
    return fields[19].decode() if len(fields) > 19 else None


os.register_at_fork(after_in_child=_OWNER.clear)


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run as the journal knows it (the `runs` row)."""

    id: str
    task: str
    mode: str
    config: dict[str, Any]
    status: str
    stopped_reason: str | None
    final_answer: str | None
    llm_calls: int
    tool_calls: int
    step_count: int
    usage: Usage
    duration_s: float
    resumes: int
    created_at: float
    updated_at: float
    forked_from: str | None = None  # the run this one was forked from (`loopwright.fork`)
    forked_at_step: int | None = None  # how many of its steps this run replayed

    @property
    def resumable(self) -> bool:
        return self.status in RESUMABLE


@dataclass(frozen=True, slots=True)
class UnsettledCall:
    """A tool call that was started and whose result was never recorded (the process
    died while it ran). A person checks whether it took effect, then `settle`s it."""

    run_id: str
    key: str  # the call's journal key: ReAct step "3", ReWOO "E2", plan-execute "2:E1"
    tool: str
    args: dict[str, Any]
    attempts: int
    started_at: float
    call_key: str  # what `loopwright.current_call().key` gave the tool: find it in its system


def call_key(run_id: str, key: str) -> str:
    """The stable idempotency key of a call: its run id and its journal key."""
    return f"{run_id}:{key}"


class StoreBase:
    """The backend-neutral part of a run journal store. A subclass provides `path` (what
    messages name it by), the connection and these five primitives."""

    path: str
    lease_s: float = DEFAULT_LEASE_S
    _db_errors: tuple[type[Exception], ...] = ()
    _unique_errors: tuple[type[Exception], ...] = ()

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._journals: weakref.WeakSet[RunJournal] = weakref.WeakSet()

    # -- the primitives a backend provides (the driver's own errors propagate) ----------

    def _raw_execute(self, sql: str, params: tuple[Any, ...]) -> int:
        """One statement in its own transaction; the number of rows it changed."""
        raise NotImplementedError

    def _raw_one(self, sql: str, params: tuple[Any, ...]) -> Any:
        raise NotImplementedError

    def _raw_all(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        raise NotImplementedError

    def _raw_batch(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        """The statements in one transaction (a driver error propagates, rolled back)."""
        raise NotImplementedError

    def _raw_snapshot(self) -> AbstractContextManager[None]:
        """Reads that see one consistent state while another process writes."""
        raise NotImplementedError

    def _before_write(self) -> None:
        """Raise StoreError when a write must not happen (SQLite: the file was deleted or
        replaced since it was opened)."""

    def _failed(self, exc: Exception) -> StoreError:
        """A driver error as the StoreError an operator reads."""
        return StoreError(f"run journal {self.path}: {type(exc).__name__}: {exc}")

    # -- what the store and its journals use: driver errors as StoreError ------------

    @contextmanager
    def _driver_errors(self) -> Iterator[None]:
        try:
            yield
        except StoreError:
            raise
        except self._db_errors as exc:
            raise self._failed(exc) from exc
        except UnicodeDecodeError as exc:  # stored text that is not UTF-8: a damaged file
            raise self._failed(exc) from exc

    def _execute(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        """One statement in its own transaction; the number of rows it changed."""
        with self._lock, self._driver_errors():
            self._before_write()
            try:
                return self._raw_execute(sql, params)
            except UnicodeEncodeError:  # text no encoding holds (a lone surrogate): stored escaped
                return self._raw_execute(sql, escape_text(params))

    def _one(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        with self._lock, self._driver_errors():
            try:
                return self._raw_one(sql, params)
            except UnicodeEncodeError:
                return self._raw_one(sql, escape_text(params))

    def _all(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        with self._lock, self._driver_errors():
            try:
                return self._raw_all(sql, params)
            except UnicodeEncodeError:
                return self._raw_all(sql, escape_text(params))

    def _run_batch(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        """The statements in one transaction: all of them or none (StoreError)."""
        with self._lock, self._driver_errors():
            self._before_write()
            try:
                self._raw_batch(statements)
            except UnicodeEncodeError:
                self._raw_batch([(sql, escape_text(params)) for sql, params in statements])

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """Reads that see one consistent state while another process writes."""
        with self._lock, self._driver_errors(), self._raw_snapshot():
            yield

    _conn: Any = None  # the backend's connection; None once closed

    def close(self) -> None:
        """Flush the open journals' buffered steps, then close the connection (twice is fine)."""
        with self._lock:
            if self._conn is not None:
                self._flush_journals()
                self._conn.close()
                self._conn = None

    def _flush_journals(self) -> None:
        for journal in list(self._journals):
            journal.flush()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        self._execute(sql, params)

    # -- runs -----------------------------------------------------------------------

    def start_run(
        self, run_id: str | None, task: str, mode: str, config: Mapping[str, Any],
        *, forked_from: str | None = None, forked_at_step: int | None = None,
    ) -> tuple[str, RunJournal]:
        """Record a new run (holding its lease) and return its id and journal. An id
        already in the journal is a StoreError: a run's history is never overwritten."""
        if run_id is None:
            run_id = new_run_id()
        elif not isinstance(run_id, str) or not 0 < len(run_id) <= 200 or not run_id.isprintable():
            raise StoreError(f"run_id must be 1-200 printable characters, got {describe(run_id)}")
        now = time.time()
        summed = (task, mode, _dumps(dict(config)), forked_from, forked_at_step)
        try:
            self._execute(
                "INSERT INTO runs (id, task, mode, config, forked_from, forked_at_step, checksum, status, "
                "created_at, updated_at, lease_owner, lease_expires) VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?)",
                (run_id, *summed, checksum(*summed), now, now, lease_owner(), now + self.lease_s),
            )
        except StoreError as exc:
            if not isinstance(exc.__cause__, self._unique_errors):
                raise
            raise StoreError(
                f"run id {run_id!r} already exists in {self.path}; nothing was overwritten "
                "(use loopwright.durable.resume to continue it, or pick another id)"
            ) from None
        fork_of = None if forked_from is None else (forked_from, forked_at_step or 0)
        return run_id, RunJournal(self, run_id, lease_owner=lease_owner(), fork_of=fork_of)

    def load_run(self, run_id: str) -> RunRecord:
        """The run's record; an unknown id is a StoreError naming it."""
        row = self._one(_RUN_SELECT + " WHERE id = ?", (run_id,))
        if row is None:
            raise StoreError(f"no run {run_id!r} in {self.path} (see `loopwright runs list`)")
        sums = self._one(f"SELECT {_RUN_SUMMED}, checksum, {_RUN_END_SUMMED}, end_checksum FROM runs WHERE id = ?",
                         (run_id,))  # one row read at once: its sums agree with each other
        verify(sums[:6], f"{self.path}: the record of run {run_id!r}")
        verify(sums[6:], f"{self.path}: the end of run {run_id!r}")
        return _run_record(row)

    def list_runs(self, *, status: str | None = None, limit: int | None = None) -> list[RunRecord]:
        """Runs, newest first."""
        sql = _RUN_SELECT + (" WHERE status = ?" if status else "") + " ORDER BY created_at DESC, id DESC"
        params: tuple[Any, ...] = (status,) if status else ()
        if limit is not None:
            sql += " LIMIT ?"
            params += (int(limit),)
        return [_run_record(r) for r in self._all(sql, params)]

    def reopen(self, run_id: str) -> tuple[RunRecord, RunJournal]:
        """For resume: take the run's lease (StoreError while another live process holds
        it), then return its record and a journal preloaded with everything it recorded.
        `journal.mark_resumed()` marks the run running again."""
        self.take_lease(run_id)
        record = self.load_run(run_id)
        fork_of = None if record.forked_from is None else (record.forked_from, record.forked_at_step or 0)
        return record, RunJournal(self, run_id, preload=True, lease_owner=lease_owner(), fork_of=fork_of)

    # -- the lease ------------------------------------------------------------------

    def take_lease(self, run_id: str) -> None:
        """Hold the run for this process for `lease_s` seconds (its journal renews it as it
        writes; the run's end releases it). Refused with a StoreError while another process
        holds an unexpired lease, unless that process is on this host and no longer exists."""
        now = time.time()
        row = self._one("SELECT lease_owner, lease_expires FROM runs WHERE id = ?", (run_id,))
        if row is None:
            self.load_run(run_id)  # raises, naming the unknown id
        if row[0] not in (None, lease_owner()) and _owner_is_alive_here(row[0]):
            # A live process on this host keeps its run whatever the clock says: a wall
            # clock that jumped past the expiry must not hand a running run to a second worker.
            self._refuse_lease(run_id, row[0], row[1])
        if self._execute(
            "UPDATE runs SET lease_owner = ?, lease_expires = ? WHERE id = ? AND "
            "(lease_owner IS NULL OR lease_owner = ? OR lease_expires < ?)",
            (lease_owner(), now + self.lease_s, run_id, lease_owner(), now),
        ):
            return
        row = self._one("SELECT lease_owner, lease_expires FROM runs WHERE id = ?", (run_id,))
        owner, expires = row
        if _owner_is_gone(owner) and self._execute(  # compare and swap on the dead owner
            "UPDATE runs SET lease_owner = ?, lease_expires = ? WHERE id = ? AND lease_owner = ?",
            (lease_owner(), now + self.lease_s, run_id, owner),
        ):
            return
        self._refuse_lease(run_id, owner, expires)

    def _refuse_lease(self, run_id: str, owner: str, expires: float) -> None:
        raise StoreError(
            f"run {run_id!r} is held by another worker ({owner}) until "
            f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(expires))}: it is running or being "
            "resumed there; two workers never run one run at once. Try again after the lease expires."
        )

    def release_lease(self, run_id: str) -> None:
        """Give the run's lease back if this process holds it."""
        self._execute("UPDATE runs SET lease_owner = NULL, lease_expires = NULL WHERE id = ? AND lease_owner = ?",
                      (run_id, lease_owner()))

    def _check_not_held(self, run_id: str, what: str) -> None:
        row = self._one("SELECT lease_owner, lease_expires FROM runs WHERE id = ?", (run_id,))
        if row is not None and row[0] not in (None, lease_owner()) and row[1] > time.time() \
                and not _owner_is_gone(row[0]):
            raise StoreError(f"cannot {what}: run {run_id!r} is running in another worker ({row[0]}); "
                             "nothing was changed")

    # -- traces ---------------------------------------------------------------------

    def trace(self, run_id: str) -> Trace:
        """The run's trace, rebuilt from its steps and its run row. For a run that has not
        ended (running, killed, or resumed and not ended again) the counters and usage are
        summed from what was recorded, as `load_run` gives them."""
        with self._snapshot():
            record = self.load_run(run_id)
            transcript, scratchpad, meta, replans, started_at = self._one(
                "SELECT transcript, scratchpad, meta, replans, started_at FROM runs WHERE id = ?", (run_id,))
            steps = [self._step(run_id, row) for row in
                     self._all(f"SELECT {_STEP_SUMMED}, checksum FROM steps WHERE run_id = ? ORDER BY idx",
                               (run_id,))]
            trace = Trace(task=record.task, mode=record.mode, steps=steps, final_answer=record.final_answer,
                          stopped_reason=record.stopped_reason, llm_calls=record.llm_calls,
                          tool_calls=record.tool_calls, replans=replans, usage=record.usage,
                          transcript=transcript or "", started_at=started_at or record.created_at,
                          duration_s=record.duration_s, run_id=run_id,
                          meta=loads(meta, self.path) if meta else {}, scratchpad=scratchpad or "")
            trace.outputs = self._outputs(run_id, steps, trace.meta)
            if record.forked_from is not None:
                trace.meta.setdefault("forked_from", {"run_id": record.forked_from,
                                                      "at_step": record.forked_at_step})
            if record.stopped_reason is None:  # never ended (the record's counters are summed)
                trace.replans = int(self._one(
                    "SELECT count(*) FROM steps WHERE run_id = ? AND kind = 'replan'", (run_id,))[0])
                if record.mode == "react" and record.llm_calls:
                    trace.scratchpad = self.prompt(run_id, record.llm_calls)
        for step in steps:  # child agents' runs, journaled in this store (loopwright.runtime.agents)
            child = step.meta.get("child_run_id")
            if isinstance(child, str) and child not in trace.children:
                try:
                    trace.children[child] = self.trace(child)
                except StoreError:  # a journal written elsewhere: the step still names it
                    pass
        return trace

    def _step(self, run_id: str, row: Any) -> Step:
        verify(row, f"{self.path}: step {row[0]} of run {run_id!r}")
        return Step.from_dict(loads(row[3], self.path))

    def _outputs(self, run_id: str, steps: list[Step], meta: Mapping[str, Any]) -> dict[str, str]:
        """The results a run kept under a handle (tools/handles.py), from the tool calls'
        rows, which hold them whole: those past the cap (the step names the handle) and
        those a ReAct fold stubbed (the fold names the step)."""
        handles = {s.meta["output"] for s in steps if isinstance(s.meta.get("output"), str)}
        for fold in meta.get("folds") or ():
            if isinstance(fold, Mapping) and fold.get("kind") == "stub_results":
                handles.update(handle_for(str(k)) for k in fold.get("folded_steps") or ())
        outputs = {}
        for handle in sorted(handles):
            row = self._one(f"SELECT {_TOOL_CALL_SUMMED}, checksum FROM tool_calls WHERE run_id = ? AND key = ? "
                            "AND state = 'done'", (run_id, handle.removeprefix("out-")))
            if row is not None:
                verify(row, f"{self.path}: tool call {row[0]!r} of run {run_id!r}")
                outputs[handle] = observation_of(row[5], row[4])
        return outputs

    def prompt(self, run_id: str, n: int) -> str:
        """Exactly what model call n of the run was sent."""
        parts: list[str] = []
        current: int | None = n
        while current is not None:
            row = self._one(f"SELECT {_MODEL_CALL_SUMMED}, checksum FROM model_calls WHERE run_id = ? AND n = ?",
                            (run_id, current))
            if row is None:
                raise StoreError(f"run {run_id!r} has no model call {current} in {self.path}")
            verify(row, f"{self.path}: model call {current} of run {run_id!r}")
            parts.append(row[3])
            current = row[2]
        return "".join(reversed(parts))

    # -- approvals ------------------------------------------------------------------

    def pending_approvals(self, run_id: str) -> list[ApprovalRequest]:
        """Calls of the run waiting for a decision (see `decide`)."""
        return [request for request, decision in self.approvals(run_id) if decision is None]

    def approvals(self, run_id: str) -> list[tuple[ApprovalRequest, Decision | None]]:
        """Every call of the run that asked for approval, with its decision (None: pending)."""
        self.load_run(run_id)
        rows = self._all(
            "SELECT tool, args, key, step, side_effects, description, state, approved, reason FROM approvals "
            "WHERE run_id = ? ORDER BY requested_at", (run_id,))
        return [(ApprovalRequest(tool, loads(args, self.path), key, _step_key(step), side, desc, run_id),
                 None if state == "pending" else Decision(bool(approved), reason or ""))
                for tool, args, key, step, side, desc, state, approved, reason in rows]

    def decide(self, run_id: str, approval_key: str, decision: Decision | bool) -> None:
        """Record a person's decision on a pending call; `resume` applies it."""
        if isinstance(decision, bool):
            decision = Decision(decision, "approved" if decision else "denied by approver")
        if not isinstance(decision, Decision):
            raise TypeError(f"decision must be a Decision or bool, got {type(decision).__name__}")
        self.load_run(run_id)
        row = self._one("SELECT state FROM approvals WHERE run_id = ? AND key = ?", (run_id, approval_key))
        if row is None or row[0] != "pending":
            pending = [r.key for r in self.pending_approvals(run_id)]
            what = "was already decided" if row is not None else "is not a pending approval"
            raise StoreError(f"{approval_key!r} {what} in run {run_id!r}; pending: {pending or 'none'}")
        self._write("UPDATE approvals SET state = 'decided', approved = ?, reason = ?, decided_at = ? "
                    "WHERE run_id = ? AND key = ?",
                    (int(decision.approved), decision.reason, time.time(), run_id, approval_key))

    # -- in-doubt calls -------------------------------------------------------------

    def unsettled(self, run_id: str) -> list[UnsettledCall]:
        """Tool calls of the run that were started and never recorded, oldest first: the
        calls a blocked run waits on (see `settle`)."""
        self.load_run(run_id)
        rows = self._all(f"SELECT {_TOOL_CALL_SUMMED}, checksum, attempts, started_at FROM tool_calls "
                         "WHERE run_id = ? AND state = 'started' ORDER BY started_at, key", (run_id,))
        for row in rows:
            verify(row[:9], f"{self.path}: tool call {row[0]!r} of run {run_id!r}")
        return [UnsettledCall(run_id, row[0], row[1], loads(row[2], self.path), int(row[9]), row[10],
                              call_key(run_id, row[0])) for row in rows]

    def settle(self, run_id: str, key: str, *, result: Any = _MISSING, error: str | None = None) -> None:
        """Record the outcome of an in-doubt call, as a person found it: `result` (the value
        the tool returned, JSON data) or `error` (what went wrong, which the model reads as
        the tool's error). `resume` then goes on as if the tool had returned it.

        A StoreError, with nothing changed, for: neither or both given, a key that is not a
        call of the run, a call that has a result already (settled or recorded), and a run
        that another live worker holds."""
        if (result is _MISSING) == (error is None):
            raise StoreError("settle takes exactly one of result=... (the value) or error=... (a message)")
        if error is not None and not isinstance(error, str):
            raise StoreError(f"error must be a message (str), got {describe(error)}")
        self.load_run(run_id)
        row = self._one("SELECT name, state, settled_at, args FROM tool_calls WHERE run_id = ? AND key = ?",
                        (run_id, key))
        if row is None or row[1] != "started":
            waiting = [c.key for c in self.unsettled(run_id)]
            what = ("is not a tool call of the run" if row is None else
                    "was settled already" if row[2] is not None else "has a recorded result already")
            raise StoreError(f"call {key!r} {what} (run {run_id!r}); nothing was changed. "
                             f"Calls waiting to be settled: {waiting or 'none'}")
        self._check_not_held(run_id, f"settle {key!r}")
        name = row[0]
        if error is not None:
            err = ToolError(name, error, "exception")
            value, observation, kind, message = None, err.as_observation(), err.kind, err.message
        else:
            value, observation, kind, message = _dumps(result), render_observation(result, -1), None, None
        now = time.time()
        changed = self._execute(
            "UPDATE tool_calls SET state = 'done', value = ?, observation = ?, error_kind = ?, error = ?, "
            "duration_s = 0, finished_at = ?, settled_at = ?, checksum = ? WHERE run_id = ? AND key = ? "
            "AND state = 'started'",
            (value, observation, kind, message, now, now,
             checksum(key, name, row[3], "done", value, observation, kind, message), run_id, key))
        if not changed:  # another process recorded or settled it in between
            raise StoreError(f"call {key!r} of run {run_id!r} got a result while settling; nothing was changed")


def _recorded(column: str, summed: str) -> str:
    """The run row's `column` once the run ended; until then `summed` (a subquery over what
    the journal recorded), so a running, killed or resumed run reads as it stands."""
    return f"CASE WHEN stopped_reason IS NULL THEN ({summed}) ELSE {column} END"


_OF_RUN: Final = "WHERE run_id = runs.id"
_RUN_SELECT: Final = (
    "SELECT id, task, mode, config, status, stopped_reason, final_answer, "
    + _recorded("llm_calls", f"SELECT count(*) FROM model_calls {_OF_RUN} AND n > 0") + ", "
    + _recorded("tool_calls", f"SELECT count(*) FROM tool_calls {_OF_RUN} AND state = 'done' "
                f"AND key NOT LIKE '%{NOTE_MARK}%'") + ", "  # a note on a call is not a call
    + f"(SELECT count(*) FROM steps {_OF_RUN}), "
    + ", ".join(_recorded(c, f"SELECT coalesce(sum({c}), 0) FROM model_calls {_OF_RUN}")
                for c in ("prompt_tokens", "evaluated_tokens", "completion_tokens")) + ", "
    + _recorded("usage_estimated", f"SELECT coalesce(max(usage_estimated), 0) FROM model_calls {_OF_RUN}") + ", "
    "duration_s, resumes, created_at, updated_at, forked_from, forked_at_step FROM runs"
)


def _run_record(row: Any) -> RunRecord:
    return RunRecord(
        id=row[0], task=row[1], mode=row[2], config=loads(row[3]), status=row[4],
        stopped_reason=row[5], final_answer=row[6], llm_calls=int(row[7]), tool_calls=int(row[8]),
        step_count=int(row[9]), usage=Usage(int(row[10]), int(row[11]), int(row[12]), estimated=bool(row[13])),
        duration_s=row[14], resumes=row[15], created_at=row[16], updated_at=row[17], forked_from=row[18],
        forked_at_step=row[19],
    )


def task_run_id(index: int, task: str, batch_id: str = "batch") -> str:
    """The run id of task `index` of a batch (`run_many`, a DBOS queue's batch): stable
    across re-runs of the same list, and different when the task text at that position changed."""
    digest = hashlib.sha256(task.encode("utf-8")).hexdigest()[:12]
    return f"{batch_id}-{index:06d}-{digest}"


def new_run_id() -> str:
    """A time-sortable id: UTC second, then 6 random hex digits."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def _step_key(step: str) -> int | str:
    return int(step) if step.isdigit() else step


def _owner_is_gone(owner: str | None) -> bool:
    """A lease owner that is a process on this host which no longer exists (or whose pid
    another process has since: its start time differs). A pid reused by an owner that
    recorded no start time reads as alive: the lease is then kept until it expires."""
    return owner is None or _local_owner(owner) is False


def _owner_is_alive_here(owner: str) -> bool:
    """A lease owner that is a running process on this host (the very process, by its start
    time, when the owner recorded one)."""
    return _local_owner(owner) is True


def _local_owner(owner: str) -> bool | None:
    """Whether a lease owner on this host is running (True) or gone (False); None for
    another host's owner, which only the lease's expiry frees."""
    parts = owner.split(":")
    if len(parts) < 3 or ":".join(parts[:-2]) != _HOST or not parts[-2].isdigit():
        return None
    pid = int(parts[-2])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, another user's
        pass
    started = parts[-1].split("-")[0] if "-" in parts[-1] else None
    if started is not None and started != _start_time(pid):
        return False  # the pid is another process's now
    return True
