"""Event streaming per token on the embedded model, against llama-cpp-python's own
stream loop on the very same prompt tokens (issue 24).

    .venv/bin/python benchmarks/stream_tokens.py [--rounds 5] [--tokens 64]

Each round, alternating: llama-cpp-python's `create_completion(stream=True)` iterated
bare (the loop a user would write), then a one-step ReAct run watched with
`lw.iter_events` on `LlamaCpp` (grammar off, so both sample the same way; the KV cache
reset before each, so both evaluate the whole prompt). Reported: the whole call's wall
time on each side, their ratio (median of the per-round ratios), and what loopwright adds
per generated token.
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
    # The very request a one-step run sends (prompt, stop strings, max_tokens), captured, so
    # the bare loop samples the same tokens with the same stops: the two sides differ only in
    # what loopwright adds. (A first version rebuilt the prompt from the trace and stopped on
    # other strings, which made the bare side do more work and look slower.)
    requests: list[lw.ModelRequest] = []

    class Capture:
        name = model.name

        def complete(self, request: lw.ModelRequest) -> lw.Completion:
            requests.append(request)
            return model.complete(request)

    lw.run(task, Capture(), registry, max_steps=1)
    request = requests[0]
    llm = model.llm

    # Each side timed whole, from the KV cache reset to the last token: the prompt's
    # evaluation is the same work on both sides, so the difference is what loopwright adds
    # (its prompt building, the thread and queue of iter_events, each delta's event, the
    # step's parse and record). Timing from the first token instead would depend on when
    # the watching thread is scheduled.
    def bare() -> tuple[float, int]:
        start = time.perf_counter()
        llm.reset()
        tokens = model.tokenize(request.prompt)
        generated = 0
        for _ in llm.create_completion(tokens, max_tokens=request.max_tokens or args.tokens,
                                       temperature=model.temperature, stop=list(request.stop),
                                       seed=model.seed, stream=True):
            generated += 1
        return time.perf_counter() - start, generated

    def watched() -> tuple[float, int]:
        start = time.perf_counter()
        generated = 0
        for event in lw.iter_events(task, model, registry, max_steps=1):
            if isinstance(event, lw.StepEvent):
                generated = event.step.usage.completion_tokens
        return time.perf_counter() - start, generated

    bare(), watched()  # warm up
    rows = []
    for _ in range(args.rounds):
        b_s, b_n = bare()
        w_s, w_n = watched()
        rows.append((b_s, w_s, b_n, w_n))
    b = statistics.median(r[0] for r in rows)
    w = statistics.median(r[1] for r in rows)
    ratio = statistics.median(r[1] / r[0] for r in rows)
    n = statistics.median(r[3] for r in rows)
    added = statistics.median((r[1] - r[0]) / max(r[3], 1) for r in rows)
    print(f"embedded model, {len(model.tokenize(request.prompt))} prompt tokens, {rows[0][2]} chunks (bare) / "
          f"{rows[0][3]} tokens (watched run), "
          f"{args.rounds} rounds, wall, whole call:")
    print(f"  llama-cpp-python's own stream loop {b * 1e3:.0f} ms")
    print(f"  lw.iter_events on LlamaCpp          {w * 1e3:.0f} ms ({ratio:.3f}x); added per generated token "
          f"{added * 1e3:+.2f} ms (median of per-round differences / {n:.0f} tokens)")
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
