"""Tool search (issue 25): recall of the right tool among the K loaded, prompt tokens per
step with and without search, and BM25 query time, on BFCL's function documents and on
real MCP servers connected at once.

    .venv/bin/python benchmarks/tool_search.py [--sample 10] [--no-mcp] [--no-sweep] [--minilm]

Data: BFCL's function documents and answers ship in the PyPI package bfcl-eval
(2026.3.23, the Berkeley Function Calling Leaderboard's data, as JSON lines inside the
wheel). This script fetches that wheel once with `pip download --no-deps` into
$LOOPWRIGHT_CACHE/bfcl (default ~/.cache/loopwright/bfcl) and reads it as a zip: nothing
is installed and none of its dependencies are needed.

- The registry: every distinct function (by name; the first document of a name wins) in
  every BFCL function document, single-turn, live, irrelevance and multi-turn, made into
  lw.Tool.from_schema (the path any JSON-Schema tool takes).
- Questions: every single-turn question with a ground truth (simple, multiple, parallel,
  parallel_multiple, live_*; Java and JavaScript included). Recall@K: every function the
  answer calls is among the K tools the run starts with (`ToolSelection.choose`, what
  `run(..., tool_search=K)` does), over all questions.
- Prompt tokens: the first ReAct step's prompt (loopwright's estimate, 3 bytes a token)
  for every `--sample`-th question, run with tool_search="off" and with K; and the size of
  one search_tools observation (what a step adds when the model searches).
- Query ms: one `ToolIndex.rank` (the per-step cost of search), p50 and p95, and the
  index build once per registry.
- Sweep: registries of N tools (each question's right functions plus random others): recall,
  prompt sizes, and how many of them `tool_search="auto"` searches for a model with the
  embedded model's 2,048-token window.
- MCP: mcp-server-time (PyPI), @modelcontextprotocol/server-everything (npm) and
  `loopwright mcp serve` with the demo tools, connected at once; one hand-written question
  per tool (ours, not a public set), alone and inside the BFCL registry.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright.modes.toolsearch import ToolIndex, ToolSelection, resolve
from loopwright.trace import estimate_tokens

BFCL = "bfcl-eval==2026.3.23"
CACHE = Path(os.environ.get("LOOPWRIGHT_CACHE") or Path.home() / ".cache" / "loopwright") / "bfcl"
SINGLE_TURN = ("simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple",
               "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
DOCS_ONLY = ("irrelevance", "live_irrelevance", "live_relevance")
KS = (5, 10, 20)


def wheel() -> Path:
    found = sorted(CACHE.glob("bfcl_eval-*.whl"))
    if not found:
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", BFCL, "-d", str(CACHE)],
                       check=True)
        found = sorted(CACHE.glob("bfcl_eval-*.whl"))
    return found[-1]


def _lines(z: zipfile.ZipFile, name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in z.read(f"bfcl_eval/data/{name}").decode().splitlines() if line.strip()]


def _noop(**kwargs: Any) -> str:
    return "ok"


_JSON_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null", "dict", "float", "tuple", "any"}


def _as_strings(node: Any) -> Any:
    """A schema whose non-JSON types (BFCL's Java and JavaScript documents type parameters
    as `String`, `long`, `Array`, ..., with values written as source text) become string."""
    if isinstance(node, dict):
        out = {k: _as_strings(v) for k, v in node.items()}
        if isinstance(out.get("type"), str) and out["type"] not in _JSON_TYPES:
            out["type"] = "string"
            out.pop("items", None)
        return out
    if isinstance(node, list):
        return [_as_strings(v) for v in node]
    return node


def load_bfcl() -> tuple[lw.ToolRegistry, list[tuple[str, str, set[str]]], dict[str, int]]:
    """The registry of every distinct BFCL function, and (category, question, right names)."""
    z = zipfile.ZipFile(wheel())
    docs: list[dict[str, Any]] = []
    questions: list[tuple[str, str, set[str]]] = []
    for category in SINGLE_TURN + DOCS_ONLY:
        entries = _lines(z, f"BFCL_v4_{category}.json")
        answers = {} if category in DOCS_ONLY else {
            a["id"]: a["ground_truth"] for a in _lines(z, f"possible_answer/BFCL_v4_{category}.json")}
        for entry in entries:
            docs += entry["function"]
            if entry["id"] in answers:
                turns = entry["question"][0] if entry["question"] else []
                text = "\n".join(m["content"] for m in turns if m.get("role") == "user")
                right = {name for call in answers[entry["id"]] for name in call}
                questions.append((category, text, right))
    for name in z.namelist():
        if name.startswith("bfcl_eval/data/multi_turn_func_doc/") and name.endswith(".json"):
            docs += _lines(z, name.removeprefix("bfcl_eval/data/"))
    tools: dict[str, lw.Tool] = {}
    counts = {"documents": len(docs), "rejected": 0, "java_js_types_as_string": 0, "same_name_other_doc": 0}
    first_doc: dict[str, str] = {}
    for doc in docs:
        name = doc["name"]
        if name in tools:
            counts["same_name_other_doc"] += json.dumps(doc, sort_keys=True) != first_doc[name]
            continue
        try:
            tools[name] = lw.Tool.from_schema(name, doc.get("description", ""), doc["parameters"], _noop)
        except (ValueError, TypeError):
            try:
                tools[name] = lw.Tool.from_schema(name, doc.get("description", ""), _as_strings(doc["parameters"]),
                                                  _noop)
                counts["java_js_types_as_string"] += 1
            except (ValueError, TypeError):
                counts["rejected"] += 1
                continue
        first_doc[name] = json.dumps(doc, sort_keys=True)
    counts["tools"] = len(tools)
    kept = [q for q in questions if q[2] <= tools.keys()]
    counts["questions"], counts["questions_dropped"] = len(kept), len(questions) - len(kept)
    return lw.ToolRegistry(list(tools.values())), kept, counts


def chosen(index: ToolIndex, registry: lw.ToolRegistry, questions: Sequence[tuple[str, str, set[str]]],
           k: int) -> list[list[str]]:
    """The K tools each question's run starts with (a shorter K's are a prefix of them)."""
    return [ToolSelection(registry, k, index, searchable=True).choose(q[1]) for q in questions]


def recall(picks: Sequence[list[str]], questions: Sequence[tuple[str, str, set[str]]], k: int) -> float:
    """Questions whose every right function is among the first k chosen."""
    hits = sum(q[2] <= set(p[:k]) for p, q in zip(picks, questions, strict=True))
    return hits / max(1, len(questions))


def first_prompt_tokens(text: str, registry: lw.ToolRegistry, tool_search: Any) -> int:
    policy = lw.ScriptedPolicy(["Final Answer: -"])
    lw.run(text, policy, registry, tool_search=tool_search, max_steps=1)
    return estimate_tokens(policy.prompts[0])


def query_times(index: ToolIndex, texts: Sequence[str], k: int) -> tuple[float, float]:
    times = []
    for text in texts:
        start = time.perf_counter()
        index.rank(text, k)
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def report(label: str, registry: lw.ToolRegistry, questions: Sequence[tuple[str, str, set[str]]],
           sample: int, embedder: Any = None) -> None:
    start = time.perf_counter()
    index = ToolIndex(registry, embedder)
    build_s = time.perf_counter() - start
    picks = chosen(index, registry, questions, max(KS))
    recalls = {k: recall(picks, questions, k) for k in KS}
    p50, p95 = query_times(index, [q[1] for q in questions], 10)
    if embedder is not None:  # the dense side's recall; prompt sizes are the same as without it
        print(f"\n## {label}, BM25 fused with {embedder.name}: {len(registry)} tools, {len(questions)} questions")
        print(" | ".join(f"recall@{k} {recalls[k]:.3f}" for k in KS)
              + f"; index build {build_s:,.1f} s; query p50 {p50:.1f} ms, p95 {p95:.1f} ms")
        return
    picked = questions[::sample]
    off = [first_prompt_tokens(q[1], registry, "off") for q in picked[:20]]  # the same tool list each time
    on = {k: statistics.mean(first_prompt_tokens(q[1], registry, k) for q in picked) for k in (5, 10)}
    selection = ToolSelection(registry, 10, index, searchable=True)
    found = [len(selection.search(q[1])[1]) for q in picked[:50]]
    print(f"\n## {label}: {len(registry)} tools, {len(questions)} questions")
    print("| K | recall@K |\n|---|---|")
    for k in KS:
        print(f"| {k} | {recalls[k]:.3f} |")
    print(f"first-step prompt tokens: every tool {statistics.mean(off):,.0f}; "
          f"K=5 {on[5]:,.0f}; K=10 {on[10]:,.0f} (mean of {len(picked)} questions)")
    print(f"one search_tools observation: {estimate_tokens('x' * int(statistics.mean(found))):,} tokens (mean)")
    print(f"index build {build_s * 1000:,.0f} ms once per registry; query p50 {p50:.2f} ms, p95 {p95:.2f} ms")
    by_category: dict[str, list[int]] = {}
    for i, q in enumerate(questions):
        by_category.setdefault(q[0], []).append(i)
    if len(by_category) > 1:
        print("| category | n | recall@5 | recall@10 | recall@20 |\n|---|---|---|---|---|")
        for category, at in by_category.items():
            qs, ps = [questions[i] for i in at], [picks[i] for i in at]
            row = " | ".join(f"{recall(ps, qs, k):.3f}" for k in KS)
            print(f"| {category} | {len(qs)} | {row} |")


def sweep(registry: lw.ToolRegistry, questions: Sequence[tuple[str, str, set[str]]], n_questions: int) -> None:
    """Registries of N tools: each question's right functions plus random others."""
    rng = random.Random(25)
    pool = list(registry.names)
    picked = rng.sample(list(questions), n_questions)
    print(f"\n## sweep: registries of N tools, {n_questions} questions, K=10")
    print("| N | recall@10 | every tool: tokens | K=10 + search_tools: tokens | auto on, 2,048-token window |")
    print("|---|---|---|---|---|")
    for n in (10, 12, 15, 20, 25, 30, 40, 80, 160):
        hits, full, searched, auto = 0, [], [], 0
        for _category, text, right in picked:
            others = [name for name in rng.sample(pool, n + len(right)) if name not in right][: n - len(right)]
            names = sorted(right) + others
            rng.shuffle(names)
            small = registry.subset(names)
            auto += resolve("auto", small, 2048) is not None  # the embedded model's default n_ctx
            index = ToolIndex(small)
            hits += right <= set(chosen(index, small, [(_category, text, right)], 10)[0])
            full.append(first_prompt_tokens(text, small, "off"))
            searched.append(first_prompt_tokens(text, small, 10) if n > 10 else full[-1])
        print(f"| {n} | {hits / n_questions:.3f} | {statistics.mean(full):,.0f} | {statistics.mean(searched):,.0f} "
              f"| {auto} of {n_questions} |")


