"""OpenTelemetry traces of runs, following the GenAI semantic conventions.

    lw.otel.instrument()                      # every run, on the global tracer provider
    lw.otel.instrument(provider, capture_content=True)
    lw.run(task, model, tools, tracer=my_tracer)   # one run, on this tracer

Spans: `invoke_agent` per run; per model call `chat {model}` or `text_completion {model}`;
per tool call `execute_tool {tool}`; per plan or replan a `plan` span holding its model
call. All are children of the run's span, which is a child of whatever span is current
when the run starts. Attributes are the conventions' (gen_ai.operation.name,
gen_ai.provider.name, gen_ai.request.model, gen_ai.tool.name, gen_ai.tool.call.id,
gen_ai.usage.input_tokens, gen_ai.usage.output_tokens, gen_ai.usage.cache_read.input_tokens:
the prompt tokens the KV cache saved, sent minus evaluated) plus `loopwright.*` (stop reason,
step kind, evaluated tokens, run id, cost). Prompts, completions, tool arguments and results
are recorded only with capture_content=True.

Cost: each hook handles its own call's values only, never the history, and spans are made
after the fact with the call's own start and end times. Off (the default), the run pays one
`is None` check at each choke point. `opentelemetry-api` is imported only when this is
turned on (`pip install 'loopwright[otel]'`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from loopwright.trace import Step, Trace, Usage

__all__ = ["RunSpans", "attach", "detach", "instrument", "run_spans", "uninstrument"]

_ACTIVE: tuple[Any, bool] | None = None  # (tracer, capture_content) set by instrument()
_VERSION = "0.1.0"


def instrument(tracer_provider: Any = None, capture_content: bool = False) -> None:
    """Trace every run from now on, on `tracer_provider` (default: the global one)."""
    global _ACTIVE
    from opentelemetry import trace

    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    _ACTIVE = (provider.get_tracer("loopwright", _VERSION), bool(capture_content))


def uninstrument() -> None:
    """Stop tracing runs (a run's own `tracer=` still works)."""
    global _ACTIVE
    _ACTIVE = None


def run_spans(
    tracer: Any, task: str, mode: str, policy: Any, run_id: str | None,
    price: Callable[[Usage], float] | None = None,
) -> RunSpans | None:
    """The span recorder for one run: on `tracer` (a run's `tracer=` option), else on what
    `instrument()` set; None when neither, and then the run records nothing."""
    if tracer is None:
        if _ACTIVE is None:
            return None
        tracer, capture = _ACTIVE
    else:
        capture = _ACTIVE[1] if _ACTIVE is not None else False
    spans = RunSpans(tracer, capture, task, mode, policy, run_id)
    spans.price = price
    return spans


def attach(context: Any) -> Any:
    """Make an OpenTelemetry context current (a child agent's run starts its span under
    it); the token for `detach`."""
    from opentelemetry import context as otel_context

    return otel_context.attach(context)


def detach(token: Any) -> None:
    from opentelemetry import context as otel_context

    otel_context.detach(token)


def _provider(policy: Any) -> str:
    own = getattr(policy, "provider_name", None)
    if isinstance(own, str):
        return own
    kind = type(policy).__name__
    if kind == "LlamaCpp":
        return "llama_cpp"
    if kind == "OpenAICompatible":
        return "openai"
    return "loopwright"


def _operation(policy: Any) -> str:
    return "chat" if getattr(policy, "mode", None) == "chat" else "text_completion"


def _model_name(policy: Any) -> str:
    name = getattr(policy, "name", None) or getattr(policy, "model", None)
    if isinstance(name, str):
        return name
    return getattr(policy, "__name__", None) or type(policy).__name__


def _messages(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}], ensure_ascii=False)


