"""Game of 24 (the Tree-of-Thoughts paper's task): ReAct, Reflexion and ToT side by side.

    .venv/bin/python benchmarks/game24.py [--puzzles 5] [--backends embedded server]
                                          [--max-tokens 96] [--threads N] [--traces DIR]
                                          [--markdown out.md] [--json out.json]

Four numbers; reach 24 with + - * /, each number once. Every mode gets the same
verifier tool `check24(expression)`; the answer is graded by the same verifier, never by
the model's own claim. ReAct: one attempt (max_steps 6). Reflexion: attempts of 4 steps,
up to 2 critiques, the verifier as the evaluator (its message is the feedback), max_steps
14. ToT: BFS over thoughts of the paper's shape ("4 + 8 = 12 (left: 4 6 12)"), the model
scores each state sure / likely / impossible; branching 3, breadth 2, depth 4, 14 nodes;
tot-beam is the same search with threshold 0 (nothing pruned, only the beam).

Backends: the embedded model (llama-cpp-python in-process, grammars on, KV cache kept)
and llama-cpp-python's OpenAI-compatible server on 127.0.0.1 (started and stopped here;
plain text completion, no grammar). Per mode: puzzles solved, model calls, prompt tokens
sent, tokens evaluated (after prefix reuse; the server reports no cached tokens, so there
evaluated == sent as far as a client can tell) and wall time. A 135M model is not expected
to solve these; the point is the cost curve and the mechanism.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import itertools
import json
import operator
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright.prompting.templates import REACT_JSON, with_examples
from served import llama_server

# Solvable puzzles of the kind the ToT paper uses (checked by `solvable` at start).
PUZZLES = [
    "4 9 10 13", "1 4 8 8", "2 3 5 12", "1 2 7 10", "3 3 8 8",
    "4 4 6 8", "1 5 5 5", "2 2 10 10", "1 3 4 6", "5 5 7 11",
]

_OPS: dict[type, Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
}


def _value(node: ast.AST, used: list[int]) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _value(node.left, used), _value(node.right, used)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ValueError("division by zero")
        return _OPS[type(node.op)](left, right)
    raise ValueError("only whole numbers, + - * / and parentheses are allowed")


def verify(numbers: str, expression: str | None) -> tuple[bool, str]:
    """Whether `expression` reaches 24 using exactly `numbers`, and a message saying so."""
    text = (expression or "").split("=")[0].strip().replace("×", "*").replace("÷", "/")
    if not text:
        return False, "no expression given"
    used: list[int] = []
    try:
        value = _value(ast.parse(text, mode="eval").body, used)
    except (SyntaxError, ValueError, RecursionError) as exc:
        return False, f"wrong: {text!r} is not usable ({exc})"
    want = sorted(int(n) for n in numbers.split())
    if sorted(used) != want:
        return False, f"wrong: {text} uses {sorted(used)}; it must use each of {want} exactly once"
    if value != 24:
        return False, f"wrong: {text} = {float(value):g}, not 24"
    return True, f"correct: {text} = 24"


def solvable(numbers: str) -> bool:
    def search(values: list[Fraction]) -> bool:
        if len(values) == 1:
            return values[0] == 24
        for i, j in itertools.permutations(range(len(values)), 2):
            rest = [v for k, v in enumerate(values) if k not in (i, j)]
            a, b = values[i], values[j]
            options = [a + b, a - b, a * b] + ([a / b] if b != 0 else [])
            if any(search([*rest, v]) for v in options):
                return True
        return False

    return search([Fraction(int(n)) for n in numbers.split()])


def task_for(numbers: str) -> str:
    return f"Make 24 from {numbers} with + - * / (each number once)."


def numbers_of(task: str) -> str:
    return task.removeprefix("Make 24 from ").split(" with ")[0]


CHECK24 = {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}


def registry_for(numbers: str) -> lw.ToolRegistry:
    """The verifier tool, bound to this puzzle's numbers."""

    def check(expression: str) -> str:
        return verify(numbers, expression)[1]

    description = "Check an arithmetic expression: does it use the puzzle's numbers once each and equal 24?"
    return lw.ToolRegistry([lw.Tool.from_schema("check24", description, CHECK24, check)])


