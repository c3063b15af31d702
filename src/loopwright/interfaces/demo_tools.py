"""The built-in demo tools `loopwright run` uses when no --tools are given.

`lookup` answers from a small bundled table of facts (cities, countries, landmarks,
dates, people) in loopwright/data/facts.json; `calculate` evaluates arithmetic by
walking the expression's syntax tree: numbers, + - * / // % **, parentheses and a few
functions, and nothing else (no names, no calls to anything else, never eval).
"""

from __future__ import annotations

import ast
import json
import math
import operator
import re
from collections.abc import Callable, Mapping
from functools import cache
from importlib import resources
from typing import Any, Final

from loopwright.batch.evaluation import is_correct
from loopwright.tools.registry import Tool, ToolRegistry, tool

__all__ = ["DEMO_TASKS", "DEMO_TOOLS", "calculate", "demo_registry", "evaluate", "is_correct", "lookup"]

MAX_EXPRESSION_CHARS: Final = 300
MAX_EXPONENT: Final = 1000
MAX_MAGNITUDE: Final = 1e300
_STOPWORDS: Final = frozenset(
    "a an and the of in on at to is was are were what whats which who whom how many much "
    "does do did for by from with about tell me please find look up fact facts".split()
)
_BINARY: Final[Mapping[type[ast.operator], Callable[[Any, Any], Any]]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: Final[Mapping[type[ast.unaryop], Callable[[Any], Any]]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCTIONS: Final[Mapping[str, Callable[..., Any]]] = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
}


@cache
def _facts() -> dict[str, Any]:
    text = resources.files("loopwright.interfaces").joinpath("data/facts.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def find_facts(query: str) -> list[str]:
    """The facts the table holds for `query`: for each subject named in it (longest
    alias first), the fact for the attribute the query asks about, or all its facts."""
    data = _facts()
    words = _words(query)
    text = " " + " ".join(words) + " "
    found: list[tuple[int, dict[str, Any]]] = []
    for subject in data["subjects"]:
        aliases = sorted(subject["aliases"], key=len, reverse=True)
        for alias in aliases:
            at = text.find(" " + alias + " ")
            if at >= 0:
                found.append((at, subject))
                break
    # "berlin wall" also contains "berlin": keep only subjects not inside a longer match.
    names = {s["name"].lower() for _, s in found}
    found = [
        (at, s)
        for at, s in found
        if not any(s["name"].lower() in other and s["name"].lower() != other for other in names)
    ]
    found.sort(key=lambda pair: pair[0])
    wanted = set(words) - _STOPWORDS
    out: list[str] = []
    for _, subject in found[:3]:
        facts: dict[str, str] = subject["facts"]
        scores = {
            attr: len(wanted & set(synonyms))
            for attr, synonyms in data["attributes"].items()
            if attr in facts
        }
        best = max(scores, key=lambda attr: scores[attr], default=None)
        out.extend([facts[best]] if best is not None and scores[best] else list(facts.values()))
    return out


# The demo tools declare their worked examples like any user's tools: the default
# prompts are built from them (the shared question makes a two-step example).
_TIMES_THREE = "What is the population of Rome times 3?"


@tool(
    examples=[
        {"question": "What is the capital of Italy?", "args": {"query": "capital of Italy"},
         "result": "The capital of Italy is Rome."},
        {"question": "When was Ada Lovelace born?", "args": {"query": "Ada Lovelace born"},
         "result": "Ada Lovelace was born in 1815."},
        {"question": _TIMES_THREE, "args": {"query": "population of Rome"},
         "result": "The population of Rome is about 2800000."},
    ]
)
def lookup(query: str) -> str:
    """Look up a fact about a city, country, landmark, event or person, e.g. "population of Paris"."""
    facts = find_facts(query)
    if facts:
        return " ".join(facts)
    # A miss is a failure, not a result: the model reads it as an ERROR observation, and
    # plan-execute replans instead of answering with it.
    known = ", ".join(s["name"] for s in _facts()["subjects"])
    raise LookupError(f"no fact found for {query!r}; known subjects: {known}")


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression, computed from its syntax tree.

    Accepts numbers (thousands separators and `x`/`×`/`÷`/`^` are read as written by
    people), + - * / // % **, parentheses, abs, round, min, max, sqrt. Raises ValueError
    saying what is not allowed for anything else, and for results too large to be useful.
    """
    if not isinstance(expression, str):
        raise ValueError(f"expected an expression string, got {type(expression).__name__}")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", expression.strip().rstrip("=").strip())
    text = text.replace("×", "*").replace("÷", "/").replace("^", "**")
    text = re.sub(r"(?<=[\d)\s])[xX](?=[\s\d(])", "*", text)
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ValueError(
            f"not an arithmetic expression: {expression!r} ({exc.msg}); "
            "use numbers and + - * / ** ( ), e.g. 17 * 23"
        ) from None
    value = _eval_node(tree.body)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def _eval_node(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ValueError(f"only numbers are allowed, got {node.value!r}")
        value: int | float = node.value
        return value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval_node(node.left), _eval_node(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError(f"exponent {right} is larger than {MAX_EXPONENT}")
        try:
            result = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ValueError("division by zero") from None
        except OverflowError:
            raise ValueError("result too large") from None
        if not isinstance(result, (int, float)) or abs(result) > MAX_MAGNITUDE:
            raise ValueError("result too large or not a real number")
        return result
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        operand: int | float = _UNARY[type(node.op)](_eval_node(node.operand))
        return operand
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        args = [_eval_node(a) for a in node.args]
        try:
            out = _FUNCTIONS[node.func.id](*args)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{node.func.id}: {exc}") from None
        if not isinstance(out, (int, float)):
            raise ValueError(f"{node.func.id} gave {out!r}, not a number")
        return out
    allowed = "numbers, + - * / // % **, parentheses, " + ", ".join(_FUNCTIONS)
    raise ValueError(f"{type(node).__name__} is not allowed in an expression; allowed: {allowed}")


@tool(
    examples=[
        {"question": "What is 12 * 34?", "args": {"expression": "12 * 34"}, "result": 408},
        {"question": "What is 100 - 58?", "args": {"expression": "100 - 58"}, "result": 42},
        {"question": _TIMES_THREE, "args": {"expression": "2800000 * 3"}, "result": 8400000},
    ]
)
def calculate(expression: str) -> int | float:
    """Evaluate an arithmetic expression such as "17 * 23" or "(2 + 3) ** 2"."""
    return evaluate(expression)


# calculate is listed first: otherwise the small model reaches for lookup even on
# arithmetic (measured on DEMO_TASKS: 12 vs 11 of 20, and more with the worded examples).
DEMO_TOOLS: Final[tuple[Tool, ...]] = (calculate, lookup)


def demo_registry() -> ToolRegistry:
    """A registry holding the demo tools."""
    return ToolRegistry(list(DEMO_TOOLS))


DEMO_TASKS: Final[tuple[tuple[str, str], ...]] = (
    ("What is 17 * 23?", "391"),
    ("What is 144 / 12?", "12"),
    ("What is 2 ** 10?", "1024"),
    ("How many hours are in 365 days?", "8760"),
    ("What is 1000 - 1?", "999"),
    ("What is the capital of Japan?", "Tokyo"),
    ("What is the capital of Australia?", "Canberra"),
    ("What is the capital of Germany?", "Berlin"),
    ("When was Alan Turing born?", "1912"),
    ("When was Marie Curie born?", "1867"),
    ("In which year was the Eiffel Tower completed?", "1889"),
    ("When did the Berlin Wall fall?", "1989"),
    ("How tall is Mount Everest in metres?", "8849"),
    ("What is the population of Berlin?", "3700000"),
    ("What is the population of Paris doubled?", "4200000"),
    ("How many years after Ada Lovelace was Alan Turing born?", "97"),
    ("What is the population of Lyon plus the population of Nice?", "860000"),
    ("In which year did Isaac Newton die?", "1727"),
    ("What is 15% of 80?", "12"),
    ("How old was Albert Einstein when he died?", "76"),
)
"""A fixed set of 20 tasks the demo tools can answer, with the expected answer: for the
benchmark's success rate and the real-model tests."""
