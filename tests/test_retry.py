"""retry=lw.Retry(...): transient model failures tried again by the drivers (one place
decides: the backend's own retries are off in such a run), every attempt recorded; tools
retried only when the journal says it is safe, else the run stops in doubt."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

import loopwright as lw
from loopwright.runtime.retry import Retry

FINAL = 'Thought: done\nFinal Answer: 42'
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture(autouse=True, scope="module")
def no_proxy() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as env:
        for name in PROXY_VARIABLES:
            env.delenv(name, raising=False)
        env.setenv("NO_PROXY", "127.0.0.1,localhost")
        env.setenv("no_proxy", "127.0.0.1,localhost")
        yield


class Flaky:
    """An OpenAI-compatible server on 127.0.0.1 answering each POST with the next
    scripted (status, text) and then 200 with the last text."""

    def __init__(self, replies: list[tuple[int, str]], headers: dict[str, str] | None = None) -> None:
        self.replies = list(replies)
        self.requests = 0
        flaky = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                flaky.requests += 1
                status, text = flaky.replies.pop(0) if len(flaky.replies) > 1 else flaky.replies[0]
                if status == 200:
                    body: dict[str, Any] = {
                        "id": "c", "object": "text_completion", "created": 0, "model": "m",
                        "choices": [{"text": text, "index": 0, "finish_reason": "stop", "logprobs": None}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
                else:
                    body = {"error": {"message": text}}
                data = json.dumps(body).encode()
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def flaky() -> Iterator[Any]:
    made: list[Flaky] = []

    def make(*replies: tuple[int, str], headers: dict[str, str] | None = None) -> Flaky:
        made.append(Flaky(list(replies), headers))
        return made[-1]

    yield make
    for server in made:
        server.close()


def model(url: str, max_retries: int = 2) -> lw.models.OpenAICompatible:
    return lw.models.OpenAICompatible(url, "m", constrain="off", max_retries=max_retries, backoff_s=0.01)


# -- the policy ------------------------------------------------------------------------


def test_a_retry_policy_checks_its_values_and_names_the_accepted_kinds() -> None:
    with pytest.raises(ValueError, match="attempts"):
        Retry(attempts=0)
    with pytest.raises(ValueError, match="backoff"):
        Retry(backoff=-1)
    with pytest.raises(ValueError, match="per_attempt_timeout_s"):
        Retry(per_attempt_timeout_s=0)
    with pytest.raises(ValueError, match="tool_timeout"):
        Retry(on={"rate_limit", "flaky"})  # type: ignore[arg-type]
    assert Retry(backoff=0.5).delay(1) == 0.5 and Retry(backoff=0.5).delay(3) == 2.0
    assert Retry(backoff=0.5, max_backoff_s=1).delay(5) == 1.0
    assert Retry(backoff=0.1).delay(1, asked=2.0) == 2.0  # a server's Retry-After is honoured
    assert Retry.from_config(Retry(on={"server"}).config()) == Retry(on={"server"})


def test_the_journal_keeps_the_retry_policy_so_resume_runs_with_it(tmp_path: Any) -> None:
    store = lw.SQLiteStore(tmp_path / "runs.db")
    policy = Retry(attempts=4, backoff=0.0, on={"server"})
    trace = lw.run("q", lw.ScriptedPolicy([FINAL]), [], store=store, retry=policy)
    config = store.load_run(trace.run_id).config
    assert config["retry"] == policy.config()
    assert lw.RunSpec.from_config("q", "react", config).retry == policy


# -- model calls -----------------------------------------------------------------------


def test_a_429_then_200_from_a_real_server_is_retried_by_the_run_and_each_attempt_recorded(flaky: Any) -> None:
    server = flaky((429, "slow down"), (200, FINAL))
    trace = lw.run("q", model(server.url), [], retry=Retry(attempts=3, backoff=0.01))
    assert trace.stopped_reason == "final" and trace.final_answer == "42"
    assert server.requests == 2
    [attempt] = trace.steps[-1].meta["attempts"]
    assert attempt["attempt"] == 1 and attempt["kind"] == "rate_limit" and attempt["delay_s"] == 0.01
    assert "429" in attempt["error"] or "RateLimit" in attempt["error"]
    assert trace.llm_calls == 1  # one call of the run, two attempts at it


def test_in_a_run_with_retry_the_backend_tries_once_so_attempts_never_multiply(flaky: Any) -> None:
    server = flaky((503, "busy"))
    trace = lw.run("q", model(server.url, max_retries=5), [], retry=Retry(attempts=2, backoff=0.0))
    assert trace.stopped_reason == "error"
    assert server.requests == 2  # 2 run attempts x 1 try, not 2 x 6
    step = trace.steps[-1]
    assert [a["kind"] for a in step.meta["attempts"]] == ["server", "server"]
    assert step.meta["attempts"][-1]["delay_s"] is None  # the last: no more waiting
    assert "after 2 attempts" in (step.error or step.observation or "")


def test_without_retry_the_backend_keeps_its_own_retries(flaky: Any) -> None:
    server = flaky((503, "busy"), (200, FINAL))
    trace = lw.run("q", model(server.url, max_retries=2), [])
    assert trace.final_answer == "42" and server.requests == 2
    assert "attempts" not in trace.steps[-1].meta


def test_a_server_retry_after_is_waited(flaky: Any) -> None:
    server = flaky((429, "slow down"), (200, FINAL), headers={"Retry-After": "0.3"})
    started = time.perf_counter()
    trace = lw.run("q", model(server.url), [], retry=Retry(backoff=0.0))
    assert trace.final_answer == "42" and time.perf_counter() - started >= 0.3
    assert trace.steps[-1].meta["attempts"][0]["delay_s"] == 0.3


def test_a_failure_the_policy_does_not_cover_is_not_retried() -> None:
    policy = lw.ScriptedPolicy([lw.TransientModelError("busy", "server"), FINAL])
    trace = lw.run("q", policy, [], retry=Retry(on={"rate_limit"}))
    assert trace.stopped_reason == "error" and policy.remaining == 1
    assert trace.steps[-1].meta["attempts"][0]["delay_s"] is None


def test_an_error_that_is_not_transient_is_not_retried() -> None:
    policy = lw.ScriptedPolicy([ValueError("a bug"), FINAL])
    trace = lw.run("q", policy, [], retry=Retry(backoff=0.0))
    assert trace.stopped_reason == "error" and policy.remaining == 1
    assert "attempts" not in trace.steps[-1].meta


def test_the_wall_clock_covers_every_attempt_and_wait() -> None:
    """A wait the run's clock would not outlast is not begun: the run ends in time."""
    policy = lw.ScriptedPolicy([lw.TransientModelError("busy", "server")] * 5 + [FINAL])
    started = time.perf_counter()
    trace = lw.run("q", policy, [], timeout_s=0.5, retry=Retry(attempts=5, backoff=0.2))
    assert time.perf_counter() - started < 1.0
    assert trace.stopped_reason in ("timeout", "error") and trace.final_answer is None
    attempts = trace.steps[-1].meta["attempts"]
    assert sum(a["delay_s"] or 0 for a in attempts) < 0.5 and attempts[-1]["delay_s"] is None