REACT_EXAMPLE = """\
Example:
Question: Make 24 from 4 6 4 8 with + - * / (each number once).
Thought: (6 - 4) * (4 + 8) uses every number once; check it
Action: check24
Action Input: {{"expression": "(6 - 4) * (4 + 8)"}}
Observation: <untrusted source="check24#1">correct: (6 - 4) * (4 + 8) = 24</untrusted>
Thought: I know the answer
Final Answer: (6 - 4) * (4 + 8)"""

TOT_STATE = """\
Game of 24: combine the four numbers with + - * / (each number used exactly once) to reach 24.
Each step combines two of the numbers left into one, like "4 + 8 = 12 (left: 4 6 12)".
When only 24 is left, the next step is "Final Answer: " and the whole expression.

Example:
Question: Make 24 from 4 6 4 8 with + - * / (each number once).
Step 1: 4 + 8 = 12 (left: 4 6 12)
Step 2: 6 - 4 = 2 (left: 2 12)
Step 3: 2 * 12 = 24 (left: 24)
Step 4: Final Answer: (6 - 4) * (4 + 8)

Question: {task}
"""

PROMPTS = dataclasses.replace(
    lw.PromptSet(),
    react_json=with_examples(REACT_JSON, REACT_EXAMPLE),
    tot_state=TOT_STATE,
    tot_value="Can the numbers left still reach 24? Reply sure, likely or impossible.\nEvaluation:",
)

MODES: dict[str, dict[str, Any]] = {
    "react": {"mode": "react", "max_steps": 6},
    "reflexion": {"mode": "reflexion", "max_steps": 14, "attempt_steps": 4, "max_reflections": 2},
    "tot": {"mode": "tot", "max_steps": 30, "branching": 3, "breadth": 2, "depth": 4, "max_nodes": 14},
    # the same search with no pruning (threshold 0: a pure beam): what the tree costs when
    # the values do not cut it short
    "tot-beam": {"mode": "tot", "max_steps": 30, "branching": 3, "breadth": 2, "depth": 4, "max_nodes": 14,
                 "threshold": 0.0},
}


@dataclass
class Row:
    backend: str
    mode: str
    puzzles: int = 0
    solved: int = 0
    calls: int = 0
    sent: int = 0
    evaluated: int = 0
    completion: int = 0
    wall_s: float = 0.0
    later_sent: int = 0  # the same, without each run's first call (whose cache state the
    later_evaluated: int = 0  # previous run left): reuse within a run only
    stops: dict[str, int] = dataclasses.field(default_factory=dict)

    def add(self, trace: lw.Trace, ok: bool, seconds: float) -> None:
        u = trace.usage
        self.puzzles += 1
        self.solved += ok
        self.calls += trace.llm_calls
        self.sent += u.prompt_tokens
        self.evaluated += u.evaluated_tokens
        self.completion += u.completion_tokens
        self.wall_s += seconds
        first = next((s for s in trace.steps if s.usage.prompt_tokens), None)
        self.later_sent += u.prompt_tokens - (first.usage.prompt_tokens if first else 0)
        self.later_evaluated += u.evaluated_tokens - (first.usage.evaluated_tokens if first else 0)
        reason = str(trace.stopped_reason)
        self.stops[reason] = self.stops.get(reason, 0) + 1


def run_one(model: Any, numbers: str, mode: str, max_tokens: int) -> tuple[bool, lw.Trace, float]:
    options = {**MODES[mode], "max_tokens": max_tokens}
    if mode == "reflexion":
        options["evaluator"] = lambda task, trace: verify(numbers_of(task), trace.final_answer)
    started = time.perf_counter()
    trace = lw.run(task_for(numbers), model, registry_for(numbers), prompts=PROMPTS, **options)
    return verify(numbers, trace.final_answer)[0], trace, time.perf_counter() - started


