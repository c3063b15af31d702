"""Shared fixtures: the seeds' small tool set."""

from __future__ import annotations

import pytest

import loopwright as lw
from loopwright.durable.base import StoreBase

FACT = "Paris is the capital and largest French city"  # 8 words


def make_registry(calls: list[tuple[str, dict[str, object]]] | None = None) -> lw.ToolRegistry:
    calls = [] if calls is None else calls

    @lw.tool
    def add(x: int, y: int) -> int:
        """Add two integers."""
        calls.append(("add", {"x": x, "y": y}))
        return x + y

    @lw.tool
    def multiply(x: int, y: int) -> int:
        """Multiply two integers."""
        calls.append(("multiply", {"x": x, "y": y}))
        if type(x) is not int or type(y) is not int:
            raise TypeError(f"multiply wants ints, got {type(x).__name__} and {type(y).__name__}")
        return x * y

    @lw.tool
    def divide(x: float, y: float) -> float:
        """Divide x by y."""
        calls.append(("divide", {"x": x, "y": y}))
        return x / y

    @lw.tool
    def search(q: str) -> str:
        """Look up a fact."""
        calls.append(("search", {"q": q}))
        return FACT if "france" in q.lower() else "no result"

    @lw.tool
    def word_count(text: str) -> int:
        """Count the words in a text."""
        calls.append(("word_count", {"text": text}))
        return len(text.split())

    return lw.ToolRegistry([add, multiply, divide, search, word_count])


@pytest.fixture
def calls() -> list[tuple[str, dict[str, object]]]:
    return []


@pytest.fixture
def registry(calls: list[tuple[str, dict[str, object]]]) -> lw.ToolRegistry:
    return make_registry(calls)


def act(name: str, args: str, thought: str = "next") -> str:
    return f"Thought: {thought}\nAction: {name}\nAction Input: {args}"


def final(answer: str, thought: str = "done") -> str:
    return f"Thought: {thought}\nFinal Answer: {answer}"


# -- run journals: SQLite and a real PostgreSQL server ------------------------------------

STORE_KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.slow)]


@pytest.fixture(scope="session")
def pg_server():
    """A PostgreSQL server of the session's own (initdb in a temporary folder, a unix
    socket there), stopped at the end. Not installed: the tests using it fail saying how
    to install it."""
    from helpers.pgserver import PostgresServer

    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture
def pg_dsn(pg_server) -> str:
    """A DSN for a fresh, empty schema on the session's server."""
    return pg_server.dsn(pg_server.new_schema())


def open_journal(kind: str, request: pytest.FixtureRequest, path) -> StoreBase:
    """A new journal of the given kind: a SQLite file at `path`, or a fresh Postgres schema."""
    if kind == "postgres":
        return lw.PostgresStore(request.getfixturevalue("pg_dsn"))
    return lw.SQLiteStore(path)
