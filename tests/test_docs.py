"""Every Python block in README.md and docs/*.md runs as written.

The runner is pytest-examples (pydantic's, for its own docs), chosen because it is made to
be driven from a test module: `find_examples` finds the blocks (indented ones in list
items too) and the `eval_example` fixture runs one as a module of its own, with a
traceback that points at the Markdown line. So the docs are one parametrised test here,
with this suite's fixtures (the real PostgreSQL server, llama-cpp-python's server) and
its `slow` marker, and pytest collects as before (`testpaths` stays `tests`). The others:
sybil runs a document's blocks in one shared namespace, so a block that leans on names an
earlier one made passes unnoticed, and its settings are HTML comments beside the fence;
pytest-markdown-docs collects `.md` files only under `--markdown-docs` from the paths
pytest is given, and hands a fixture to a block as a global named after the fixture.

The conventions, all in the fence's info string (GitHub highlights by the first word and
shows none of the rest):

- ```` ```python ````: a whole program. It runs in a fresh module with a temporary folder
  as its working directory, so the files it writes go there.
- ```` ```python continues ````: runs after the block before it in the same file, in the
  namespace that block left (the blocks before are run again first, so it runs alone too).
- ```` ```python skip="why" ````: not run; the reason stays in the fence for readers.

A block whose code uses the embedded model (`LlamaCpp`) or an OpenAI-compatible server
(`OpenAICompatible`) runs for real, marked slow, with `OPENAI_BASE_URL` set to
llama-cpp-python's server on 127.0.0.1 running the embedded model; one that uses
`PostgresStore` runs, marked slow, with `DATABASE_URL` set to a fresh schema on the
session's real PostgreSQL server; one that uses `A2AAgent` runs, marked slow, against the
`loopwright a2a serve` command written last before it in the file, started in another
process on a free port (its URL in `CALCULATOR_URL`).
"""

from __future__ import annotations

import contextlib
import io
import linecache
import logging
import re
import shlex
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from pytest_examples import CodeExample, EvalExample, find_examples

from helpers.a2a_serving import cli_serving

# llama-cpp-python's server on the embedded model, shared with the OpenAI-compatible tests.
from test_models_openai import llama_server  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def python_blocks() -> list[CodeExample]:
    """The Python blocks the runner finds, in document order."""
    return [example for path in DOCS for example in find_examples(path)]


def is_continuation(example: CodeExample) -> bool:
    return "continues" in example.prefix.split()[1:]


def chain(example: CodeExample, blocks: list[CodeExample]) -> list[CodeExample]:
    """The blocks to run for this one: the block it continues (and what that one
    continues), then itself."""
    same_file = [b for b in blocks if b.path == example.path]
    at = next(i for i, b in enumerate(same_file) if b.start_line == example.start_line)
    start = at
    while is_continuation(same_file[start]):
        if start == 0:
            raise AssertionError(f"{example}: says it continues, but no Python block comes before it")
        start -= 1
    return same_file[start : at + 1]


