"""Who may call a served app: the checks in front of `loopwright serve` and `loopwright mcp
serve`, as one ASGI middleware (standard library only, so both servers share it).

A browser lets any page send requests to any address, so an app on 127.0.0.1 is reachable
from every site its user visits, and a name the attacker controls can be pointed at
127.0.0.1 (DNS rebinding). In front of the app, in this order:

- the connection: one that arrived on an address other than loopback is served only when a
  token is configured (403);
- Host: loopback names on the server's port, the address the connection arrived on (an
  address typed as digits cannot be rebound), and the names configured (421);
- the token, when one is configured: `Authorization: Bearer TOKEN` on every request but the
  open paths (the page's static files), compared in constant time (401);
- Origin: outside the open paths, only the server's own origin and the configured ones; a
  request without Origin (a program, not a page) passes unless `Sec-Fetch-Site` says a
  page of another origin sent it (403);
- mutations (any method but GET, HEAD, OPTIONS), when `json_only`: `Content-Type:
  application/json`. A page of another origin can send text/plain or a form without asking;
  JSON needs a CORS preflight, which these apps never grant (415);
- the body: a `Content-Length` past the limit is refused before reading, a body that grows
  past it while read is refused there (413); the app gets the body whole.

Every response gets headers that keep it out of frames (`X-Frame-Options: DENY`, CSP
`frame-ancestors 'none'`) and stop content sniffing.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Final

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY: Final = 1024 * 1024
"""The default body limit, bytes."""
TOKEN_ENV: Final = "LOOPWRIGHT_TOKEN"
"""The environment variable the commands read the token from."""

LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")
_SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
_SAME_ORIGIN_FETCH: Final = frozenset({"same-origin", "none"})
_DEFAULT_PORTS: Final = {"http": 80, "https": 443, "ws": 80, "wss": 443}

SECURITY_HEADERS: Final = (
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy",
     b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
     b"frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-resource-policy", b"same-origin"),
)


def is_loopback(host: str | None) -> bool:
    """Whether `host` (an address to bind or a connection's local address) is loopback:
    127.0.0.0/8, ::1 (also as an IPv4-mapped address) or the name localhost."""
    if not host:
        return False
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool((mapped or address).is_loopback)


def _split_host(value: str, default_port: int | None) -> tuple[str, int | None] | None:
    """`name[:port]` or `[v6]:port`, lowercased, with `default_port` when none is given;
    None when it is not a host."""
    value = value.strip().lower()
    if not value or any(c in value for c in "/@?#\\ "):
        return None
    if value.startswith("["):
        name, bracket, rest = value.partition("]")
        name += bracket
        if not bracket or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:]
    else:
        name, _, port_text = value.partition(":")
    if not name or name == "[]":
        return None
    if not port_text:
        return name, default_port
    if not port_text.isascii() or not port_text.isdigit() or len(port_text) > 5:
        return None
    return name, int(port_text)


def _split_origin(value: str) -> tuple[str, str, int] | None:
    """`scheme://host[:port]` as (scheme, host, port); None for anything else ("null" too)."""
    scheme, sep, rest = value.strip().lower().partition("://")
    if not sep or scheme not in _DEFAULT_PORTS:
        return None
    host = _split_host(rest, _DEFAULT_PORTS[scheme])
    return None if host is None or host[1] is None else (scheme, host[0], host[1])


@dataclass(frozen=True)
class Access:
    """Who may call: `token` (None: none needed, and only loopback connections are served),
    `hosts` beyond the defaults (`name` on any port, or `name:port`), `origins` beyond the
    server's own (`scheme://host[:port]`), the body limit in bytes, whether mutations must
    be JSON, and the paths that need no token nor Origin (the page's own files)."""

    token: str | None = None
    hosts: tuple[str, ...] = ()
    origins: tuple[str, ...] = ()
    max_body: int = MAX_BODY
    json_only: bool = True
    open_paths: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if self.token is not None and not self.token.strip():
            raise ValueError("the token is empty; give a secret, or none for loopback only")
        if self.max_body < 1:
            raise ValueError(f"max_body must be at least 1 byte, got {self.max_body!r}")
        for host in self.hosts:
            if _split_host(host, None) is None:
                raise ValueError(f"not a host name (name or name:port): {host!r}")
        for origin in self.origins:
            if _split_origin(origin) is None:
                raise ValueError(f"not an origin (scheme://host[:port]): {origin!r}")


class Guard:
    """ASGI middleware that checks each request against `access` before `app` sees it (see
    the module's docstring) and adds the framing and sniffing headers to every response."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app, self.access = app, access
        self._token = None if access.token is None else access.token.encode("utf-8")
        self._origins = {o for o in map(_split_origin, access.origins) if o is not None}
        self._hosts = {host for host in (_split_host(h, None) for h in access.hosts) if host is not None}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # neither app speaks websocket: refuse the handshake
            if (await receive())["type"] == "websocket.connect":
                await send({"type": "websocket.close", "code": 1008})
            return
        refusal = self.check(scope)
        if refusal is not None:
            await _refuse(scope, send, *refusal)
            return
        body = await _read_body(receive, self.access.max_body)
        if body is None:
            await _refuse(scope, send, 413, f"the body is over the limit of {self.access.max_body} bytes")
            return

        async def replay() -> Message:
            return body.popleft() if body else await receive()

        await self.app(scope, replay, _with_headers(send))

    def check(self, scope: Scope) -> tuple[int, str] | None:
        """(status, why) when the request is refused before its body is read; None to go on."""
        headers = _headers(scope)
        server = scope.get("server")
        local = str(server[0]) if server else None
        port = int(server[1]) if server and server[1] is not None else None
        if server and self._token is None and not is_loopback(local):
            return 403, "this server takes connections off loopback only with a token (--token or LOOPWRIGHT_TOKEN)"
        scheme = str(scope.get("scheme", "http"))
        host = _split_host(headers.get("host", ""), _DEFAULT_PORTS.get(scheme, 80))
        if host is None or not self._host_allowed(host, local, port):
            return 421, f"this server does not answer to the host {headers.get('host', '')[:100]!r}"
        path = str(scope.get("path", ""))
        open_path = path in self.access.open_paths and scope.get("method") in _SAFE_METHODS
        if self._token is not None and not open_path and not self._token_given(headers):
            return 401, "send the server's token as 'Authorization: Bearer TOKEN'"
        if not open_path and not self._origin_allowed(headers, (scheme, host[0], host[1] or 0)):
            return 403, "requests from pages of other origins are refused"
        if scope.get("method") not in _SAFE_METHODS:
            if self.access.json_only:
                media = headers.get("content-type", "").partition(";")[0].strip().lower()
                if media != "application/json":
                    return 415, f"send the body as application/json (got {media[:100] or 'no content type'!r})"
        length = headers.get("content-length")
        if length is not None:
            if not (length.isascii() and length.isdigit()) or len(length) > 18:
                return 400, "Content-Length is not a whole number"
            if int(length) > self.access.max_body:
                return 413, f"the body is over the limit of {self.access.max_body} bytes"
        return None

    def _host_allowed(self, host: tuple[str, int | None], local: str | None, port: int | None) -> bool:
        name, host_port = host
        if port is not None and host_port == port:
            if name in LOOPBACK_NAMES:
                return True
            if local is not None and name == _bracketed(local):
                return True
        return host in self._hosts or (name, None) in self._hosts  # a name given without a port: any port

    def _token_given(self, headers: dict[str, str]) -> bool:
        scheme, _, given = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or self._token is None:
            return False
        return hmac.compare_digest(given.strip().encode("utf-8"), self._token)

    def _origin_allowed(self, headers: dict[str, str], own: tuple[str, str, int]) -> bool:
        origin = headers.get("origin")
        if origin is None:
            return headers.get("sec-fetch-site", "same-origin") in _SAME_ORIGIN_FETCH
        parsed = _split_origin(origin)
        return parsed is not None and (parsed == own or parsed in self._origins)


def _bracketed(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lowercased name; a repeated one keeps its first value."""
    out: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        out.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return out


async def _read_body(receive: Receive, limit: int) -> deque[Message] | None:
    """The request's messages with the body read whole, to hand to the app; None when the
    body grows past `limit` (it is not read further)."""
    parts: list[bytes] = []
    size = 0
    out: deque[Message] = deque()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            out.append(message)  # the client left: the app hears it
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
        if not message.get("more_body", False):
            out.appendleft({"type": "http.request", "body": b"".join(parts), "more_body": False})
            break
    return out


def _with_headers(send: Send) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", ()))
            present = {bytes(name).lower() for name, _ in headers}
            headers += [(name, value) for name, value in SECURITY_HEADERS if name not in present]
            message = {**message, "headers": headers}
        await send(message)

    return sending


async def _refuse(scope: Scope, send: Send, status: int, why: str) -> None:
    body = json.dumps({"error": why}).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"cache-control", b"no-store"), *SECURITY_HEADERS]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="loopwright"'))
    if status == 413:
        headers.append((b"connection", b"close"))
    await _with_headers(send)({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body if scope.get("method") != "HEAD" else b""})


__all__ = ["LOOPBACK_NAMES", "MAX_BODY", "SECURITY_HEADERS", "TOKEN_ENV", "Access", "Guard", "is_loopback"]
