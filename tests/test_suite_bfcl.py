"""BFCL multi-turn replay: BFCL's own classes and ground truth through `lw.run` with the
default options, each call's result and each turn's state equal to BFCL's own executor.

Data and code come from the PyPI package bfcl-eval (its wheel, fetched at install time by
scripts/test_deps.sh into $LOOPWRIGHT_CACHE/bfcl; read here as a zip with zipimport, never
installed: the multi-turn classes and BFCL's executor need only the standard library and
mpmath, a dev dependency). For every case of the four multi-turn categories (base,
long_context, miss_param, miss_func: 800 cases), turn by turn:

- BFCL's side: `execute_multi_turn_func_call` (BFCL's executor, as its checker calls it)
  runs the turn's ground truth on one set of class instances.
- loopwright's side: each involved class's methods become tools through
  `lw.Tool.from_schema` with BFCL's function documents (less the case's excluded functions,
  and with miss_func's withheld functions outside `tools=` until their turn, as BFCL shows
  them to a model), bound to a second set of instances; a scripted model writes the same
  calls as ReAct steps, then a final answer; `lw.run(question, model, registry)` with no
  other option.
- Compared: every call's result as BFCL renders it, and the instances' state after the turn
  (BFCL's `state_checker`).

The scripted model runs twice: as `lw.ScriptedPolicy`, which reports no context window (so
`tool_search="auto"` shows every tool), and reporting the embedded model's 2,048-token
window, so that "auto" turns search on for most cases and the calls reach tools that search
did not load. One base case is known not to replay: its ground truth passes a string where
the function's own document declares an integer, which loopwright's strict validation
rejects before the call (BFCL's executor runs it and gets the function's own error); the
state after it is the same on both sides.
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import json
import os
import re
import sys
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import loopwright as lw

BFCL_VERSION = "2026.3.23"  # scripts/test_deps.sh fetches this wheel
CACHE = Path(os.environ.get("LOOPWRIGHT_CACHE") or Path.home() / ".cache" / "loopwright") / "bfcl"
WHEEL = CACHE / f"bfcl_eval-{BFCL_VERSION}-py3-none-any.whl"
CATEGORIES = ("base", "long_context", "miss_param", "miss_func")
MULTI_TURN_CLASSES = ("GorillaFileSystem", "MathAPI", "MessageAPI", "TwitterAPI", "TicketAPI", "TradingBot",
                      "TravelAPI", "VehicleControlAPI")  # the classes the four categories involve
EMBEDDED_WINDOW = 2048  # lw.models.LlamaCpp's default n_ctx
DEFAULT_MAX_STEPS = lw.RunSpec("").run_limits().max_steps  # ReAct's default
REFUSED_TICKET = "invalid args: 'ticket_id' must be an integer, got 'ticket_001'"
KNOWN = {
    **{f"multi_turn_{c}_173": (4 if c.startswith("miss") else 3, "close_ticket", REFUSED_TICKET) for c in CATEGORIES},
    "multi_turn_miss_func_49": (1, "tail", "unknown tool 'tail'"),
}
"""Cases whose ground truth breaks the case's own documents: (turn, function, loopwright's
error). close_ticket's document declares `ticket_id` an integer, and these cases' tickets
have string ids, so the strict validation refuses the call (BFCL's executor runs it and
closes the ticket); miss_func_49 withholds `tail` until turn 3 and calls it at turn 1, where
it is outside `tools=`. The two sides part there: the case is compared up to that call."""


@dataclass
class Bfcl:
    """What the test uses of the wheel: its data, BFCL's executor and state checker."""

    zip: zipfile.ZipFile
    execute: Callable[..., tuple[list[str], dict[str, Any]]]
    state_checker: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]
    executor_globals: dict[str, Any]
    class_modules: dict[str, str]
    doc_files: dict[str, str]
    stateless: list[str]

    def lines(self, name: str) -> list[dict[str, Any]]:
        text = self.zip.read(f"bfcl_eval/data/{name}").decode()
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def docs(self, class_name: str) -> list[dict[str, Any]]:
        return self.lines(f"multi_turn_func_doc/{self.doc_files[class_name]}")


