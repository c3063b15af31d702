"""How fast a GGUF model runs embedded: load time, prompt and generation tokens per second.

    .venv/bin/python benchmarks/model_speed.py [--model-path PATH.gguf ...] [--rounds 3]

For each model (default: the bundled SmolLM2-135M): the time to load it and evaluate a
first one-token prompt, then per round, with the KV cache reset, a ReAct prompt of the
demo tools (about 700 tokens) evaluated whole, and 64 tokens generated after it (greedy,
no grammar, no stop strings). Medians of the rounds. Threads: $LOOPWRIGHT_N_THREADS, else
every core. Also the resident memory after the runs (the largest so far in this process).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from typing import Any

import loopwright as lw
from loopwright.interfaces.demo_tools import demo_registry


def react_prompt() -> str:
    """The prompt the first ReAct step of a demo task sends."""
    prompts: list[str] = []

    def capture(prompt: str) -> str:  # a plain function policy is handed the prompt text
        prompts.append(prompt)
        return "Thought: I know the answer\nFinal Answer: 8760"

    lw.run("How many hours are in 365 days?", capture, demo_registry(), max_steps=1)
    return prompts[0]


def measure(path: str | None, rounds: int, prompt: str) -> dict[str, Any]:
    started = time.perf_counter()
    model = lw.models.LlamaCpp(path, grammar=False)
    llm = model.llm
    llm.create_completion([int(llm.token_bos())], max_tokens=1)
    load_s = time.perf_counter() - started
    tokens = model.tokenize(prompt)
    prompt_rates, gen_rates = [], []
    for _ in range(rounds):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(tokens)
        t1 = time.perf_counter()
        out: Any = llm.create_completion(tokens, max_tokens=64, temperature=0.0)
        t2 = time.perf_counter()
        generated = int(out["usage"]["completion_tokens"])
        prompt_rates.append(len(tokens) / (t1 - t0))
        gen_rates.append(generated / (t2 - t1))  # the prompt is cached: generation only
    return {
        "model": model.name, "n_ctx": model.n_ctx, "threads": model.n_threads, "load_s": load_s,
        "prompt_tokens": len(tokens), "prompt_tok_s": statistics.median(prompt_rates),
        "gen_tok_s": statistics.median(gen_rates),
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-path", nargs="*", default=[None], help="GGUF files (default: the bundled model)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    prompt = react_prompt()
    print("| model | n_ctx | threads | load s | prompt tokens | prompt tok/s | generated tok/s | max RSS MB |")
    print("|---|---|---|---|---|---|---|---|")
    for path in args.model_path:
        r = measure(path, args.rounds, prompt)
        print(f"| {r['model']} | {r['n_ctx']} | {r['threads']} | {r['load_s']:.2f} | {r['prompt_tokens']} | "
              f"{r['prompt_tok_s']:.0f} | {r['gen_tok_s']:.1f} | {r['max_rss_mb']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