def test_an_attempt_past_per_attempt_timeout_is_a_transient_timeout_and_retried() -> None:
    calls: list[float] = []

    def slow_then_quick(prompt: str) -> str:
        calls.append(time.perf_counter())
        if len(calls) == 1:
            time.sleep(1.0)
        return FINAL

    trace = lw.run("q", slow_then_quick, [], retry=Retry(backoff=0.0, per_attempt_timeout_s=0.2))
    assert trace.final_answer == "42" and len(calls) == 2
    assert trace.steps[-1].meta["attempts"][0]["kind"] == "timeout"


def test_budgets_cover_the_answers_of_every_call() -> None:
    """Failed attempts spend no tokens; the budget is judged on what answered, as always."""
    answer = lw.Completion('Thought: t\nAction: add\nAction Input: {"x": 1, "y": 2}', lw.Usage(50, 50, 50))
    policy = lw.ScriptedPolicy([lw.TransientModelError("busy", "server"), answer, answer])

    @lw.tool
    def add(x: int, y: int) -> int:
        "Add."
        return x + y

    trace = lw.run("q", policy, [add], token_budget=150, retry=Retry(backoff=0.0))
    assert trace.stopped_reason == "token_budget"
    assert trace.usage.total_tokens == 200 and trace.steps[0].meta["attempts"][0]["kind"] == "server"


