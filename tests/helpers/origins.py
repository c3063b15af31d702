"""Another site for the browser tests: fixed pages served from 127.0.0.1 on a port of their
own, which a browser started with `RESOLVE` reaches as http://evil.test:PORT/ (another
site, not only another origin). `rebound.test` resolves to 127.0.0.1 too: a name an
attacker pointed at the loopback address (DNS rebinding)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

RESOLVE = "--host-resolver-rules=MAP evil.test 127.0.0.1, MAP rebound.test 127.0.0.1"


@contextmanager
def other_site(pages: Mapping[str, str]) -> Iterator[str]:
    """Serve `pages` (path -> HTML); yield the site's address, http://evil.test:PORT."""

    class Pages(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path.partition("?")[0], "").encode("utf-8")
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://evil.test:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
