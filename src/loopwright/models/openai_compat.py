"""Any OpenAI-compatible server (vLLM, SGLang, Ollama, llama.cpp's and llama-cpp-python's
servers) as a Model.

mode="completion" sends the prompt as text to `/v1/completions` with the stop strings:
the same prompt the trace records, and the right choice for models whose chat template
does not teach ReAct. mode="chat" sends the request's chat messages to
`/v1/chat/completions` with the tools as functions (native tool calling); returned tool
calls become Completion.tool_calls with their raw argument strings kept intact (the
parser reads them tolerantly).

tool_choice: "auto" (the default), "required", "none", the name of one tool (a named
function), or a callable taking the ModelRequest and returning one of those.
llama-cpp-python's server (`--chat_format chatml-function-calling`) ignores "auto" with
small models and errors on "required"; a named function works, e.g.
`tool_choice=lambda r: "none" if any(m.get("role") == "tool" for m in r.messages) else "calculate"`.

constrain: what the server is asked to hold the output to (Completion.meta["constrain"]
records what was sent: "grammar", "json_schema" or "off").
- "grammar": the step grammar the embedded model uses (`grammar_for`: ReAct steps in the
  text dialects, plans, solver answers; tools, known calls excluded, output_type schema,
  bounds, enums), as GBNF in the body: `grammar` for llama.cpp's and llama-cpp-python's
  servers, `structured_outputs: {"grammar": ...}` for vLLM, `ebnf` for SGLang (see
  `server`). On the chat endpoint a grammar-constrained call sends no tools (the grammar
  names them; a server's function calling would replace it). A request with no grammar
  (native tool calling, summaries) gets what "json_schema" sends.
- "json_schema": in chat, strict tools (`"strict": true` on each function whose schema
  strict mode leaves unchanged in meaning: every property required; others are sent as
  they are) and, for a typed final answer (output_type; a native step or a solver
  reply), `response_format`: `json_schema` with `strict`, or llama.cpp's `json_object`
  with the schema. Text completions get nothing.
- "off": nothing beyond the plain request.
- "auto" (the default): "grammar" on a server that takes one, else "json_schema".
The server kind comes from `server` ("llama.cpp", "vllm", "sglang", "other") or, when
None and constrain is not "off", from one probe on first use (`detect_server`: the
`owned_by` of GET /v1/models, then the API title in /openapi.json; any failure means
"other"), so a server of unknown kind is never sent a grammar field by "auto". A server
that answers HTTP 400 or 422 (or llama-cpp-python's HTTP 500 "validation error", not
retried) to a constrained request is asked again with the next
weaker constraint ("grammar", then "json_schema", then "off"); the refused kind is
remembered for this model's endpoint once a weaker one succeeds, and
Completion.meta["constrain_rejected"] lists what was refused on that call.

Transient failures (connection errors and timeouts, HTTP 429, HTTP 5xx) are retried up
to max_retries times with exponential backoff; Completion.meta["retries"] says how many
retries the call took. One place decides: in a run with `retry=lw.Retry(...)` the run
retries (every attempt recorded on the step, in the journal and on the span) and this
model tries once; either way a transient failure it gives up on is a
`TransientModelError` whose `kind` says which ("rate_limit", "server", "timeout",
"connection"), so `lw.models.Fallback` and a run's `retry=` can tell it from a refusal.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any

from loopwright.errors import ModelError, TransientKind, TransientModelError
from loopwright.models.constrain import (
    GRAMMAR_SERVERS,
    SERVERS,
    grammar_fields,
    response_format,
    strict_schema,
)
from loopwright.models.grammar import CONSTRAINED_MIN_TOKENS, grammar_for
from loopwright.models.sse import StreamedResponse
from loopwright.policy import Completion, ModelRequest, ToolCall, run_retries
from loopwright.trace import Usage

ToolChoice = str | Callable[[ModelRequest], str]
CONSTRAINTS = ("auto", "grammar", "json_schema", "off")
_API_NAME = re.compile(r"[^A-Za-z0-9_-]")


def api_tool_names(names: Sequence[str]) -> dict[str, str]:
    """Map tool names to names the function-calling API accepts (letters, digits, `_`,
    `-`, at most 64 characters), distinct and reversible through the returned dict
    (api name -> tool name)."""
    out: dict[str, str] = {}
    for name in names:
        base = _API_NAME.sub("_", name)[:60] or "tool"
        candidate, n = base, 1
        while candidate in out:
            n += 1
            candidate = f"{base[: 60 - len(str(n)) - 1]}_{n}"
        out[candidate] = name
    return out


def _is_transient(exc: Exception) -> bool:
    import openai

    if isinstance(exc, openai.APIConnectionError):  # includes timeouts
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code == 429 or (exc.status_code >= 500 and not _is_validation(exc))
    return False


def _transient_kind(exc: Exception) -> TransientKind:
    """Which transient failure `exc` is (one `_is_transient` accepted)."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "connection"
    return "rate_limit" if getattr(exc, "status_code", None) == 429 else "server"


