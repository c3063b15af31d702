"""loopwright.httpguard in front of the served app: loopwright.ui on a real uvicorn, called
with a real HTTP client and raw sockets. Who may call (Host, token, Origin, the address
connected to), what a mutation must be (JSON), how big a body may be, malformed input,
and the headers every response carries. The browser's side of the same checks is in
tests/test_serve.py."""

from __future__ import annotations

import select
import socket
from collections.abc import Iterable

import httpx2
import pytest

import loopwright as lw
from helpers.agui import serving
from loopwright.httpguard import Access, is_loopback
from loopwright.ui import app

FINAL = "Thought: I know it\nFinal Answer: 5"
WIPE = b'{"task": "wipe secrets.db"}'


def _app(**settings: object) -> object:
    return app(lw.ScriptedPolicy([FINAL] * 8), lw.ToolRegistry(), **settings)


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def _lan_address() -> str:
    """An address of this machine other than loopback (the route out, no packet sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("10.255.255.255", 1))
        except OSError:
            pytest.skip("this machine has no address but loopback")
        address = str(sock.getsockname()[0])
    if is_loopback(address):
        pytest.skip("this machine has no address but loopback")
    return address


def _raw(port: int, head: bytes, body: Iterable[bytes] = ()) -> tuple[bytes, int]:
    """Send a request's head, then its body piece by piece until the server answers;
    (the response's head, the body bytes sent before it came)."""
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        for piece in body:
            if select.select([sock], [], [], 0)[0]:  # an answer (or a close) came
                break
            try:
                sock.sendall(piece)
            except OSError:  # the server answered and closed
                break
            sent += len(piece)
        reply = b""
        while b"\r\n\r\n" not in reply:
            got = sock.recv(65536)
            if not got:
                break
            reply += got
    return reply, sent


def test_a_mutation_that_is_not_json_is_refused_with_415() -> None:
    served = _app()
    with serving(served) as base:
        statuses = {(path, kind): httpx2.post(f"{base}{path}", content=WIPE,
                                             headers={"Content-Type": kind} if kind else {}).status_code
                    for path in ("/runs", "/agui", "/runs/r1/approvals/k1")
                    for kind in ("text/plain", "application/x-www-form-urlencoded",
                                 "multipart/form-data; boundary=x", "application/jsonp", None)}
        held = dict(served.state.runs.runs)
        ok = httpx2.post(f"{base}/runs", content=b'{"task": "hi"}',
                         headers={"Content-Type": "application/json; charset=utf-8"})
    assert set(statuses.values()) == {415}, statuses
    assert held == {}  # none of them started a run
    assert ok.status_code == 201


def test_only_the_servers_own_origin_and_the_allowed_ones_may_call() -> None:
    with serving(_app(allowed_origins=["https://ui.example"])) as base:
        port = _port(base)

        def post(**headers: str) -> int:
            return httpx2.post(f"{base}/runs", json={"task": "hi"}, headers=headers).status_code

        refused = [post(Origin="http://evil.example"), post(Origin=f"http://127.0.0.1:{port + 1}"),
                   post(Origin=f"http://localhost:{port}"),  # Host says 127.0.0.1: another origin
                   post(Origin="null"), post(Origin="https://ui.example:444"),
                   post(**{"Sec-Fetch-Site": "cross-site"}), post(**{"Sec-Fetch-Site": "same-site"})]
        allowed = [post(Origin=f"http://127.0.0.1:{port}"),
                   post(Origin=f"http://localhost:{port}", Host=f"localhost:{port}"),
                   post(Origin="https://ui.example"), post(**{"Sec-Fetch-Site": "same-origin"}),
                   post(**{"Sec-Fetch-Site": "none"}), post()]
        read = httpx2.get(f"{base}/runs", headers={"Origin": "http://evil.example"})
    assert refused == [403] * 7
    assert allowed == [201] * 6
    assert read.status_code == 403  # reads too: no page of another origin gets an answer


def test_a_host_that_is_not_the_servers_is_refused_with_421() -> None:
    with serving(_app(allowed_hosts=["agent.lan", "proxy.lan:8443"])) as base:
        port = _port(base)

        def get(host: str) -> int:
            return httpx2.get(f"{base}/runs", headers={"Host": host}).status_code

        refused = [get("attacker.example"), get(f"attacker.example:{port}"), get(f"127.0.0.1:{port + 1}"),
                   get("127.0.0.1"), get("proxy.lan"), get(f"proxy.lan:{port}"), get(f"127.0.0.1.evil:{port}"),
                   get(f"user@127.0.0.1:{port}"), get(f"127.0.0.1:{port}0")]
        allowed = [get(f"127.0.0.1:{port}"), get(f"localhost:{port}"), get(f"LOCALHOST:{port}"),
                   get(f"[::1]:{port}"), get("agent.lan"), get(f"agent.lan:{port}"), get("proxy.lan:8443")]
    assert refused == [421] * 9
    assert allowed == [200] * 7


def test_with_a_token_every_request_but_the_pages_files_must_carry_it() -> None:
    with serving(_app(token="s3cret-t0ken")) as base:
        def post(authorization: str | None) -> httpx2.Response:
            headers = {} if authorization is None else {"Authorization": authorization}
            return httpx2.post(f"{base}/runs", json={"task": "hi"}, headers=headers)

        bare, wrong, basic, short = post(None), post("Bearer s3cret"), post("Basic s3cret-t0ken"), post("Bearer")
        right = post("Bearer s3cret-t0ken")
        run_id = right.json()["run_id"]
        reads = [httpx2.get(f"{base}{path}").status_code
                 for path in ("/runs", f"/runs/{run_id}", f"/runs/{run_id}/events")]
        authorised = httpx2.get(f"{base}/runs/{run_id}/events", headers={"Authorization": "bearer s3cret-t0ken"})
        page = [httpx2.get(f"{base}{path}").status_code for path in ("/", "/serve.js", "/serve.css")]
    assert [r.status_code for r in (bare, wrong, basic, short)] == [401] * 4
    assert bare.headers["www-authenticate"].startswith("Bearer")
    assert right.status_code == 201
    assert reads == [401] * 3 and authorised.status_code == 200
    assert page == [200] * 3  # the page has no secrets; it asks for the token


def test_a_connection_off_loopback_is_served_only_with_a_token() -> None:
    address = _lan_address()
    with serving(_app(), host="0.0.0.0") as base:
        port = _port(base)
        off = [httpx2.get(f"http://{address}:{port}{path}") for path in ("/", "/runs")]
        on = httpx2.get(f"{base}/runs")  # the same server over loopback
    assert [r.status_code for r in off] == [403, 403] and "token" in off[1].json()["error"]
    assert on.status_code == 200
    with serving(_app(token="s3cret-t0ken"), host="0.0.0.0") as base:
        port = _port(base)
        bearer = {"Authorization": "Bearer s3cret-t0ken"}
        bare = httpx2.get(f"http://{address}:{port}/runs")
        carried = httpx2.get(f"http://{address}:{port}/runs", headers=bearer)  # Host: the address connected to
        renamed = httpx2.get(f"http://{address}:{port}/runs", headers={**bearer, "Host": f"attacker.example:{port}"})
    assert (bare.status_code, carried.status_code, renamed.status_code) == (401, 200, 421)


def test_a_body_declared_over_the_limit_is_refused_before_it_is_sent() -> None:
    served = _app()
    with serving(served) as base:
        head = (f"POST /runs HTTP/1.1\r\nHost: 127.0.0.1:{_port(base)}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {300 * 1024 * 1024}\r\n\r\n").encode()
        reply, _ = _raw(_port(base), head)  # not a byte of the 300 MB body goes out
        bad_length = _raw(_port(base), head.replace(b"314572800", b"12ab"))[0]
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert bad_length.startswith(b"HTTP/1.1 400"), bad_length[:200]
    assert served.state.runs.runs == {}


def test_a_body_that_grows_past_the_limit_while_read_is_refused() -> None:
    with serving(_app(max_body=256 * 1024)) as base:
        head = (f"POST /runs HTTP/1.1\r\nHost: 127.0.0.1:{_port(base)}\r\nContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\n\r\n").encode()
        piece = b"10000\r\n" + b" " * 0x10000 + b"\r\n"  # 64 KiB a chunk: 16 MiB in all
        reply, sent = _raw(_port(base), head, [b'10\r\n{"task": "hi"}  \r\n', *[piece] * 256, b"0\r\n\r\n"])
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert sent < 128 * len(piece)  # it stopped reading: half of the 16 MiB never went out


def test_a_body_at_the_limit_reaches_the_app_and_one_byte_more_does_not() -> None:
    body = b'{"task": "hi"}'
    with serving(_app(max_body=len(body))) as base:
        at = httpx2.post(f"{base}/runs", content=body, headers={"Content-Type": "application/json"})
        over = httpx2.post(f"{base}/runs", content=body + b" ", headers={"Content-Type": "application/json"})
        streamed = httpx2.post(f"{base}/runs", content=iter([body[:5], body[5:] + b" "]),
                               headers={"Content-Type": "application/json"})  # chunked: no Content-Length
    assert (at.status_code, over.status_code, streamed.status_code) == (201, 413, 413)


def test_malformed_input_is_a_4xx_never_a_500() -> None:
    with serving(_app()) as base:
        def post(path: str, body: bytes) -> int:
            return httpx2.post(f"{base}{path}", content=body, headers={"Content-Type": "application/json"}).status_code

        run_id = httpx2.post(f"{base}/runs", json={"task": "hi"}).json()["run_id"]
        bodies = [b"[" * 200000, b'{"task": ' + b"1" * 5000 + b"}", b"\xff\xfe{", b"", b'{"task": "a"']
        statuses = {path: [post(path, body) for body in bodies]
                    for path in ("/runs", "/agui", f"/runs/{run_id}/approvals/k")}
        deep = post("/agui", b'{"threadId": "t", "runId": "r", "messages": ' + b"[" * 5000 + b"]" * 5000 + b"}")
        ids = [httpx2.get(f"{base}/runs/{run_id}/events", headers={"Last-Event-ID": value}).status_code
               for value in (b"9" * 5000, b"\xb2", b"-1", b"1e3", b"1 1")]
        answer = httpx2.post(f"{base}/runs/{run_id}/approvals/k", json={"approved": True, "reason": ["x"]})
    assert all(400 <= s < 500 for found in statuses.values() for s in found), statuses
    assert statuses["/runs"] == [400] * 5
    assert 400 <= deep < 500
    assert ids == [400] * 5
    assert answer.status_code == 422


def test_every_response_forbids_framing_and_sniffing() -> None:
    with serving(_app()) as base:
        responses = [httpx2.get(f"{base}/"), httpx2.get(f"{base}/serve.js"), httpx2.get(f"{base}/runs"),
                     httpx2.get(f"{base}/runs/nope"), httpx2.post(f"{base}/runs", content=WIPE),
                     httpx2.get(f"{base}/", headers={"Host": "attacker.example"})]
    assert [r.status_code for r in responses] == [200, 200, 200, 404, 415, 421]
    for response in responses:
        assert response.headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        assert response.headers["x-content-type-options"] == "nosniff"
    assert "access-control-allow-origin" not in {k.lower() for r in responses for k in r.headers}


def test_loopback_is_127_8_and_1_and_localhost_and_nothing_else() -> None:
    assert all(map(is_loopback, ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LocalHost",
                                 "::ffff:127.0.0.1"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "192.0.2.2", "localhost.evil", "127.0.0.1.nip.io", "",
                                     None, "fd00::2"]))


def test_access_refuses_settings_it_cannot_check() -> None:
    for bad in ({"token": "  "}, {"hosts": ("a b",)}, {"hosts": ("h:port",)}, {"origins": ("ui.example",)},
                {"origins": ("ftp://ui.example",)}, {"max_body": 0}):
        with pytest.raises(ValueError):
            Access(**bad)  # type: ignore[arg-type]
