"""Every Python block in README.md and docs/*.md runs as written.

The runner is pytest-examples (pydantic's runner for its own docs). It is made to be driven
from a test module: `find_examples` finds the blocks (indented ones in list items too) and
the `eval_example` fixture runs one as a module of its own, with a traceback that points at
the Markdown line. So the docs run as one ordinary parametrised test here, with this
suite's fixtures (the real PostgreSQL server, llama-cpp-python's server) and its `slow`
marker, and nothing changes in how pytest collects (`testpaths` stays `tests`). sybil
shares one namespace across a document's blocks, so a block that leans on an earlier one
would pass unnoticed, and its settings are HTML comments beside the fence;
pytest-markdown-docs collects `.md` files only under `--markdown-docs` from the paths
pytest is pointed at, and hands fixtures to a block as globals named after them.

The conventions, all in the fence's info string (GitHub highlights by the first word and
shows none of the rest):

- ```` ```python ````: a whole program. It runs in a fresh module with a temporary folder
  as its working directory, so the files it writes go there.
- ```` ```python continues ````: runs after the block before it in the same file, in the
  namespace that block left (the blocks before are run again first, so it runs alone too).
- ```` ```python skip="why" ````: not run; the reason stays in the fence for readers.

A block that names the embedded model (`LlamaCpp(`) or an OpenAI-compatible server
(`OpenAICompatible(`) runs for real, marked slow, with `OPENAI_BASE_URL` set to
llama-cpp-python's server on 127.0.0.1 running the embedded model; one that names
`PostgresStore(` runs, marked slow, with `DATABASE_URL` set to a fresh schema on the
session's real PostgreSQL server.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from pytest_examples import CodeExample, EvalExample, find_examples

# llama-cpp-python's server on the embedded model, shared with the OpenAI-compatible tests.
from test_models_openai import llama_server  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REAL_MODEL = ("LlamaCpp(", "OpenAICompatible(")
POSTGRES = "PostgresStore("


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


def needs(example: CodeExample, blocks: list[CodeExample]) -> set[str]:
    source = "".join(b.source for b in chain(example, blocks))
    found = set()
    if any(name in source for name in REAL_MODEL):
        found.add("model")
    if POSTGRES in source:
        found.add("postgres")
    return found


def params() -> list[object]:
    blocks = python_blocks()
    out = []
    for example in blocks:
        skip = example.prefix_settings().get("skip")
        marks = [pytest.mark.skip(reason=skip)] if skip else []
        if needs(example, blocks):
            marks.append(pytest.mark.slow)
        out.append(pytest.param(example, marks=marks, id=f"{example.path.name}:{example.start_line}"))
    return out


@pytest.mark.parametrize("example", params())
def test_the_block_runs_as_written(
    example: CodeExample,
    eval_example: EvalExample,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    blocks = python_blocks()
    want = needs(example, blocks)
    if "model" in want:
        monkeypatch.setenv("OPENAI_BASE_URL", request.getfixturevalue("llama_server"))
    if "postgres" in want:
        monkeypatch.setenv("DATABASE_URL", request.getfixturevalue("pg_dsn"))
    # The runner executes a block as __main__ and leaves it in sys.modules; put pytest's back.
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] | None = None
    for block in chain(example, blocks):
        namespace = eval_example.run(block, module_globals=namespace)


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
        (path.name, line)
        for path in DOCS
        for line, lang in fence_languages(path)
        if lang in python_tags or lang.startswith("{.py")
    )
    collected = sorted((example.path.name, example.start_line) for example in python_blocks())
    assert collected == in_markdown
    assert len(collected) >= 12


def test_a_broken_block_fails(eval_example: EvalExample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check has teeth: a block using a name it never defines fails, as a fragment would."""
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    monkeypatch.chdir(tmp_path)
    [fragment] = find_examples(_write(tmp_path / "doc.md", "```python\ntrace = lw.run(task)\n```\n"))
    with pytest.raises(NameError, match="'lw' is not defined"):
        eval_example.run(fragment)


def _write(path: Path, text: str) -> Path:
    path.write_text(text, "utf-8")
    return path
