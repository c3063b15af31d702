"""Headless Chromium driven over the Chrome DevTools protocol (a websocket): load a page,
evaluate JavaScript in it, take a screenshot. For the tests of the page that watches a run."""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
import websocket


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no chromium binary on PATH (scripts/test_deps.sh installs Debian's chromium)")


class Browser:
    """One headless Chromium with one page at `url`; `close()` ends the browser."""

    def __init__(self, url: str, profile: Path, size: tuple[int, int] = (1200, 900),
                 args: tuple[str, ...] = ()) -> None:
        profile.mkdir(parents=True, exist_ok=True)
        self.log = (profile / "chromium.log").open("w")
        self.proc = subprocess.Popen(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
             "--remote-debugging-port=0", "--remote-allow-origins=*", f"--user-data-dir={profile}",
             f"--window-size={size[0]},{size[1]}", "--hide-scrollbars", *args, url],
            stdout=self.log, stderr=subprocess.STDOUT)
        self._ids = itertools.count(1)
        try:
            port = self.port = self._port(profile / "DevToolsActivePort")
            pages = [t for t in httpx2.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
                     if t["type"] == "page"]
            self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=30,
                                                  suppress_origin=True)
        except BaseException:
            self.close()
            raise

    def _port(self, marker: Path) -> int:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if marker.exists() and marker.read_text().strip():
                return int(marker.read_text().split()[0])
            assert self.proc.poll() is None, "chromium exited at start"
            time.sleep(0.05)
        raise AssertionError("chromium did not open its DevTools port")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result (events that arrive meanwhile are skipped)."""
        call_id = next(self._ids)
        self.ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == call_id:
                assert "error" not in reply, reply
                return reply["result"]  # type: ignore[no-any-return]

    def eval(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0) -> Any:
        """Poll `expression` until it is truthy (one that throws, say before the page has
        loaded, counts as false); its value."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
            value = None if "exceptionDetails" in result else result["result"].get("value")
            if value:
                return value
            assert time.monotonic() < deadline, f"the page never made {expression!r} true"
            time.sleep(0.02)

    def eval_in_frame(self, url_start: str, expression: str) -> Any:
        """Evaluate in the (out-of-process) frame whose address starts with `url_start`:
        what a page of another origin cannot read of the frames it embeds."""
        [frame] = [t for t in httpx2.get(f"http://127.0.0.1:{self.port}/json/list", timeout=10).json()
                   if t["type"] == "iframe" and t["url"].startswith(url_start)]
        ws = websocket.create_connection(frame["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)
        try:
            ws.send(json.dumps({"id": 1, "method": "Runtime.evaluate",
                                "params": {"expression": expression, "returnByValue": True}}))
            while True:
                reply = json.loads(ws.recv())
                if reply.get("id") == 1:
                    assert "error" not in reply, reply
                    return reply["result"]["result"].get("value")
        finally:
            ws.close()

    def screenshot(self, path: Path) -> Path:
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        return path

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
