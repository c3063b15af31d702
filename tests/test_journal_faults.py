"""The journal under real faults: text UTF-8 cannot hold, a lock another process holds
past the busy timeout, a full disk, a read-only folder, a file deleted or replaced while a
run writes it, several processes opening one new file at once. Each fails loudly with a
StoreError or a `store_error` stop, and never loses or doubles a record quietly."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import multiprocessing.synchronize
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import loopwright as lw
from conftest import STORE_KINDS, act, final, open_journal
from loopwright.durable.sqlite import SQLiteStore
from loopwright.interfaces.runs import runs_main

ODD = "report-\udcff.pdf"  # os.listdir's name for a file whose name is not UTF-8


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path):
    with open_journal(request.param, request, tmp_path / "runs.db") as s:
        yield s


def listing_tools() -> lw.ToolRegistry:
    @lw.tool(side_effects="read")
    def list_files(folder: str) -> list[str]:
        """List a folder."""
        return [ODD, "b.txt"]

    @lw.tool(side_effects="read")
    def first_file(folder: str) -> str:
        """The first file of a folder."""
        return ODD

    return lw.ToolRegistry([list_files, first_file])


LISTING = [act("first_file", '{"folder": "."}'), act("list_files", '{"folder": "."}'), final("2 files")]


# -- text UTF-8 cannot hold --------------------------------------------------------------


def test_a_lone_surrogate_in_a_tool_result_is_stored_escaped_and_the_run_finishes(store):
    trace = lw.run("list", lw.ScriptedPolicy(LISTING), listing_tools(), store=store, run_id="r")
    assert trace.stopped_reason == "final" and trace.steps[0].observation == ODD
    record = store.load_run("r")
    assert (record.status, record.stopped_reason, store.unsettled("r")) == ("finished", "final", [])
    stored = store.trace("r")
    assert stored.steps[0].observation == ODD  # JSON of the step: the escape reads back as the original
    assert "report-\\udcff.pdf" in store.prompt("r", 2)  # plain text: kept escaped


def test_a_run_killed_after_a_lone_surrogate_resumes_and_finishes(store):
    policy = lw.ScriptedPolicy(LISTING[:2])  # the script ends: the run stops with an error after step 2
    first = lw.run("list", policy, listing_tools(), store=store, run_id="r")
    assert first.stopped_reason == "error" and store.unsettled("r") == []
    done = lw.resume("r", lw.ScriptedPolicy(LISTING[2:]), listing_tools(), store=store)
    assert (done.stopped_reason, done.final_answer) == ("final", "2 files")
    assert done.steps[1].meta.get("replayed") is True and done.steps[1].observation == json.dumps([ODD, "b.txt"])


def test_a_lone_surrogate_without_a_journal_is_counted_and_the_run_finishes():
    trace = lw.run("list", lw.ScriptedPolicy(LISTING), listing_tools())
    assert trace.stopped_reason == "final" and trace.usage.prompt_tokens > 0
    assert lw.trace.estimate_tokens(ODD) == 5  # 14 bytes: the surrogate counts as 3


def test_a_settled_result_holding_a_lone_surrogate_is_stored(store):
    @lw.tool(side_effects="write", timeout_s=0.05)
    def move(name: str) -> str:
        """Move a file (stalls: abandoned at its deadline, in doubt)."""
        threading.Event().wait(1)
        return name

    lw.run("move", lw.ScriptedPolicy([act("move", '{"name": "a"}')]), lw.ToolRegistry([move]), store=store,
           run_id="r")
    store.settle("r", "1", result={"moved": ODD})
    with pytest.raises(lw.StoreError, match="no run"):
        store.load_run("r\udcff")
    done = lw.resume("r", lw.ScriptedPolicy([final("moved")]), lw.ToolRegistry([move]), store=store)
    assert done.final_answer == "moved" and done.steps[0].observation == '{"moved": "report-\\udcff.pdf"}'


# -- a failed journal write stops the run ------------------------------------------------

LOCKER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""


@contextlib.contextmanager
def lock_held(path: Path) -> Iterator[None]:
    """Another process holds the journal's write lock for the duration."""
    proc = subprocess.Popen([sys.executable, "-c", LOCKER, str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        yield
    finally:
        release([proc])


def charge_tools(charged: list[int], db: Path, holder: list[subprocess.Popen[str]]) -> lw.ToolRegistry:
    @lw.tool(side_effects="write")
    def charge(amount: int) -> str:
        """Charge the card; meanwhile another process takes the journal's lock and keeps it."""
        charged.append(amount)
        if not holder:
            holder.append(proc := subprocess.Popen([sys.executable, "-c", LOCKER, str(db)], stdin=subprocess.PIPE,
                                                   stdout=subprocess.PIPE, text=True))
            assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        return f"charged {amount}"

    return lw.ToolRegistry([charge])


def release(holder: list[subprocess.Popen[str]]) -> None:
    for proc in holder:
        proc.stdin.write("\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        proc.wait(30)


def test_a_lock_held_past_the_busy_timeout_stops_the_run_as_store_error_and_writes_nothing_more(tmp_path):
    db, charged, holder = tmp_path / "runs.db", [], []
    script = [act("charge", '{"amount": 30}'), final("charged 30")]
    with SQLiteStore(db, busy_timeout_s=0.1) as store:
        trace = lw.run("pay", lw.ScriptedPolicy(script), charge_tools(charged, db, holder), store=store, run_id="r")
        release(holder)
        assert trace.stopped_reason == "store_error" and trace.final_answer is None
        assert trace.steps[-1].kind == "error" and trace.steps[-1].meta["store_error"] is True
        assert "locked for longer than the busy timeout" in trace.steps[-1].error
        assert trace.llm_calls == 1  # the model was not asked again after the failed write
        record = store.load_run("r")  # the journal's last word: the call in doubt, the run not ended
        assert (record.status, record.stopped_reason) == ("running", None)
        assert [(c.key, c.tool) for c in store.unsettled("r")] == [("1", "charge")]
    assert charged == [30]
    with SQLiteStore(db) as store:  # the run resumes from what the journal holds, in doubt as after a crash
        blocked = lw.resume("r", lw.ScriptedPolicy([]), charge_tools(charged, db, [None]), store=store)  # type: ignore[list-item]
        assert blocked.stopped_reason == "error" and store.load_run("r").status == "blocked"
        store.settle("r", "1", result="charged 30")
        done = lw.resume("r", lw.ScriptedPolicy(script[1:]), charge_tools(charged, db, [None]), store=store)  # type: ignore[list-item]
        assert (done.stopped_reason, done.final_answer) == ("final", "charged 30")
    assert charged == [30]


# -- outside a run: every failure is a StoreError, and the CLI says it in one line -------


def blocked_journal(db: Path) -> None:
    """A journal holding run "r", blocked on an in-doubt charge (key "1")."""
    @lw.tool(side_effects="write", timeout_s=0.05)
    def charge(amount: int) -> str:
        """Charge the card (stalls past its deadline)."""
        threading.Event().wait(1)
        return "charged"

    with SQLiteStore(db) as store:
        lw.run("pay", lw.ScriptedPolicy([act("charge", '{"amount": 30}')]), lw.ToolRegistry([charge]),
               store=store, run_id="r")
        assert store.load_run("r").status == "blocked"


def runs_cli(*argv: str) -> tuple[int, str]:
    import io
    from contextlib import redirect_stderr

    err = io.StringIO()
    with redirect_stderr(err):
        code = runs_main(list(argv), out=io.StringIO())
    return code, err.getvalue()


def test_settling_while_another_process_holds_the_lock_is_a_store_error(tmp_path):
    db = tmp_path / "runs.db"
    blocked_journal(db)
    with SQLiteStore(db, busy_timeout_s=0.1) as store, lock_held(db):
        with pytest.raises(lw.StoreError, match="locked for longer than the busy timeout"):
            store.settle("r", "1", result="charged")
        with pytest.raises(lw.StoreError, match="locked"):
            lw.resume("r", lw.ScriptedPolicy([final("x")]), lw.ToolRegistry([]), store=store,
                      allow_tool_changes=True)
    with SQLiteStore(db) as store:
        assert [c.key for c in store.unsettled("r")] == ["1"]  # nothing was changed


def test_the_cli_reports_a_locked_journal_in_one_line_with_exit_2(tmp_path, monkeypatch):
    db = tmp_path / "runs.db"
    blocked_journal(db)
    monkeypatch.setattr(SQLiteStore.__init__, "__kwdefaults__",
                        {**SQLiteStore.__init__.__kwdefaults__, "busy_timeout_s": 0.1})
    with lock_held(db):
        code, err = runs_cli("settle", "r", "1", "--result", '"charged"', "--db", str(db))
    assert code == 2 and err.count("\n") == 1 and err.startswith("loopwright runs: ") and "locked" in err
    assert "Traceback" not in err


def test_a_damaged_json_record_is_a_store_error_and_the_cli_exits_2(tmp_path):
    db = tmp_path / "runs.db"
    blocked_journal(db)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("UPDATE tool_calls SET args = '{\"amount\": 3' WHERE key = '1'")
        conn.commit()
    with SQLiteStore(db) as store:
        with pytest.raises(lw.StoreError, match="damaged"):
            store.unsettled("r")
    code, err = runs_cli("show", "r", "--db", str(db))
    assert code == 2 and "damaged" in err and "Traceback" not in err


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A tiny tmpfs of its own (root mounts it), unmounted after the test."""
    folder = Path(tempfile.mkdtemp(prefix="lw-tmpfs-"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
        folder.rmdir()


def fill(folder: Path) -> None:
    with contextlib.suppress(OSError), (folder / "filler").open("wb") as f:
        while True:
            f.write(b"\0" * 4096)
            f.flush()


def test_opening_a_new_journal_on_a_full_disk_is_a_store_error_that_says_so(small_disk):
    fill(small_disk)
    with pytest.raises(lw.StoreError, match="disk is full|cannot open run journal"):
        SQLiteStore(small_disk / "runs.db")


def test_a_run_that_fills_the_disk_stops_as_store_error(small_disk):
    @lw.tool(side_effects="read")
    def big(n: int) -> str:
        """A large result; meanwhile the disk fills up."""
        fill(small_disk)
        return "x" * n

    with SQLiteStore(small_disk / "runs.db") as store:
        script = [act("big", '{"n": 200000}'), final("done")]
        trace = lw.run("t", lw.ScriptedPolicy(script), lw.ToolRegistry([big]), store=store, run_id="r")
        assert trace.stopped_reason == "store_error" and "disk is full" in trace.steps[-1].error
        (small_disk / "filler").unlink()
        assert store.load_run("r").status == "running"  # the journal was not told a wrong end


def test_a_read_only_folder_says_so(small_disk):
    with SQLiteStore(small_disk / "runs.db") as store:
        lw.run("t", lw.ScriptedPolicy([final("x")]), lw.ToolRegistry([]), store=store, run_id="r")
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    with pytest.raises(lw.StoreError, match=f"its folder {small_disk} is read-only"):
        SQLiteStore(small_disk / "new.db")
    code, err = runs_cli("list", "--db", str(small_disk / "runs.db"))
    assert code == 2 and f"its folder {small_disk} is read-only" in err and "Traceback" not in err


# -- the file under the store: deleted, replaced, opened by many at once ---------------


def note_tools(db: Path, fault: str) -> lw.ToolRegistry:
    @lw.tool(side_effects="read")
    def note(text: str) -> str:
        """Note a text; meanwhile the journal file is deleted or replaced."""
        if fault == "delete":
            db.unlink()
        else:
            other = db.with_name("other.db")
            with SQLiteStore(other) as store:
                lw.run("other", lw.ScriptedPolicy([final("kept")]), lw.ToolRegistry([]), store=store,
                       run_id="other-run")
            os.replace(other, db)
        return "noted"

    return lw.ToolRegistry([note])


@pytest.mark.parametrize("fault", ["delete", "replace"])
def test_a_journal_deleted_or_replaced_mid_run_stops_the_run_and_is_never_written(tmp_path, fault):
    db = tmp_path / "runs.db"
    store = SQLiteStore(db)
    script = [act("note", '{"text": "a"}'), final("noted")]
    trace = lw.run("t", lw.ScriptedPolicy(script), note_tools(db, fault), store=store, run_id="r")
    assert trace.stopped_reason == "store_error"
    assert ("was deleted" if fault == "delete" else "was replaced by another file") in trace.steps[-1].error
    with pytest.raises(lw.StoreError, match="closed"):
        store.list_runs()
    store.close()
    if fault == "delete":
        assert not db.exists()
        return
    with SQLiteStore(db) as reopened:  # the other journal, whole: no log of the first was applied to it
        assert [r.id for r in reopened.list_runs()] == ["other-run"]
        assert reopened.load_run("other-run").final_answer == "kept"
        assert reopened.integrity_check() == "ok"


def test_a_journal_replaced_while_its_store_stays_open_keeps_the_new_files_runs(tmp_path):
    db = tmp_path / "runs.db"
    first = SQLiteStore(db)
    lw.run("t", lw.ScriptedPolicy([final("one")]), lw.ToolRegistry([]), store=first, run_id="r1")
    other = tmp_path / "other.db"
    with SQLiteStore(other) as store:
        lw.run("other", lw.ScriptedPolicy([final("kept")]), lw.ToolRegistry([]), store=store, run_id="other-run")
    os.replace(other, db)
    with pytest.raises(lw.StoreError, match="replaced by another file"):
        lw.run("t", lw.ScriptedPolicy([final("two")]), lw.ToolRegistry([]), store=first, run_id="r2")
    with SQLiteStore(db) as reopened:
        assert [r.id for r in reopened.list_runs()] == ["other-run"] and reopened.integrity_check() == "ok"
    first.close()


def _open_many(path: str, barrier: multiprocessing.synchronize.Barrier, out: multiprocessing.Queue) -> None:
    barrier.wait()
    try:
        with SQLiteStore(path) as store:
            out.put(("ok", store.schema_version))
    except Exception as exc:  # what the test counts
        out.put(("error", f"{type(exc).__name__}: {exc}"))


def test_processes_opening_one_new_journal_at_once_all_succeed(tmp_path):
    ctx = multiprocessing.get_context("fork")
    failures, opens = [], 0
    for trial in range(8):
        path = str(tmp_path / f"new-{trial}.db")
        barrier, out = ctx.Barrier(4), ctx.Queue()
        procs = [ctx.Process(target=_open_many, args=(path, barrier, out)) for _ in range(4)]
        for p in procs:
            p.start()
        results = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(60)
        opens += len(results)
        failures += [r for r in results if r[0] != "ok"]
    assert opens == 32 and failures == []
