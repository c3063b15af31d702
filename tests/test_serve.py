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
from typing import Any

import httpx2
import pytest

import loopwright as lw
from helpers.agui import check_order, custom, serving, start_run, texts, watch
from helpers.cdp import Browser
from helpers.origins import RESOLVE, other_site
from loopwright.interfaces.cli import main
from loopwright.policy import ModelRequest
from loopwright.safety import approval_key
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
            browser.wait_for("document.body.dataset.ready === '1'")
            browser.eval("document.getElementById('start').click()")  # the linked task starts when pressed
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
            asked = browser.eval("[...document.querySelectorAll('.approval .tool, .approval .effects, "
                                 ".approval .description')].map(e => e.textContent)")
            browser.eval("document.querySelector('.approval button.approve').click()")
            browser.wait_for("document.getElementById('state').dataset.state === 'answered'")
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
    assert asked == ["delete", "destructive", "Delete a file."]  # what the call does, not only its name
    for png in (shot, mid):
        head = png.read_bytes()[:24]
        assert head[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000  # a rendered page


def test_page_shows_model_and_tool_text_as_text_not_html(tmp_path: Path) -> None:
    hostile = '<img src=x onerror="document.title=1"></script><script>document.title=2</script><b>b</b>'

    @lw.tool
    def echo(text: str) -> str:
        """Echo the text back."""
        return text

    step = f"Thought: {hostile}\nAction: echo\nAction Input: {json.dumps({'text': hostile})}"
    policy = SlowStream([step, "Thought: done\nFinal Answer: <b>bold</b></script>"], gap_s=0.0)
    with serving(app(policy, lw.ToolRegistry([echo]), max_steps=3)) as base:
        browser = Browser(f"{base}/?task=hi", tmp_path / "profile")
        try:
            browser.wait_for("document.body.dataset.ready === '1'")
            browser.eval("document.getElementById('start').click()")
            browser.wait_for("document.getElementById('state').dataset.state === 'answered'")
            text = browser.eval("document.querySelector('pre.text').textContent")
            result = browser.eval("document.querySelector('.call pre.result').textContent")
            elements = browser.eval("document.querySelectorAll('main img, main b, main script').length")
            answer = browser.eval("document.getElementById('answer').textContent")
            title = browser.eval("document.title")
        finally:
            browser.close()
    assert text == step and result == "→ " + hostile
    assert elements == 0 and title == "loopwright: watch a run"
    assert answer == "<b>bold</b></script>"


def _started(served: Any) -> dict[str, Any]:
    return dict(served.state.runs.runs)


def test_a_linked_task_is_filled_in_and_starts_only_when_the_person_presses_run(tmp_path: Path) -> None:
    served = app(SlowStream([FINAL], gap_s=0.0), lw.ToolRegistry(), max_steps=2)
    with serving(served) as base:
        browser = Browser(f"{base}/?task=wipe%20secrets.db", tmp_path / "profile")
        try:
            browser.wait_for("document.body.dataset.ready === '1'")
            shown = browser.eval("[document.getElementById('task').value, document.getElementById('state').dataset.state,"
                                 " document.getElementById('run').hidden, document.getElementById('from-link').hidden]")
            before = _started(served)
            browser.eval("document.getElementById('start').click()")
            browser.wait_for("document.getElementById('state').dataset.state === 'answered'")
            after = _started(served)
        finally:
            browser.close()
    assert shown == ["wipe secrets.db", "idle", True, False]  # filled in, said so, not started
    assert before == {} and len(after) == 1


def test_the_page_opens_a_run_by_id_lists_the_runs_and_shows_a_limit_as_stopped(tmp_path: Path) -> None:
    policy = lw.ScriptedPolicy([FINAL, DELETE])
    with serving(app(policy, lw.ToolRegistry(), max_steps=1)) as base:
        answered = start_run(base, "say it")
        watch(base, answered)
        limited = start_run(base, "delete it")  # one step allowed, and it is not an answer
        watch(base, limited)
        browser = Browser(f"{base}/?run={answered}", tmp_path / "profile")
        try:
            browser.wait_for("document.getElementById('state').dataset.state === 'answered'")
            first = browser.eval("[document.getElementById('answer').textContent, "
                                 "getComputedStyle(document.getElementById('state')).backgroundColor]")
            links = browser.wait_for("document.querySelectorAll('#runs-list li').length === 2 && "
                                     "[...document.querySelectorAll('#runs-list li')].map(li => li.dataset.run)")
            browser.eval(f"location.href = '/?run={limited}'")
            browser.wait_for("document.getElementById('state').dataset.state === 'stopped'")
            second = browser.eval("[document.getElementById('state').textContent, "
                                  "getComputedStyle(document.getElementById('state')).backgroundColor]")
            address = browser.eval("location.search")
        finally:
            browser.close()
    assert first[0] == "deleted notes.txt as asked"
    assert links == [limited, answered]
    assert second[0] == "stopped: max_steps" and second[1] != first[1]  # a limit is not shown as a success
    assert address == f"?run={limited}"


def test_the_page_carries_the_token_it_was_given(tmp_path: Path) -> None:
    served = app(SlowStream([FINAL], gap_s=0.0), lw.ToolRegistry(), max_steps=2, token="s3cret-t0ken")
    with serving(served) as base:
        bare = Browser(f"{base}/", tmp_path / "bare")
        try:
            asks = bare.wait_for("!document.getElementById('token-form').hidden")
        finally:
            bare.close()
        browser = Browser(f"{base}/#token=s3cret-t0ken", tmp_path / "profile")
        try:
            browser.wait_for("document.body.dataset.ready === '1'")
            browser.eval("document.getElementById('task').value = 'say it';"
                         "document.getElementById('start').click()")
            browser.wait_for("document.getElementById('state').dataset.state === 'answered'")
            answer = browser.eval("document.getElementById('answer').textContent")
            address = browser.eval("location.href")
        finally:
            browser.close()
    assert asks is True
    assert answer == "deleted notes.txt as asked"
    assert "token" not in address  # taken out of the address bar (and its history)


ATTACK = """<!doctype html><title>cute cats</title>
<iframe name="sink" id="sink"></iframe>
<form id="form" method="post" enctype="text/plain" target="sink" action="{base}/runs">
<input name='{{"task": "wipe secrets.db", "x": "' value='"}}'></form>
<script>
const B = "{base}";
const plain = (path, body) => fetch(B + path, {{method: "POST", mode: "no-cors",
  headers: {{"Content-Type": "text/plain"}}, body}});
const agui = JSON.stringify({{threadId: "t", runId: "pwn1", state: null, tools: [], context: [],
  forwardedProps: null, messages: [{{id: "m", role: "user", content: "wipe secrets.db"}}]}});
const tries = [
  plain("/agui", agui),
  plain("/runs", '{{"task": "wipe secrets.db"}}'),
  plain("/runs/{run}/approvals/{hashed}", '{{"approved": true}}'),
  plain("/runs/{run}/approvals/{key}", '{{"approved": true}}'),
  fetch(B + "/runs/{run}/approvals/{key}", {{method: "POST", headers: {{"Content-Type": "application/json"}},
    body: '{{"approved": true}}'}}),
  fetch(B + "/runs", {{method: "POST", headers: {{"Content-Type": "application/json"}},
    body: '{{"task": "wipe secrets.db"}}'}}),
  fetch(B + "/runs").then((r) => r.text()),
  new Promise((resolve) => {{ document.getElementById("sink").onload = resolve; }}),
];
document.getElementById("form").submit();
Promise.allSettled(tries).then((results) => {{
  window.results = results.map((r) => r.status + (r.value && typeof r.value === "string" ? ":" + r.value : ""));
  document.title = "done";
}});
</script>"""


def test_a_page_of_another_site_can_neither_start_a_run_nor_approve_a_call(tmp_path: Path) -> None:
    ran: list[str] = []

    @lw.tool(side_effects="destructive", requires_approval=True)
    def delete(name: str) -> str:
        """Delete a file."""
        ran.append(name)
        return f"deleted {name}"

    served = app(lw.ScriptedPolicy([DELETE, FINAL]), lw.ToolRegistry([delete]), max_steps=4)
    with serving(served) as base:
        run_id = start_run(base, "delete the notes")  # the person's own run, waiting for them
        deadline = time.monotonic() + 30
        while not (asked := httpx2.get(f"{base}/runs/{run_id}").json()["approvals"]):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # the attacker is given what it could not know: the run's id and even the key itself
        page = ATTACK.format(base=base, run=run_id, key=asked[0]["key"],
                             hashed=approval_key("delete", {"name": "notes.txt"}))
        with other_site({"/": page}) as evil:
            browser = Browser(f"{evil}/", tmp_path / "profile", args=(RESOLVE,))
            try:
                browser.wait_for("document.title === 'done'")
                results = browser.eval("window.results")
            finally:
                browser.close()
        runs = _started(served)
        still = httpx2.get(f"{base}/runs/{run_id}").json()
    assert list(runs) == [run_id] and ran == []  # no run started, the call not approved
    assert still["state"] == "waiting" and still["approvals"] == asked
    assert results[-2] == "rejected" and results[-3] == "rejected"  # no CORS: nothing to read, no JSON sent


FRAME = """<!doctype html><title>win a prize</title>
<button style="position:absolute;top:0">Claim</button>
<iframe id="app" src="{base}/?task=wipe%20secrets.db" style="opacity:0.01;position:absolute;top:0"></iframe>
<script>document.getElementById("app").onload = () => {{ document.title = "framed"; }};</script>"""


def test_a_page_of_another_site_cannot_frame_the_page(tmp_path: Path) -> None:
    served = app(lw.ScriptedPolicy([FINAL]), lw.ToolRegistry(), max_steps=2)
    with serving(served) as base, other_site({"/": FRAME.format(base=base)}) as evil:
        browser = Browser(f"{evil}/", tmp_path / "profile", args=(RESOLVE,))
        try:
            browser.wait_for("document.title === 'framed'")
            inside = browser.eval_in_frame(f"{base}/", "[location.href, !!document.getElementById('task-form')]")
        finally:
            browser.close()
    assert inside == ["chrome-error://chromewebdata/", False]  # the browser refused to show it in a frame
    assert _started(served) == {}


def test_a_name_rebound_to_loopback_gets_neither_the_page_nor_the_api(tmp_path: Path) -> None:
    served = app(lw.ScriptedPolicy([FINAL]), lw.ToolRegistry(), max_steps=2)
    with serving(served) as base:
        port = base.rsplit(":", 1)[1]
        browser = Browser(f"http://rebound.test:{port}/", tmp_path / "profile", args=(RESOLVE,))
        try:
            browser.wait_for("location.host.startsWith('rebound.test') && document.readyState === 'complete'")
            page = browser.eval("[!!document.getElementById('task-form'), document.body.innerText]")
            statuses = browser.eval(
                "Promise.all([fetch('/runs', {method: 'POST', headers: {'Content-Type': 'application/json'},"
                " body: '{\"task\": \"wipe secrets.db\"}'}).then(r => r.status),"
                " fetch('/runs').then(r => r.status)])")
        finally:
            browser.close()
    assert page[0] is False and "does not answer to the host" in page[1]
    assert statuses == [421, 421] and _started(served) == {}


def test_serve_refuses_bad_flags_before_serving(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--tools", "no_such_module_here:tools"]) == 2
    assert "no_such_module_here" in capsys.readouterr().err
    assert main(["serve", "--port", "0"]) == 2
    assert main(["serve", "--approval-timeout-s", "-1"]) == 2


CASSETTE = str(Path(__file__).parent / "cassettes" / "react_json_17x23.jsonl")


def test_serve_off_loopback_without_a_token_refuses_to_start(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    import uvicorn

    monkeypatch.delenv("LOOPWRIGHT_TOKEN", raising=False)
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: pytest.fail("it served"))
    for host in ("0.0.0.0", "::", "192.0.2.2", "agent.lan"):
        assert main(["serve", "--replay", CASSETTE, "--host", host]) == 2
        assert "needs a token" in capsys.readouterr().err
    assert main(["serve", "--replay", CASSETTE, "--allow-origin", "ui.example"]) == 2
    assert main(["serve", "--replay", CASSETTE, "--allow-host", "a b"]) == 2


def test_serve_off_loopback_with_a_token_takes_only_requests_that_carry_it() -> None:
    port = _free_port()
    source = Path(lw.__file__).parents[1]  # the loopwright this test imported
    proc = subprocess.Popen([sys.executable, "-m", "loopwright", "serve", "--replay", CASSETTE, "--host", "0.0.0.0",
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(source), "LOOPWRIGHT_TOKEN": "s3cret-t0ken"})
    base = f"http://127.0.0.1:{port}"
    bearer = {"Authorization": "Bearer s3cret-t0ken"}
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                page = httpx2.get(f"{base}/", timeout=5)
                break
            except httpx2.HTTPError:
                assert proc.poll() is None, proc.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "loopwright serve did not start"
                time.sleep(0.1)
        bare = httpx2.get(f"{base}/runs")
        carried = httpx2.get(f"{base}/runs", headers=bearer)
        started = httpx2.post(f"{base}/runs", json={"task": "What is 17 * 23?"}, headers=bearer)
        refused = httpx2.post(f"{base}/runs", json={"task": "wipe secrets.db"})
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert page.status_code == 200 and bare.status_code == 401 and refused.status_code == 401
    assert carried.status_code == 200 and started.status_code == 201
    assert "requests need the token" in err and "s3cret-t0ken" not in err  # the secret is not printed


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
