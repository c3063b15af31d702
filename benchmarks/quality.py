"""Answer quality with the user's own tools: three tool sets that are not the demo tools.

    .venv/bin/python benchmarks/quality.py [--split heldout|dev|all] [--modes react,rewoo]
        [--configs default,whole_runs,examples_off,exclusion_off,grammar_off,state_cache_off,
                   echoes,invented,bootstrap,bootstrap_only,server_off,server_grammar,
                   grounded]
        [--sets units,inventory,facts] [--model PATH.gguf] [--questions both|single|multi]
        [--max-steps 4] [--tot 2,1,3,6] [--markdown out.md] [--show]

Each set has 21 labelled single-call questions; every third is held out (7 per set):
develop on the rest, report the held-out figures. Each set also has 9 held-out
multi-call questions, reported apart: 5 of two calls, the second using the first's
result, and a computation, and 4 of other kinds (sums of two and three values, a
difference, a date shifted across a leap day); and 7 development ones of those kinds
(`--split dev` runs those; `--split all` both). `whole_runs` declares one whole-run example per kind of
chain the dev questions show (`ToolRegistry(tools, examples=[...])`; ReAct shows the nearest
alone when it fits, `whole_runs+runs_nearest` after the single-call examples,
`whole_runs+runs_all` every one); `state_cache_off` runs the model without its
per-family state cache (answers alike, tokens evaluated differ). `--model` runs another
GGUF file (embedded, and in the server configurations). Runs the embedded model with the default prompts:
correct answers, parse errors, runs stopped by `repeated_call`, mean model calls, and
prompt tokens sent vs evaluated (after KV-cache prefix reuse; the cache is kept across a
set's questions, which share the prompt's head). Ablations, one technique off each:
`examples_off` (worked examples from the schemas only, as a registry without examples
gets), `exclusion_off` (no decode-time exclusion of a known call), `grammar_off`, and two
with no switch in the library, the old behaviour patched back in for the row: `echoes`
(examples end with the observation pasted whole: answers-not-echoes off) and `invented`
(a tool with no real value to show gets arguments made from its parameters' names: no
invented values off; it matters with `examples_off`, as `examples_off+invented`); join
configurations with `+` to switch several off. And one technique
switched on: `grounded` (`LlamaCpp(ground_numbers=True)`: a call writes only numbers the
question or an observation gave), and `held` (`LlamaCpp(hold_answer=True)`: a ReAct step
that would answer while the question names something no call has used is held to a call,
its thought saying what is left; `held+grounded` both). `--show` prints each question's answer
and calls. `--tot branching,breadth,depth,max_nodes` sets Tree-of-Thoughts' search (BFS, the
library's threshold, side effects refused) for `--modes tot`: by default 2,1,3,6, a modest
search whose model-call cap (its `max_steps`, which counts proposals and values) is what it
needs, (1 + branching) * (1 + (depth - 1) * breadth): 9 calls a question at most. And `bootstrap` (not in the
default list): `lw.bootstrap_examples` on the set's dev questions with the same model and
mode, the kept calls added before each tool's declared examples (the prompt's budget
shows a tool's first examples), then the chosen split; `bootstrap_only` the same with the
bootstrapped examples replacing the declared ones. Bootstrapping is always on the dev
split, so run these with `--split heldout`; the row's configuration says how many dev
runs were correct and how many calls were kept, and its seconds include the bootstrapping.

Through a server: `server_off` and `server_grammar` run the same model in
llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server` on 127.0.0.1,
started once, threads from $LOOPWRIGHT_N_THREADS) via `OpenAICompatible` in completion
mode, with `constrain="off"` and `constrain="grammar"` (the embedded model's step grammar
sent as the body's `grammar`). The server reports no cached prompt tokens, so its
"evaluated" equals "sent". A `server_json_schema` row would need native tool calling,
which this server cannot drive with tool_choice="auto" on this model; it is not offered.

Run with another checkout's `src` first on PYTHONPATH (for example the main branch
before tool examples) to get its baseline: the tools are declared the same way, their
examples only where `lw.tool` takes them, and configurations that checkout cannot run
are skipped.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import dataclasses
import datetime as dt
import inspect
import json
import time
from collections.abc import Callable
from typing import Any
from unittest import mock

import loopwright as lw
from loopwright.interfaces.demo_tools import evaluate, is_correct
from loopwright.prompting import templates
from loopwright.tools.results import render_observation
from served import llama_server

HAS_EXAMPLES = "examples" in inspect.signature(lw.tool).parameters


def _tool(func: Callable[..., Any], examples: list[dict[str, Any]], **options: Any) -> lw.Tool:
    if HAS_EXAMPLES:
        options["examples"] = examples
    return lw.tool(**options)(func)


# --- unit conversion and a calendar --------------------------------------------------------

_METRES = {"mm": 0.001, "cm": 0.01, "m": 1.0, "km": 1000.0, "in": 0.0254, "ft": 0.3048, "mi": 1609.344}


def convert_length(value: float, from_unit: str, to_unit: str) -> float:
    """Convert a length from one unit to another.

    Args:
        value: the length to convert
        from_unit: the unit it is given in: mm, cm, m, km, in, ft or mi
        to_unit: the unit wanted: mm, cm, m, km, in, ft or mi
    """
    if from_unit not in _METRES or to_unit not in _METRES:
        raise ValueError(f"units must be one of {', '.join(_METRES)}")
    return round(value * _METRES[from_unit] / _METRES[to_unit], 4)


def day_of_week(date: str) -> str:
    """The day of the week of a date written YYYY-MM-DD."""
    return dt.date.fromisoformat(date).strftime("%A")


def shift_date(date: str, days: int) -> str:
    """The date a number of days after (or, if negative, before) a date written YYYY-MM-DD."""
    return (dt.date.fromisoformat(date) + dt.timedelta(days=days)).isoformat()


def units_tools() -> list[lw.Tool]:
    return [
        _tool(convert_length, [{"question": "How many metres is 2 km?", "args": {"value": 2, "from_unit": "km", "to_unit": "m"}, "result": 2000.0}]),
        _tool(day_of_week, [{"question": "What day of the week was 2023-07-04?", "args": {"date": "2023-07-04"}, "result": "Tuesday"}]),
        _tool(shift_date, [{"question": "What date is 3 days after 2023-01-30?", "args": {"date": "2023-01-30", "days": 3}, "result": "2023-02-02"}]),
    ]  # fmt: skip


UNITS = [
    ("How many metres is 3 km?", "3000"),
    ("How many centimetres are in 2 m?", "200"),
    ("What day of the week was 2024-03-15?", "Friday"),
    ("What date is 10 days after 2024-02-25?", "2024-03-06"),
    ("How many feet is 3.048 m?", "10"),
    ("What day of the week was 2000-01-01?", "Saturday"),
    ("What date is 7 days before 2024-01-03?", "2023-12-27"),
    ("How many metres is 5 mi?", "8046.72"),
    ("What day of the week is 2025-12-25?", "Thursday"),
    ("How many millimetres are in 4 cm?", "40"),
    ("What date is 30 days after 2024-01-15?", "2024-02-14"),
    ("How many km is 2500 m?", "2.5"),
    ("What day of the week was 1969-07-20?", "Sunday"),
    ("What date is 1 day after 2024-02-28?", "2024-02-29"),
    ("How many inches is 0.254 m?", "10"),
    ("What day of the week was 2012-12-21?", "Friday"),
    ("What date is 100 days after 2024-01-01?", "2024-04-10"),
    ("How many metres is 12 ft?", "3.6576"),
    ("What day of the week was 1989-11-09?", "Thursday"),
    ("What date is 14 days before 2024-03-01?", "2024-02-16"),
    ("How many cm is 1 in?", "2.54"),
]

# Held-out questions that need two calls, the second using the first's result, and a
# computation (written once, never run while developing: every one is held out).
UNITS_MULTI = [
    ("What day of the week is 10 days after 2024-02-25?", "Wednesday"),
    ("What day of the week was 30 days before 2024-07-04?", "Tuesday"),
    ("What day of the week is 100 days after 2024-01-01?", "Wednesday"),
    ("What day of the week was 3 days after 2023-12-30?", "Tuesday"),
    ("What day of the week is 14 days after 2025-06-20?", "Friday"),
    # sums, a difference, a sum of three and a date (issue 38: kinds the first five lack)
    ("How many metres are 3 km and 5 mi together?", "11046.72"),
    ("How many metres longer is 1 mi than 1 km?", "609.344"),
    ("How many metres are 1 km, 1 mi and 100 ft together?", "2639.824"),
    ("What day of the week was 2 days before 2024-03-01?", "Wednesday"),
]

# Development questions of the same kind (to develop on; the held-out ones above are not).
UNITS_MULTI_DEV = [
    ("What day of the week is 5 days after 2024-04-01?", "Saturday"),
    ("What day of the week was 20 days before 2023-09-15?", "Saturday"),
    ("What day of the week is 45 days after 2025-01-10?", "Monday"),
    ("What day of the week was 2 days after 2024-12-30?", "Wednesday"),
    ("What day of the week is 60 days after 2024-03-01?", "Tuesday"),
    ("How many metres are 2 km and 3 mi together?", "6828.032"),
    ("What day of the week was 4 days before 2023-03-02?", "Sunday"),
]

# --- an inventory with lookup and update -------------------------------------------------

_START = {"bolt": 40, "nut": 120, "washer": 75, "screw": 300, "hinge": 12, "bracket": 8}


class Inventory:
    """Stock levels that restocking changes; a fresh one per question."""

    def __init__(self) -> None:
        self.levels = dict(_START)

    def tools(self) -> list[lw.Tool]:
        def stock_level(item: str) -> int:
            """How many units of an item are in stock (bolt, nut, washer, screw, hinge, bracket)."""
            if item not in self.levels:
                raise ValueError(f"unknown item {item!r}; known: {', '.join(self.levels)}")
            return self.levels[item]

        def restock(item: str, quantity: int) -> int:
            """Add units of an item to the stock; returns the new stock level."""
            if item not in self.levels:
                raise ValueError(f"unknown item {item!r}; known: {', '.join(self.levels)}")
            if quantity < 1:
                raise ValueError("quantity must be at least 1")
            self.levels[item] += quantity
            return self.levels[item]

        return [
            _tool(stock_level, [{"question": "How many gaskets are in stock?", "args": {"item": "gasket"}, "result": 17}]),
            _tool(restock, [{"question": "Add 5 gaskets to the stock. How many are there now?", "args": {"item": "gasket", "quantity": 5}, "result": 22}],
                  side_effects="write"),
        ]  # fmt: skip


INVENTORY = [
    ("How many bolts are in stock?", "40"),
    ("How many nuts are in stock?", "120"),
    ("Add 10 bolts to the stock. How many bolts are there now?", "50"),
    ("How many washers are in stock?", "75"),
    ("How many hinges are in stock?", "12"),
    ("Add 5 brackets to the stock. How many brackets are there now?", "13"),
    ("How many screws are in stock?", "300"),
    ("How many brackets are in stock?", "8"),
    ("Add 25 washers to the stock. How many washers are there now?", "100"),
    ("What is the stock level of nuts?", "120"),
    ("Restock 3 hinges. What is the new stock level?", "15"),
    ("How many units of screw are in stock?", "300"),
    ("Add 100 nuts to the stock. How many nuts are there now?", "220"),
    ("What is the stock level of bolts?", "40"),
    ("Restock 2 brackets. What is the new stock level?", "10"),
    ("How many bracket units are there?", "8"),
    ("Add 1 hinge to the stock. How many hinges are there now?", "13"),
    ("What is the stock level of washers?", "75"),
    ("Restock 50 screws. What is the new stock level?", "350"),
    ("How many hinge units are in stock?", "12"),
    ("Add 60 bolts to the stock. How many bolts are there now?", "100"),
]

INVENTORY_MULTI = [
    ("Restock bolts by as many units as there are hinges in stock. How many bolts are there now?", "52"),
    ("Add as many nuts as there are brackets in stock. How many nuts are there now?", "128"),
    ("Restock washers by the number of bolts in stock. What is the new stock level of washers?", "115"),
    ("Add as many hinges as there are brackets in stock. How many hinges are there now?", "20"),
    ("Restock brackets by the number of hinges in stock. How many brackets are there now?", "20"),
    ("How many bolts and nuts are in stock together?", "160"),
    ("How many more screws than washers are in stock?", "225"),
    ("How many hinges, brackets and bolts are in stock in total?", "60"),
    ("Restock nuts by 10 and bolts by 5. How many nuts and bolts are there now in total?", "175"),
]

INVENTORY_MULTI_DEV = [
    ("Restock screws by as many units as there are hinges in stock. How many screws are there now?", "312"),
    ("Add as many nuts as there are bolts in stock. How many nuts are there now?", "160"),
    ("Restock bolts by the number of washers in stock. What is the new stock level of bolts?", "115"),
    ("Add as many screws as there are brackets in stock. How many screws are there now?", "308"),
    ("Restock washers by the number of hinges in stock. How many washers are there now?", "87"),
    ("How many washers and hinges are in stock together?", "87"),
    ("How many more nuts than brackets are in stock?", "112"),
]

# --- facts and arithmetic, other names and docstrings ------------------------------------

_FACTS = {
    "mars": "Mars has 2 moons and is the fourth planet from the Sun.",
    "jupiter": "Jupiter has 95 known moons and is the largest planet.",
    "earth": "Earth has 1 moon and is the third planet from the Sun.",
    "carbon": "Carbon has atomic number 6.",
    "oxygen": "Oxygen has atomic number 8.",
    "iron": "Iron has atomic number 26.",
    "gold": "Gold has atomic number 79.",
    "nile": "The Nile is about 6650 km long.",
    "amazon": "The Amazon is about 6400 km long.",
    "everest": "Mount Everest is 8849 m high.",
    "k2": "K2 is 8611 m high.",
}


def encyclopedia(topic: str) -> str:
    """Read the encyclopedia entry for a topic: a planet, a chemical element, a river or a mountain."""
    words = topic.lower().replace("mount ", "").split()
    for word in words:
        if word.strip("?.,") in _FACTS:
            return _FACTS[word.strip("?.,")]
    return f"No entry for {topic!r}. Entries: {', '.join(sorted(_FACTS))}."


def compute(formula: str) -> int | float:
    """Work out the value of a formula with numbers and + - * / ( )."""
    return evaluate(formula)


def facts_tools() -> list[lw.Tool]:
    return [
        _tool(encyclopedia, [{"question": "How long is the Danube?", "args": {"topic": "Danube"}, "result": "The Danube is about 2850 km long."}]),
        _tool(compute, [{"question": "What is 25 * 4?", "args": {"formula": "25 * 4"}, "result": 100}]),
    ]  # fmt: skip


FACTS = [
    ("How many moons does Mars have?", "2"),
    ("What is 45 * 3?", "135"),
    ("What is the atomic number of carbon?", "6"),
    ("How long is the Nile in km?", "6650"),
    ("What is 1200 / 4?", "300"),
    ("How high is Mount Everest in metres?", "8849"),
    ("What is the atomic number of gold?", "79"),
    ("What is 17 + 26?", "43"),
    ("How many moons does Jupiter have?", "95"),
    ("What is the atomic number of iron?", "26"),
    ("What is 99 - 45?", "54"),
    ("How high is K2 in metres?", "8611"),
    ("How long is the Amazon in km?", "6400"),
    ("What is 12 * 12?", "144"),
    ("What is the atomic number of oxygen?", "8"),
    ("How many moons does Earth have?", "1"),
    ("What is 7 * 8 + 4?", "60"),
    ("What is 1000 - 385?", "615"),
    ("What is 360 / 12?", "30"),
    ("What is 2 * (3 + 4)?", "14"),
    ("What is 81 / 9?", "9"),
]

FACTS_MULTI = [
    ("What is the atomic number of iron times 3?", "78"),
    ("How many moons does Jupiter have, minus 5?", "90"),
    ("How high is K2 in metres, divided by 1000?", "8.611"),
    ("What is the atomic number of gold plus 21?", "100"),
    ("How long is the Amazon in km, times 2?", "12800"),
    ("How much higher is Mount Everest than K2, in metres?", "238"),
    ("How much longer is the Nile than the Amazon, in km?", "250"),
    ("What is the sum of the atomic numbers of carbon, oxygen and iron?", "40"),
    ("How many moons do Mars, Earth and Jupiter have in total?", "98"),
]

FACTS_MULTI_DEV = [
    ("What is the atomic number of oxygen times 5?", "40"),
    ("How many moons does Mars have, plus 10?", "12"),
    ("How long is the Nile in km, divided by 2?", "3325"),
    ("How high is Mount Everest in metres, minus 849?", "8000"),
    ("What is the atomic number of carbon plus 14?", "20"),
    ("How many moons do Earth and Mars have in total?", "3"),
    ("What is the atomic number of gold minus that of oxygen?", "71"),
]

Questions = list[tuple[str, str]]
# per set: its tools, single-call questions (split by `split`), held-out multi-call
# questions, development multi-call questions
SETS: dict[str, tuple[Callable[[], list[lw.Tool]] | None, Questions, Questions, Questions]] = {
    "units": (units_tools, UNITS, UNITS_MULTI, UNITS_MULTI_DEV),
    "inventory": (None, INVENTORY, INVENTORY_MULTI, INVENTORY_MULTI_DEV),  # a fresh inventory per question
    "facts": (facts_tools, FACTS, FACTS_MULTI, FACTS_MULTI_DEV),
}

# Whole-run examples per set (the `whole_runs` configuration): one run per kind of chain the
# development questions show, each using a result in the next call and answering the
# question, with the single-call examples' own values (2023-01-30, gaskets, the Danube).
# A run shows with a question only when it is the example nearest it (loopwright/prompting/nearest_run.py).
def _facts_run(word: str, formula: str, value: int) -> dict[str, Any]:
    return {"question": f"How long is the Danube, {word}?",
            "calls": [{"tool": "encyclopedia", "args": {"topic": "Danube"}, "result": "The Danube is about 2850 km long."},
                      {"tool": "compute", "args": {"formula": formula}, "result": value}],
            "answer": str(value)}  # fmt: skip


def _stock_run(question: str) -> dict[str, Any]:
    return {"question": question,
            "calls": [{"tool": "stock_level", "args": {"item": "flange"}, "result": 6},
                      {"tool": "restock", "args": {"item": "gasket", "quantity": 6}, "result": 23}],
            "answer": "23"}  # fmt: skip


WHOLE_RUNS: dict[str, list[dict[str, Any]]] = {
    "units": [{"question": "What day of the week is 3 days after 2023-01-30?",
               "calls": [{"tool": "shift_date", "args": {"date": "2023-01-30", "days": 3}, "result": "2023-02-02"},
                         {"tool": "day_of_week", "args": {"date": "2023-02-02"}, "result": "Thursday"}],
               "answer": "Thursday"},
              {"question": "What day of the week was 3 days before 2023-01-30?",
               "calls": [{"tool": "shift_date", "args": {"date": "2023-01-30", "days": -3}, "result": "2023-01-27"},
                         {"tool": "day_of_week", "args": {"date": "2023-01-27"}, "result": "Friday"}],
               "answer": "Friday"}],
    "inventory": [_stock_run("Add as many gaskets as there are flanges in stock. How many gaskets are there now?"),
                  _stock_run("Restock gaskets by the number of flanges in stock. How many gaskets are there now?")],
    "facts": [_facts_run("times 3", "2850 * 3", 8550), _facts_run("plus 150", "2850 + 150", 3000),
              _facts_run("minus 850", "2850 - 850", 2000), _facts_run("divided by 2", "2850 / 2", 1425)],
}  # fmt: skip


def split(questions: list[tuple[str, str]], which: str) -> list[tuple[str, str]]:
    if which == "all":
        return questions
    held = [q for i, q in enumerate(questions) if i % 3 == 2]
    return held if which == "heldout" else [q for i, q in enumerate(questions) if i % 3 != 2]


SERVER_CONFIGS = {"server_off": "off", "server_grammar": "grammar"}
_SERVER: list[str] = []


def server_url() -> str:
    """llama-cpp-python's server on the embedded model, started on first use and
    stopped when this script exits."""
    if not _SERVER:
        from loopwright.models.llamacpp import default_threads

        stack = contextlib.ExitStack()
        _SERVER.append(stack.enter_context(llama_server(default_threads(), *MODEL_PATH)))
        atexit.register(stack.close)
    return _SERVER[0]


MODEL_PATH: list[str] = []  # --model PATH.gguf
SHOW: list[bool] = []  # --show: each question's answer and calls


def make_model(config: str) -> Any | None:
    if config in SERVER_CONFIGS:
        if "constrain" not in inspect.signature(lw.models.OpenAICompatible).parameters:
            return None
        return lw.models.OpenAICompatible(server_url(), "smollm2", constrain=SERVER_CONFIGS[config],
                                          timeout_s=600, max_retries=0)
    options: dict[str, Any] = {}
    parts = config.split("+")  # "examples_off+exclusion_off": two techniques off at once
    if "grammar_off" in parts:
        options["grammar"] = False
    if "exclusion_off" in parts:
        if "exclude_known" not in inspect.signature(lw.models.LlamaCpp).parameters:
            return None
        options["exclude_known"] = False
    if "grounded" in parts:
        if "ground_numbers" not in inspect.signature(lw.models.LlamaCpp).parameters:
            return None
        options["ground_numbers"] = True
    if "held" in parts:
        if "hold_answer" not in inspect.signature(lw.models.LlamaCpp).parameters:
            return None
        options["hold_answer"] = True
    if "state_cache_off" in parts:
        if "state_cache_bytes" not in inspect.signature(lw.models.LlamaCpp).parameters:
            return None
        options["state_cache_bytes"] = 0
    return lw.models.LlamaCpp(MODEL_PATH[0] if MODEL_PATH else None, **options)


def prompts_for(config: str) -> Any | None:
    for how in ("nearest", "all"):  # whole_runs+runs_nearest: the chosen run after the single-call examples
        if f"runs_{how}" in config.split("+"):
            return dataclasses.replace(templates.DEFAULT_PROMPTS, run_examples=how)
    if "examples_off" not in config.split("+"):  # the server configurations use the default prompts
        return templates.DEFAULT_PROMPTS
    if not hasattr(templates.DEFAULT_PROMPTS, "tool_examples"):
        return None
    return dataclasses.replace(templates.DEFAULT_PROMPTS, tool_examples=False)


def _invented_args(parameters: dict[str, Any]) -> dict[str, Any]:
    """Before issue 26: arguments made from each parameter's name and type ("topic" for
    `topic: str`) when the schema writes no value down."""
    made: dict[str, Any] = {"integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}
    props = parameters.get("properties") or {}
    return {k: made.get(props[k].get("type"), k) for k in parameters.get("required") or () if k in props}


def _echo(question: str, result: Any) -> str:
    """Before issue 26: the example's answer is the observation pasted whole."""
    return " ".join(render_observation(result, 300).split())