def _given_up(where: str, exc: Exception, retries: int) -> TransientModelError:
    """The TransientModelError for a transient failure no longer retried here."""
    after = f" after {retries} retries" if retries else ""
    status = getattr(exc, "status_code", None)
    return TransientModelError(f"{where}: {type(exc).__name__}{after}: {exc}", _transient_kind(exc),
                               status=status if isinstance(status, int) else None,
                               retry_after_s=_retry_after(exc))


def _retry_after(exc: Exception) -> float | None:
    """The seconds a server's Retry-After header asks for (its number form), if any."""
    response = getattr(exc, "response", None)
    value = getattr(response, "headers", {}).get("retry-after") if response is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _is_validation(exc: Any) -> bool:
    """A refusal of the request's fields: HTTP 400 or 422, or the HTTP 500 that
    llama-cpp-python's server answers a body it fails to validate with."""
    status = getattr(exc, "status_code", None)
    return status in (400, 422) or (status == 500 and "validation error" in str(exc).lower())


def _is_rejection(exc: ModelError) -> bool:
    """Whether the server refused the request as malformed (a field it does not take)."""
    import openai

    cause = exc.__cause__
    return isinstance(cause, openai.APIStatusError) and _is_validation(cause)


class OpenAICompatible:
    """A Model served over the OpenAI API by any compatible server.

    context_window: the served model's context window in tokens, if known; `tool_search="auto"`
    decides from it (with None, the default, every tool is shown)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        mode: str = "completion",
        tool_choice: ToolChoice = "auto",
        timeout_s: float = 60.0,
        max_retries: int = 2,
        backoff_s: float = 0.5,
        temperature: float = 0.0,
        max_tokens: int = 256,
        seed: int | None = 0,
        client: Any = None,
        pool_size: int = 256,
        constrain: str = "auto",
        server: str | None = None,
        plan_max_steps: int = 4,
        exclude_known: bool = True,
        context_window: int | None = None,
    ) -> None:
        if mode not in ("completion", "chat"):
            raise ValueError(f"mode must be 'completion' or 'chat', got {mode!r}")
        if constrain not in CONSTRAINTS:
            raise ValueError(f"constrain must be one of {', '.join(CONSTRAINTS)}, got {constrain!r}")
        if server is not None and server not in SERVERS:
            raise ValueError(f"server must be None or one of {', '.join(SERVERS)}, got {server!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if context_window is not None and (
            isinstance(context_window, bool) or not isinstance(context_window, int) or context_window < 1
        ):
            raise ValueError(f"context_window must be a number of tokens >= 1 or None, got {context_window!r}")
        self.base_url = base_url
        self.model = model
        self.name = model
        self.mode = mode
        self.tool_choice = tool_choice
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.seed = seed
        self.timeout_s = timeout_s
        self.pool_size = pool_size
        self.constrain = constrain
        self.server = server
        self.plan_max_steps = plan_max_steps
        self.exclude_known = exclude_known
        self.context_window = context_window
        self._rejected: set[tuple[str, bool]] = set()  # (constraint kind, chat endpoint)
        self._probe_lock = threading.Lock()
        self._api_key = api_key or "no-key"
        self._aclients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
        # The client's own retries are off: ours count, so the trace can say how many.
        import openai  # imported on use, not with loopwright.models: it takes about 0.5 s

        self.client: Any = client or openai.OpenAI(
            base_url=base_url, api_key=api_key or "no-key", timeout=timeout_s, max_retries=0
        )

    def __repr__(self) -> str:
        return f"OpenAICompatible({self.base_url!r}, {self.model!r}, mode={self.mode!r})"

    def complete(self, request: ModelRequest) -> Completion:
        """One completion (mode "completion"), or one chat turn with tools (mode "chat",
        and any request in the "native" dialect, which only chat can serve)."""
        chat = self.mode == "chat" or request.dialect == "native"
        response, retries, elapsed, kind, refused = self._send(request, chat, stream=False)
        return self._completion(request, chat, response, retries, elapsed, kind, refused)

    async def acomplete(self, request: ModelRequest) -> Completion:
        """`complete` on the running event loop, through a pooled `openai.AsyncOpenAI`
        client (one per event loop, its connections kept alive between calls); what
        `lw.arun` and `lw.run_many` use."""
        chat = self.mode == "chat" or request.dialect == "native"
        response, retries, elapsed, kind, refused = await self._asend(request, chat, stream=False)
        return self._completion(request, chat, response, retries, elapsed, kind, refused)

    def stream(self, request: ModelRequest) -> Iterator[str | Completion]:
        """`complete`, streamed (server-sent events): the text as it arrives, then a
        Completion with the tool calls assembled from their deltas, the usage and the
        meta (its text empty: the deltas joined are the text). Retries and constraint
        fallbacks happen before the first delta; a failure mid-stream is a ModelError."""
        chat = self.mode == "chat" or request.dialect == "native"
        chunks, retries, _, kind, refused = self._send(request, chat, stream=True)
        started = time.perf_counter()
        streamed = StreamedResponse(chat)
        parts: list[str] = []
        try:
            for chunk in chunks:
                text = streamed.add(chunk)
                if text:
                    parts.append(text)
                    yield text
        except Exception as exc:  # the choke point for the stream's own failures
            raise ModelError(f"{self.base_url}: stream broke off: {type(exc).__name__}: {exc}") from exc
        finally:
            chunks.close()
        yield self._streamed(request, streamed, "".join(parts), retries, time.perf_counter() - started, kind, refused)

    async def astream(self, request: ModelRequest) -> AsyncIterator[str | Completion]:
        """`stream` on the running event loop, through the pooled async client."""
        chat = self.mode == "chat" or request.dialect == "native"
        chunks, retries, _, kind, refused = await self._asend(request, chat, stream=True)
        started = time.perf_counter()
        streamed = StreamedResponse(chat)
        parts: list[str] = []
        try:
            async for chunk in chunks:
                text = streamed.add(chunk)
                if text:
                    parts.append(text)
                    yield text
        except Exception as exc:  # the choke point for the stream's own failures
            raise ModelError(f"{self.base_url}: stream broke off: {type(exc).__name__}: {exc}") from exc
        finally:
            await chunks.close()
        yield self._streamed(request, streamed, "".join(parts), retries, time.perf_counter() - started, kind, refused)

    def _send(self, request: ModelRequest, chat: bool, stream: bool) -> tuple[Any, int, float, str, list[str]]:
        """Send the request with the strongest constraint the server takes (a refused one
        falls back to the next weaker): (the response's JSON object, or the stream of its
        chunks; retries; seconds; the kind sent; the kinds refused)."""
        server = self.server_kind()
        refused: list[str] = []
        while True:
            kind = self._kind(request, chat, server, refused)
            try:
                response, retries, elapsed = self._call(self.client, chat, self._body(request, chat, kind, server,
                                                                                      stream), stream)
                return response, retries, elapsed, kind, refused
            except ModelError as exc:
                if kind == "off" or not _is_rejection(exc):
                    raise
                refused.append(kind)

    async def _asend(self, request: ModelRequest, chat: bool, stream: bool) -> tuple[Any, int, float, str, list[str]]:
        """`_send`, awaited, through the pooled async client."""
        server = self.server if self.server is not None or self.constrain == "off" else None
        if server is None:
            server = await asyncio.to_thread(self.server_kind)
        client = self._async_client()
        refused: list[str] = []
        while True:
            kind = self._kind(request, chat, server, refused)
            try:
                response, retries, elapsed = await self._acall(client, chat, self._body(request, chat, kind, server,
                                                                                        stream), stream)
                return response, retries, elapsed, kind, refused
            except ModelError as exc:
                if kind == "off" or not _is_rejection(exc):
                    raise
                refused.append(kind)

    def _streamed(
        self, request: ModelRequest, streamed: StreamedResponse, text: str, retries: int, elapsed: float,
        kind: str, refused: Sequence[str],
    ) -> Completion:
        """The Completion that ends a stream (text empty: the deltas are the text)."""
        names = api_tool_names([str(t["name"]) for t in request.tools])
        calls = tuple(ToolCall(names.get(name, name), arguments, call_id)
                      for name, arguments, call_id in streamed.tool_calls())
        out = Completion("", _usage({"usage": streamed.usage}, request.prompt, text), calls,
                         self._meta(retries, elapsed, streamed.finish_reason))
        return self._constrained(out, streamed.chat, kind, refused)

    def server_kind(self) -> str:
        """The configured `server`, else the probed one (probed once, then cached);
        "other" when constrain is "off" (nothing is probed)."""
        if self.server is None:
            if self.constrain == "off":
                return "other"
            from loopwright.models.constrain import detect_server

            with self._probe_lock:
                if self.server is None:
                    self.server = detect_server(self.base_url, self._api_key, min(self.timeout_s, 5.0))
        return self.server

    def _gbnf(self, request: ModelRequest) -> str | None:
        return grammar_for(request, plan_max_steps=self.plan_max_steps, exclude_known=self.exclude_known)

    def _kind(self, request: ModelRequest, chat: bool, server: str, refused: Sequence[str]) -> str:
        """The constraint this call sends: the one asked for (or "auto"'s choice for
        `server`) when it applies to the request, else the next weaker one that does;
        kinds the server refused are skipped."""
        wanted = self.constrain
        if wanted == "off":
            return "off"
        if wanted == "auto":
            wanted = "grammar" if server in GRAMMAR_SERVERS else "json_schema"
        skip = set(refused) | {kind for kind, endpoint in self._rejected if endpoint == chat}
        if wanted == "grammar" and "grammar" not in skip and self._gbnf(request) is not None:
            return "grammar"
        if "json_schema" not in skip and chat and _schema_applies(request):
            return "json_schema"
        return "off"

    def _body(self, request: ModelRequest, chat: bool, kind: str, server: str, stream: bool = False) -> dict[str, Any]:
        """The request's JSON body, as sent."""
        if not chat:
            kwargs = self._text_body(request)
        else:
            kwargs = self._chat_body(request, strict=kind == "json_schema", tools=kind != "grammar")
            if kind == "json_schema" and request.output_schema is not None:
                kwargs["response_format"] = response_format(server, request.output_schema)
        if kind == "grammar":
            gbnf = self._gbnf(request) or ""
            kwargs.update(grammar_fields(server, gbnf))
            wanted = request.max_tokens or self.max_tokens
            kwargs["max_tokens"] = max(wanted, CONSTRAINED_MIN_TOKENS.get(request.purpose, 0))
        if stream:  # usage comes in a last chunk when the server honours include_usage
            kwargs["stream"] = True
            kwargs["stream_options"] = {"include_usage": True}
        return kwargs

    def _completion(
        self, request: ModelRequest, chat: bool, response: dict[str, Any], retries: int, elapsed: float,
        kind: str, refused: Sequence[str],
    ) -> Completion:
        """The Completion, with the constraint sent recorded; kinds refused on the way
        are remembered now that a weaker one went through."""
        out = (self._chat_completion if chat else self._text_completion)(request, response, retries, elapsed)
        return self._constrained(out, chat, kind, refused)

    def _constrained(self, out: Completion, chat: bool, kind: str, refused: Sequence[str]) -> Completion:
        out.meta["constrain"] = kind
        if refused:
            out.meta["constrain_rejected"] = list(refused)
            self._rejected.update((r, chat) for r in refused)
        return out

    def _async_client(self) -> Any:
        loop = asyncio.get_running_loop()
        client = self._aclients.get(loop)
        if client is None:
            import openai
            from openai._constants import DEFAULT_CONNECTION_LIMITS

            # up to pool_size connections, but at most _IDLE_CONNECTIONS kept idle: the pool
            # checks every idle connection (a poll each) on every request. At 256 runs in
            # flight, one idle per run cost ~2 ms of CPU a run more than reconnecting, and
            # openai's cap of 100 ~10% more than 32 (benchmarks/batch.py)
            idle = min(self.pool_size, _IDLE_CONNECTIONS)
            pool = type(DEFAULT_CONNECTION_LIMITS)(
                max_connections=max(self.pool_size, 1), max_keepalive_connections=max(idle, 1)
            )
            client = openai.AsyncOpenAI(
                base_url=self.base_url, api_key=self._api_key, timeout=self.timeout_s, max_retries=0,
                http_client=openai.DefaultAsyncHttpxClient(limits=pool, timeout=self.timeout_s),
            )
            self._aclients[loop] = client
        return client

    async def _acall(self, client: Any, chat: bool, body: dict[str, Any], stream: bool = False) -> tuple[Any, int, float]:
        """`_call`, awaited: the same retries, with asyncio.sleep between them."""
        import openai

        retries = 0
        started = time.perf_counter()
        path = _CHAT_PATH if chat else _TEXT_PATH
        while True:
            try:
                if stream:  # the connection is open and the answer's status read: no retry after this
                    chunks = await client.post(path, body=body, cast_to=object, stream=True,
                                               stream_cls=openai.AsyncStream[object])
                    return chunks, retries, time.perf_counter() - started
                response = await client.post(path, body=body, cast_to=object)
                return _json_object(response, self.base_url), retries, time.perf_counter() - started
            except openai.OpenAIError as exc:
                if not _is_transient(exc):
                    raise ModelError(f"{self.base_url}: {type(exc).__name__}: {exc}") from exc
                if retries >= self.max_retries or run_retries():  # the run's retry= decides
                    raise _given_up(self.base_url, exc, retries) from exc
                await asyncio.sleep(self.backoff_s * 2**retries)
                retries += 1

    def _text_body(self, request: ModelRequest) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "prompt": request.prompt,
            "max_tokens": request.max_tokens or self.max_tokens,
            "temperature": self.temperature,
        }
        if request.stop:
            kwargs["stop"] = list(request.stop)
        if self.seed is not None:
            kwargs["seed"] = self.seed
        return kwargs

    def _text_completion(self, request: ModelRequest, response: dict[str, Any], retries: int,
                         elapsed: float) -> Completion:
        choice = _first_choice(response, self.base_url)
        text = choice.get("text") or ""
        return Completion(
            text=text,
            usage=_usage(response, request.prompt, text),
            meta=self._meta(retries, elapsed, choice.get("finish_reason")),
        )

    def _chat_body(self, request: ModelRequest, *, strict: bool = False, tools: bool = True) -> dict[str, Any]:
        names = api_tool_names([str(t["name"]) for t in request.tools])
        to_api = {v: k for k, v in names.items()}
        messages = [_api_message(m, to_api) for m in request.messages] or [
            {"role": "user", "content": request.prompt}
        ]
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": request.max_tokens or self.max_tokens,
            "temperature": self.temperature,
        }
        if self.seed is not None:
            kwargs["seed"] = self.seed
        if request.tools and tools:
            kwargs["tools"] = [_api_tool(t, to_api[str(t["name"])], strict) for t in request.tools]
            choice_name = (
                self.tool_choice(request) if callable(self.tool_choice) else self.tool_choice
            )
            kwargs["tool_choice"] = _api_tool_choice(choice_name, to_api)
        return kwargs

    def _chat_completion(self, request: ModelRequest, response: dict[str, Any], retries: int,
                         elapsed: float) -> Completion:
        names = api_tool_names([str(t["name"]) for t in request.tools])
        choice = _first_choice(response, self.base_url)
        message = choice.get("message") or {}
        text = message.get("content") or ""
        calls = tuple(
            ToolCall(names.get(name, name), function.get("arguments") or "", call.get("id"))
            for call in (message.get("tool_calls") or ())
            if isinstance(call, dict) and isinstance(function := call.get("function"), dict)
            and isinstance(name := function.get("name"), str)
        )
        return Completion(
            text=text,
            usage=_usage(response, request.prompt, text),
            tool_calls=calls,
            meta=self._meta(retries, elapsed, choice.get("finish_reason")),
        )

    def _call(self, client: Any, chat: bool, body: dict[str, Any], stream: bool = False) -> tuple[Any, int, float]:
        """POST the body to the completions (or chat completions) endpoint, with retries on
        transient errors: (the response's JSON object, or with `stream` the stream of its
        chunks as JSON objects; retries; seconds).

        Through the client's own `post`, which keeps its base URL, headers, auth, timeouts
        and error types, but with the body as it is and the JSON answer as a dict: the
        typed `create` re-walks the arguments against their TypedDicts and builds pydantic
        response models, a third of a call's CPU, for fields this reads four of."""
        import openai

        retries = 0
        started = time.perf_counter()
        path = _CHAT_PATH if chat else _TEXT_PATH
        while True:
            try:
                if stream:  # the connection is open and the answer's status read: no retry after this
                    chunks = client.post(path, body=body, cast_to=object, stream=True, stream_cls=openai.Stream[object])
                    return chunks, retries, time.perf_counter() - started
                response = client.post(path, body=body, cast_to=object)
                return _json_object(response, self.base_url), retries, time.perf_counter() - started
            except openai.OpenAIError as exc:
                if not _is_transient(exc):
                    raise ModelError(f"{self.base_url}: {type(exc).__name__}: {exc}") from exc
                if retries >= self.max_retries or run_retries():  # the run's retry= decides
                    raise _given_up(self.base_url, exc, retries) from exc
                time.sleep(self.backoff_s * 2**retries)
                retries += 1

    def _meta(self, retries: int, elapsed: float, finish_reason: Any) -> dict[str, Any]:
        return {
            "model": self.model,
            "retries": retries,
            "finish_reason": finish_reason,
            "model_s": round(elapsed, 6),
        }


