"""What a guardrail costs a step: the same ReAct run without guardrails, with a function
guard, and with a model guard on the embedded model, side by side in one invocation.

    LOOPWRIGHT_N_THREADS=1 nice -n 5 .venv/bin/python benchmarks/guardrails.py [--rounds 3] [--steps 200]
        [--model-rounds 2] [--model-steps 3]

Scripted: a cheap function policy (it answers from the step count, so the runtime is what
is measured) runs `--steps` tool steps; the guarded side has a function input, tool
(arguments) and output guardrail that allow. CPU µs a step, the sides alternating round by
round; the ratio is the median of the per-round ratios.

Embedded: the default `lw.models.LlamaCpp()` (SmolLM2-135M) answers a demo task in at most
`--model-steps` steps, without guardrails, with the function guards, and with a model
guardrail (`lw.model_guardrail` on the same model) on every tool call's arguments; wall
seconds a step (a run's time over its steps) and the ratio to the run without, median of
the per-round ratios. The model guard's calls and their tokens are counted in the run's
usage, so tokens a step are reported too.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import loopwright as lw
from loopwright.interfaces.demo_tools import DEMO_TASKS, demo_registry

STEP = 'Thought: keep adding\nAction: add\nAction Input: {"x": %d, "y": 1}'
FINAL = "Thought: done\nFinal Answer: %d"
CLASSIFIER = 'You approve calculator calls. Answer {"verdict": "allow"} for any arithmetic.\n{text}\nVerdict:'
"""A prompt the 135M model answers allow on for the task's calls, so the guarded run takes the
same steps as the bare one (with one that blocks, it stops at the first call instead)."""


def function_guards() -> list[lw.Guardrail]:
    return [lw.input_guardrail(lambda task: None), lw.tool_guardrail(lambda tool, args: None),
            lw.output_guardrail(lambda answer: None)]


def scripted_policy(n: int) -> Callable[[str], str]:
    state = {"i": 0}

    def policy(prompt: str) -> str:
        i = state["i"]
        state["i"] += 1
        return STEP % i if i < n else FINAL % n

    return policy


def scripted(rounds: int, steps: int) -> None:
    @lw.tool
    def add(x: int, y: int) -> int:
        """Add two integers."""
        return x + y

    registry = lw.ToolRegistry([add])

    def per_step(guardrails: list[lw.Guardrail]) -> float:
        start = time.process_time()
        trace = lw.run("count", scripted_policy(steps), registry, max_steps=steps + 1, on_repeat="off",
                       guardrails=guardrails)
        assert trace.stopped_reason == "final", trace.stopped_reason
        return (time.process_time() - start) / len(trace.steps) * 1e6

    per_step([]), per_step(function_guards())  # warm up
    bare, guarded = [], []
    for _ in range(rounds):
        bare.append(per_step([]))
        guarded.append(per_step(function_guards()))
    ratio = statistics.median(g / b for b, g in zip(bare, guarded, strict=True))
    print(f"scripted, {steps} steps, CPU µs a step (median of {rounds}):")
    print(f"  no guardrails        {statistics.median(bare):8.1f}")
    print(f"  function guards (3)  {statistics.median(guarded):8.1f}   {ratio:.2f}x")


def embedded(rounds: int, steps: int) -> None:
    model = lw.models.LlamaCpp()
    registry = demo_registry()
    task = DEMO_TASKS[0][0]
    sides: dict[str, Callable[[], list[lw.Guardrail]]] = {
        "no guardrails": list,
        "function guards (3)": function_guards,
        "model guard (tool args)": lambda: [lw.model_guardrail(model, CLASSIFIER, kind="tool", name="classifier",
                                                               max_tokens=32)],
    }

    def one(guardrails: list[lw.Guardrail]) -> tuple[float, lw.Trace]:
        start = time.perf_counter()
        trace = lw.run(task, model, registry, max_steps=steps, guardrails=guardrails)
        return (time.perf_counter() - start) / max(1, len(trace.steps)), trace

    one([])  # warm up: the model loaded, its first prompt evaluated
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    traces: dict[str, list[lw.Trace]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, make in sides.items():
            s, trace = one(make())
            seconds[name].append(s)
            traces[name].append(trace)
    print(f"embedded ({model.name}), {task!r}, at most {steps} steps, wall s a step (median of {rounds}):")
    for name in sides:
        ratio = statistics.median(g / b for b, g in zip(seconds["no guardrails"], seconds[name], strict=True))
        runs = traces[name]
        n_steps = statistics.median(len(t.steps) for t in runs)
        tokens = statistics.median(t.usage.total_tokens / max(1, len(t.steps)) for t in runs)
        verdicts = sorted({str(e.get("action")) for t in runs for e in t.meta.get("guardrails", [])})
        stops = sorted({str(t.stopped_reason) for t in runs})
        print(f"  {name:24} {statistics.median(seconds[name]):7.3f}   {ratio:.2f}x   steps {n_steps:g}, "
              f"tokens a step {tokens:.0f}, stopped {'/'.join(stops)}"
              + (f", verdicts other than allow: {'/'.join(verdicts)}" if verdicts else ""))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--model-rounds", type=int, default=2)
    parser.add_argument("--model-steps", type=int, default=3)
    args: Any = parser.parse_args()
    scripted(args.rounds, args.steps)
    embedded(args.model_rounds, args.model_steps)


if __name__ == "__main__":
    main()
