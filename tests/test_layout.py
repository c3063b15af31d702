"""The package's shape: imports run one way, no circles, each room named for what it holds."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import loopwright

SRC = Path(loopwright.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _import_graph() -> dict[str, set[str]]:
    """module -> the loopwright modules it imports anywhere (top level, functions,
    TYPE_CHECKING blocks), plus the packages whose __init__ those imports run."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        package = name if is_pkg else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                if not target.startswith("loopwright"):
                    continue
                while target not in modules:
                    target = target.rpartition(".")[0]
                parts = target.split(".")
                for i in range(2, len(parts) + 1):  # the module and every package above it
                    dep = ".".join(parts[:i])
                    if dep != name and not name.startswith(dep + "."):
                        graph[name].add(dep)
    graph.pop("loopwright")  # the facade imports everything; nothing inside imports it back
    for deps in graph.values():
        deps.discard("loopwright")
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_import_graph_has_no_cycles():
    graph = _import_graph()
    assert len(graph) > 30  # the walk found the package
    assert _cycles(graph) == []


def test_cycle_detection_finds_a_planted_circle():
    graph = _import_graph()
    graph["loopwright.tools.registry"].add("loopwright.durable.sqlite")
    assert any("loopwright.tools.registry" in c and "loopwright.durable.sqlite" in c for c in _cycles(graph))


# What each room may not import: the rooms above it. From the top: interfaces (and ui,
# batch), then durable and runtime (the run plumbing), then modes (the machines), then
# prompting, memory, models, tools and parsing, and the top-level records.
_ABOVE_MACHINES = ("loopwright.modes", "loopwright.runtime", "loopwright.durable", "loopwright.interfaces",
                   "loopwright.ui", "loopwright.batch", "loopwright.mcp")
_FORBIDDEN = {
    "loopwright.parsing": ("loopwright.tools", "loopwright.prompting", "loopwright.models", "loopwright.memory",
                           *_ABOVE_MACHINES),
    "loopwright.tools": ("loopwright.parsing", "loopwright.prompting", "loopwright.models", "loopwright.memory",
                         *_ABOVE_MACHINES),
    "loopwright.models": _ABOVE_MACHINES,
    "loopwright.memory": _ABOVE_MACHINES,
    "loopwright.prompting": ("loopwright.models", *_ABOVE_MACHINES),
    "loopwright.modes": _ABOVE_MACHINES[1:],  # the machines never import the plumbing that drives them
    "loopwright.runtime": ("loopwright.interfaces", "loopwright.ui", "loopwright.batch", "loopwright.mcp",
                           "loopwright.a2a"),
    "loopwright.durable": ("loopwright.interfaces", "loopwright.ui", "loopwright.batch", "loopwright.a2a"),
    "loopwright.batch": ("loopwright.interfaces", "loopwright.ui"),
    "loopwright.trace": ("loopwright.tools", "loopwright.parsing", "loopwright.prompting", *_ABOVE_MACHINES),
    "loopwright.errors": ("loopwright.tools", "loopwright.parsing", "loopwright.prompting", *_ABOVE_MACHINES),
}


