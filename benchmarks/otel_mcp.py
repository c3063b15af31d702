"""What tracing and MCP cost per call, side by side in one process.

    .venv/bin/python benchmarks/otel_mcp.py [--repeats 9]

1. Spans: microseconds per ReAct step of the bare ~40-line loop (benchmarks/overhead.py),
   loopwright with tracing off, and loopwright traced with the OpenTelemetry SDK (a real
   TracerProvider and span processor that drops what it is given, so what is measured is
   making the spans, not exporting them). The three alternate round by round; ratios are
   medians of per-round ratios. "off" against "bare" is the overhead figure of overhead.py.
2. MCP: microseconds per tool call of a registry calling mcp-server-time's get_current_time
   through a real stdio session, against calling the same Python function directly.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import loopwright as lw
from loopwright import otel
from overhead import add, bare_loop, make_policy


def _per_step(fn, n: int, batch: int) -> float:
    start = time.perf_counter()
    steps = sum(fn(n) for _ in range(batch))
    return (time.perf_counter() - start) / steps * 1e6


def spans(repeats: int, n: int = 20) -> None:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    class Drop(SpanProcessor):
        pass  # the SDK builds and ends every span; nothing is exported

    provider = TracerProvider()
    provider.add_span_processor(Drop())
    tracer = provider.get_tracer("bench")
    registry = lw.ToolRegistry([lw.tool(add)])

    def bare(k: int) -> int:
        return bare_loop("sum", make_policy(k), {"add": add}, k + 1)[1]

    def off(k: int) -> int:
        return lw.run("sum", make_policy(k), registry, max_steps=k + 1).llm_calls

    def on(k: int) -> int:
        trace = lw.run("sum", make_policy(k), registry, max_steps=k + 1, tracer=tracer)
        return trace.llm_calls

    for fn in (bare, off, on):
        fn(n)
    batch = max(1, 2000 // n)
    rows: dict[str, list[float]] = {"bare": [], "off": [], "on": []}
    for _ in range(repeats):
        for name, fn in (("bare", bare), ("off", off), ("on", on)):
            rows[name].append(_per_step(fn, n, batch))
    med = {k: statistics.median(v) for k, v in rows.items()}
    off_ratio = statistics.median(o / b for o, b in zip(rows["off"], rows["bare"], strict=True))
    on_ratio = statistics.median(o / f for o, f in zip(rows["on"], rows["off"], strict=True))
    extra = statistics.median(o - f for o, f in zip(rows["on"], rows["off"], strict=True))
    print(f"spans, N={n} steps (a step = 1 model span + 1 tool span):")
    print(f"  bare loop {med['bare']:.1f} us/step · loopwright off {med['off']:.1f} us/step "
          f"({off_ratio:.1f}x bare) · traced {med['on']:.1f} us/step ({on_ratio:.2f}x off)")
    print(f"  tracing adds {extra:.1f} us per step, about {extra / 2:.1f} us per span")
    # the SDK alone: one span with the same attributes, started and ended, no loopwright
    attrs = {f"gen_ai.attr{i}": i for i in range(12)}
    parent = otel_context(tracer)
    sdk = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(2000):
            tracer.start_span("x", context=parent, attributes=attrs).end()
        sdk.append((time.perf_counter() - start) / 2000 * 1e6)
    print(f"  the OpenTelemetry SDK alone: {statistics.median(sdk):.1f} us to start and end one span "
          "with 12 attributes")


def otel_context(tracer):
    from opentelemetry import trace

    return trace.set_span_in_context(tracer.start_span("parent"))


def mcp_calls(repeats: int, calls: int = 200) -> None:
    from mcp_server_time.server import TimeServer

    from loopwright.mcp import MCPServer

    exe = Path(sys.executable).parent / "mcp-server-time"
    direct = TimeServer()
    with MCPServer.stdio(str(exe), ["--local-timezone", "Etc/UTC"], timeout_s=60) as server:
        registry = lw.ToolRegistry(server.tools(include=["get_current_time"]))
        args = {"timezone": "Asia/Tokyo"}
        assert registry.execute("get_current_time", args).error is None

        def through_mcp() -> None:
            for _ in range(calls):
                registry.execute("get_current_time", args)

        def plain() -> None:
            for _ in range(calls):
                direct.get_current_time("Asia/Tokyo").model_dump()

        via, fn = [], []
        for _ in range(repeats):
            for sink, job in ((via, through_mcp), (fn, plain)):
                start = time.perf_counter()
                job()
                sink.append((time.perf_counter() - start) / calls * 1e6)
    v, f = statistics.median(via), statistics.median(fn)
    print(f"MCP, {calls} calls a round: registry -> stdio session -> mcp-server-time "
          f"{v:.0f} us/call; the same function called directly {f:.1f} us/call; "
          f"MCP adds {v - f:.0f} us per call")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    otel.uninstrument()
    spans(args.repeats)
    mcp_calls(max(3, args.repeats // 3))


if __name__ == "__main__":
    main()
