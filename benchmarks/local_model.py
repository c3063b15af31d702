"""The embedded local model on the fixed set of 20 demo tasks.

    .venv/bin/python benchmarks/local_model.py [--tasks 20] [--max-steps 4] [--json out.json]
        [--groups react:off,rewoo,rewoo:off,plan_execute] [--no-reset] [--state-cache-bytes N]

Per task (ReAct, grammars on, KV cache kept): wall time split into model time (inside
the model's complete()) and runtime time (everything else: the loop, parsing, tools,
the trace), tokens sent, tokens evaluated with prefix reuse, tokens evaluated by the
same task with the cache reset before every call, and tokens (evaluated + generated) per
second of model time. Then the share of the 20 tasks answered correctly, in ReAct and
in ReWOO, with and without grammars, and in plan-execute, the parse errors of each, and
tokens evaluated / sent per mode. The cached model is not reset between tasks (a batch):
its per-family state cache keeps the planner's and the solver's prefixes apart, and its
peak memory is reported. The demo tools and
the prompts built from their examples (loopwright.interfaces.demo_tools) are used; answers are checked with is_correct.

A 135M model answers few of these; the numbers are reported as they come.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import loopwright as lw
from loopwright.interfaces.demo_tools import DEMO_TASKS, demo_registry, is_correct


@dataclass
class TimedModel:
    """A model wrapper that times every complete() call."""

    model: Any
    seconds: list[float] = field(default_factory=list)

    def complete(self, request: lw.ModelRequest) -> lw.Completion:
        started = time.perf_counter()
        try:
            return self.model.complete(request)  # type: ignore[no-any-return]
        finally:
            self.seconds.append(time.perf_counter() - started)


@dataclass(frozen=True)
class Result:
    task: str
    mode: str
    grammar: bool
    correct: bool
    stopped: str | None
    answer: str | None
    calls: int
    parse_errors: int
    sent: int
    evaluated: int
    generated: int
    wall_s: float
    model_s: float
    call_s: tuple[float, ...]


def parse_errors(trace: lw.Trace) -> int:
    """Steps whose model text did not parse: ReAct parse errors and unusable plans."""
    return sum(
        1
        for s in trace.steps
        if s.kind == "parse_error" or (s.kind in ("plan", "replan") and s.error is not None)
    )


def run_one(
    model: Any, task: str, expected: str, mode: str, max_steps: int, grammar: bool
) -> Result:
    timed = TimedModel(model)
    model.grammar = grammar
    started = time.perf_counter()
    trace = lw.run(
        task, timed, demo_registry(), mode=mode, max_steps=max_steps
    )
    wall = time.perf_counter() - started
    u = trace.usage
    return Result(
        task,
        mode,
        grammar,
        is_correct(trace.final_answer, expected),
        trace.stopped_reason,
        trace.final_answer,
        trace.llm_calls,
        parse_errors(trace),
        u.prompt_tokens,
        u.evaluated_tokens,
        u.completion_tokens,
        wall,
        sum(timed.seconds),
        tuple(timed.seconds),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=len(DEMO_TASKS))
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--json", help="write every result here")
    parser.add_argument("--groups", default="react:off,rewoo,rewoo:off,plan_execute",
                        help="mode[:off] runs after ReAct with grammars on (off: grammars off)")
    parser.add_argument("--no-reset", action="store_true", help="skip the runs with the cache reset before every call")
    parser.add_argument("--state-cache-bytes", type=int, default=None,
                        help="the cached model's state cache bound (0: one KV cache only, as before)")
    args = parser.parse_args()
    tasks = DEMO_TASKS[: args.tasks]

    bound = {} if args.state_cache_bytes is None else {"state_cache_bytes": args.state_cache_bytes}
    cached = lw.models.LlamaCpp(n_ctx=2048, **bound)
    fresh = lw.models.LlamaCpp(n_ctx=2048, prefix_cache=False)
    react: list[Result] = []
    resets: list[Result] = []
    print(
        f"{'task':<58} {'ok':>2} {'calls':>5} {'sent':>5} {'eval':>5} {'reset':>5} "
        f"{'model s':>8} {'rt s':>6} {'rt %':>5} {'tok/s':>6}"
    )
    for task, expected in tasks:
        r = run_one(cached, task, expected, "react", args.max_steps, grammar=True)
        reset = r if args.no_reset else run_one(fresh, task, expected, "react", args.max_steps, grammar=True)
        react.append(r)
        if not args.no_reset:
            resets.append(reset)
        runtime = r.wall_s - r.model_s
        print(
            f"{task[:58]:<58} {'y' if r.correct else '-':>2} {r.calls:>5} {r.sent:>5} "
            f"{r.evaluated:>5} {reset.evaluated:>5} {r.model_s:>8.2f} {runtime:>6.3f} "
            f"{100 * runtime / r.wall_s:>5.2f} {(r.evaluated + r.generated) / r.model_s:>6.0f}",
            flush=True,
        )
    groups: dict[tuple[str, bool], list[Result]] = {("react", True): react}
    for group in filter(None, args.groups.split(",")):
        mode, _, off = group.partition(":")
        grammar = off != "off"
        groups[mode, grammar] = [
            run_one(cached, task, expected, mode, args.max_steps, grammar)
            for task, expected in tasks
        ]

    wall = sum(r.wall_s for r in react)
    model_s = sum(r.model_s for r in react)
    calls = [s for r in react for s in r.call_s]
    print()
    reset_note = (f" (cache reset before every call: sent {sum(r.sent for r in resets)}, "
                  f"evaluated {sum(r.evaluated for r in resets)})") if resets else ""
    print(
        f"ReAct, grammars on, cache kept: {sum(r.calls for r in react)} model calls; "
        f"tokens sent {sum(r.sent for r in react)}, evaluated {sum(r.evaluated for r in react)}{reset_note}"
    )
    print(
        f"wall {wall:.2f}s = model {model_s:.2f}s + runtime {wall - model_s:.3f}s "
        f"({100 * (wall - model_s) / wall:.2f}% of wall); per call: median "
        f"{statistics.median(calls):.3f}s, max {max(calls):.3f}s; "
        f"{sum(r.evaluated + r.generated for r in react) / model_s:.0f} tokens "
        "(evaluated + generated) per second of model time"
    )
    print()
    print(
        f"{'mode':<13} {'grammar':<8} {'answered correctly':>20} {'parse errors':>13} {'calls':>6} "
        f"{'sent':>7} {'evaluated':>9} {'eval/sent':>9}"
    )
    for (mode, grammar), group in groups.items():
        ok = sum(r.correct for r in group)
        share = f"{ok}/{len(group)} ({100 * ok / len(group):.0f}%)"
        sent, evaluated = sum(r.sent for r in group), sum(r.evaluated for r in group)
        print(
            f"{mode:<13} {'on' if grammar else 'off':<8} {share:>20} "
            f"{sum(r.parse_errors for r in group):>13} {sum(r.calls for r in group):>6} "
            f"{sent:>7} {evaluated:>9} {evaluated / max(sent, 1):>9.2f}"
        )
    print()
    print(
        f"state cache: peak {cached.peak_state_bytes / 2**20:.1f} MiB of its "
        f"{cached.state_cache_bytes / 2**20:.0f} MiB bound; {len(cached.saved_states)} states held at the end"
    )
    results = [
        *react,
        *resets,
        *(r for (m, g), group in groups.items() if (m, g) != ("react", True) for r in group),
    ]
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump([r.__dict__ for r in results], f, indent=1)


if __name__ == "__main__":
    main()
