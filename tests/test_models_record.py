"""Record and replay: cassettes of real-model runs replay to identical traces, and a
request that was never recorded fails with a message that shows where it departs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright.models.record import Entry, read_cassette, request_key

CASSETTES = Path(__file__).parent / "cassettes"
sys.path.insert(0, str(CASSETTES))
from record import CASES, run_case  # noqa: E402

TIMINGS = {"started_at", "duration_s"}


def comparable(value: Any) -> Any:
    """A trace dict without wall-clock facts (timestamps, durations, *_s timings) or a tool
    error's traceback (its frames name the checkout's own paths)."""
    if isinstance(value, dict):
        return {
            k: comparable(v)
            for k, v in value.items()
            if k not in TIMINGS and k != "traceback" and not (isinstance(k, str) and k.endswith("_s"))
        }
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


@pytest.mark.parametrize("name", sorted(CASES))
def test_recorded_real_model_run_replays_to_an_identical_trace(name: str) -> None:
    recorded = json.loads((CASSETTES / f"{name}.trace.json").read_text(encoding="utf-8"))
    replay = lw.models.Replay(CASSETTES / f"{name}.jsonl")
    try:
        trace = run_case(replay, CASES[name])
    except lw.ReplayMissError as exc:  # pragma: no cover - the message is the diagnosis
        pytest.fail(f"{exc}\nre-record with: python tests/cassettes/record.py {name}")
    assert comparable(trace.to_dict()) == comparable(recorded)
    assert replay.calls == trace.llm_calls == len(replay.entries)


def test_cassettes_hold_real_model_usage_with_prefix_reuse() -> None:
    entries = list(read_cassette(CASSETTES / "react_json_17x23.jsonl"))
    assert all(e.completion.usage is not None and not e.completion.usage.estimated for e in entries)
    assert all(e.completion.meta["model"].endswith(".gguf") for e in entries)
    later = [e.completion.usage for e in entries[1:]]
    assert later and all(u is not None and u.evaluated_tokens < u.prompt_tokens for u in later)


def test_recorder_appends_every_call_and_replay_serves_them_back(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    usage = lw.Usage(10, 4, 2)
    script = lw.ScriptedPolicy(
        [
            lw.Completion("one", usage, meta={"retries": 1}),
            lw.Completion("", tool_calls=(lw.ToolCall("add", '{"x": 1,\n "y": 2}', "c1"),)),
            "three",
        ]
    )
    recorder = lw.models.Recorder(script, path)
    requests = [
        lw.ModelRequest("p1", ("\nObservation",), "react"),
        lw.ModelRequest("p1", (), "plan", messages=({"role": "user", "content": "hi"},)),
        lw.ModelRequest("p3", (), "solve", max_tokens=5),
    ]
    originals = [recorder.complete(r) for r in requests]
    assert recorder.calls == 3 and len(path.read_text().splitlines()) == 3
    replay = lw.models.Replay(path)
    replayed = [replay.complete(r) for r in requests]
    assert [c.text for c in replayed] == ["one", "", "three"]
    assert replayed[0].usage == usage and replayed[0].meta == {"retries": 1}
    assert replayed[1].tool_calls == originals[1].tool_calls  # raw argument text intact
    assert replayed[2].usage is None


def test_replay_serves_repeated_identical_requests_in_recorded_order(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    recorder = lw.models.Recorder(lw.ScriptedPolicy(["a", "b"]), path)
    request = lw.ModelRequest("same")
    recorder.complete(request)
    recorder.complete(request)
    replay = lw.models.Replay(path)
    assert [replay.complete(request).text for _ in range(3)] == ["a", "b", "b"]


def test_replay_miss_shows_where_the_prompt_departs_from_the_nearest_recording(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    recorder = lw.models.Recorder(lambda prompt: "x", path)
    recorder.complete(lw.ModelRequest("Question: What is 17 * 23?\nThought:"))
    recorder.complete(lw.ModelRequest("Something else entirely"))
    replay = lw.models.Replay(path)
    with pytest.raises(lw.ReplayMissError) as caught:
        replay.complete(lw.ModelRequest("Question: What is 17 * 24?\nThought:"))
    message = str(caught.value)
    assert "differs at char 24 (line 1)" in message
    assert "recorded: 'Question: What is 17 * 23?" in message
    assert "asked:    'Question: What is 17 * 24?" in message


def test_replay_miss_names_the_field_when_only_the_settings_differ(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    lw.models.Recorder(lambda prompt: "x", path).complete(lw.ModelRequest("p", ("\n",)))
    with pytest.raises(lw.ReplayMissError, match=r"stop: recorded \('\\n',\), asked \(\)"):
        lw.models.Replay(path).complete(lw.ModelRequest("p"))


def test_replay_of_an_empty_cassette_says_it_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    with pytest.raises(lw.ReplayMissError, match="the cassette is empty"):
        lw.models.Replay(path).complete(lw.ModelRequest("p"))


def test_a_corrupt_cassette_line_is_reported_with_its_line_number(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "p", "text": "t"}\n{not json\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not a cassette entry"):
        lw.models.Replay(path)


def test_request_key_holds_what_can_change_the_answer() -> None:
    tool = {"name": "add", "description": "Add.", "parameters": {"type": "object"}}
    base = lw.ModelRequest("p", ("s",), "react", tools=(tool,))
    assert request_key(base) == request_key(lw.ModelRequest("p", ("s",), "react", tools=({"name": "add"},)))
    for other in (
        lw.ModelRequest("p", ("s",), "react"),
        lw.ModelRequest("p", ("s",), "react", tools=(tool,), max_tokens=9),
        lw.ModelRequest("p2", ("s",), "react"),
        lw.ModelRequest("p", (), "react"),
        lw.ModelRequest("p", ("s",), "plan"),
        lw.ModelRequest("p", ("s",), "react", dialect="brackets"),
    ):
        assert request_key(other) != request_key(base)
    entry = Entry(base, lw.Completion("t"))
    assert request_key(Entry.from_dict(entry.to_dict()).request) == request_key(base)


def test_a_replayed_run_needs_no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_model(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("replay must not load a model")

    monkeypatch.setattr(lw.models.LlamaCpp, "complete", no_model)
    replay = lw.models.Replay(CASSETTES / "rewoo_capital.jsonl")
    trace = run_case(replay, CASES["rewoo_capital"])
    assert trace.llm_calls == 2