def test_the_async_driver_retries_too(flaky: Any) -> None:
    server = flaky((500, "oops"), (429, "slow"), (200, FINAL))
    trace = asyncio.run(lw.arun("q", model(server.url), [], retry=Retry(attempts=3, backoff=0.01)))
    assert trace.final_answer == "42" and server.requests == 3
    assert [a["kind"] for a in trace.steps[-1].meta["attempts"]] == ["server", "rate_limit"]


def test_the_async_driver_retries_an_async_policy() -> None:
    tries = []

    async def policy(prompt: str) -> str:
        tries.append(1)
        if len(tries) < 3:
            raise ConnectionError("reset")
        return FINAL

    trace = asyncio.run(lw.arun("q", policy, [], retry=Retry(backoff=0.0)))
    assert trace.final_answer == "42"
    assert [a["kind"] for a in trace.steps[-1].meta["attempts"]] == ["connection", "connection"]


def test_attempts_are_journaled_with_the_step_and_the_answer(tmp_path: Any) -> None:
    store = lw.SQLiteStore(tmp_path / "runs.db")
    policy = lw.ScriptedPolicy([lw.TransientModelError("busy", "server"), FINAL])
    trace = lw.run("q", policy, [], store=store, retry=Retry(backoff=0.0))
    stored = store.trace(trace.run_id)
    assert stored.steps[-1].meta["attempts"] == trace.steps[-1].meta["attempts"]
    assert stored.steps[-1].meta["attempts"][0]["kind"] == "server"


def test_otel_model_span_has_an_event_per_failed_attempt() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    policy = lw.ScriptedPolicy([lw.TransientModelError("busy", "rate_limit"), FINAL])
    lw.run("q", policy, [], tracer=provider.get_tracer("t"), retry=Retry(backoff=0.0))
    [span] = [s for s in exporter.get_finished_spans() if s.name.startswith("text_completion")]
    [event] = span.events
    assert event.name == "retry" and event.attributes is not None
    assert event.attributes["loopwright.retry.kind"] == "rate_limit"
    assert event.attributes["loopwright.retry.attempt"] == 1


# -- tool calls ------------------------------------------------------------------------


def act(tool: str, args: str) -> str:
    return f"Thought: call\nAction: {tool}\nAction Input: {args}"


def flaky_tool(fails: int, **declared: Any) -> tuple[lw.Tool, list[int]]:
    """A tool raising ConnectionError `fails` times, then answering; its calls counted."""
    calls: list[int] = []

    def fetch(n: int) -> int:
        "Fetch a number."
        calls.append(n)
        if len(calls) <= fails:
            raise ConnectionError("reset by peer")
        return n * 2

    return lw.tool(**declared)(fetch), calls


def test_an_idempotent_tool_failing_transiently_is_retried_and_its_attempts_recorded() -> None:
    fetch, calls = flaky_tool(2, side_effects="read")
    policy = lw.ScriptedPolicy([act("fetch", '{"n": 4}'), FINAL])
    trace = lw.run("q", policy, [fetch], retry=Retry(backoff=0.0, on={"tool_exception"}))
    assert len(calls) == 3 and trace.steps[0].observation == "8"
    assert [a["kind"] for a in trace.steps[0].meta["attempts"]] == ["tool_exception", "tool_exception"]
    assert "reset by peer" in trace.steps[0].meta["attempts"][0]["error"]
    assert trace.tool_calls == 1


def test_a_tool_failure_is_not_retried_unless_the_policy_names_it() -> None:
    fetch, calls = flaky_tool(1, side_effects="read")
    policy = lw.ScriptedPolicy([act("fetch", '{"n": 4}'), FINAL])
    trace = lw.run("q", policy, [fetch], retry=Retry(backoff=0.0))  # the default covers tool timeouts only
    assert len(calls) == 1 and "reset by peer" in (trace.steps[0].observation or "")


def test_a_non_idempotent_tool_that_started_and_failed_is_not_retried_but_stops_in_doubt(tmp_path: Any) -> None:
    store = lw.SQLiteStore(tmp_path / "runs.db")
    pay, calls = flaky_tool(1, side_effects="write")
    policy = lw.ScriptedPolicy([act("fetch", '{"n": 4}'), FINAL])
    trace = lw.run("q", policy, [pay], store=store, retry=Retry(backoff=0.0, on={"tool_exception"}))
    assert len(calls) == 1  # its effect may have happened: never run twice
    assert trace.stopped_reason == "error" and trace.steps[-1].meta["in_doubt"] is True
    assert "whether it took effect is unknown" in (trace.steps[-1].error or "")
    [unsettled] = store.unsettled(trace.run_id)  # blocked until a person settles it, as after a crash
    assert unsettled.key == "1"