def _upward(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, deps in graph.items():
        for room, forbidden in _FORBIDDEN.items():
            if module == room or module.startswith(room + "."):
                wrong += [f"{module} -> {d}" for d in deps if d.startswith(forbidden)]
    return wrong


def test_imports_run_one_way_from_interfaces_down_to_the_wire():
    assert _upward(_import_graph()) == []


def test_the_plumbing_imports_the_machines_and_never_the_reverse():
    graph = _import_graph()
    assert "loopwright.modes.react" in graph["loopwright.runtime.spec"]
    machines = [name for name in graph if name.startswith("loopwright.modes.")]
    assert len(machines) >= 6
    assert [f"{m} -> {d}" for m in machines for d in graph[m] if d.startswith("loopwright.runtime")] == []
    graph["loopwright.modes.react"].add("loopwright.runtime.context")  # a planted reach upward is caught
    assert "loopwright.modes.react -> loopwright.runtime.context" in _upward(graph)


def test_the_top_level_holds_at_most_twelve_modules():
    """Counted: every .py file directly under src/loopwright except __init__.py (the facade)
    and __main__.py (`python -m loopwright`); the rooms (subpackages) are not counted."""
    top = sorted(p.name for p in SRC.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(top) <= 12, top


def test_the_modes_room_holds_only_the_machines_and_what_they_share():
    assert sorted(p.stem for p in (SRC / "modes").glob("*.py")) == [
        "__init__", "_critique", "folding", "machine", "plan_execute", "react", "reflexion", "rewoo",
        "toolsearch", "tot"]


def test_each_subpackage_init_says_what_lives_there():
    for pkg in ("tools", "parsing", "durable", "interfaces", "modes", "runtime", "prompting", "models", "memory",
                "batch", "mcp"):
        doc = importlib.import_module(f"loopwright.{pkg}").__doc__ or ""
        assert len(doc.strip().splitlines()) >= 2, pkg


def test_the_rooms_export_the_facades_names():
    from loopwright.durable.journal import RunJournal
    from loopwright.durable.resume import resume
    from loopwright.durable.sqlite import SQLiteStore
    from loopwright.interfaces.cli import main
    from loopwright.interfaces.demo_tools import demo_registry
    from loopwright.interfaces.viewer import render_html
    from loopwright.parsing import (
        Action,
        parse_plan,
        parse_react_step,
        parse_tool_calls,
        substitute,
    )
    from loopwright.parsing.plans import PlanStep
    from loopwright.parsing.toolcalls import parse_tool_calls as ptc
    from loopwright.tools import Tool, ToolRegistry, tool

    assert parse_tool_calls is ptc is loopwright.parse_tool_calls
    assert (Tool, ToolRegistry, tool, SQLiteStore, resume) == (
        loopwright.Tool, loopwright.ToolRegistry, loopwright.tool, loopwright.SQLiteStore, loopwright.resume)
    assert parse_react_step("Final Answer: 3").answer == "3"
    assert callable(main) and callable(demo_registry) and callable(render_html)
    assert Action and parse_plan and substitute and PlanStep and RunJournal


def test_python_dash_m_runs_the_commands():
    for module in ("loopwright", "loopwright.interfaces.runs", "loopwright.interfaces.cli"):
        out = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, (module, out.stderr)
        assert "usage:" in out.stdout


def test_import_and_a_sync_run_leave_asyncio_unloaded():
    """asyncio (with ssl) and importlib.abc were a quarter of `import loopwright`: none
    loads on import, and a sync run never needs asyncio."""
    code = (
        "import sys, loopwright as lw\n"
        "print(sorted(m for m in ('asyncio', 'ssl', 'importlib.abc') if m in sys.modules))\n"
        "def add(x: int, y: int) -> int:\n"
        "    return x + y\n"
        "replies = iter(['Action: add\\nAction Input: {\"x\": 1, \"y\": 2}', 'Final Answer: 3'])\n"
        "trace = lw.run('sum', lambda prompt: next(replies), lw.ToolRegistry([lw.tool(add)]))\n"
        "assert trace.final_answer == '3' and trace.tool_calls == 1, trace.stopped_reason\n"
        "print(sorted(m for m in ('asyncio', 'ssl') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "[]"]


def _long_functions(source: str, limit: int = 80) -> list[str]:
    """Every function (def, async def, method, nested) longer than `limit` lines, from its
    `def` (decorators not counted) to its last line: "name at line: n lines"."""
    return [f"{node.name} at {node.lineno}: {n} lines" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and (n := (node.end_lineno or node.lineno) - node.lineno + 1) > limit]


def test_no_function_over_80_lines():
    """A function fits on a screen; a module may be as long as its one idea needs."""
    long = {name: found for name, path in _modules().items() if (found := _long_functions(path.read_text("utf-8")))}
    assert long == {}


def test_the_function_length_check_counts_from_def_to_the_last_line():
    body = "".join(f"        x{i} = {i}\n" for i in range(79))
    assert _long_functions(f"class C:\n    def fits(self):\n{body}") == []
    assert _long_functions(f"class C:\n    async def long(self):\n{body}        y = 1\n") == ["long at 2: 81 lines"]


def test_importing_every_module_keeps_the_facades_names():
    """No module sits at a path that would shadow a facade name once imported (importing
    `loopwright.x` sets attribute x on the package)."""
    before = {name: getattr(loopwright, name) for name in loopwright.__all__}
    for name in _modules():
        if not name.endswith("__main__"):
            importlib.import_module(name)
    assert {name: getattr(loopwright, name) for name in loopwright.__all__} == before


# The modes are pure step machines: they yield requests and Steps, and the drivers do the I/O.
# toolsearch.py is left out: its ToolIndex builds the tools' BM25 index in-process, and used
# directly (a benchmark's index) calls an embedder it is given; a machine's embedder queries
# go through the driver (Embed), which test_machines' structural purity test checks.
_MODE_MODULES = ("react", "rewoo", "plan_execute", "reflexion", "tot", "_critique", "machine", "folding")
_NO_IO_IMPORTS = ("threading", "asyncio", "concurrent", "time", "multiprocessing", "socket", "subprocess")
# what only a driver may call: the policy, a tool, the registry's execution, a thread or a clock
_DRIVER_CALLS = ("call_policy", "acall_policy", "execute", "aexecute", "dispatch", "complete", "acomplete",
                 "perf_counter", "monotonic", "call_in_thread", "acall_in_thread", "begin_model", "model_done",
                 "guard_after_call", "evaluator", "embed", "expired", "add_many",
                 "context_within")  # budgets, the clock and user code (an evaluator, an embedder, a memory)
# are the driver's (ModelCall.stop, CheckClock, Evaluate, Embed, Remember, Recall)


def _mode_io(path: Path) -> list[str]:
    """The imports of I/O modules and the driver-only calls in a mode module's source."""
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in _NO_IO_IMPORTS]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in _NO_IO_IMPORTS:
            found.append(node.module or "")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in _DRIVER_CALLS:
                found.append(f"{name}() at line {node.lineno}")
            elif name == "policy" or (isinstance(func, ast.Attribute) and func.attr == "policy"):
                found.append(f"policy() at line {node.lineno}")
    return found


@pytest.mark.parametrize("module", _MODE_MODULES)
def test_mode_modules_do_no_io_and_call_no_policy_or_tool(module):
    assert _mode_io(SRC / "modes" / f"{module}.py") == []


def test_the_mode_check_finds_a_planted_thread_and_tool_call(tmp_path):
    planted = tmp_path / "mode.py"
    planted.write_text("import threading\nfrom time import perf_counter\n\n"
                       "def step(ctx):\n    return ctx.registry.execute('x', {})\n", "utf-8")
    assert _mode_io(planted) == ["threading", "time", "execute() at line 5"]


# A machine reads its run through a read-only view and changes it only by yielding a request
# (Stop, Record, UseTools): nothing in modes/ writes through the view, or a name or attribute
# that holds something read from it (`trace = view.trace`, `self.view`).
_MUTATORS = frozenset({"append", "extend", "insert", "remove", "update", "setdefault", "pop", "popitem", "clear",
                       "add", "discard", "stop", "use_registry", "record", "apply"})


def _view_writes(path: Path) -> list[str]:
    """Where a module assigns to, deletes or calls a mutating method on what its view holds."""
    tree = ast.parse(path.read_text("utf-8"))
    views = {"view"}

    def through_view(node: ast.expr) -> bool:
        while isinstance(node, ast.Attribute | ast.Subscript):
            if isinstance(node, ast.Attribute) and node.attr == "view":
                return True
            node = node.value
        return isinstance(node, ast.Name) and node.id in views

    for node in ast.walk(tree):  # names bound to what the view holds: `trace = view.trace`, `a, t = x, view.trace`
        if isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = (zip(target.elts, node.value.elts, strict=False)
                         if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                         else [(target, node.value)])
                views.update(t.id for t, v in pairs if isinstance(t, ast.Name) and through_view(v))
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in _MUTATORS and through_view(node.func.value)):
            found.append(f"{node.func.attr}() at line {node.lineno}")
        for target in targets:
            for part in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(part, ast.Attribute | ast.Subscript) and through_view(part.value):
                    found.append(f"{ast.unparse(part)} written at line {node.lineno}")
    return found


@pytest.mark.parametrize("module", sorted(p.stem for p in (SRC / "modes").glob("*.py")))
def test_no_machine_writes_through_its_view(module):
    assert _view_writes(SRC / "modes" / f"{module}.py") == []


def test_the_view_check_finds_planted_writes(tmp_path):
    planted = tmp_path / "mode.py"
    planted.write_text(
        "def machine(view, spec):\n"
        "    view.trace.output = 1\n"
        "    trace = view.trace\n"
        "    trace.meta['tot'] = {}\n"
        "    loop, t = object(), view.trace\n"
        "    t.steps.append(None)\n"
        "    self.view.stop('final')\n"
        "    self.view = view\n"  # keeping the view is no write
        "    yield\n", "utf-8")
    assert _view_writes(planted) == ["view.trace.output written at line 2", "trace.meta['tot'] written at line 4",
                                     "append() at line 6", "stop() at line 7"]


_FRONT_DOORS = ("run", "iter_run", "arun", "aiter_run", "run_many", "arun_many", "resume", "fork",
                "run_react", "iter_react", "run_rewoo", "iter_rewoo", "run_plan_execute", "iter_plan_execute",
                "run_reflexion", "iter_reflexion", "run_tot", "iter_tot")


@pytest.mark.parametrize("name", _FRONT_DOORS)
def test_the_public_run_functions_take_their_options_as_one_typed_dict(name):
    import inspect

    signature = inspect.signature(getattr(loopwright, name))
    params = list(signature.parameters.values())
    assert inspect.Parameter.VAR_POSITIONAL not in {p.kind for p in params}
    unannotated = [p.name for p in params if p.annotation is inspect.Parameter.empty]
    assert unannotated == []
    assert signature.return_annotation not in (inspect.Signature.empty, "Any")
    options = params[-1]
    assert options.kind is inspect.Parameter.VAR_KEYWORD and options.name == "options"
    typed = "ResumeOptions" if name in ("resume", "fork") else "RunOptions"
    assert options.annotation == f"Unpack[{typed}]"


def test_run_options_are_run_spec_fields_by_name_and_type():
    import dataclasses

    def spelled(annotation: object) -> str:
        text = getattr(annotation, "__forward_arg__", annotation)
        assert isinstance(text, str)
        return text[len("InitVar["):-1] if text.startswith("InitVar[") else text

    spec = {name: spelled(f.type) for name, f in loopwright.RunSpec.__dataclass_fields__.items()
            if f._field_type is not dataclasses._FIELD_CLASSVAR}  # type: ignore[attr-defined]
    del spec["task"], spec["mode"]
    options = {name: spelled(a) for name, a in loopwright.RunOptions.__annotations__.items()}
    assert options == spec
    assert set(loopwright.ResumeOptions.__annotations__) == set(spec) - {"store", "run_id", "approver",
                                                                          "journal_meta"}


def test_a_new_option_is_one_field_of_run_spec_and_needs_no_other_list():
    from loopwright.durable.resume import OVERRIDES

    assert OVERRIDES == set(loopwright.ResumeOptions.__annotations__)
    for module in ("runtime/front.py", "batch/runner.py", "runtime/agents.py", "durable/resume.py", "durable/fork.py"):
        text = (SRC / module).read_text("utf-8")
        assert "max_nudges" not in text, module  # no option is spelled out where options pass through


def readme_layout(readme: str) -> dict[str, set[str]]:
    """The module files the README's layout block names, by folder ("" for the package's
    top level). An entry starts two spaces in (`  modes/  ...`, `  session.py ...`); deeper
    lines continue it; lines outside the package (`tests/ ...`) start at the margin."""
    block = readme.split("\n## Layout\n", 1)[1].split("```\n", 2)[1]
    lines = block.splitlines()
    assert lines[0] == "src/loopwright/"
    named: dict[str, set[str]] = {}
    folder = ""
    for line in lines[1:]:
        if not line.startswith("  "):
            continue
        if not line.startswith("   "):
            entry = re.match(r"  (\w+)/", line)
            folder = entry.group(1) if entry else ""
        named.setdefault(folder, set()).update(re.findall(r"\b(\w+\.py)\b", line))
    return {folder: names - {"__init__.py"} for folder, names in named.items()}


def test_the_readmes_layout_names_every_module_and_no_other():
    actual: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if path.name != "__init__.py":
            actual.setdefault(rel.parent.as_posix() if len(rel.parts) > 1 else "", set()).add(path.name)
    named = readme_layout((SRC.parents[1] / "README.md").read_text("utf-8"))
    missing = {f: sorted(actual[f] - named.get(f, set())) for f in actual if actual[f] - named.get(f, set())}
    gone = {f: sorted(named[f] - actual.get(f, set())) for f in named if named[f] - actual.get(f, set())}
    assert not missing, f"modules the README's layout section does not name: {missing}"
    assert not gone, f"the README's layout section names modules that do not exist: {gone}"


def test_the_layout_check_catches_a_module_left_out():
    readme = (SRC.parents[1] / "README.md").read_text("utf-8")
    assert "tot.py" in readme_layout(readme)["modes"]
    assert "tot.py" not in readme_layout(readme.replace("tot.py", "tot"))["modes"]
    assert "trace.py" in readme_layout(readme)[""]


def _run_private_names() -> set[str]:
    """The private attributes and methods of Run (runtime/driver.py)."""
    tree = ast.parse((SRC / "runtime" / "driver.py").read_text("utf-8"))
    run = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Run")
    names = {n.name for n in run.body if isinstance(n, ast.FunctionDef) and n.name.startswith("_")
             and not n.name.endswith("__")}
    for node in ast.walk(run):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
                and node.attr.startswith("_") and not node.attr.endswith("__")):
            names.add(node.attr)
    return names