def _schema_applies(request: ModelRequest) -> bool:
    """Whether "json_schema" has something to send for this chat request: the tools of
    a native step, or the schema of a typed final answer (a native step's or a
    solver's)."""
    if request.dialect == "native" and request.tools:
        return True
    return request.output_schema is not None and (request.dialect == "native" or request.purpose == "solve")


def _api_tool(tool: Mapping[str, Any], name: str, strict: bool) -> dict[str, Any]:
    """A tool as an API function; with `strict`, marked strict when its schema allows."""
    parameters = tool.get("parameters") or {"type": "object", "properties": {}}
    function: dict[str, Any] = {
        "name": name, "description": str(tool.get("description", "")), "parameters": parameters,
    }
    strict_parameters = strict_schema(parameters) if strict else None
    if strict_parameters is not None:
        function["parameters"] = strict_parameters
        function["strict"] = True
    return {"type": "function", "function": function}


def _api_tool_choice(choice: str, to_api: Mapping[str, str]) -> Any:
    if choice in ("auto", "required", "none"):
        return choice
    if choice in to_api:
        return {"type": "function", "function": {"name": to_api[choice]}}
    raise ValueError(
        f"tool_choice {choice!r} is neither 'auto', 'required', 'none' nor a tool name "
        f"({', '.join(sorted(to_api))})"
    )