@pytest.fixture(scope="module")
def bfcl() -> Iterator[Bfcl]:
    if not WHEEL.is_file():
        pytest.fail(f"the bfcl-eval {BFCL_VERSION} wheel is not at {WHEEL}: run scripts/test_deps.sh "
                    "(scripts/install.sh --dev runs it), which fetches it once")
    sys.path.insert(0, str(WHEEL))  # zipimport: the package's modules straight from the wheel
    try:
        config: ModuleType = importlib.import_module("bfcl_eval.constants.executable_backend_config")
        utils = importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils")
        checker = importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker")
        yield Bfcl(zipfile.ZipFile(WHEEL), utils.execute_multi_turn_func_call, checker.state_checker,
                   vars(utils), config.CLASS_FILE_PATH_MAPPING, config.MULTI_TURN_FUNC_DOC_FILE_MAPPING,
                   config.STATELESS_CLASSES)
    finally:
        sys.path.remove(str(WHEEL))


def bfcl_rendering(value: Any) -> str:
    """A result as BFCL's executor renders it (what its checker compares)."""
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except TypeError:
            return str(value)
    return str(value)


def parse_call(text: str, method: Callable[[str], Any]) -> tuple[str, dict[str, Any]]:
    """A ground-truth call string, `cd(folder='document')` or `sort('a.pdf')`, as a name and
    keyword arguments (positional ones named from the method's signature). Literals only."""
    node = ast.parse(text, mode="eval").body
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name), text
    name = node.func.id
    params = list(inspect.signature(method(name)).parameters)
    args = {params[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    args.update({k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None})
    return name, args


def react_step(name: str, args: dict[str, Any]) -> str:
    return f"Thought: I call {name}.\nAction: {name}\nAction Input: {json.dumps(args)}"


class Windowed(lw.ScriptedPolicy):
    """The scripted model, reporting a context window as the embedded model does."""

    context_window = EMBEDDED_WINDOW


class Toolbox:
    """loopwright's side: BFCL's functions as tools, made once from the documents (checking
    a JSON Schema costs more than replaying a case) and bound to the case being replayed:
    each tool calls its method on `instances`, the current case's own set, and records the
    result as BFCL renders it when the method returns (a later call may change a returned
    dict). One registry per set of classes and excluded functions, so a run's tool index
    is built once for it, as for a user's registry."""

    def __init__(self, b: Bfcl) -> None:
        self.b = b
        self.instances: dict[str, Any] = {}
        self.results: list[str] = []
        self.tools = {c: [self._tool(c, doc) for doc in b.docs(c)] for c in MULTI_TURN_CLASSES}
        self._registries: dict[tuple[tuple[str, ...], frozenset[str]], lw.ToolRegistry] = {}

    def _tool(self, class_name: str, doc: dict[str, Any]) -> lw.Tool:
        name = doc["name"]

        def call(**kwargs: Any) -> Any:
            value = getattr(self.instances[class_name], name)(**kwargs)
            self.results.append(bfcl_rendering(value))
            return value

        return lw.Tool.from_schema(name, doc["description"], doc["parameters"], call)

    def bind(self, entry: dict[str, Any], long_context: bool) -> lw.ToolRegistry:
        """New instances for the case (its initial state), and its tools as a registry."""
        self.instances = {}
        for class_name in entry["involved_classes"]:
            instance = getattr(importlib.import_module(self.b.class_modules[class_name]), class_name)()
            if class_name not in self.b.stateless:
                instance._load_scenario(copy.deepcopy(entry["initial_config"].get(class_name, {})),
                                        long_context=long_context)
            self.instances[class_name] = instance
        key = (tuple(entry["involved_classes"]), frozenset(entry.get("excluded_function", [])))
        if key not in self._registries:
            self._registries[key] = lw.ToolRegistry(
                [t for c in key[0] for t in self.tools[c] if t.name not in key[1]])
        return self._registries[key]

    def method(self, name: str) -> Any:
        """The bound method a ground-truth call names (for its parameters' names)."""
        return next(getattr(i, name) for i in self.instances.values() if hasattr(i, name))


def withheld(entry: dict[str, Any], turn: int) -> set[str]:
    """miss_func: the functions BFCL does not show a model before their turn."""
    missed = entry.get("missed_function") or {}
    return {name for at, names in missed.items() if int(at) > turn for name in names}


def replay(b: Bfcl, box: Toolbox, category: str, entry: dict[str, Any], truth: list[list[str]],
           policy: type, executor_name: str) -> tuple[list[str], int]:
    """Replay one case turn by turn: what differed from BFCL's executor (empty: nothing), and
    how many calls loaded a tool that tool search had not loaded."""
    long_context = category == "long_context"
    registry = box.bind(entry, long_context)
    problems: list[str] = []
    loaded_by_call = 0
    question = ""
    for turn, calls in enumerate(truth):
        expected, theirs = b.execute(calls, entry["initial_config"], entry["involved_classes"], executor_name,
                                     entry["id"], long_context=long_context)
        messages = entry["question"][turn] if turn < len(entry["question"]) else []
        # a miss_func turn that only reveals the withheld functions has no message: the question goes on
        question = "\n".join(m["content"] for m in messages if m["role"] == "user") or question
        script = [react_step(*parse_call(c, box.method)) for c in calls] + ["Final Answer: done"]
        hidden = withheld(entry, turn)
        scope = None if not hidden else [n for n in registry.names if n not in hidden]
        # the one option set where a default cannot hold a turn: 34 calls need 35 model calls
        more = {"max_steps": len(calls) + 1} if len(calls) >= DEFAULT_MAX_STEPS else {}
        box.results.clear()
        trace = lw.run(question, policy(script), registry, tools=scope, **more)
        where = f"{entry['id']} turn {turn}"
        actions = [s for s in trace.steps if s.kind == "action"]
        loaded_by_call += sum(bool(s.meta.get("tools_loaded")) for s in actions)
        known = KNOWN.get(entry["id"])
        if known is not None and known[0] == turn:
            refused = [s for s in actions if s.tool == known[1]]
            assert refused and (refused[0].error or "").startswith(known[2]), (where, refused)
            break  # the two sides part here (see KNOWN)
        errors = [s.error for s in actions if s.error]
        if trace.stopped_reason != "final" or errors or len(actions) != len(calls):
            problems.append(f"{where}: stopped {trace.stopped_reason}, {len(actions)} of {len(calls)} calls, "
                            f"errors {errors[:2]}")
            break
        if box.results != expected:
            problems.append(f"{where}: results differ: {box.results} != {expected}")
            break
        state = b.state_checker(box.instances, theirs)
        if not state["valid"]:
            problems.append(f"{where}: {state['error_message']} {state['details']['differences']}")
            break
    prefix = re.sub(r"[-./:]", "_", f"{executor_name}_{entry['id']}_")
    for name in [n for n in b.executor_globals if n.startswith(prefix)]:  # the executor's instances
        del b.executor_globals[name]
    return problems, loaded_by_call


@pytest.fixture(scope="module")
def toolbox(bfcl: Bfcl) -> Toolbox:
    return Toolbox(bfcl)


@pytest.mark.parametrize("policy", [lw.ScriptedPolicy, Windowed], ids=["no-window", "embedded-window"])
@pytest.mark.parametrize("category", CATEGORIES)
def test_every_bfcl_multi_turn_case_replays_through_run_with_default_options(
    bfcl: Bfcl, toolbox: Toolbox, category: str, policy: type
) -> None:
    entries = bfcl.lines(f"BFCL_v4_multi_turn_{category}.json")
    truth = {a["id"]: a["ground_truth"] for a in bfcl.lines(f"possible_answer/BFCL_v4_multi_turn_{category}.json")}
    assert len(entries) == 200 and truth.keys() == {e["id"] for e in entries}
    executor_name = f"loopwright_{policy.__name__}"
    problems: list[str] = []
    loaded_by_call = 0
    for entry in entries:
        found, loaded = replay(bfcl, toolbox, category, entry, truth[entry["id"]], policy, executor_name)
        problems += found
        loaded_by_call += loaded
    assert problems == [], f"{len(problems)} of {len(entries)} cases differ from BFCL's executor:\n" + "\n".join(
        problems[:20])
    if policy is Windowed:  # search was on, and the calls did reach tools it had not loaded
        assert loaded_by_call >= 100, loaded_by_call
    else:
        assert loaded_by_call == 0
