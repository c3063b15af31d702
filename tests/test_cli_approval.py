"""`loopwright run --approve` asks at the terminal; `--db` journals the run."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from loopwright.interfaces import cli
from loopwright.safety import ApprovalRequest, terminal_approver

sys.path.insert(0, str(Path(__file__).parent / "helpers"))
import danger_tools

STEP = 'Thought: clean up\nAction: delete_file\nAction Input: {"path": "/tmp/x"}'


def cassette(tmp_path: Path, approve: bool = True) -> str:
    """A replay cassette whose model deletes a file, then answers (recorded with the
    same approval outcome the test expects, since the second prompt holds it)."""
    path = tmp_path / f"c-{approve}.jsonl"
    rows = [{"completion": STEP}, {"completion": "Thought: done\nFinal Answer: cleaned"}]
    import loopwright as lw

    policy = lw.models.Recorder(lw.ScriptedPolicy([r["completion"] for r in rows]), str(path))
    approver = (lambda r: True) if approve else None
    lw.run("Clean up /tmp/x", policy, lw.ToolRegistry(danger_tools.TOOLS), max_steps=3,
           approver=approver)
    assert path.read_text().count("\n") == 2
    return str(path)


@pytest.fixture(autouse=True)
def _clear() -> None:
    danger_tools.DELETED.clear()


def test_without_approve_a_destructive_call_is_denied(tmp_path, capsys):
    tape = cassette(tmp_path, approve=False)
    danger_tools.DELETED.clear()
    code = cli.main(["run", "Clean up /tmp/x", "--tools", "danger_tools:TOOLS", "--replay", tape, "--json"])
    trace = json.loads(capsys.readouterr().out)
    assert danger_tools.DELETED == []
    assert trace["steps"][0]["kind"] == "denied"
    assert trace["steps"][0]["observation"].startswith("DENIED[delete_file]")
    assert code == 0


def test_without_approve_the_denial_says_how_to_allow_it(tmp_path, capsys):
    tape = cassette(tmp_path, approve=False)
    danger_tools.DELETED.clear()
    cli.main(["run", "Clean up /tmp/x", "--tools", "danger_tools:TOOLS", "--replay", tape])
    err = " ".join(capsys.readouterr().err.split())
    assert danger_tools.DELETED == []
    assert "denied delete_file: it needs approval" in err and "run again with --approve" in err


def test_a_denial_at_the_terminal_gives_no_approve_hint(tmp_path, capsys, monkeypatch):
    tape = cassette(tmp_path, approve=False)
    danger_tools.DELETED.clear()
    monkeypatch.setattr("builtins.input", lambda prompt="": "n")
    cli.main(["run", "Clean up /tmp/x", "--tools", "danger_tools:TOOLS", "--replay", tape, "--approve"])
    err = capsys.readouterr().err
    assert "DENIED[delete_file]: denied at the terminal" in " ".join(err.split())
    assert "run again with --approve" not in err


def test_approve_asks_at_the_terminal_and_yes_runs_it(tmp_path, capsys, monkeypatch):
    tape = cassette(tmp_path)
    danger_tools.DELETED.clear()
    asked: list[str] = []
    monkeypatch.setattr("builtins.input", lambda prompt="": asked.append(prompt) or "y")
    code = cli.main(["run", "Clean up /tmp/x", "--tools", "danger_tools:TOOLS", "--replay", tape, "--approve"])
    err = capsys.readouterr().err
    assert danger_tools.DELETED == ["/tmp/x"] and code == 0
    assert 'Approve delete_file({"path": "/tmp/x"}) [destructive]?' in err


def test_approve_with_no_terminal_denies(tmp_path, capsys, monkeypatch):
    tape = cassette(tmp_path, approve=False)
    danger_tools.DELETED.clear()

    def no_terminal(prompt: str = "") -> str:
        raise EOFError

    monkeypatch.setattr("builtins.input", no_terminal)
    cli.main(["run", "Clean up /tmp/x", "--tools", "danger_tools:TOOLS", "--replay", tape, "--approve", "--quiet"])
    assert danger_tools.DELETED == []


def test_terminal_approver_binds_to_the_shown_call():
    answers = iter(["yes", "n"])
    approver = terminal_approver(lambda prompt: next(answers))
    request = ApprovalRequest("delete_file", {"path": "/a"}, "k", 1, "destructive")
    assert approver(request).approved
    assert not approver(request).approved


def test_db_journals_the_run_for_runs_resume(tmp_path, capsys):
    tape = cassette(tmp_path, approve=False)
    db = tmp_path / "runs.db"
    code = cli.main(["run", "Clean up /tmp/x", "--tools", "danger_tools:TOOLS", "--replay", tape,
                     "--db", str(db), "--run-id", "r1", "--quiet"])
    assert code == 0
    with sqlite3.connect(db) as conn:
        status, answer = conn.execute("SELECT status, final_answer FROM runs WHERE id = 'r1'").fetchone()
    assert answer == "cleaned" and status == "finished"
    assert cli.main(["runs", "show", "r1", "--db", str(db)]) == 0
    assert "cleaned" in capsys.readouterr().out


def test_run_id_without_db_is_a_usage_error(tmp_path, capsys):
    assert cli.main(["run", "t", "--replay", cassette(tmp_path), "--run-id", "x"]) == 2
    assert "--run-id needs --db" in capsys.readouterr().err