def names_in(source: str) -> set[str]:
    """The names a block's code uses (a model named in a comment or a string is not run)."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {t.string for t in tokens if t.type == tokenize.NAME}


def needs(example: CodeExample, blocks: list[CodeExample]) -> set[str]:
    """What a block runs against: "model" (the embedded model or a server), "server"
    (llama-cpp-python's server), "postgres" and "a2a" (an A2A agent in another process)."""
    names = set().union(*(names_in(b.source) for b in chain(example, blocks)))
    found = set()
    if names & {"LlamaCpp", "OpenAICompatible"}:
        found.add("model")
    if "OpenAICompatible" in names:
        found.add("server")
    if "PostgresStore" in names:
        found.add("postgres")
    if "A2AAgent" in names:
        found.add("a2a")
    return found


def a2a_serve_args(example: CodeExample) -> list[str]:
    """The arguments of the `loopwright a2a serve` command written last before the block,
    less its `--port` (the test picks a free one)."""
    before = example.path.read_text("utf-8").splitlines()[: example.start_line - 1]
    command = next((line for line in reversed(before) if line.startswith("loopwright a2a serve ")), None)
    assert command is not None, f"{example}: uses A2AAgent, but no `loopwright a2a serve` command comes before it"
    args = shlex.split(command, comments=True)[3:]
    if "--port" in args:
        del args[args.index("--port") : args.index("--port") + 2]
    return args


@contextlib.contextmanager
def a2a_agent(example: CodeExample, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The block's A2A agent served in another process, its URL in CALCULATOR_URL."""
    with cli_serving(a2a_serve_args(example), start_s=300) as served:
        monkeypatch.setenv("CALCULATOR_URL", served.base)
        yield


def skip_reason(example: CodeExample) -> str | None:
    """The reason in the fence's `skip="..."`, as written (the runner lower-cases its copy)."""
    fence = example.path.read_text("utf-8").splitlines()[example.start_line - 1]
    found = re.search(r'\bskip="([^"]*)"', fence)
    return found.group(1) if found else None


def marks_for(example: CodeExample, blocks: list[CodeExample]) -> list[pytest.MarkDecorator]:
    reason = skip_reason(example)
    marks = [pytest.mark.skip(reason=reason)] if reason is not None else []
    if needs(example, blocks):
        marks.append(pytest.mark.slow)
    return marks


def params() -> list[object]:
    blocks = python_blocks()
    return [
        pytest.param(example, marks=marks_for(example, blocks), id=f"{example.path.name}:{example.start_line}")
        for example in blocks
    ]


@pytest.mark.parametrize("example", params())
def test_the_block_runs_as_written(
    example: CodeExample,
    eval_example: EvalExample,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    blocks = python_blocks()
    want = needs(example, blocks)
    if "model" in want:
        # one thread: on a shared machine several are many times slower (7x on 2 cores at load 7)
        monkeypatch.setenv("LOOPWRIGHT_N_THREADS", "1")
    if "server" in want:
        monkeypatch.setenv("OPENAI_BASE_URL", request.getfixturevalue("llama_server"))
    if "postgres" in want:
        monkeypatch.setenv("DATABASE_URL", request.getfixturevalue("pg_dsn"))
    # The runner executes a block as __main__ and leaves it in sys.modules; put pytest's back.
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    monkeypatch.chdir(tmp_path)
    unclose_console_handlers()
    with contextlib.ExitStack() as stack:
        if "a2a" in want:
            stack.enter_context(a2a_agent(example, monkeypatch))
        namespace: dict[str, object] | None = None
        for block in chain(example, blocks):
            namespace = run_block(eval_example, block, namespace)
            # The runner prints this and returns when a block raises KeyboardInterrupt.
            assert "KeyboardInterrupt in example" not in capsys.readouterr().out, f"{block} was interrupted"


def unclose_console_handlers() -> None:
    """A library's console handler writes to the stderr it found when it was made (DBOS
    makes one once a process): under pytest, an earlier test's captured stream, closed
    since. Point such handlers at this test's stderr."""
    loggers = [logging.getLogger(), *(logging.getLogger(name) for name in logging.root.manager.loggerDict)]
    for handler in {h for logger in loggers for h in logger.handlers}:
        if isinstance(handler, logging.StreamHandler) and getattr(handler.stream, "closed", False):
            handler.stream = sys.stderr  # not setStream: it flushes the closed one first


def run_block(
    eval_example: EvalExample, block: CodeExample, namespace: dict[str, object] | None
) -> dict[str, object]:
    """Run one block; a failure is reported as the Markdown line that raised and the error.

    pytest-examples re-points the traceback at the Markdown file with code objects whose
    position tables do not fit on Python 3.11, and pytest's traceback printer then stops
    with an internal error; the frames' file and line numbers are right, so say those."""
    try:
        return eval_example.run(block, module_globals=namespace)
    except Exception as exc:
        failure = describe(exc, block)
    pytest.fail(failure, pytrace=False)


def describe(exc: Exception, block: CodeExample) -> str:
    """The block's lines the traceback passes through, then the error."""
    lines = []
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == str(block.path):
            source = linecache.getline(str(block.path), tb.tb_lineno).strip()
            lines.append(f"{block.path}:{tb.tb_lineno}: {source}")
        tb = tb.tb_next
    return "\n".join([*lines, f"{type(exc).__name__}: {exc}"])


def fence_languages(path: Path) -> list[tuple[int, str]]:
    """(line, language) of every fenced block, as a CommonMark parser reads the file."""
    tokens = MarkdownIt("commonmark").parse(path.read_text("utf-8"))
    return [
        (token.map[0] + 1, token.info.split()[0].lower() if token.info.split() else "")
        for token in tokens
        if token.type == "fence" and token.map
    ]


def test_every_python_block_in_the_docs_is_collected() -> None:
    """A Python block the runner does not find would go untested: count them with a
    CommonMark parser and compare with what the runner collects."""
    python_tags = {"py", "python", "python3", "pycon", "ipython"}
    in_markdown = sorted(
        (path, line)
        for path in DOCS
        for line, lang in fence_languages(path)
        if lang in python_tags or lang.startswith("{.py")
    )
    collected = sorted((example.path, example.start_line) for example in python_blocks())
    assert collected == in_markdown
    assert len(collected) >= 12


def test_a_broken_block_fails_naming_its_markdown_line(
    eval_example: EvalExample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check has teeth: a block using a name it never defines fails, as a fragment would,
    and the failure names the line of the Markdown file."""
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    monkeypatch.chdir(tmp_path)
    doc = tmp_path / "doc.md"
    doc.write_text("Text.\n\n```python\nimport os\n\ntrace = lw.run(task)\n```\n", "utf-8")
    [fragment] = find_examples(doc)
    with pytest.raises(pytest.fail.Exception) as failed:
        run_block(eval_example, fragment, None)
    assert str(failed.value) == f"{doc}:6: trace = lw.run(task)\nNameError: name 'lw' is not defined"


def test_the_fence_says_which_blocks_continue_and_which_are_not_run(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "```python\nx = 1\n```\n\ntext\n\n```python continues\ny = x\n```\n\n"
        '```python skip="Serves until Ctrl-C"\nserve()\n```\n\n'
        "```python\nfrom loopwright.models import LlamaCpp\n\nLlamaCpp()\n```\n",
        "utf-8",
    )
    first, second, server, model = blocks = list(find_examples(doc))
    assert chain(first, blocks) == [first] and chain(second, blocks) == [first, second]
    assert chain(server, blocks) == [server]
    assert [m.name for m in marks_for(server, blocks)] == ["skip"]
    assert marks_for(server, blocks)[0].kwargs["reason"] == "Serves until Ctrl-C"
    assert [m.name for m in marks_for(model, blocks)] == ["slow"] and not marks_for(second, blocks)
