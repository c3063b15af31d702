"""End to end: a run's spans sent over OTLP/HTTP to a real receiver on 127.0.0.1 (Arize
Phoenix from PyPI, installed by scripts/install.sh --dev (scripts/test_deps.sh) into ~/.cache/loopwright/phoenix), read back from
its REST API with the attributes the conventions name."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import loopwright as lw
from conftest import act, final, make_registry
from helpers.mcp_servers import free_port, stop

CACHE = Path(os.environ.get("LOOPWRIGHT_CACHE") or Path.home() / ".cache" / "loopwright")
PHOENIX = CACHE / "phoenix" / "bin" / "phoenix"  # where scripts/test_deps.sh installs it


def _get(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def _wait_up(port: int, proc: subprocess.Popen[bytes], limit_s: float = 600.0) -> None:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"phoenix exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"phoenix did not come up within {limit_s}s")


class Counted:
    name = "counted-model"

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)

    def complete(self, request: lw.ModelRequest) -> lw.Completion:
        return lw.Completion(self.replies.pop(0), lw.Usage(40, 10, 5))


def _ours(span: dict[str, Any]) -> dict[str, Any]:
    """A received span's gen_ai.* and loopwright.* attributes."""
    return {k: v for k, v in span["attributes"].items() if k.startswith(("gen_ai.", "loopwright."))}


@pytest.mark.slow
def test_spans_of_a_real_run_arrive_at_an_otlp_receiver_with_the_conventions_attributes(tmp_path: Path):
    if not PHOENIX.exists():
        pytest.fail(f"{PHOENIX} is missing: run scripts/install.sh --dev (it installs Arize Phoenix, the OTLP receiver)")
    port, grpc = free_port(), free_port()
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(tmp_path), "PHOENIX_PORT": str(port),
           "PHOENIX_GRPC_PORT": str(grpc), "PHOENIX_HOST": "127.0.0.1"}  # fmt: skip
    proc = subprocess.Popen([str(PHOENIX), "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_up(port, proc)
        provider = TracerProvider(resource=Resource.create({"openinference.project.name": "loopwright-e2e"}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")))
        policy = Counted([act("add", '{"x": 2, "y": 3}'), final("5")])
        trace = lw.run("2+3?", policy, make_registry(), tracer=provider.get_tracer("e2e"))
        assert trace.stopped_reason == "final"
        provider.shutdown()  # flushes the batch
        url = f"http://127.0.0.1:{port}/v1/projects/loopwright-e2e/spans?limit=50"
        spans: list[dict[str, object]] = []
        for _ in range(120):  # the receiver writes asynchronously: poll, bounded
            try:
                spans = _get(url)["data"]  # type: ignore[index]
            except OSError:
                spans = []
            if len(spans) >= 4:
                break
            time.sleep(0.5)
        by = {s["name"]: s for s in spans}  # type: ignore[index]
        assert sorted(by) == ["execute_tool add", "invoke_agent", "text_completion counted-model"], sorted(by)
        run = by["invoke_agent"]
        run_id = run["context"]["span_id"]  # type: ignore[index]
        assert run["parent_id"] is None
        assert all(s["parent_id"] == run_id for s in spans if s is not run)  # type: ignore[index]
        # our own keys compared whole (the receiver adds its translations, llm.* and tool.*)
        models = sorted((_ours(s) for s in spans if s["name"] == "text_completion counted-model"),
                        key=lambda a: a["loopwright.step.index"])
        common = {"gen_ai.provider.name": "loopwright", "gen_ai.request.model": "counted-model"}
        usage = {"gen_ai.usage.input_tokens": 40, "gen_ai.usage.output_tokens": 5,
                 "gen_ai.usage.cache_read.input_tokens": 30, "loopwright.usage.evaluated_tokens": 10,
                 "loopwright.usage.estimated": False}
        assert models == [
            {"gen_ai.operation.name": "text_completion", **common, **usage, "loopwright.purpose": "react",
             "loopwright.step.kind": kind, "loopwright.step.index": index}
            for index, kind in ((1, "action"), (2, "final"))
        ]
        assert _ours(by["execute_tool add"]) == {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "add", "gen_ai.tool.call.id": "1",
            "gen_ai.tool.type": "function", "loopwright.step.kind": "action",
        }
        assert _ours(run) == {
            "gen_ai.operation.name": "invoke_agent", **common, "loopwright.mode": "react",
            "gen_ai.usage.input_tokens": 80, "gen_ai.usage.output_tokens": 10,
            "gen_ai.usage.cache_read.input_tokens": 60, "loopwright.usage.evaluated_tokens": 20,
            "loopwright.stop_reason": "final", "loopwright.llm_calls": 2, "loopwright.tool_calls": 1,
        }
    finally:
        stop(proc)
