"""`loopwright runs list | show | resume | export` over a journal."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

import loopwright as lw
from conftest import act, final, make_registry
from loopwright.durable.sqlite import SQLiteStore
from loopwright.interfaces.runs import runs_main
from loopwright.safety import ApprovalPending, approval_key

REACT = [act("add", '{"x": 2, "y": 3}'), act("multiply", '{"x": 5, "y": 10}'), final("50")]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as store:
        lw.run("Add then multiply", lw.ScriptedPolicy(REACT), make_registry(), store=store, run_id="done")
        with pytest.raises(lw.RunInterrupted):
            lw.run("Add then multiply", lw.ScriptedPolicy([REACT[0], KeyboardInterrupt()]), make_registry(),
                   store=store, run_id="cut")
    return path


def cli(*argv: str, policy: lw.ScriptedPolicy | None = None) -> tuple[int, str]:
    out = io.StringIO()
    code = runs_main(list(argv), out=out,
                     policy_factory=lambda args: policy or lw.ScriptedPolicy([]),
                     registry_factory=lambda args: make_registry())
    return code, out.getvalue()


def test_list_shows_runs_newest_first_with_status(db):
    code, text = cli("list", "--db", str(db))
    assert code == 0
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["ID", "MODE", "STATUS", "STOPPED"]
    assert lines[1].split()[:4] == ["cut", "react", "interrupted", "interrupted"]
    assert lines[2].split()[:4] == ["done", "react", "finished", "final"]
    code, text = cli("list", "--db", str(db), "--status", "finished")
    assert [line.split()[0] for line in text.splitlines()[1:]] == ["done"]


def test_show_prints_the_record_and_the_steps(db):
    code, text = cli("show", "done", "--db", str(db))
    assert code == 0
    assert "Run done  [react]  status: finished  stopped: final" in text
    assert "multiply" in text and "answer: '50'" in text


def test_export_writes_the_trace_as_json(db, tmp_path):
    target = tmp_path / "trace.json"
    code, text = cli("export", "done", "--db", str(db), "--out", str(target))
    assert code == 0 and text.strip() == str(target)
    with SQLiteStore(db) as store:
        assert lw.Trace.from_json(target.read_text()).to_dict() == store.trace("done").to_dict()
    code, text = cli("export", "done", "--db", str(db))
    assert json.loads(text)["final_answer"] == "50"


def test_resume_continues_an_interrupted_run(db, capsys):
    policy = lw.ScriptedPolicy(REACT[1:])
    code, text = cli("resume", "cut", "--db", str(db), policy=policy)
    assert code == 0 and text == "50\n"  # the answer alone on stdout
    assert "answer: '50'" in capsys.readouterr().err  # the account on stderr
    policy.assert_consumed()
    with SQLiteStore(db) as store:
        assert store.load_run("cut").status == "finished"


def test_resume_with_approve_decides_the_pending_call(tmp_path, capsys):
    path = tmp_path / "runs.db"

    @lw.tool(side_effects="destructive")
    def delete_file(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    def later(request):
        raise ApprovalPending(request.key)

    with SQLiteStore(path) as store:
        lw.run("t", lw.ScriptedPolicy([act("delete_file", '{"path": "/tmp/x"}')]), lw.ToolRegistry([delete_file]),
               approver=later, store=store, run_id="p")
    key = approval_key("delete_file", {"path": "/tmp/x"})
    code, text = cli("show", "p", "--db", str(path))
    assert "Pending approvals" in text and key in text

    out = io.StringIO()
    code = runs_main(["resume", "p", "--db", str(path), "--approve", key, "--reason", "ok by Ann"], out=out,
                     policy_factory=lambda args: lw.ScriptedPolicy([final("gone")]),
                     registry_factory=lambda args: lw.ToolRegistry([delete_file]))
    assert code == 0 and out.getvalue() == "gone\n" and "deleted /tmp/x" in capsys.readouterr().err


def test_resume_that_pauses_again_exits_1_and_names_the_key(tmp_path, capsys):
    path = tmp_path / "runs.db"

    @lw.tool(side_effects="destructive")
    def delete_file(path: str) -> str:
        """Delete a file."""
        return "deleted"

    with SQLiteStore(path) as store:
        lw.run("t", lw.ScriptedPolicy([act("delete_file", '{"path": "/a"}')]), lw.ToolRegistry([delete_file]),
               approver=lambda r: (_ for _ in ()).throw(ApprovalPending(r.key)), store=store, run_id="p")
    out = io.StringIO()
    code = runs_main(["resume", "p", "--db", str(path)], out=out,
                     policy_factory=lambda args: lw.ScriptedPolicy([]),
                     registry_factory=lambda args: lw.ToolRegistry([delete_file]))
    assert code == 1 and out.getvalue() == ""
    assert f"waiting for approval: {approval_key('delete_file', {'path': '/a'})}" in capsys.readouterr().err


def test_unknown_run_and_missing_journal_exit_2_with_a_message(db, tmp_path, capsys):
    assert cli("show", "ghost", "--db", str(db))[0] == 2
    assert "no run 'ghost'" in capsys.readouterr().err
    assert cli("resume", "ghost", "--db", str(db))[0] == 2
    assert cli("list", "--db", str(tmp_path / "absent.db"))[0] == 2
    assert "no run journal at" in capsys.readouterr().err
    assert not (tmp_path / "absent.db").exists()  # listing never creates a journal


def test_db_defaults_to_the_environment_variable(db, monkeypatch):
    monkeypatch.setenv("LOOPWRIGHT_DB", str(db))
    code, text = cli("list")
    assert code == 0 and "done" in text


def test_resume_builds_model_and_tools_as_loopwright_run_does(tmp_path):
    """Through the `loopwright` command: the demo tools with their prompts, the model
    from the same flags (here a cassette of an uninterrupted run, which answers only
    prompts identical to the ones that run sent)."""
    from loopwright.interfaces import cli
    from loopwright.interfaces import runs as store_cli
    from loopwright.interfaces.demo_tools import demo_registry

    script = [act("calculate", '{"expression": "17 * 23"}'), final("391")]
    cassette, path = tmp_path / "calls.jsonl", tmp_path / "runs.db"
    lw.run("What is 17 * 23?", lw.models.Recorder(lw.ScriptedPolicy(script), cassette), demo_registry())
    with SQLiteStore(path) as store, pytest.raises(lw.RunInterrupted):
        lw.run("What is 17 * 23?", lw.ScriptedPolicy([script[0], KeyboardInterrupt()]), demo_registry(),
               store=store, run_id="cut")

    store_cli.register()
    assert cli.main(["runs", "resume", "cut", "--db", str(path), "--replay", str(cassette)]) == 0
    with SQLiteStore(path) as store:
        assert store.trace("cut").final_answer == "391" and store.load_run("cut").status == "finished"
    assert cli.main(["runs", "list", "--db", str(path)]) == 0
    assert cli.main(["runs", "resume", "cut", "--db", str(path), "--replay", str(tmp_path / "none")]) == 2


def test_runs_module_runs_as_a_command(db):
    out = subprocess.run([sys.executable, "-m", "loopwright.interfaces.runs", "list", "--db", str(db)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and "interrupted" in out.stdout


def test_show_lists_the_recorded_tools_by_name(db):
    code, text = cli("show", "done", "--db", str(db))
    assert code == 0
    assert "'tool_set': ['add', 'divide', 'multiply', 'search', 'word_count']" in text