# Techniques with no switch in the library, switched off in this process for one row:
# the old behaviour patched back in while the row runs.
PATCHES: dict[str, tuple[str, Any]] = {
    "invented": ("loopwright.tools.examples.synthesise_args", _invented_args),  # "no invented values" off
    "echoes": ("loopwright.prompting.examples.short_answer", _echo),  # "answers, not echoes" off
}


def bootstrapped(name: str, model: Any, mode: str, max_steps: int, prompts: Any) -> tuple[Any, str]:
    """Examples bootstrapped on the set's dev questions (never the held-out ones), and a
    note of how many dev runs were correct and how many calls were kept."""
    factory, questions, _multi, _multi_dev = SETS[name]

    def fresh() -> lw.ToolRegistry:
        return lw.ToolRegistry(factory() if factory is not None else Inventory().tools())

    result = lw.bootstrap_examples(split(questions, "dev"), model, fresh, mode=mode, max_steps=max_steps,
                                   prompts=prompts)
    return result, f"dev {result.tasks_correct}/{result.tasks_run} correct, {result.kept} kept"


TOT: list[tuple[int, int, int, int]] = []  # --tot branching,breadth,depth,max_nodes


def tot_options() -> dict[str, Any]:
    """lw.run's options for a ToT row: the search's settings and its model-call cap."""
    branching, breadth, depth, max_nodes = TOT[0] if TOT else (2, 1, 3, 6)
    settings = lw.ToTSettings(branching=branching, breadth=breadth, depth=depth, max_nodes=max_nodes)
    return {"settings": settings, "max_steps": (1 + branching) * (1 + (depth - 1) * breadth)}


