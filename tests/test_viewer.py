"""The trace viewer: one self-contained page where every trace string stays text.

Unit tests read the HTML with html.parser; the browser test opens the page in headless
Chromium from a file:// URL, checks the DOM it built and takes a screenshot (in the
test's temporary folder: tests write nowhere else).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
from html import escape as html_escape
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loopwright as lw
from loopwright.interfaces.viewer import load_trace, render_html, view_main, write_html
from loopwright.trace import Step, Trace, Usage, estimate_tokens

HOSTILE = '</script><img src=x onerror="alert(1)"><svg onload=alert(2)>&amp;</details>'

# Every tag the viewer itself writes. Anything else in a page came from trace text.
ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "main", "header", "div", "h1", "h2",
    "p", "span", "b", "code", "section", "svg", "line", "text", "a", "rect", "table", "thead",
    "tbody", "tr", "th", "td", "details", "summary", "pre", "ol", "li", "i", "button",
    "footer", "script",
}


class Page(HTMLParser):
    """The parts of a page the tests look at: tags with their attributes and depth, step
    elements, and the text of every element that has an id."""

    VOID = frozenset({"meta", "br", "img", "input", "link", "hr"})

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.depths: list[int] = []
        self.texts: dict[str, str] = {}
        self._open_ids: list[tuple[str, int]] = []
        self._depth = 0
        self.feed(text)
        self.close()

    def _record(self, tag: str, attrs: list[tuple[str, str | None]]) -> dict[str, str | None]:
        a = dict(attrs)
        self.tags.append((tag, a))
        self.depths.append(self._depth)
        for ident, _ in self._open_ids:  # keep the words of adjacent cells apart
            self.texts[ident] += " "
        return a

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = self._record(tag, attrs)
        if tag in self.VOID:
            return
        self._depth += 1
        if a.get("id"):
            self._open_ids.append((str(a["id"]), self._depth))
            self.texts[str(a["id"])] = ""

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._record(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID:
            return
        if self._open_ids and self._open_ids[-1][1] == self._depth:
            self._open_ids.pop()
        self._depth -= 1

    def handle_data(self, data: str) -> None:
        for ident, _ in self._open_ids:
            self.texts[ident] += data

    def steps(self) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == "li" and "data-step-kind" in a]

    def inside(self, ident: str) -> list[tuple[str, dict[str, str | None]]]:
        """The element with this id and every tag inside it."""
        start = next(i for i, (_, a) in enumerate(self.tags) if a.get("id") == ident)
        end = start + 1
        while end < len(self.tags) and self.depths[end] > self.depths[start]:
            end += 1
        return self.tags[start:end]


def cached_usage() -> Any:
    """A usage function that models a KV-cached backend: evaluated is the part of the
    prompt past its longest common prefix with the previous prompt."""
    previous = {"prompt": ""}

    def usage(prompt: str, completion: str) -> Usage:
        shared = len(os.path.commonprefix([prompt, previous["prompt"]]))
        previous["prompt"] = prompt
        return Usage(estimate_tokens(prompt), estimate_tokens(prompt[shared:]),
                     estimate_tokens(completion), estimated=True)

    return usage


def sample_trace(hostile: str = HOSTILE) -> Trace:
    """A hand-made ReAct trace with every kind of trouble the viewer highlights, with
    `hostile` text in the task, a model reply and the answer."""
    usage = cached_usage()
    prompt = "Tools:\nadd(x: int, y: int)\nQuestion: 2 + 3, then + 10?\nThought:"
    rows: list[tuple[str, str, dict[str, Any]]] = [
        ("action", ' add\nAction: add\nAction Input: {"x": 2, "y": 3}',
         {"tool": "add", "args": {"x": 2, "y": 3}, "observation": "5"}),
        ("parse_error", "I am not sure what to do next. " + hostile,
         {"observation": "Invalid format", "error": "no Action or Final Answer found"}),
        ("action", ' again\nAction: add\nAction Input: {"x": 5, "y": "10"}',
         {"tool": "add", "args": {"x": 5, "y": "10"},
          "observation": "ERROR[add]: invalid args: y must be an integer",
          "error": "invalid args: y must be an integer"}),
        ("nudge", ' again\nAction: add\nAction Input: {"x": 2, "y": 3}',
         {"tool": "add", "args": {"x": 2, "y": 3}, "observation": "You already called add"}),
        ("final", " done\nFinal Answer: 15", {}),
    ]
    steps = []
    for i, (kind, raw, fields) in enumerate(rows, 1):
        meta = {"tool_s": 0.001 * i, "model_s": 0.2} if kind == "action" else {}
        steps.append(Step(i, kind, raw=raw, thought=raw.split("\n")[0].strip(), prompt=prompt,
                          usage=usage(prompt, raw), duration_s=0.2 + 0.01 * i, meta=meta,
                          **fields))
        prompt += f"{raw}\nObservation: {fields.get('observation', '')}\nThought:"
    total = Usage()
    for s in steps:
        total = total + s.usage
    return Trace(task="Add 2 and 3, then add 10. " + hostile, mode="react", steps=steps,
                 final_answer=("15 " + hostile).strip(), stopped_reason="final", llm_calls=5,
                 tool_calls=2, usage=total, transcript=prompt, duration_s=1.2, run_id="run-1")


def assert_only_our_markup(text: str) -> Page:
    page = Page(text)
    tags = {t for t, _ in page.tags}
    assert tags <= ALLOWED_TAGS, f"unexpected tags from trace text: {tags - ALLOWED_TAGS}"
    assert [t for t, _ in page.tags].count("script") == 1
    handlers = [(t, k) for t, a in page.tags for k in a if k.lower().startswith("on")]
    assert handlers == []
    # The one script element holds only our asset: no trace text reaches a script.
    assert text.lower().count("</script") == 1
    return page


def test_hostile_trace_text_is_rendered_as_text_everywhere() -> None:
    trace = sample_trace()
    trace.meta = {HOSTILE: HOSTILE}
    trace.mode = HOSTILE
    trace.run_id = HOSTILE
    html = render_html(trace)
    page = assert_only_our_markup(html)
    assert "<img" not in html and "<svg onload" not in html
    assert HOSTILE in page.texts["task"]
    assert HOSTILE in page.texts["final-answer"]


def test_hostile_tool_name_and_kind_stay_inside_their_attributes() -> None:
    d = sample_trace().to_dict()
    d["steps"][0]["tool"] = '"><img src=x onerror=alert(1)>'
    d["steps"][0]["kind"] = '" onmouseover="alert(1)'
    d["steps"][0]["args"] = {HOSTILE: [HOSTILE]}
    page = assert_only_our_markup(render_html(d))
    assert page.steps()[0]["data-step-kind"] == '" onmouseover="alert(1)'
    assert page.steps()[0]["data-tool"] == '"><img src=x onerror=alert(1)>'
    assert "k-unknown" in str(page.steps()[0]["class"])


text_fields = st.text(alphabet=st.characters(codec="utf-8"), max_size=60) | st.sampled_from(
    [HOSTILE, "</style>", "<!--", "]]>", "</", "<script>", "\x00", "&#60;script&#62;"]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    task=text_fields, raw=text_fields, prompt=text_fields, observation=text_fields,
    error=text_fields, tool=text_fields, answer=text_fields, kind=st.sampled_from(
        sorted(lw.trace.STEP_KINDS) + ["<b>"]),
)
def test_any_trace_text_yields_only_the_viewers_markup(
    task: str, raw: str, prompt: str, observation: str, error: str, tool: str, answer: str,
    kind: str,
) -> None:
    step = Step(1, kind, raw=raw, prompt=prompt, tool=tool, args={tool: raw},
                observation=observation, error=error, thought=raw, meta={raw: error})
    trace = Trace(task=task, mode="react", steps=[step], final_answer=answer,
                  stopped_reason="max_steps", transcript=prompt)
    page = assert_only_our_markup(render_html(trace))
    assert len(page.steps()) == 1


def test_one_step_element_per_step_in_order_with_its_kind() -> None:
    trace = sample_trace()
    page = Page(render_html(trace))
    assert [s["data-step-kind"] for s in page.steps()] == [s.kind for s in trace.steps]
    assert [s["id"] for s in page.steps()] == [f"step-{s.index}" for s in trace.steps]


def test_errors_and_guards_are_flagged_and_parse_errors_open() -> None:
    page = Page(render_html(sample_trace()))
    classes = {s["data-step-kind"]: str(s["class"]).split() for s in page.steps()}
    assert "flagged" in classes["parse_error"]
    assert "guard" in classes["nudge"]
    assert "flagged" not in classes["final"] and "guard" not in classes["final"]
    failed_add = page.steps()[2]
    assert "flagged" in str(failed_add["class"])
    details = [a for t, a in page.inside("step-2") if t == "details"]
    assert "open" in details[0]
    assert "1 parse error" in page.texts["issues"] and "1 nudge" in page.texts["issues"]


@pytest.mark.parametrize("reason", ["max_steps", "error", "token_budget", "denied", "timeout"])
def test_a_stop_other_than_final_is_shown_as_bad(reason: str) -> None:
    trace = sample_trace()
    trace.stopped_reason = reason
    trace.final_answer = None
    page = Page(render_html(trace))
    stop = next(a for t, a in page.tags if a.get("id") == "stop-reason")
    assert page.texts["stop-reason"] == reason
    assert "bad" in str(stop["class"]).split()
    assert page.texts["final-answer"].endswith("none")


def test_final_stop_is_shown_as_ok() -> None:
    page = Page(render_html(sample_trace()))
    stop = next(a for t, a in page.tags if a.get("id") == "stop-reason")
    assert page.texts["stop-reason"] == "final" and "ok" in str(stop["class"]).split()


def test_token_chart_has_one_bar_per_model_call_sized_by_sent_and_evaluated() -> None:
    trace = sample_trace()
    page = Page(render_html(trace))
    chart = page.inside("token-chart")
    links = [a["href"] for t, a in chart if t == "a"]
    assert links == [f"#step-{s.index}" for s in trace.steps]
    sent = [float(str(a["height"])) for t, a in chart if t == "rect" and a["class"] == "sent"]
    evaluated = [float(str(a["height"])) for t, a in chart if t == "rect" and a["class"] == "eval"]
    assert len(sent) == len(evaluated) == len(trace.steps)
    assert sent == sorted(sent)  # the prompt only grows
    assert all(e <= s for e, s in zip(evaluated, sent, strict=True))
    assert sum(evaluated) < sum(sent) / 2  # prefix reuse shows


def test_tool_latency_chart_and_table_count_executed_calls_only() -> None:
    page = Page(render_html(sample_trace()))
    chart = page.inside("latency-chart")
    links = [a["href"] for t, a in chart if t == "a"]
    assert links == ["#step-1", "#step-3"]  # the nudge executed nothing
    rows = page.texts["tool-table"].split()
    assert rows[rows.index("add") + 1] == "2"  # calls
    assert rows[rows.index("add") + 2] == "1"  # errors


def rebuilt_prompts(html: str) -> dict[int, str]:
    """Every prompt in the page, rebuilt the way the page's script does: the new part of
    each prompt block after the shared prefix of the prompt it extends."""
    blocks = re.finditer(
        r'<details class="part prompt" id="prompt-(\d+)"(?: data-extends="(\d+)" data-shared="(\d+)")?>'
        r'.*?<span class="new prompt-new">|<details class="part prompt" id="prompt-(\d+)">.*?'
        r'<pre class="prompt-new">', html)
    prompts: dict[int, str] = {}
    for m in blocks:
        index = int(m.group(1) or m.group(4))
        end = html.index("</", m.end())
        new = unescape(html[m.end():end])
        prefix = prompts[int(m.group(2))][: int(m.group(3))] if m.group(2) else ""
        prompts[index] = prefix + new
    return prompts


def test_prompt_shows_what_is_new_since_the_previous_call() -> None:
    trace = sample_trace()
    html = render_html(trace)
    first, second = trace.steps[0].prompt, trace.steps[1].prompt
    assert second is not None and first is not None and second.startswith(first)
    new_part = html_escape(second[len(first):])
    assert f'data-extends="1" data-shared="{len(first)}"' in html
    assert f'<span class="new prompt-new">{new_part}</span>' in html


def test_every_prompt_can_be_rebuilt_exactly_from_the_page() -> None:
    trace = sample_trace()
    prompts = rebuilt_prompts(render_html(trace))
    assert prompts == {s.index: s.prompt for s in trace.steps}


def test_real_react_prompts_are_written_once_so_the_page_grows_linearly() -> None:
    sizes = {}
    for n in (40, 160):
        trace = _long_react_run(n)
        html = render_html(trace)
        prompts = rebuilt_prompts(html)
        assert prompts == {s.index: trace.prompt_for(s) for s in trace.steps}
        sizes[n] = len(html)
    assert sizes[160] / sizes[40] < 6  # quadratic would be about 16


def _long_react_run(n: int) -> Trace:
    outputs = [f'Thought: step {k}\nAction: add\nAction Input: {{"x": {k}, "y": 1}}' for k in range(n)]
    policy = lw.ScriptedPolicy([*outputs, "Thought: done\nFinal Answer: ok"])
    trace = lw.run("count", policy, lw.ToolRegistry([_add]), mode="react", max_steps=n + 1)
    assert trace.stopped_reason == "final"
    return trace


def test_page_loads_nothing_from_the_network() -> None:
    html = render_html(sample_trace())
    page = Page(html)
    for _, attrs in page.tags:
        for key in ("src", "href"):
            value = attrs.get(key)
            assert value is None or value.startswith("#"), (key, value)
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert html.replace("http://www.w3.org/2000/svg", "").count("://") == 0


def test_dict_and_trace_render_the_same_page() -> None:
    trace = sample_trace()
    assert render_html(trace) == render_html(trace.to_dict())


def test_empty_trace_renders_with_placeholders() -> None:
    page = Page(render_html(Trace(task="nothing", mode="rewoo")))
    assert page.steps() == []
    assert page.texts["stop-reason"] == "not stopped"
    assert "No model calls" in page.texts["token-chart"]


def test_real_react_run_renders_every_step(tmp_path: Path) -> None:
    policy = lw.ScriptedPolicy([
        'Thought: add\nAction: add\nAction Input: {"x": 2, "y": 3}',
        "no idea",
        'Thought: add\nAction: add\nAction Input: {"x": 5, "y": 10}',
        "Thought: done\nFinal Answer: 15",
    ])
    trace = lw.run("2 + 3 + 10?", policy, lw.ToolRegistry([_add]), mode="react", max_steps=6)
    assert trace.stopped_reason == "final"
    path = write_html(trace, tmp_path / "out" / "run.html")
    page = assert_only_our_markup(path.read_text(encoding="utf-8"))
    assert [s["data-step-kind"] for s in page.steps()] == [s.kind for s in trace.steps]
    assert "parse_error" in [s.kind for s in trace.steps]


def test_plan_execute_run_shows_its_plans_and_the_replan() -> None:
    plan = json.dumps({"plan": [{"id": "E1", "tool": "_add", "args": {"x": 1, "y": 2}},
                                {"id": "E2", "tool": "_add", "args": {"x": "#E1", "y": "oops"}}]})
    fixed = json.dumps({"plan": [{"id": "E1", "tool": "_add", "args": {"x": 1, "y": 2}},
                                 {"id": "E2", "tool": "_add", "args": {"x": "#E1", "y": 3}}]})
    trace = lw.run("1 + 2 + 3?", lw.ScriptedPolicy([plan, fixed]), lw.ToolRegistry([_add]),
                   mode="plan_execute", max_steps=4, max_replans=1)
    assert trace.final_answer == "6" and trace.replans == 1
    page = assert_only_our_markup(render_html(trace))
    kinds = [s["data-step-kind"] for s in page.steps()]
    assert kinds == ["plan", "action", "action", "replan", "action", "action"]
    assert "2-step plan: E1 = _add" in page.texts["step-1"]
    assert "flagged" in str(page.steps()[2]["class"])  # the failed step that caused the replan
    assert page.texts["stop-reason"] == "final"


def test_rewoo_run_shows_plan_workers_and_solver() -> None:
    plan = json.dumps({"plan": [{"id": "E1", "tool": "_add", "args": {"x": 1, "y": 2}},
                                {"id": "E2", "tool": "_add", "args": {"x": 3, "y": 4}},
                                {"id": "E3", "tool": "_add", "args": {"x": "#E1", "y": "#E2"}}]})
    trace = lw.run("(1 + 2) + (3 + 4)?", lw.ScriptedPolicy([plan, "Final Answer: 10"]),
                   lw.ToolRegistry([_add]), mode="rewoo")
    assert trace.final_answer == "10"
    page = assert_only_our_markup(render_html(trace))
    assert [s["data-step-kind"] for s in page.steps()] == ["plan", "action", "action", "action", "solve"]
    assert "E3 = _add" in page.texts["step-4"]
    # two model calls, so two bars; three workers, so three latency bars
    assert sum(1 for t, _ in page.inside("token-chart") if t == "a") == 2
    assert sum(1 for t, _ in page.inside("latency-chart") if t == "a") == 3
    assert "Final Answer: 10" in page.texts["step-5"]


@lw.tool
def _add(x: int, y: int) -> int:
    """Add two integers."""
    return x + y


def test_view_main_writes_the_page_next_to_the_trace(tmp_path: Path, capsys: Any) -> None:
    src = tmp_path / "run.json"
    src.write_text(sample_trace().to_json(), encoding="utf-8")
    assert view_main([str(src)]) == 0
    out = tmp_path / "run.html"
    assert capsys.readouterr().out.strip() == str(out)
    assert Page(out.read_text(encoding="utf-8")).texts["stop-reason"] == "final"
    custom = tmp_path / "pages" / "x.html"
    assert view_main([str(src), "--out", str(custom)]) == 0 and custom.is_file()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"steps": []}', "not a loopwright trace"),
        ('{"task": "t", "mode": "react", "steps": [{"index": 1, "kind": "action", "duration_s": "1s"}]}',
         "duration_s must be a number"),
        ('{"task": "t", "mode": "react", "steps": [{"index": 1, "kind": "final", "raw": ["x"]}]}',
         "raw must be a string"),
        ('{"task": ["t"], "mode": "react"}', "task must be a string"),
    ],
)
def test_view_main_rejects_what_is_not_a_trace(tmp_path: Path, capsys: Any, content: str, message: str) -> None:
    src = tmp_path / "bad.json"
    src.write_text(content, encoding="utf-8")
    assert view_main([str(src)]) == 2
    assert message in capsys.readouterr().err
    with pytest.raises(ValueError, match=message):
        load_trace(src)


def test_view_main_reports_a_missing_file(tmp_path: Path, capsys: Any) -> None:
    assert view_main([str(tmp_path / "nope.json"), "--db", str(tmp_path / "none.db")]) == 2
    err = capsys.readouterr().err
    assert "no such trace file" in err and "no run journal" in err
    assert not (tmp_path / "none.db").exists()  # looking did not create a journal


def test_view_main_renders_a_journaled_run_by_its_id(tmp_path: Path, capsys: Any,
                                                     monkeypatch: Any) -> None:
    from loopwright.durable.sqlite import SQLiteStore

    db = tmp_path / "runs.db"
    policy = lw.ScriptedPolicy(['Thought: add\nAction: _add\nAction Input: {"x": 2, "y": 3}',
                                "Thought: done\nFinal Answer: 5"])
    with SQLiteStore(db) as store:
        trace = lw.run("2 + 3?", policy, lw.ToolRegistry([_add]), store=store, run_id="run-7")
    monkeypatch.chdir(tmp_path)
    assert view_main(["run-7", "--db", str(db)]) == 0
    out = tmp_path / "run-7.html"
    assert capsys.readouterr().out.strip() == "run-7.html"
    page = Page(out.read_text(encoding="utf-8"))
    assert [s["data-step-kind"] for s in page.steps()] == [s.kind for s in trace.steps]
    assert page.texts["stop-reason"] == "final"
    assert view_main(["run-8", "--db", str(db)]) == 2
    assert "run-8" in capsys.readouterr().err


# -- the page in a real browser ---------------------------------------------------------


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _browser(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    binary = _chromium()
    if binary is None:
        pytest.skip("no chromium binary on PATH (scripts/install.sh --dev installs Debian's chromium)")
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run",
        "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}",
    ]
    return subprocess.run([binary, *flags, *args], capture_output=True, text=True,
                          timeout=120, check=False)


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return int(width), int(height)


def test_browser_builds_the_page_and_its_script_runs(tmp_path: Path) -> None:
    trace = sample_trace()
    page_path = write_html(trace, tmp_path / "trace.html")
    # The fragment names a step; the page's script opens it on load.
    proc = _browser(["--dump-dom", page_path.as_uri() + "#step-4"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = Page(proc.stdout)
    assert [s["data-step-kind"] for s in dom.steps()] == [s.kind for s in trace.steps]
    assert dom.texts["stop-reason"] == "final"
    chart = dom.inside("token-chart")
    assert chart[0][0] == "svg"
    assert sum(1 for t, _ in chart if t == "rect") >= 2 * len(trace.steps)
    step4 = dom.inside("step-4")
    assert step4[1][0] == "details" and "open" in step4[1][1], "the script did not run"
    assert "img" not in {t for t, _ in dom.tags}


def test_browser_script_rebuilds_a_prompts_shared_prefix(tmp_path: Path) -> None:
    trace = _long_react_run(6)
    page_path = write_html(trace, tmp_path / "trace.html")
    proc = _browser(["--dump-dom", page_path.as_uri() + "#prompt-5"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    prompt4, prompt5 = trace.prompt_for(trace.steps[3]), trace.prompt_for(trace.steps[4])
    assert prompt4 is not None and prompt5 is not None and prompt5.startswith(prompt4)
    m = re.search(r'<pre class="prompt-prefix" data-filled="true">(.*?)</pre>', proc.stdout, re.S)
    assert m is not None, "the script did not fill the prefix of prompt 5"
    assert unescape(m.group(1)) == prompt4


def test_browser_screenshot_shows_a_rendered_page(tmp_path: Path) -> None:
    trace = sample_trace(hostile="")
    page_path = write_html(trace, tmp_path / "trace.html")
    (tmp_path / "trace.json").write_text(json.dumps(trace.to_dict()), encoding="utf-8")
    shot = tmp_path / "viewer.png"
    proc = _browser([f"--screenshot={shot}", "--window-size=1280,2000",
                     "--hide-scrollbars", page_path.as_uri() + "#step-3"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _png_size(shot) == (1280, 2000)
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one


def test_a_child_agent_run_is_nested_under_the_step_that_called_it() -> None:
    @lw.tool
    def add(x: int, y: int) -> int:
        """Add two integers."""
        return x + y

    inner = lw.Agent("calculator", lw.ScriptedPolicy([
        'Thought: add\nAction: add\nAction Input: {"x": 2, "y": 3}', f"Thought: done\nFinal Answer: 5 {HOSTILE}"]),
        lw.ToolRegistry([add]))
    trace = lw.run("2 + 3?", lw.ScriptedPolicy([
        'Thought: ask\nAction: calculator\nAction Input: {"task": "2 + 3"}', "Thought: ok\nFinal Answer: 5"]),
        lw.ToolRegistry([inner.as_tool()]))
    text = render_html(trace)
    page = assert_only_our_markup(text)  # the child's text stays text too
    [nested] = [a for tag, a in page.tags if "data-child-run-id" in a]
    assert nested["data-child-run-id"] == trace.steps[0].meta["child_run_id"]
    assert nested["data-agent"] == "calculator"
    # nested inside step 1's element, before step 2's
    step1 = text.index('id="step-1"')
    assert step1 < text.index("data-child-run-id") < text.index('id="step-2"')
    kinds = [a["data-step-kind"] for tag, a in page.tags if tag == "li" and "id" not in a and "data-step-kind" in a]
    assert kinds == ["action", "final"]  # the child's two steps
    assert "Question: 2 + 3" in unescape(text)  # the child's prompt is shown
    # a page rebuilt from the trace's JSON nests the same run
    assert render_html(json.loads(trace.to_json())) == text
