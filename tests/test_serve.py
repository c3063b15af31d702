"""`loopwright serve` and its page: headless Chromium loads the page from a real uvicorn,
starts a run, sees the model's tokens arrive one by one and approves a tool with the
page's button (a screenshot is kept in the test's folder); the command's usage errors; and
(slow) the command on the embedded model, read with a real HTTP client."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

import loopwright as lw
from helpers.agui import check_order, custom, serving, start_run, texts, watch
from helpers.cdp import Browser
from loopwright.interfaces.cli import main
from loopwright.policy import ModelRequest
from loopwright.ui import app

DELETE = 'Thought: I will delete the old notes first\nAction: delete\nAction Input: {"name": "notes.txt"}'
FINAL = "Thought: the notes are gone\nFinal Answer: deleted notes.txt as asked"


class SlowStream:
    """A scripted model that streams each answer word by word, a little apart, the way a
    real model's tokens arrive."""

    name = "slow-scripted"

    def __init__(self, answers: list[str], gap_s: float) -> None:
        self.answers, self.gap_s = list(answers), gap_s

    def complete(self, request: ModelRequest) -> str:
        return self.answers.pop(0)

    def stream(self, request: ModelRequest) -> Iterator[str]:
        text = self.answers.pop(0)
        for i, word in enumerate(text.split(" ")):
            time.sleep(self.gap_s)
            yield word if i == 0 else " " + word


def test_page_shows_tokens_as_they_arrive_and_approves_with_its_button(tmp_path: Path) -> None:
    ran: list[str] = []

    @lw.tool(side_effects="destructive", requires_approval=True)
    def delete(name: str) -> str:
        """Delete a file."""
        ran.append(name)
        return f"deleted {name}"

    policy = SlowStream([DELETE, FINAL], gap_s=0.15)
    with serving(app(policy, lw.ToolRegistry([delete]), max_steps=4)) as base:
        browser = Browser(f"{base}/?task=Delete%20notes.txt", tmp_path / "profile")
        try:
            browser.wait_for("document.readyState === 'complete'")
            first = "document.querySelector('pre.text')"
            seen: list[str] = []
            mid = tmp_path / "streaming.png"
            while len(seen) < 200 and (not seen or seen[-1] != DELETE):  # the first step's text, as it grows
                text = browser.eval(f"{first} ? {first}.textContent : ''")
                if text and (not seen or text != seen[-1]):
                    seen.append(text)
                    if len(text) > len(DELETE) // 2 and not mid.exists():
                        browser.screenshot(mid)  # half the step's text is in
                time.sleep(0.02)
            browser.wait_for("!!document.querySelector('.approval button.approve')")
            assert ran == []  # the tool waits for the button
            browser.eval("document.querySelector('.approval button.approve').click()")
            browser.wait_for("document.getElementById('state').dataset.state === 'finished'")
            answer = browser.eval("document.getElementById('answer').textContent")
            result = browser.eval("document.querySelector('.call pre.result').textContent")
            decided = browser.eval("document.querySelector('.approval .decision').textContent")
            kinds = browser.eval("[...document.querySelectorAll('.step .kind')].map(e => e.textContent)")
            shot = browser.screenshot(tmp_path / "page.png")
        finally:
            browser.close()
    print(f"\nscreenshots: {shot} (finished), {mid} (while streaming)")
    # tokens arrived one by one: the page showed growing prefixes of the step's text
    assert len(seen) >= 3 and seen[-1] == DELETE, seen  # at least two partial texts before the whole
    assert all(DELETE.startswith(s) for s in seen) and seen == sorted(seen, key=len)
    assert answer == "deleted notes.txt as asked"
    assert ran == ["notes.txt"] and result == "→ deleted notes.txt" and decided == "approved"
    assert kinds == ["action", "final"]
    for png in (shot, mid):
        head = png.read_bytes()[:24]
        assert head[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000  # a rendered page


def test_page_shows_the_model_text_as_text_not_html(tmp_path: Path) -> None:
    hostile = 'Thought: <img src=x onerror="document.title=1">\nFinal Answer: <b>bold</b>'
    with serving(app(SlowStream([hostile], gap_s=0.0), lw.ToolRegistry(), max_steps=2)) as base:
        browser = Browser(f"{base}/?task=hi", tmp_path / "profile")
        try:
            browser.wait_for("document.getElementById('state').dataset.state === 'finished'")
            text = browser.eval("document.querySelector('pre.text').textContent")
            images = browser.eval("document.querySelectorAll('main img, main b').length")
            answer = browser.eval("document.getElementById('answer').textContent")
        finally:
            browser.close()
    assert text == hostile and images == 0 and answer == "<b>bold</b>"


def test_serve_refuses_bad_flags_before_serving(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--tools", "no_such_module_here:tools"]) == 2
    assert "no_such_module_here" in capsys.readouterr().err
    assert main(["serve", "--port", "0"]) == 2
    assert main(["serve", "--approval-timeout-s", "-1"]) == 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_serve_streams_a_run_of_the_embedded_model(tmp_path: Path) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "loopwright", "serve", "--port", str(port), "--max-steps", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "LOOPWRIGHT_N_THREADS": "2"})
    try:
        deadline = time.monotonic() + 120  # the model loads before the server starts
        while True:
            try:
                page = httpx2.get(f"{base}/", timeout=5)
                break
            except httpx2.HTTPError:
                assert proc.poll() is None, proc.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "loopwright serve did not start"
                time.sleep(0.2)
        assert page.status_code == 200 and "serve.js" in page.text
        events = watch(base, start_run(base, "What is 17 * 23?"), read_timeout=600)  # a shared 2-core box is slow
    finally:
        proc.send_signal(signal.SIGINT)  # a model call still going finishes first: it runs on a thread
        _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert f"http://127.0.0.1:{port}/" in err
    check_order(events)
    (tmp_path / "events.json").write_text(json.dumps(events, indent=1), encoding="utf-8")
    steps = custom(events, "step")
    assert steps and events[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR")
    by_message = texts(events)
    assert sorted(by_message.values()) == sorted(s["raw"] for s in steps if s["raw"])  # deltas re-join
    deltas = sum(e["type"] == "TEXT_MESSAGE_CONTENT" for e in events)
    assert deltas > len(by_message)  # the model's text came token by token, not a step at a time