def test_a_non_idempotent_tool_that_dedupes_on_its_call_key_is_retried_with_the_same_key(tmp_path: Any) -> None:
    keys: list[str] = []

    @lw.tool(side_effects="write", dedupes_on_call_key=True)
    def pay(amount: int) -> str:
        "Pay."
        info = lw.current_call()
        assert info is not None
        keys.append(f"{info.key}#{info.attempt}")
        if len(keys) == 1:
            raise ConnectionError("reset")
        return "paid"

    store = lw.SQLiteStore(tmp_path / "runs.db")
    policy = lw.ScriptedPolicy([act("pay", '{"amount": 5}'), FINAL])
    trace = lw.run("q", policy, [pay], store=store, retry=Retry(backoff=0.0, on={"tool_exception"}))
    assert trace.final_answer == "42" and trace.steps[0].observation == "paid"
    assert [k.split(":", 1)[1] for k in keys] == ["1#1", "1#2"]  # the same call key, the next attempt
    assert store.unsettled(trace.run_id) == []


def test_an_idempotent_tool_past_per_attempt_timeout_is_retried() -> None:
    calls: list[float] = []

    @lw.tool(side_effects="read")
    def lookup(q: str) -> str:
        "Look up."
        calls.append(time.perf_counter())
        if len(calls) == 1:
            time.sleep(1.0)
        return "found"

    policy = lw.ScriptedPolicy([act("lookup", '{"q": "a"}'), FINAL])
    trace = lw.run("q", policy, [lookup], retry=Retry(backoff=0.0, per_attempt_timeout_s=0.2))
    assert trace.steps[0].observation == "found" and len(calls) == 2
    assert trace.steps[0].meta["attempts"][0]["kind"] == "tool_timeout"


def test_tool_retries_stop_at_the_run_clock() -> None:
    fetch, calls = flaky_tool(100, side_effects="read")
    policy = lw.ScriptedPolicy([act("fetch", '{"n": 4}'), FINAL])
    started = time.perf_counter()
    trace = lw.run("q", policy, [fetch], timeout_s=0.5,
                   retry=Retry(attempts=50, backoff=0.1, on={"tool_exception"}))
    assert time.perf_counter() - started < 1.0
    assert 2 <= len(calls) <= 4  # waits of 0.1 and 0.2 s fit in 0.5 s; 0.4 more would not
    assert trace.steps[0].meta["attempts"][-1]["delay_s"] is None


def test_the_async_driver_retries_tools_only_when_safe(tmp_path: Any) -> None:
    fetch, fetched = flaky_tool(1, side_effects="read")
    trace = asyncio.run(lw.arun("q", lw.ScriptedPolicy([act("fetch", '{"n": 4}'), FINAL]), [fetch],
                                retry=Retry(backoff=0.0, on={"tool_exception"})))
    assert len(fetched) == 2 and trace.final_answer == "42"
    pay, paid = flaky_tool(1, side_effects="write")
    store = lw.SQLiteStore(tmp_path / "runs.db")
    trace = asyncio.run(lw.arun("q", lw.ScriptedPolicy([act("fetch", '{"n": 4}'), FINAL]), [pay], store=store,
                                retry=Retry(backoff=0.0, on={"tool_exception"})))
    assert len(paid) == 1 and trace.steps[-1].meta["in_doubt"] is True


def test_otel_failed_model_span_has_an_event_per_attempt_when_every_attempt_fails() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    busy = [lw.TransientModelError("busy", "rate_limit") for _ in range(3)]
    trace = lw.run("q", lw.ScriptedPolicy(busy), [], tracer=provider.get_tracer("t"),
                   retry=Retry(attempts=3, backoff=0.0))
    assert trace.stopped_reason == "error"
    [span] = [s for s in exporter.get_finished_spans() if s.name.startswith("text_completion")]
    assert [e.name for e in span.events] == ["retry"] * 3
    assert [e.attributes["loopwright.retry.attempt"] for e in span.events if e.attributes] == [1, 2, 3]
    assert {e.attributes["loopwright.retry.kind"] for e in span.events if e.attributes} == {"rate_limit"}
