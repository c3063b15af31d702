"""The `loopwright` command's contract, as a script sees it: the installed command run as a
subprocess, real exit codes, stdout and stderr apart. Model calls are answered from
cassettes recorded here for exactly the prompts the command builds (`record`)."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

import loopwright as lw
from loopwright.interfaces import cli
from loopwright.interfaces.common import DEFAULT_TOOL_TIMEOUT_S, load_tools

LOOPWRIGHT = Path(sys.executable).with_name("loopwright")
CASSETTES = Path(__file__).parent / "cassettes"
REACT_CASSETTE = str(CASSETTES / "react_json_17x23.jsonl")  # answers "What is 17 * 23?" with 391
PRE_TOOLSET_JOURNAL = Path(__file__).parent / "fixtures" / "pre_toolset_journal.db"


def _default_sigint() -> None:
    """In the child before exec: Ctrl-C as a fresh shell gives it (default action, not
    blocked), whatever the test process inherited or set up; a Python child keeps an
    ignored SIGINT ignored, and exec keeps a blocked one blocked."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


TOOLS_MODULE = '''
import os
import time
from pathlib import Path

import loopwright as lw


@lw.tool
def list_todos(owner: str) -> str:
    """List the open todos of an owner."""
    return f"{owner}: buy milk"


@lw.tool
def fail(reason: str) -> str:
    """A tool that always fails."""
    raise RuntimeError(reason)


@lw.tool
def nothing(x: str) -> str:
    """A tool that returns an empty string."""
    return ""


@lw.tool
def hang(marker: str) -> str:
    """Writes the marker file, then (with LW_TEST_HANG set) never returns."""
    Path(marker).write_text("started")
    while os.environ.get("LW_TEST_HANG"):
        time.sleep(0.05)
    return "done"


@lw.tool
def wait_for(path: str) -> str:
    """Returns once the file exists."""
    while not Path(path).exists():
        time.sleep(0.05)
    return "done"


TOOLS = [list_todos]
WITH_FAIL = [list_todos, fail]
WITH_NOTHING = [list_todos, nothing]
HANG = [hang]
WAIT = [wait_for]
'''

CHANGED_MODULE = '''
import loopwright as lw


@lw.tool
def list_todos(owner: str, done: bool = False) -> str:
    """List the todos of an owner."""
    return f"{owner}: buy milk"


TOOLS = [list_todos]
'''


def act(name: str, args: dict[str, object], thought: str = "next") -> str:
    return f"Thought: {thought}\nAction: {name}\nAction Input: {json.dumps(args)}"


def final(answer: str) -> str:
    return f"Thought: done\nFinal Answer: {answer}"


def plan(*steps: tuple[str, dict[str, object]]) -> str:
    return json.dumps({"plan": [{"id": f"E{i}", "tool": t, "args": a} for i, (t, a) in enumerate(steps, 1)]})


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A working folder holding the tool modules `lwt_tools` and `lwt_changed`, the current
    folder of the test and of every command it runs."""
    (tmp_path / "lwt_tools.py").write_text(TOOLS_MODULE)
    (tmp_path / "lwt_changed.py").write_text(CHANGED_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("lwt_tools", "lwt_changed", "lwt_prompts"):
        sys.modules.pop(name, None)


def record(path: Path, argv: Sequence[str], replies: Sequence[str]) -> Path:
    """A cassette with the model calls `loopwright run ARGV` makes when the model replies
    `replies`: the same flags parsed and turned into the same registry and options by the
    command's own code, on a scripted policy, through a Recorder."""
    args = cli.build_parser().parse_args(["run", *argv])
    registry = load_tools(args.tools, args.tool_timeout_s)
    options = cli.run_options(args)
    lw.run(args.task, lw.models.Recorder(lw.ScriptedPolicy(list(replies)), path), registry, mode=args.mode,
           **options)
    return path


def first_calls(cassette: Path, n: int, out: Path) -> Path:
    """A cassette holding only the first n calls of another (the run dies at call n + 1)."""
    out.write_text("".join(cassette.read_text().splitlines(keepends=True)[:n]))
    return out


def command(*argv: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LOOPWRIGHT), *argv], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=None if env is None else {**os.environ, **env}, check=False)