def bench(backend: str, model: Any, puzzles: list[str], max_tokens: int, modes: list[str],
          traces: Path | None = None) -> list[Row]:
    rows = []
    for mode in modes:
        row = Row(backend, mode)
        for numbers in puzzles:
            ok, trace, seconds = run_one(model, numbers, mode, max_tokens)
            if traces is not None:
                traces.mkdir(parents=True, exist_ok=True)
                (traces / f"{backend}-{mode}-{numbers.replace(' ', '_')}.json").write_text(trace.to_json())
            row.add(trace, ok, seconds)
            reason = str(trace.stopped_reason)
            print(f"  {backend:8} {mode:9} {numbers:12} {'solved' if ok else '-':6} {reason:15} "
                  f"calls {trace.llm_calls:3} answer {trace.final_answer!r}", file=sys.stderr)
        rows.append(row)
    return rows


def rows_from_traces(folder: Path) -> list[Row]:
    """The table again from the traces a run saved with --traces (BACKEND-MODE-NUMBERS.json)."""
    rows: dict[tuple[str, str], Row] = {}
    for path in sorted(folder.glob("*.json")):
        backend, mode, _numbers = path.stem.split("-", 2) if path.stem.count("-") >= 2 else ("?", "?", "")
        if mode == "tot" and path.stem.startswith(f"{backend}-tot-beam-"):
            mode = "tot-beam"
        trace = lw.Trace.from_json(path.read_text())
        ok = verify(numbers_of(trace.task), trace.final_answer)[0]
        rows.setdefault((backend, mode), Row(backend, mode)).add(trace, ok, trace.duration_s)
    order = {m: i for i, m in enumerate(MODES)}
    return sorted(rows.values(), key=lambda r: (r.backend, order.get(r.mode, 99)))


def markdown(rows: list[Row]) -> str:
    lines = [
        "| backend | mode | solved | model calls | calls/puzzle | tokens sent | evaluated | evaluated/sent "
        "| evaluated/sent after each run's first call | generated | wall s | stop reasons |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = r.evaluated / r.sent if r.sent else 0.0
        later = f"{r.later_evaluated / r.later_sent:.2f}" if r.later_sent else "-"
        stops = ", ".join(f"{k} {v}" for k, v in sorted(r.stops.items()))
        lines.append(
            f"| {r.backend} | {r.mode} | {r.solved}/{r.puzzles} | {r.calls} | {r.calls / max(r.puzzles, 1):.1f} "
            f"| {r.sent:,} | {r.evaluated:,} | {ratio:.2f} | {later} | {r.completion:,} | {r.wall_s:.0f} | {stops} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--puzzles", type=int, default=5, help="how many of the 10 puzzles (default 5)")
    parser.add_argument("--backends", nargs="+", choices=("embedded", "server"), default=["embedded", "server"])
    parser.add_argument("--modes", nargs="+", choices=sorted(MODES), default=list(MODES))
    parser.add_argument("--max-tokens", type=int, default=96, help="generated tokens per call (default 96)")
    parser.add_argument("--threads", type=int, default=None, help="model threads (default: every core)")
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--traces", type=Path, help="write every trace here as JSON (for loopwright view)")
    parser.add_argument("--tables-from", type=Path, metavar="DIR",
                        help="print the table from the traces a run saved with --traces, and run nothing")
    args = parser.parse_args()
    # SIGTERM as SystemExit: the server's `finally` then stops it (a plain kill would orphan it)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.tables_from:
        print(markdown(rows_from_traces(args.tables_from)))
        return 0
    puzzles = PUZZLES[: args.puzzles]
    assert all(solvable(p) for p in PUZZLES), "every puzzle must have a solution"
    from loopwright.models.llamacpp import default_threads

    threads = args.threads or default_threads()
    rows: list[Row] = []
    for backend in args.backends:
        if backend == "embedded":
            model = lw.models.LlamaCpp(n_threads=threads)
            rows += bench(backend, model, puzzles, args.max_tokens, args.modes, args.traces)
        else:
            with llama_server(threads) as url:
                model = lw.models.OpenAICompatible(url, "smollm2", timeout_s=300)
                rows += bench(backend, model, puzzles, args.max_tokens, args.modes, args.traces)
    table = markdown(rows)
    print(table)
    if args.markdown:
        args.markdown.write_text(table + "\n")
    if args.json:
        args.json.write_text(json.dumps([dataclasses.asdict(r) for r in rows], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
