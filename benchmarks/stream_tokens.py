"""Event streaming per token on the embedded model, against llama-cpp-python's own
stream loop on the very same prompt tokens (issue 24).

    .venv/bin/python benchmarks/stream_tokens.py [--rounds 5] [--tokens 64]

Each round, alternating: llama-cpp-python's `create_completion(stream=True)` iterated
bare (the loop a user would write), then a one-step ReAct run watched with
`lw.iter_events` on `LlamaCpp` (grammar off, so both sample the same way; the KV cache
reset before each, so both evaluate the whole prompt). Reported: wall ms a token of
each from the first text to the end (generation only), their ratio (median of the
per-round ratios), and what loopwright adds a token (the watched side's end includes
parsing the step and recording it).
Then the same event path with no model at all (a scripted stream of one-character
deltas), which isolates loopwright's own cost of a delta.
"""

from __future__ import annotations

import argparse
import statistics
import time

import loopwright as lw
from loopwright.interfaces.demo_tools import demo_registry


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    model = lw.models.LlamaCpp(n_ctx=1024, max_tokens=args.tokens, grammar=False, prefix_cache=False)
    registry = demo_registry()
    task = "How many hours are in 365 days?"
    # the prompt a one-step run sends, as tokens, for the bare loop
    probe = lw.run(task, model, registry, max_steps=1)
    prompt = probe.scratchpad[: probe.steps[0].prompt_chars] if probe.steps[0].prompt is None else probe.steps[0].prompt
    stop = ["\nObservation", "\nThought", "\nQuestion", "\n\n"]
    llm = model.llm
    tokens = model.tokenize(prompt)

    # Timed from the first piece of text to the end: generation only (the prompt's
    # evaluation and the run's setup are the same work on both sides, and not per token).
    def bare() -> tuple[float, int]:
        llm.reset()
        first = None
        n = 0
        for chunk in llm.create_completion(tokens, max_tokens=args.tokens, temperature=0.0, stop=stop, seed=0,
                                           stream=True):
            if chunk["choices"][0]["text"]:
                n += 1
                if first is None:
                    first = time.perf_counter()
        return time.perf_counter() - (first or time.perf_counter()), n - 1

    def watched() -> tuple[float, int]:
        first = None
        n = 0
        for event in lw.iter_events(task, model, registry, max_steps=1):
            if isinstance(event, lw.ModelDelta):
                n += 1
                if first is None:
                    first = time.perf_counter()
        return time.perf_counter() - (first or time.perf_counter()), n - 1

    bare(), watched()  # warm up
    rows = []
    for _ in range(args.rounds):
        b_s, b_n = bare()
        w_s, w_n = watched()
        rows.append((b_s / max(b_n, 1) * 1e3, w_s / max(w_n, 1) * 1e3, b_n, w_n))
    b = statistics.median(r[0] for r in rows)
    w = statistics.median(r[1] for r in rows)
    ratio = statistics.median(r[1] / r[0] for r in rows)
    print(f"embedded model, {rows[0][2]} pieces of text after the first (bare) / {rows[0][3]} (watched run), "
          f"{args.rounds} rounds, wall:")
    print(f"  llama-cpp-python's own stream loop {b:.2f} ms/token")
    print(f"  lw.iter_events on LlamaCpp          {w:.2f} ms/token ({ratio:.2f}x, {(w - b) * 1e3:+.0f} us/token;"
          f" the step's parse and record included)")
    isolated(args.rounds)


def isolated(rounds: int, n: int = 2000) -> None:
    """loopwright's own cost of a delta: a one-step run whose scripted stream yields n
    one-character deltas, watched, against the same run nobody watches (no stream)."""
    text = "Thought: " + "x" * (n - 30) + "\nFinal Answer: 1"
    deltas = tuple(text)
    registry = lw.ToolRegistry([])

    def plain() -> float:
        start = time.process_time()
        lw.run("q", lw.ScriptedPolicy([text]), registry, max_steps=1)
        return time.process_time() - start

    def watched() -> float:
        start = time.process_time()
        for _ in lw.iter_events("q", lw.ScriptedPolicy([deltas]), registry, max_steps=1):
            pass
        return time.process_time() - start

    plain(), watched()
    costs = []
    for _ in range(rounds):
        p, w = plain(), watched()
        costs.append((w - p) / len(deltas) * 1e6)
    print(f"  loopwright's own cost of a delta (scripted stream, {len(deltas)} deltas, iter_events): "
          f"{statistics.median(costs):.2f} CPU us")


if __name__ == "__main__":
    main()
