"""Re-record the cassettes of real-model runs that tests/test_models_record.py replays.

    .venv/bin/python tests/cassettes/record.py

Each case runs once on the embedded model through a Recorder, writing `<name>.jsonl`
(every request and completion) and `<name>.trace.json` (the trace the run produced).
Re-record after changing a prompt, a demo tool's schema or the loops' prompt layout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright.interfaces.demo_tools import demo_registry

HERE = Path(__file__).parent

CASES: dict[str, dict[str, Any]] = {
    "react_json_17x23": {"task": "What is 17 * 23?", "mode": "react", "max_steps": 4},
    "react_brackets_turing": {
        "task": "When was Alan Turing born?",
        "mode": "react",
        "dialect": "brackets",
        "max_steps": 4,
    },
    "react_json_percent": {
        "task": "What is 15% of 80?",
        "mode": "react",
        "max_steps": 5,
    },
    "rewoo_capital": {"task": "What is the capital of Japan?", "mode": "rewoo", "max_steps": 4},
    "plan_execute_everest": {
        "task": "How tall is Mount Everest in metres?",
        "mode": "plan_execute",
        "max_steps": 4,
        "max_replans": 1,
    },
}


def run_case(policy: Any, case: dict[str, Any]) -> lw.Trace:
    """The run a case describes, on `policy`, with the demo tools (and the prompts built from their examples)."""
    options = dict(case)
    task = options.pop("task")
    return lw.run(task, policy, demo_registry(), **options)


def main(names: list[str]) -> None:
    model = lw.models.LlamaCpp(n_ctx=2048)
    for name in names or list(CASES):
        cassette = HERE / f"{name}.jsonl"
        cassette.unlink(missing_ok=True)
        model.reset()
        trace = run_case(lw.models.Recorder(model, cassette), CASES[name])
        (HERE / f"{name}.trace.json").write_text(
            json.dumps(trace.to_dict(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        print(f"{name}: {trace.stopped_reason} {trace.final_answer!r} ({trace.llm_calls} calls)")


if __name__ == "__main__":
    main(sys.argv[1:])