def _api_message(message: Mapping[str, Any], to_api: Mapping[str, str]) -> dict[str, Any]:
    """A chat message with tool names mapped to their API names, and an empty string for
    the null content of an assistant turn that only calls tools."""
    out = dict(message)
    calls = out.get("tool_calls")
    if calls and out.get("content") is None:
        out["content"] = ""  # some servers (llama-cpp-python's) refuse a null content
    if calls:
        mapped = []
        for call in calls:
            call = dict(call)
            function = dict(call.get("function") or {})
            if "name" in function:
                function["name"] = to_api.get(function["name"], function["name"])
            call["function"] = function
            mapped.append(call)
        out["tool_calls"] = mapped
    if out.get("role") == "tool" and "name" in out:
        out["name"] = to_api.get(out["name"], out["name"])
    return out


_IDLE_CONNECTIONS = 32
_TEXT_PATH = "/completions"
_CHAT_PATH = "/chat/completions"


def _json_object(response: Any, where: str) -> dict[str, Any]:
    """The response body as a JSON object; anything else is a ModelError."""
    if not isinstance(response, dict):
        raise ModelError(f"{where}: the server's answer is not a JSON object: {str(response)[:200]!r}")
    return response


def _first_choice(response: dict[str, Any], where: str) -> dict[str, Any]:
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ModelError(f"{where}: the server's answer has no choices: {str(response)[:200]!r}")
    return choices[0]


def _usage(response: dict[str, Any], prompt: str, text: str) -> Usage:
    """Usage as the server reports it; cached prompt tokens, when reported, are not
    counted as evaluated. Estimated when the server reports nothing."""
    usage = response.get("usage")
    if not isinstance(usage, dict) or usage.get("prompt_tokens") is None:
        return Usage.estimate(prompt, text)
    details = usage.get("prompt_tokens_details")
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    sent = int(usage["prompt_tokens"])
    return Usage(sent, max(sent - cached, 0), int(usage.get("completion_tokens") or 0))