class RunSpans:
    """Records one run's spans. Built by `run_spans`; the run context calls it at its
    choke points (model calls, tool calls, recorded steps, the end of the run)."""

    def __init__(self, tracer: Any, capture: bool, task: str, mode: str, policy: Any, run_id: str | None) -> None:
        from opentelemetry import trace

        self._trace = trace
        self.tracer = tracer
        self.capture = capture
        self.provider = _provider(policy)
        self.operation = _operation(policy)
        self.model_name = _model_name(policy)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": self.provider,
            "gen_ai.request.model": self.model_name,
            "loopwright.mode": mode,
        }
        if run_id is not None:
            attributes["loopwright.run_id"] = run_id
        if capture:
            attributes["gen_ai.input.messages"] = _messages("user", task)
        self.span = tracer.start_span("invoke_agent", attributes=attributes)
        self.context = trace.set_span_in_context(self.span)
        self._pending: list[tuple[Any, int]] = []  # (span, end time) until its step is recorded
        self._open: dict[str, Any] = {}  # call key -> an execute_tool span opened for a child agent
        self.price: Callable[[Usage], float] | None = None  # a call's cost, when the run has prices

    def _settle(self, step: Step | None) -> None:
        for span, end in self._pending:
            if step is not None:
                span.set_attribute("loopwright.step.kind", step.kind)
                span.set_attribute("loopwright.step.index", step.index)
            span.end(end_time=end if span.name != "plan" else max(end, time.time_ns()))
        self._pending = []

    def model(self, n: int, request: Any, completion: Any, usage: Usage, started: float) -> None:
        """Model call `n` (a ModelRequest answered with a Completion), begun at
        perf_counter() `started`; its span ends when its step is recorded."""
        purpose, prompt, text, meta, pricing = request.purpose, request.prompt, completion.text, completion.meta, self.price
        if self._pending:
            self._settle(None)
        end = time.time_ns()
        start = end - int((time.perf_counter() - started) * 1e9)
        parent = self.context
        if purpose in ("plan", "replan"):
            plan = self.tracer.start_span(
                "plan", context=parent, start_time=start,
                attributes={"loopwright.plan.kind": purpose},
            )
            self._pending.append((plan, end))
            parent = self._trace.set_span_in_context(plan)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": self.operation,
            "gen_ai.provider.name": self.provider,
            "gen_ai.request.model": self.model_name,
            "gen_ai.usage.input_tokens": usage.prompt_tokens,
            "gen_ai.usage.output_tokens": usage.completion_tokens,
            "gen_ai.usage.cache_read.input_tokens": usage.prompt_tokens - usage.evaluated_tokens,
            "loopwright.usage.evaluated_tokens": usage.evaluated_tokens,
            "loopwright.usage.estimated": usage.estimated,
            "loopwright.purpose": purpose,
        }
        if meta:
            if isinstance(meta.get("model"), str):
                attributes["gen_ai.response.model"] = meta["model"]
            finish = meta.get("finish_reason")
            if isinstance(finish, str):
                attributes["gen_ai.response.finish_reasons"] = (finish,)
        if pricing is not None:
            attributes["loopwright.cost_usd"] = pricing(usage)
        if self.capture:
            attributes["gen_ai.input.messages"] = _messages("user", prompt)
            attributes["gen_ai.output.messages"] = _messages("assistant", text)
        span = self.tracer.start_span(
            f"{self.operation} {self.model_name}", context=parent, start_time=start,
            kind=self._trace.SpanKind.CLIENT, attributes=attributes,
        )
        if meta:
            _attempt_events(span, meta, start)
        self._pending.insert(0, (span, end))

    def model_failed(self, purpose: str, message: str, seconds: float,
                     meta: Mapping[str, Any] | None = None) -> None:
        end = time.time_ns()
        span = self.tracer.start_span(
            f"{self.operation} {self.model_name}", context=self.context,
            start_time=end - int(seconds * 1e9), kind=self._trace.SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": self.operation, "gen_ai.provider.name": self.provider,
                "gen_ai.request.model": self.model_name, "loopwright.purpose": purpose,
                "error.type": "policy_error",
            },
        )
        if meta:  # the attempts that failed before it gave up, the models a Fallback passed over
            _attempt_events(span, dict(meta), end - int(seconds * 1e9))
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, message))
        span.end(end_time=end)

    def open_tool(self, key: str, name: str) -> Any:
        """Start the `execute_tool` span of call `key` now, while it runs (a child agent's
        `invoke_agent` goes under it); `tool` ends it. The OpenTelemetry context to attach."""
        span = self.tracer.start_span(f"execute_tool {name}", context=self.context,
                                      kind=self._trace.SpanKind.INTERNAL)
        self._open[key] = span
        return self._trace.set_span_in_context(span)

    def tool(self, key: str, result: Any, kind: str = "action") -> None:
        """One executed (or denied) tool call: a ToolResult."""
        end = time.time_ns()
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": result.name,
            "gen_ai.tool.call.id": key,
            "gen_ai.tool.type": "function",
            "loopwright.step.kind": kind,
        }
        error = result.error
        if error is not None:
            attributes["error.type"] = error.kind
        if self.capture:
            attributes["gen_ai.tool.call.arguments"] = json.dumps(result.args, ensure_ascii=False, default=str)
            attributes["gen_ai.tool.call.result"] = result.observation
        opened = self._open.pop(key, None) if self._open else None
        if opened is None:
            span = self.tracer.start_span(
                f"execute_tool {result.name}", context=self.context,
                start_time=end - int(result.duration_s * 1e9), kind=self._trace.SpanKind.INTERNAL,
                attributes=attributes,
            )
        else:  # opened while it ran (a child agent's spans are under it)
            span = opened
            span.set_attributes(attributes)
        if error is not None:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, error.message))
        span.end(end_time=end)

    def step(self, step: Step) -> None:
        """A step was recorded: the model call (and plan) it came from ends here. A
        guardrail's step is a span of its own, naming the guardrail and its reason."""
        if self._pending:
            self._settle(step)
        if step.kind == "guardrail":
            meta = step.meta
            attributes = {"loopwright.guardrail.name": str(meta.get("guardrail")),
                          "loopwright.guardrail.where": str(meta.get("where")),
                          "loopwright.guardrail.reason": str(meta.get("reason")),
                          "loopwright.step.index": step.index, "loopwright.step.kind": step.kind}
            span = self.tracer.start_span(f"guardrail {meta.get('guardrail')}", context=self.context,
                                          kind=self._trace.SpanKind.INTERNAL, attributes=attributes)
            span.end()

    def end(self, trace: Trace) -> None:
        if self._pending:
            self._settle(None)
        span = self.span
        u = trace.usage
        span.set_attribute("gen_ai.usage.input_tokens", u.prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", u.completion_tokens)
        span.set_attribute("gen_ai.usage.cache_read.input_tokens", u.prompt_tokens - u.evaluated_tokens)
        span.set_attribute("loopwright.usage.evaluated_tokens", u.evaluated_tokens)
        span.set_attribute("loopwright.stop_reason", str(trace.stopped_reason))
        span.set_attribute("loopwright.llm_calls", trace.llm_calls)
        span.set_attribute("loopwright.tool_calls", trace.tool_calls)
        if trace.run_id is not None:
            span.set_attribute("loopwright.run_id", trace.run_id)
        cost = trace.meta.get("cost_usd")
        if isinstance(cost, int | float):
            span.set_attribute("loopwright.cost_usd", float(cost))
        if self.capture and trace.final_answer is not None:
            span.set_attribute("gen_ai.output.messages", _messages("assistant", trace.final_answer))
        if trace.stopped_reason == "guardrail" and trace.steps and trace.steps[-1].kind == "guardrail":
            span.set_attribute("loopwright.guardrail.name", str(trace.steps[-1].meta.get("guardrail")))
        if trace.stopped_reason == "error":
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, "the run stopped on an error"))
        span.end()


def _attempt_events(span: Any, meta: dict[str, Any], start: int) -> None:
    """A `retry` event on a model call's span for each failed attempt (`meta["attempts"]`,
    runtime/retry.py), and a `fallback` event for each model a Fallback passed over."""
    for attempt in meta.get("attempts") or ():
        attributes = {f"loopwright.retry.{key}": value for key, value in attempt.items() if value is not None}
        span.add_event("retry", attributes=attributes, timestamp=start)
    for passed in meta.get("fallback") or ():
        attributes = {f"loopwright.fallback.{key}": str(value) for key, value in passed.items()
                      if key != "usage" and value is not None}
        span.add_event("fallback", attributes=attributes, timestamp=start)
    answered = meta.get("answered_by")
    if isinstance(answered, str):
        span.set_attribute("loopwright.answered_by", answered)