def assert_usage_error(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2, nothing on stdout, one line on stderr naming the problem, no traceback."""
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    for needle in needles:
        assert needle in done.stderr


# ------------------------------------------------------------------ stdout and stderr


def test_the_answer_goes_alone_to_stdout_and_the_account_to_stderr() -> None:
    done = command("run", "What is 17 * 23?", "--max-steps", "4", "--replay", REACT_CASSETTE)
    assert done.returncode == 0 and done.stdout == "391\n"
    assert 'calculate({"expression": "17 * 23"})' in done.stderr and "stopped: final" in done.stderr
    quiet = command("run", "What is 17 * 23?", "--max-steps", "4", "--replay", REACT_CASSETTE, "--quiet")
    assert quiet.returncode == 0 and quiet.stdout == "391\n" and quiet.stderr == ""
    as_json = command("run", "What is 17 * 23?", "--max-steps", "4", "--replay", REACT_CASSETTE, "--json")
    trace = lw.Trace.from_json(as_json.stdout)
    assert as_json.returncode == 0 and trace.final_answer == "391" and trace.answered
    assert "stopped: final" in as_json.stderr


def test_a_run_without_an_answer_exits_1_with_nothing_on_stdout() -> None:
    done = command("run", "What is 17 * 23?", "--max-steps", "1", "--replay", REACT_CASSETTE)
    assert done.returncode == 1 and done.stdout == ""
    assert "no answer" in done.stderr and "stopped: max_steps" in done.stderr


def test_rewoo_with_an_empty_solver_reply_is_not_answered(folder: Path) -> None:
    argv = ["Todos of Ann?", "--mode", "rewoo", "--tools", "lwt_tools:TOOLS"]
    cassette = record(folder / "c.jsonl", argv, [plan(("list_todos", {"owner": "Ann"})), "  \n"])
    done = command("run", *argv, "--replay", str(cassette), "--json", cwd=folder)
    trace = lw.Trace.from_json(done.stdout)
    assert done.returncode == 1 and not trace.answered
    assert trace.stopped_reason == "error" and trace.final_answer is None
    assert trace.steps[-1].kind == "solve" and "no answer" in (trace.steps[-1].error or "")


def test_plan_execute_whose_last_step_failed_has_no_answer(folder: Path) -> None:
    argv = ["Todos of Ann?", "--mode", "plan_execute", "--tools", "lwt_tools:WITH_FAIL", "--max-replans", "0"]
    cassette = record(folder / "c.jsonl", argv, [plan(("list_todos", {"owner": "Ann"}), ("fail", {"reason": "x"}))])
    done = command("run", *argv, "--replay", str(cassette), cwd=folder)
    assert done.returncode == 1 and done.stdout == ""
    assert "stopped: max_replans" in done.stderr and "RuntimeError: x" in done.stderr


def test_plan_execute_whose_last_step_gave_nothing_has_no_answer(folder: Path) -> None:
    argv = ["Todos of Ann?", "--mode", "plan_execute", "--tools", "lwt_tools:WITH_NOTHING", "--max-replans", "0"]
    cassette = record(folder / "c.jsonl", argv, [plan(("nothing", {"x": "y"}))])
    done = command("run", *argv, "--replay", str(cassette), "--json", cwd=folder)
    trace = lw.Trace.from_json(done.stdout)
    assert done.returncode == 1 and trace.final_answer is None and trace.stopped_reason == "max_replans"


# ------------------------------------------------------------------ usage errors


@pytest.mark.parametrize("task", ["", "   \n\t"])
def test_an_empty_or_blank_task_is_a_usage_error(task: str, tmp_path: Path) -> None:
    done = command("run", task, "--db", str(tmp_path / "runs.db"))
    assert_usage_error(done, "task is empty")
    assert not (tmp_path / "runs.db").exists()  # refused before anything was opened


def test_a_model_file_that_is_not_a_model_is_a_usage_error(tmp_path: Path) -> None:
    text = tmp_path / "notamodel.gguf"
    text.write_text("just text\n")
    assert_usage_error(command("run", "q", "--model", str(text)), "not a GGUF model file")
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)  # the right magic, then nothing a model holds
    assert_usage_error(command("run", "q", "--model", str(broken)), "cannot load the model")
    # with --db: the journal opened first is removed again when it was new, kept when not
    assert_usage_error(command("run", "q", "--model", str(text), "--db", str(tmp_path / "new.db")), "GGUF")
    assert list(tmp_path.glob("new.db*")) == []
    old = tmp_path / "old.db"
    lw.SQLiteStore(str(old)).close()
    assert_usage_error(command("run", "q", "--model", str(text), "--db", str(old)), "GGUF")
    assert old.is_file()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["run", "q", "--max-steps", "abc"], "--max-steps: expected a whole number, got 'abc'"),
        (["run", "q", "--max-steps", "0"], "must be at least 1"),
        (["run", "q", "--timeout-s", "soon"], "expected a number of seconds"),
        (["run", "q", "--tool-timeout-s", "-1"], "must be a positive number of seconds"),
        (["run", "q", "--mode", "tree"], "invalid choice"),
        (["run", "q", "--on-repeat", "sometimes"], "invalid choice"),
        (["run"], "required: task"),
        (["run", "q", "--tools", "nocolon"], "takes MODULE:ATTR"),
        (["run", "q", "--prompts", "absent.json"], "no such file"),
        (["run", "q", "--run-id", "x"], "--run-id needs --db"),
        (["run", "q", "--db", "runs.db", "--run-id", "a\nb", "--replay", REACT_CASSETTE], "run_id must be"),
        (["runs", "resume"], "required"),
    ],
)
def test_usage_errors_are_one_line_without_a_traceback(argv: list[str], needle: str, tmp_path: Path) -> None:
    assert_usage_error(command(*argv, cwd=tmp_path), needle)


def test_tools_from_a_module_in_the_current_folder_load(folder: Path) -> None:
    argv = ["Todos of Ann?", "--tools", "lwt_tools:TOOLS"]
    cassette = record(folder / "c.jsonl", argv, [act("list_todos", {"owner": "Ann"}), final("buy milk")])
    done = command("run", *argv, "--replay", str(cassette), cwd=folder)
    assert done.returncode == 0 and done.stdout == "buy milk\n", done.stderr
    missing = command("run", "q", "--tools", "lwt_absent:TOOLS", cwd=folder)
    assert_usage_error(missing, "No module named 'lwt_absent'", f"current folder {folder}")


def test_a_long_task_is_shown_trimmed() -> None:
    task = "word " * 20_000  # 100 kB
    done = command("run", task, "--max-steps", "1", "--replay", REACT_CASSETTE)
    assert done.returncode == 1  # the cassette has no answer for this task
    assert "(100,000 characters)" in done.stderr
    assert len(done.stderr) < 5_000 and task not in done.stderr


# ------------------------------------------------------------------ output paths


def test_output_files_get_their_missing_folders_made(tmp_path: Path) -> None:
    save, rec, db = tmp_path / "a/b/t.json", tmp_path / "c/d/x.jsonl", tmp_path / "e/f/runs.db"
    done = command("run", "What is 17 * 23?", "--max-steps", "4", "--replay", REACT_CASSETTE,
                   "--save", str(save), "--record", str(rec), "--db", str(db), "--run-id", "r1")
    assert done.returncode == 0, done.stderr
    assert lw.Trace.from_json(save.read_text()).final_answer == "391" and rec.is_file() and db.is_file()
    out = tmp_path / "g/h/trace.json"
    exported = command("runs", "export", "r1", "--db", str(db), "--out", str(out))
    assert exported.returncode == 0 and json.loads(out.read_text())["final_answer"] == "391"
    page = tmp_path / "i/j/page.html"
    viewed = command("view", str(save), "--out", str(page))
    assert viewed.returncode == 0 and page.read_text().lower().startswith("<!doctype html>")


@pytest.mark.parametrize("flag", ["--save", "--record", "--db"])
def test_an_output_path_that_cannot_be_written_is_refused_before_the_run(flag: str, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file, not a folder")
    journal = tmp_path / "runs.db"
    argv = ["run", "What is 17 * 23?", "--replay", REACT_CASSETTE, flag, str(blocker / "x")]
    if flag != "--db":
        argv += ["--db", str(journal)]
    done = command(*argv)
    assert_usage_error(done, flag, "cannot create its folder")
    assert not journal.exists()  # nothing ran
    assert_usage_error(command("run", "q", flag, str(tmp_path)), "is a folder")


def test_runs_export_and_view_refuse_an_unwritable_out(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    done = command("run", "What is 17 * 23?", "--max-steps", "4", "--replay", REACT_CASSETTE, "--quiet",
                   "--db", str(tmp_path / "runs.db"), "--run-id", "r1", "--save", str(tmp_path / "t.json"))
    assert done.returncode == 0
    exported = command("runs", "export", "r1", "--db", str(tmp_path / "runs.db"), "--out", str(blocker / "x"))
    assert exported.returncode == 2 and "cannot create its folder" in exported.stderr
    assert exported.stdout == "" and "Traceback" not in exported.stderr
    viewed = command("view", str(tmp_path / "t.json"), "--out", str(blocker / "x.html"))
    assert viewed.returncode == 2 and "cannot create its folder" in viewed.stderr


def test_an_existing_run_id_is_a_usage_error(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    argv = ["run", "What is 17 * 23?", "--max-steps", "4", "--replay", REACT_CASSETTE, "--db", db, "--run-id", "r1"]
    assert command(*argv).returncode == 0
    assert_usage_error(command(*argv), "'r1' already exists", "runs resume r1")


# ------------------------------------------------------------------ resume and tools


def _cut_run(folder: Path, argv: Sequence[str], replies: Sequence[str]) -> Path:
    """Journal `loopwright run ARGV` as run "r" in runs.db, cut after its first model call
    (the cassette it replays holds no second one); returns the full cassette."""
    full = record(folder / "full.jsonl", argv, replies)
    first = first_calls(full, 1, folder / "first.jsonl")
    cut = command("run", *argv, "--db", "runs.db", "--run-id", "r", "--replay", str(first), cwd=folder)
    assert cut.returncode == 1 and "policy raised ReplayMissError" in cut.stderr
    return full


def test_resume_loads_the_tools_the_run_was_started_with(folder: Path) -> None:
    argv = ["Todos of Ann?", "--tools", "lwt_tools:TOOLS"]
    full = _cut_run(folder, argv, [act("list_todos", {"owner": "Ann"}), final("buy milk")])
    with lw.SQLiteStore(folder / "runs.db") as store:
        config = store.load_run("r").config
    assert config["meta"]["cli"]["tools"] == ["lwt_tools:TOOLS"] and list(config["tool_set"]) == ["list_todos"]
    done = command("runs", "resume", "r", "--db", "runs.db", "--replay", str(full), cwd=folder)
    assert done.returncode == 0 and done.stdout == "buy milk\n", done.stderr


def test_resume_with_other_tools_is_refused_naming_the_difference(folder: Path) -> None:
    argv = ["Todos of Ann?", "--tools", "lwt_tools:TOOLS"]
    full = _cut_run(folder, argv, [act("list_todos", {"owner": "Ann"}), final("buy milk")])
    with lw.SQLiteStore(folder / "runs.db") as store:
        before = store.trace("r").to_dict()
    added = command("runs", "resume", "r", "--db", "runs.db", "--tools", "lwt_tools:WITH_FAIL",
                    "--replay", str(full), cwd=folder)
    assert added.returncode == 2 and "added fail" in added.stderr and "--allow-tool-changes" in added.stderr
    demo = command("runs", "resume", "r", "--db", "runs.db", "--tools", "loopwright.interfaces.demo_tools:DEMO_TOOLS",
                   "--replay", str(full), cwd=folder)
    assert demo.returncode == 2 and "added calculate, lookup" in demo.stderr and "removed list_todos" in demo.stderr
    changed = command("runs", "resume", "r", "--db", "runs.db", "--tools", "lwt_changed:TOOLS",
                      "--replay", str(full), cwd=folder)
    assert changed.returncode == 2 and "changed list_todos" in changed.stderr
    with lw.SQLiteStore(folder / "runs.db") as store:  # refused before anything was replayed or written
        assert store.load_run("r").resumes == 0 and store.trace("r").to_dict() == before

    allowed = command("runs", "resume", "r", "--db", "runs.db", "--tools", "lwt_changed:TOOLS",
                      "--replay", str(full), "--allow-tool-changes", cwd=folder)
    assert allowed.returncode != 2, allowed.stderr
    with lw.SQLiteStore(folder / "runs.db") as store:
        assert store.trace("r").meta["tool_changes"] == {"added": [], "removed": [], "changed": ["list_todos"]}


def test_a_journal_from_before_tool_sets_were_recorded_resumes(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    shutil.copy(PRE_TOOLSET_JOURNAL, db)
    with sqlite3.connect(db) as conn:  # the fixture really is the old shape
        config = json.loads(conn.execute("SELECT config FROM runs WHERE id = 'old'").fetchone()[0])
    assert config["tools"] is None and "tool_set" not in config and "meta" not in config
    reply = 'Thought: I calculate\nAction: calculate\nAction Input: {"expression": "17 * 23"}'
    cassette = record(tmp_path / "c.jsonl", ["What is 17 * 23?", "--max-steps", "4"], [reply, final("391")])
    done = command("runs", "resume", "old", "--db", str(db), "--replay", str(cassette))
    assert done.returncode == 0 and done.stdout == "391\n", done.stderr
    with lw.SQLiteStore(db) as store:
        assert store.load_run("old").status == "finished" and store.load_run("old").resumes == 1


# ------------------------------------------------------------------ live display and in-flight calls


@pytest.mark.skipif(os.name != "posix", reason="a pseudo-terminal")
def test_the_live_line_names_the_tool_in_flight_on_a_terminal(folder: Path) -> None:
    import pty

    gate = folder / "gate"
    argv = ["Wait?", "--tools", "lwt_tools:WAIT"]
    gate.write_text("open")  # the recording run must not wait
    cassette = record(folder / "c.jsonl", argv, [act("wait_for", {"path": str(gate)}), final("waited")])
    gate.unlink()
    master, slave = pty.openpty()
    process = subprocess.Popen([str(LOOPWRIGHT), "run", *argv, "--replay", str(cassette)], cwd=folder,
                               stdout=subprocess.PIPE, stderr=slave, text=True,
                               env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "200"})
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 120
        while b"wait_for(" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                seen += os.read(master, 65536)
        assert b"wait_for(" in seen and b"path" in seen  # shown while the tool still waits
        assert not gate.exists() and process.poll() is None
        gate.write_text("open")
        out, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
    assert process.returncode == 0 and out == "waited\n"


@pytest.mark.skipif(os.name != "posix", reason="a pseudo-terminal")
def test_the_models_text_shows_live_on_a_terminal_and_not_in_a_pipe(folder: Path) -> None:
    import pty

    gate = folder / "gate"
    argv = ["Wait?", "--tools", "lwt_tools:WAIT"]
    gate.write_text("open")  # the recording run must not wait
    cassette = record(folder / "c.jsonl", argv, [act("wait_for", {"path": str(gate)}), final("waited")])
    gate.unlink()
    master, slave = pty.openpty()
    process = subprocess.Popen([str(LOOPWRIGHT), "run", *argv, "--replay", str(cassette)], cwd=folder,
                               stdout=subprocess.PIPE, stderr=slave, text=True,
                               env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "200"})
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 120
        while b"Action Input:" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    seen += os.read(master, 65536)
                except OSError:  # the command ended: the terminal is gone
                    break
        # the model's own text (its "Action Input:" line, which a printed step never shows),
        # on the terminal while the tool it asked for still waits
        assert b"Action Input:" in seen and process.poll() is None, seen[-3000:]
        gate.write_text("open")
        out, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
    assert process.returncode == 0 and out == "waited\n"
    piped = command("run", *argv, "--replay", str(cassette), cwd=folder)
    assert piped.returncode == 0 and piped.stdout == "waited\n"
    assert "Action Input" not in piped.stderr and "\x1b[" not in piped.stderr  # nothing live when not a terminal


@pytest.mark.skipif(os.name != "posix", reason="SIGINT delivery")
def test_ctrl_c_during_a_tool_call_records_the_call_in_flight(folder: Path) -> None:
    marker, saved = folder / "started", folder / "trace.json"
    argv = ["Hang?", "--tools", "lwt_tools:HANG"]
    cassette = record(folder / "c.jsonl", argv, [act("hang", {"marker": str(marker)}), final("x")])
    marker.unlink()
    process = subprocess.Popen([str(LOOPWRIGHT), "run", *argv, "--replay", str(cassette), "--save", str(saved)],
                               cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "LW_TEST_HANG": "1"}, preexec_fn=_default_sigint)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists()
        # the tool's thread writes the marker as it starts; give the run's thread a moment
        # to reach its wait for the call, so Ctrl-C lands during the call, not its start
        time.sleep(0.5)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 1 and out == ""
    trace = lw.Trace.from_json(saved.read_text())
    assert trace.stopped_reason == "interrupted"
    [cut] = trace.meta["in_flight"]
    assert cut["call"] == "tool" and cut["tool"] == "hang" and cut["args"] == {"marker": str(marker)}
    assert "interrupted during hang(" in err


def test_a_hung_tool_ends_at_the_tool_timeout(folder: Path) -> None:
    marker = folder / "started"
    argv = ["Hang?", "--tools", "lwt_tools:HANG", "--tool-timeout-s", "0.5", "--max-steps", "1"]
    cassette = record(folder / "c.jsonl", argv, [act("hang", {"marker": str(marker)})])
    done = command("run", *argv, "--replay", str(cassette), "--json", cwd=folder, env={"LW_TEST_HANG": "1"})
    trace = lw.Trace.from_json(done.stdout)
    assert done.returncode == 1 and trace.stopped_reason == "max_steps"
    assert trace.steps[0].tool == "hang" and "timeout after 0.5s" in (trace.steps[0].error or "")


def test_the_cli_gives_tools_a_default_timeout_that_the_flag_replaces() -> None:
    assert load_tools(None).tool_timeout_s == DEFAULT_TOOL_TIMEOUT_S
    assert load_tools(None, 5.0).tool_timeout_s == 5.0
    assert load_tools(None, 0.0).tool_timeout_s is None  # 0: no timeout
    assert f"else {DEFAULT_TOOL_TIMEOUT_S:g}" in command("run", "--help").stdout


# ------------------------------------------------------------------ new flags


def test_on_repeat_stop_ends_a_repeating_run(folder: Path) -> None:
    argv = ["Todos of Ann?", "--tools", "lwt_tools:TOOLS", "--on-repeat", "stop"]
    same = act("list_todos", {"owner": "Ann"})
    cassette = record(folder / "c.jsonl", argv, [same, same, same])
    done = command("run", *argv, "--replay", str(cassette), "--json", cwd=folder)
    trace = lw.Trace.from_json(done.stdout)
    assert done.returncode == 1 and trace.stopped_reason == "repeated_call"


def test_prompts_from_a_json_file_or_a_module_attribute(folder: Path) -> None:
    template = "Use the tools:\n{tools}\nQuestion: {task}\nThought:"
    (folder / "prompts.json").write_text(json.dumps({"react_json": template}))
    (folder / "lwt_prompts.py").write_text(
        "import loopwright as lw\nPROMPTS = lw.PromptSet(react_json=" + repr("Module prompt.\n" + template) + ")\n")
    for spec, head in (("prompts.json", "Use the tools:"), ("lwt_prompts:PROMPTS", "Module prompt.")):
        argv = ["Todos of Ann?", "--tools", "lwt_tools:TOOLS", "--prompts", spec]
        cassette = record(folder / f"{head[:3]}.jsonl", argv, [final("buy milk")])
        done = command("run", *argv, "--replay", str(cassette), "--json", cwd=folder)
        trace = lw.Trace.from_json(done.stdout)
        assert done.returncode == 0, done.stderr
        assert (trace.prompt_for(trace.steps[0]) or "").startswith(head)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ({"react_jsn": "x"}, "unknown field(s) 'react_jsn'"),
        ({"react_json": "{question}"}, "react_json uses {question}"),
        ({"react_json": "{task"}, "not a valid template"),
        ({"stop_json": "\n"}, "must be a list of strings"),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_a_bad_prompts_file_is_a_usage_error(content: object, needle: str, tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text(json.dumps(content))
    assert_usage_error(command("run", "q", "--prompts", "p.json", cwd=tmp_path), needle)


@pytest.mark.slow
def test_n_threads_reaches_the_embedded_model() -> None:
    from loopwright.interfaces.common import make_model

    args = cli.build_parser().parse_args(["run", "q", "--n-threads", "1"])
    model = make_model(args)
    assert model.n_threads == 1 and model.llm.context_params.n_threads == 1