def _reach_ins(source: str, private: set[str]) -> list[str]:
    """`something._x` in `source` where _x is one of Run's private names and something is
    not `self`: "line: ._x" for each."""
    return [f"{node.lineno}: .{node.attr}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Attribute) and node.attr in private
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))]


def test_no_module_but_runs_own_reaches_into_a_runs_private_state():
    """AsyncRun, the watchers and agents use Run's public lifecycle (context, machine,
    finished, end, interrupt, close). Checked: every module that can reach a Run (it
    imports loopwright.runtime, or is in it); a module outside them (a model backend with a
    `_ctx` of its own) cannot hold one."""
    private = _run_private_names()
    assert {"_ctx", "_machine", "_finished"} <= private
    modules = _modules()
    reach = [name for name, deps in _import_graph().items()
             if name.startswith("loopwright.runtime") or any(d.startswith("loopwright.runtime") for d in deps)]
    assert len(reach) > 10
    found = [f"{name}:{hit}" for name in reach if name != "loopwright.runtime.driver"
             for hit in _reach_ins(modules[name].read_text("utf-8"), private)]
    assert found == []


def test_the_reach_in_check_finds_a_planted_one():
    planted = "def f(run):\n    return run._machine.send(None), self._machine, run.machine\n"
    assert _reach_ins(planted, _run_private_names()) == ["2: ._machine"]
