"""The flipped-byte trial: copies of a journal, each with one byte flipped, read back
through SQLiteStore. Each copy reads back the same as the original, fails loudly (a
StoreError), fails with another exception (a leak), or reads back different content with
no error (silent corruption: what must not happen to what a replay uses).

    python tests/helpers/flip_trial.py [COPIES]     # prints the counts
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright.durable.sqlite import SQLiteStore

SCRIPT = [
    'Thought: add\nAction: add\nAction Input: {"x": 20, "y": 22}',
    'Thought: search\nAction: search\nAction Input: {"q": "capital of France"}',
    'Thought: count\nAction: word_count\nAction Input: {"text": "one two three four"}',
    "Thought: done\nFinal Answer: 42 and Paris",
]


def tools() -> lw.ToolRegistry:
    @lw.tool
    def add(x: int, y: int) -> int:
        """Add two integers."""
        return x + y

    @lw.tool
    def search(q: str) -> str:
        """Look up a fact."""
        return "Paris is the capital and largest French city"

    @lw.tool
    def word_count(text: str) -> int:
        """Count the words in a text."""
        return len(text.split())

    return lw.ToolRegistry([add, search, word_count])


def make_journal(path: Path) -> None:
    with SQLiteStore(path) as store:
        lw.run("what is 20 + 22, and the capital of France?", lw.ScriptedPolicy(SCRIPT), tools(),
               store=store, run_id="r")
    # closed: the log is folded into the file, which now holds everything


def read_back(path: Path) -> dict[str, Any]:
    """What the journal gives a reader and a replay."""
    with SQLiteStore(path) as store:
        record = store.load_run("r")
        trace = store.trace("r")
        prompts = [store.prompt("r", n) for n in range(1, record.llm_calls + 1)]
        resumed = store.reopen("r")[1]  # the journal a resume replays from
        replay = {"completions": {n: c[0].text for n, c in resumed._completions.items()},
                  "tools": {k: (v[0], None if v[1] is None else v[1].observation) for k, v in resumed._tools.items()}}
        return {"record": repr(record), "trace": trace.to_dict(), "prompts": prompts, "replay": replay,
                "unsettled": repr(store.unsettled("r"))}


def trial(copies: int, seed: int = 7) -> Counter[str]:
    """Flip one byte of each copy (positions spread over the file, seeded) and classify."""
    folder = Path(tempfile.mkdtemp(prefix="lw-flip-"))
    try:
        original = folder / "runs.db"
        make_journal(original)
        expected = json.dumps(read_back(original), sort_keys=True, default=str)
        data = original.read_bytes()
        rng = random.Random(seed)
        outcomes: Counter[str] = Counter()
        for i in range(copies):
            copy = folder / f"copy-{i}.db"
            flipped = bytearray(data)
            at = rng.randrange(100, len(data))  # past the header, which SQLite checks itself
            flipped[at] ^= 1 << rng.randrange(8)
            copy.write_bytes(bytes(flipped))
            try:
                got = json.dumps(read_back(copy), sort_keys=True, default=str)
            except lw.StoreError:
                outcomes["store_error"] += 1
            except Exception as exc:  # a driver error that leaked
                outcomes[f"leaked {type(exc).__name__}"] += 1
            else:
                outcomes["same" if got == expected else "wrong"] += 1
            for suffix in ("", "-wal", "-shm"):
                Path(f"{copy}{suffix}").unlink(missing_ok=True)
        return outcomes
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    counts = trial(int(sys.argv[1]) if len(sys.argv) > 1 else 167)
    print(dict(sorted(counts.items())))
