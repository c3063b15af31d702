"""Server-side constrained decoding: what kind of OpenAI-compatible server is at a URL,
and the request fields that carry a constraint to it.

Servers differ in what they take. llama.cpp's server and llama-cpp-python's take a GBNF
`grammar` field; vLLM takes `structured_outputs: {"grammar": ...}`; SGLang takes
`ebnf`; OpenAI proper takes none of these, only strict JSON Schemas (`"strict": true`
on functions, `response_format: {"type": "json_schema", ...}`). `detect_server` asks the
server once; OpenAICompatible decides from its answer (see its docstring).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

SERVERS: Final = ("llama.cpp", "vllm", "sglang", "other")
"""Server kinds: "llama.cpp" covers llama.cpp's own server and llama-cpp-python's."""
GRAMMAR_SERVERS: Final = ("llama.cpp", "vllm", "sglang")
_OWNED_BY: Final = {"llamacpp": "llama.cpp", "llama.cpp": "llama.cpp", "vllm": "vllm", "sglang": "sglang"}


def detect_server(base_url: str, api_key: str | None = None, timeout_s: float = 5.0) -> str:
    """Which of SERVERS answers at `base_url` (an OpenAI-style URL ending in /v1).

    `GET /v1/models`: `owned_by` "llamacpp" (llama.cpp's server), "vllm" or "sglang"
    names the server. Otherwise `GET /openapi.json` at the root: llama-cpp-python's
    server (whose models say `owned_by: "me"`) titles its API "llama.cpp Python API".
    Anything else, an error or a timeout included, is "other": a probe that fails
    falls back to sending no server-specific field, never to an error.
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    base = base_url.rstrip("/")
    root = base[: -len("/v1")] if base.endswith("/v1") else base
    models = _get_json(f"{base}/models", headers, timeout_s)
    entries = models.get("data") if isinstance(models, dict) else None
    for entry in entries if isinstance(entries, list) else ():
        kind = _OWNED_BY.get(str(entry.get("owned_by", "")).lower()) if isinstance(entry, dict) else None
        if kind:
            return kind
    api = _get_json(f"{root}/openapi.json", headers, timeout_s)
    info = api.get("info") if isinstance(api, dict) else None
    if isinstance(info, dict) and "llama.cpp" in str(info.get("title", "")).lower():
        return "llama.cpp"
    return "other"


def _get_json(url: str, headers: Mapping[str, str], timeout_s: float) -> Any:
    """GET `url` as JSON; None on any failure (refused, timed out, not JSON)."""
    import json
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=dict(headers)), timeout=timeout_s) as r:
            return json.loads(r.read(1 << 20))
    except (OSError, ValueError):  # URLError and timeouts are OSErrors
        return None


def grammar_fields(server: str, gbnf: str) -> dict[str, Any]:
    """The request body fields (openai's `extra_body`) that carry a GBNF grammar to
    `server`; llama.cpp's `grammar` field for a server of unknown kind (sent only when
    the user asked for constrain="grammar")."""
    if server == "vllm":
        return {"structured_outputs": {"grammar": gbnf}}
    if server == "sglang":
        return {"ebnf": gbnf}
    return {"grammar": gbnf}


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """A copy of an object schema that strict mode accepts unchanged in meaning
    (`additionalProperties: false` on every object), or None when strict mode would
    change it: an object with optional properties (strict makes every property
    required) or with additional properties allowed, or a root that is not an object."""
    if schema.get("type") != "object":
        return None
    out = copy.deepcopy(dict(schema))
    return out if _strict_in_place(out) else None


def _strict_in_place(node: Any) -> bool:
    if isinstance(node, list):
        return all(_strict_in_place(item) for item in node)
    if not isinstance(node, dict):
        return True
    if node.get("type") == "object" or "properties" in node:
        properties = node.get("properties") or {}
        if set(properties) != set(node.get("required") or ()):
            return False
        if node.get("additionalProperties", False) is not False:
            return False
        node["additionalProperties"] = False
        node.setdefault("properties", {})
    for key in ("properties", "$defs", "definitions"):
        if isinstance(node.get(key), dict) and not all(_strict_in_place(v) for v in node[key].values()):
            return False
    return all(_strict_in_place(node[key]) for key in ("items", "anyOf", "oneOf", "allOf") if key in node)


def response_format(server: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The `response_format` that holds a final answer to `schema`: llama.cpp's
    `json_object` with the schema, else OpenAI's `json_schema`, strict when
    `strict_schema` allows it."""
    if server == "llama.cpp":
        return {"type": "json_object", "schema": dict(schema)}
    strict = strict_schema(schema)
    body: dict[str, Any] = {"name": "final_answer", "schema": strict or dict(schema)}
    if strict is not None:
        body["strict"] = True
    return {"type": "json_schema", "json_schema": body}
