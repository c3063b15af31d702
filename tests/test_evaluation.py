"""lw.evaluate, its scorers and report, and the `loopwright batch` / `eval` commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from helpers.batch_policies import adder, either
from loopwright.batch.evaluation import contains, exact, first_number, load_dataset, numeric
from loopwright.interfaces.batch_cli import report_html
from loopwright.interfaces.cli import main
from loopwright.interfaces.demo_tools import demo_registry

DATASET = [
    {"task": "add 2 and 3", "answer": 5},
    {"task": "add 10 and 20", "answer": "30"},
    {"question": "add 1 and 1", "answer": 3, "id": "wrong-on-purpose"},
    {"task": "fail 1 and 2", "answer": 3},
]


def test_exact_ignores_case_spacing_and_a_final_period_only() -> None:
    assert exact("  Paris. ", "paris")
    assert exact("New  York", "new york")
    assert not exact("Paris, France", "Paris")
    assert not exact(None, "Paris")


def test_numeric_reads_the_first_number_within_the_tolerance() -> None:
    assert numeric()("The answer is 1,234.0 apples", 1234)
    assert numeric(0.5)("about 3.4", "3")
    assert not numeric(0.1)("about 3.4", "3")
    assert numeric(0.01, relative=True)("1005", 1000)
    assert not numeric()("no number here", 3)
    assert not numeric()(None, 3)
    assert first_number("x = -2.5e3 or 7") == -2500.0
    with pytest.raises(ValueError, match="tolerance must be a finite number >= 0"):
        numeric(-1)


def test_contains_finds_the_expected_text_in_the_answer() -> None:
    assert contains("It is Paris, France", "paris")
    assert not contains("Lyon", "Paris")


def test_a_dataset_item_without_task_or_answer_is_named_in_the_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="dataset item 2 needs a 'task'"):
        load_dataset([{"task": "a", "answer": 1}, {"answer": 2}])
    with pytest.raises(ValueError, match="dataset item 1 needs an 'answer'"):
        load_dataset([{"task": "a"}])
    path = tmp_path / "d.jsonl"
    path.write_text('{"task": "a", "answer": 1}\n{oops\n')
    with pytest.raises(ValueError, match=r"d.jsonl:2: not JSON"):
        load_dataset(path)


def test_evaluate_compares_modes_with_accuracy_calls_and_tokens() -> None:
    report = lw.evaluate(DATASET, either, demo_registry(), modes=["react", "rewoo", "plan_execute"],
                         scorer="numeric")
    assert list(report.summaries) == ["react", "rewoo", "plan_execute"]
    for mode, summary in report.summaries.items():
        assert summary.items == 4
        assert summary.accuracy == 0.5, mode  # items 1 and 2 right, 3 wrong, 4 crashes
        assert summary.prompt_tokens > 0 and summary.evaluated_tokens == summary.prompt_tokens
        assert summary.stopped == {"final": 3, "error": 1}
    assert report.summaries["react"].llm_calls == 3 * 2 + 1
    assert report.summaries["rewoo"].llm_calls == 3 * 2 + 1
    rows = report.results["react"]
    assert [r.score for r in rows] == [1.0, 1.0, 0.0, 0.0]
    assert rows[2].id == "wrong-on-purpose" and rows[2].answer == "2"
    data = json.loads(json.dumps(report.to_dict()))
    assert data["scorer"] == "numeric"
    assert data["modes"]["rewoo"]["accuracy"] == 0.5
    assert len(data["items"]["plan_execute"]) == 4


def test_a_user_scorer_may_give_partial_credit_and_a_bad_one_is_refused() -> None:
    def half(answer: str | None, expected: Any) -> float:
        return 0.5

    assert lw.evaluate(DATASET[:2], adder, demo_registry(), scorer=half).summaries["react"].accuracy == 0.5
    with pytest.raises(ValueError, match="a scorer must return a bool or a number in"):
        lw.evaluate(DATASET[:1], adder, demo_registry(), scorer=lambda a, e: 7)
    with pytest.raises(ValueError, match="scorer must be one of"):
        lw.evaluate(DATASET[:1], adder, demo_registry(), scorer="fuzzy")


def test_the_report_renders_as_a_table_and_as_html_with_each_trace() -> None:
    from rich.console import Console

    report = lw.evaluate(DATASET[:3], adder, demo_registry(), scorer="exact")
    console = Console(record=True, width=200)
    console.print(report.table())
    text = console.export_text()
    assert "react" in text and "66.7%" in text
    page = report_html(report)
    assert page.count("<details>") == 3
    assert "wrong-on-purpose: wrong" in page and "srcdoc=" in page


# -- the commands ----------------------------------------------------------------------


def _write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_batch_command_writes_results_in_order_and_resumes_from_its_journal(tmp_path: Path) -> None:
    tasks = _write_jsonl(tmp_path / "tasks.jsonl", ["add 2 and 3", {"task": "fail 1 and 2"}, {"question": "add 4 and 4"}])
    out, db = tmp_path / "results.jsonl", tmp_path / "runs.db"
    argv = [
        "batch", str(tasks), "--out", str(out), "--db", str(db), "--concurrency", "2",
        "--policy", "helpers.batch_policies:adder", "--quiet",
    ]
    assert main(argv) == 1  # one task did not answer
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["final_answer"] for x in lines] == ["5", None, "8"]
    assert [x["stopped_reason"] for x in lines] == ["final", "error", "final"]
    assert lines[1]["error"] == "policy raised RuntimeError: cannot do 'fail 1 and 2'"
    assert lines[0]["run_id"].startswith("batch-000000-")
    # again: every run is in the journal already, so none runs
    with lw.SQLiteStore(db) as store:
        before = {r.id: r.updated_at for r in store.list_runs()}
    assert main(argv) == 1
    with lw.SQLiteStore(db) as store:
        assert {r.id: r.updated_at for r in store.list_runs()} == before
    assert [json.loads(x)["final_answer"] for x in out.read_text().splitlines()] == ["5", None, "8"]


def test_batch_command_names_a_bad_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('"ok"\n{"nope": 1}\n')
    assert main(["batch", str(tasks), "--out", str(tmp_path / "o.jsonl"),
                 "--policy", "helpers.batch_policies:adder"]) == 2
    assert 'tasks.jsonl:2: expected a string or an object with "task"' in capsys.readouterr().err


def test_eval_command_prints_the_table_and_writes_json_and_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _write_jsonl(tmp_path / "data.jsonl", DATASET)
    report, page = tmp_path / "report.json", tmp_path / "report.html"
    code = main(["eval", str(data), "--modes", "react,rewoo", "--scorer", "numeric", "--tolerance", "0.5",
                 "--policy", "helpers.batch_policies:either", "--json", str(report), "--html", str(page),
                 "--quiet"])
    assert code == 0
    out = capsys.readouterr().out
    assert "react" in out and "rewoo" in out and "50.0%" in out
    data_out = json.loads(report.read_text())
    assert data_out["scorer"] == "numeric(tolerance=0.5)"
    assert set(data_out["modes"]) == {"react", "rewoo"}
    assert page.read_text().count("<details>") == 8


def test_eval_command_takes_a_user_scorer_and_refuses_an_unknown_mode(tmp_path: Path) -> None:
    data = _write_jsonl(tmp_path / "data.jsonl", DATASET[:2])
    report = tmp_path / "r.json"
    assert main(["eval", str(data), "--scorer", "helpers.batch_policies:close_enough",
                 "--policy", "helpers.batch_policies:adder", "--json", str(report), "--quiet"]) == 0
    assert json.loads(report.read_text())["modes"]["react"]["accuracy"] == 1.0
    assert main(["eval", str(data), "--modes", "react,tot9", "--policy", "helpers.batch_policies:adder"]) == 2