MCP_QUESTIONS = {
    "echo": "Repeat back the message 'hello world' exactly as I wrote it.",
    "get-annotated-message": "Show me an example message that carries annotations, with an image included.",
    "get-env": "Which environment variables is the server running with?",
    "get-resource-links": "Give me links to three of the available resources.",
    "get-resource-reference": "I need a reference to the text resource with id 7.",
    "get-structured-content": "Return structured weather content for the location Chicago.",
    "get-sum": "What do 17 and 25 add up to?",
    "get-tiny-image": "Send me the tiny MCP logo picture.",
    "gzip-file-as-resource": "Compress this file's data with gzip and give it back as a resource.",
    "toggle-simulated-logging": "Switch the simulated logging on.",
    "toggle-subscriber-updates": "Turn off the simulated resource subscription updates.",
    "trigger-long-running-operation": "Start a long running operation of 10 seconds in 5 steps with progress.",
    "simulate-research-query": "Do a deep research run on the topic of solar panels.",
    "get_current_time": "What time is it right now in Tokyo?",
    "convert_time": "Convert 14:30 in New York to London time.",
    "lookup": "Find a fact: what is the population of Paris?",
    "calculate": "Work out the arithmetic expression (2 + 3) ** 2.",
}


def mcp(bfcl: lw.ToolRegistry | None) -> None:
    from loopwright.mcp import MCPServer

    node = Path(os.environ.get("LOOPWRIGHT_CACHE") or Path.home() / ".cache" / "loopwright") / "node"
    servers = [
        MCPServer.stdio(str(Path(sys.executable).parent / "mcp-server-time"), ["--local-timezone", "Etc/UTC"],
                        timeout_s=60),
        MCPServer.stdio(str(node / "node_modules" / ".bin" / "mcp-server-everything"), [], timeout_s=60),
        MCPServer.stdio(sys.executable, ["-m", "loopwright", "mcp", "serve", "--tools",
                                         "loopwright.interfaces.demo_tools:DEMO_TOOLS"], timeout_s=60),
    ]
    try:
        tools = [t for server in servers for t in server.connect().tools()]
    finally:
        for server in servers:
            server.close()
    questions = [("mcp", text, {name}) for name, text in MCP_QUESTIONS.items() if any(t.name == name for t in tools)]
    alone = lw.ToolRegistry(tools)
    print(f"\nMCP servers connected at once: {len(servers)}, {len(tools)} tools, {len(questions)} questions")
    report("MCP servers alone", alone, questions, 1)
    if bfcl is not None:
        both = lw.ToolRegistry([*tools, *(t for t in bfcl if t.name not in alone)])
        report("MCP servers + the BFCL registry", both, questions, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=10, help="prompt tokens for every n-th question")
    parser.add_argument("--sweep-questions", type=int, default=100)
    parser.add_argument("--no-mcp", action="store_true")
    parser.add_argument("--no-sweep", action="store_true")
    parser.add_argument("--minilm", action="store_true", help="also BM25 fused with all-MiniLM-L6-v2 on BFCL")
    args = parser.parse_args()
    registry, questions, counts = load_bfcl()
    print(f"BFCL ({BFCL}): {counts}")
    report("BFCL, every distinct function", registry, questions, args.sample)
    if args.minilm:
        from loopwright.memory import MiniLMEmbedder

        report("BFCL, every distinct function", registry, questions, args.sample, MiniLMEmbedder(num_threads=1))
    if not args.no_sweep:
        sweep(registry, questions, args.sweep_questions)
    if not args.no_mcp:
        mcp(registry)


if __name__ == "__main__":
    main()