def run_row(name: str, mode: str, config: str, which: str, max_steps: int,
            questions_kind: str = "both") -> dict[str, Any] | None:
    if config.startswith("bootstrap") and not hasattr(lw, "bootstrap_examples"):
        return None
    if "whole_runs" in config.split("+") and "examples" not in inspect.signature(lw.ToolRegistry).parameters:
        return None
    model, prompts = make_model(config), prompts_for(config)
    if model is None or prompts is None:
        return None
    row = {"set": name, "mode": mode, "config": config, "n": 0, "correct": 0, "multi_n": 0, "multi_correct": 0,
           "parse_errors": 0, "repeat_stops": 0, "nudges": 0, "calls": 0, "sent": 0, "evaluated": 0,
           "seconds": 0.0}  # fmt: skip
    started = time.perf_counter()
    patches = contextlib.ExitStack()
    for part in config.split("+"):
        if part in PATCHES:
            patches.enter_context(mock.patch(*PATCHES[part]))
    with patches:
        _run_questions(row, name, mode, config, which, max_steps, questions_kind, model, prompts)
    row["seconds"] = time.perf_counter() - started
    if hasattr(model, "close"):
        model.close()
    return row


def _run_questions(row: dict[str, Any], name: str, mode: str, config: str, which: str, max_steps: int,
                   questions_kind: str, model: Any, prompts: Any) -> None:
    factory, questions, multi_held, multi_dev = SETS[name]
    multi = {"heldout": multi_held, "dev": multi_dev, "all": multi_dev + multi_held}[which]
    examples = None
    if config.startswith("bootstrap"):
        examples, note = bootstrapped(name, model, mode, max_steps, prompts)
        how = "replacing the declared examples" if config == "bootstrap_only" else "before the declared examples"
        row["config"] = f"{config} ({how}; {note})"
    runs = WHOLE_RUNS[name] if "whole_runs" in config.split("+") else None
    held = [(q, a, False) for q, a in split(questions, which)] if questions_kind != "multi" else []
    held += [(q, a, True) for q, a in multi] if questions_kind != "single" else []
    for question, expected, needs_two in held:
        tools = factory() if factory is not None else Inventory().tools()
        registry = lw.ToolRegistry(tools, examples=runs) if runs is not None else lw.ToolRegistry(tools)
        if examples is not None:
            registry = examples.apply(registry, placement="replace" if config == "bootstrap_only" else "first")
        options: dict[str, Any] = tot_options() if mode == "tot" else {"max_steps": max_steps}
        trace = lw.run(question, model, registry, mode=mode, prompts=prompts, **options)
        prefix = "multi_" if needs_two else ""
        if SHOW:
            calls = "; ".join(f"{s.tool}{json.dumps(s.args)}->{(s.observation or s.error or '')[:50]!r}"
                              for s in trace.steps if s.tool is not None)
            ok = is_correct(trace.final_answer, expected)
            print(f"  {'+' if ok else '-'} {question} [{expected}] => {trace.final_answer!r}{_shown_run(registry, question, prompts)}"
                  f" | {calls}", flush=True)
        row[prefix + "n"] += 1
        row[prefix + "correct"] += is_correct(trace.final_answer, expected)
        row["parse_errors"] += sum(s.kind == "parse_error" for s in trace.steps)
        row["repeat_stops"] += trace.stopped_reason == "repeated_call"
        row["nudges"] += sum(s.kind == "nudge" for s in trace.steps)  # identical calls proposed again
        row["calls"] += trace.llm_calls
        row["sent"] += trace.usage.prompt_tokens
        row["evaluated"] += trace.usage.evaluated_tokens


def _shown_run(registry: lw.ToolRegistry, question: str, prompts: Any) -> str:
    """For --show: the question of the whole-run example the prompt showed, if any."""
    try:
        from loopwright.prompting.nearest_run import chosen_blocks
    except ImportError:  # a checkout before the nearest run
        return ""
    blocks = chosen_blocks(registry, question, prompts, "json")
    return "".join(f" [run: {b.splitlines()[1].removeprefix('Question: ')}]" for b in blocks)


def table(rows: list[dict[str, Any]], label: str) -> str:
    lines = [
        f"| tool set | mode | configuration ({label}) | single-call correct | multi-call correct | parse errors | repeats nudged | repeated_call stops | mean model calls | tokens sent | evaluated |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['set']} | {r['mode']} | {r['config']} | {r['correct']}/{r['n']} | "
            f"{r['multi_correct']}/{r['multi_n']} | {r['parse_errors']} | {r.get('nudges', 0)} | {r['repeat_stops']} | "
            f"{r['calls'] / max(r['n'] + r['multi_n'], 1):.1f} | {r['sent']} | {r['evaluated']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="heldout", choices=("heldout", "dev", "all"))
    parser.add_argument("--modes", default="react,rewoo")
    parser.add_argument("--configs", default="default,whole_runs,examples_off,exclusion_off,grammar_off,state_cache_off")
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--tot", default="2,1,3,6",
                        help="Tree-of-Thoughts' branching,breadth,depth,max_nodes (--modes tot)")
    parser.add_argument("--label", default="this checkout")
    parser.add_argument("--markdown", help="also write the table here")
    parser.add_argument("--model", help="a GGUF file to run instead of the embedded default model")
    parser.add_argument("--questions", default="both", choices=("both", "single", "multi"),
                        help="single-call questions, multi-call ones, or both")
    parser.add_argument("--show", action="store_true", help="print each question's answer and calls")
    args = parser.parse_args()
    if args.model:
        MODEL_PATH.append(args.model)
    if args.show:
        SHOW.append(True)
    branching, breadth, depth, max_nodes = (int(v) for v in args.tot.split(","))
    TOT.append((branching, breadth, depth, max_nodes))
    rows = []
    for config in args.configs.split(","):
        for mode in args.modes.split(","):
            for name in args.sets.split(","):
                row = run_row(name, mode, config, args.split, args.max_steps, args.questions)
                if row is not None:
                    rows.append(row)
                    print(table([row], args.label).splitlines()[-1] + f" {row['seconds']:.0f}s", flush=True)
    text = table(rows, f"{args.label}, {args.split}")
    print(text)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as out:
            out.write(text + "\n")


if __name__ == "__main__":
    main()
