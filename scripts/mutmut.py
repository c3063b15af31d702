"""Run mutmut over named modules of src/ with the fast tests, in a copy of the tree.

    .venv/bin/python scripts/mutmut.py src/loopwright/events.py --tests tests/test_events.py
    .venv/bin/python scripts/mutmut.py src/loopwright/runtime/agents.py src/loopwright/events.py
    .venv/bin/python scripts/mutmut.py src/loopwright/events.py --only 'loopwright.events.x_tool*'

The files git knows (tracked, and untracked ones it does not ignore), as they are in the
working tree, uncommitted changes included, are copied to a temporary folder; mutmut is
configured there (a `[tool.mutmut]` table appended to the copy's pyproject.toml) to
mutate only the named modules and to run the tests named with `--tests` (default: the
whole `tests` folder) under `-m "not slow"`. mutmut first records which tests reach
which function, so each mutant runs only those. Nothing is written in the working tree;
the copy is removed at the end unless `--keep` is given (then `mutmut browse` or
`mutmut show NAME` work inside it).

Prints, per module, the mutants and how many were killed, survived and timed out, the
kill rate with timeouts counted apart (killed / (mutants - timeouts)), then each
survivor and its diff. Exit status 0 when every module reaches `--min-score` percent.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTMUT = Path(sys.executable).with_name("mutmut")
# Prints {mutant name: its diff} for the names on stdin, in one process (`mutmut show`
# takes one name and a second of start-up each).
SHOW = """
import json, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
print(json.dumps({name: get_diff_for_mutant(name) for name in sys.stdin.read().split()}))
"""


def copy_tree(dest: Path) -> None:
    """Copy the files git knows, as they are on disk now, from ROOT to dest."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if not source.is_file():  # deleted in the working tree, or a submodule
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)


def configure(dest: Path, modules: list[str], tests: list[str]) -> None:
    """Append mutmut's settings to the copy's pyproject.toml."""
    settings = {
        "source_paths": ["src"],
        "only_mutate": modules,
        "pytest_add_cli_args": ["-m", "not slow", "-p", "no:cacheprovider"],
        "pytest_add_cli_args_test_selection": tests,
        "use_git_change_detection": False,
        # each mutant's tests run in a process forked from a clean server, not from the one
        # that ran the whole selection first: forked from that one, asyncio.run hangs in a
        # child (tests/test_events.py), and every mutant that reaches it is a false timeout
        "process_isolation": "forkserver",
    }
    lines = ["", "[tool.mutmut]"] + [f"{key} = {json.dumps(value)}" for key, value in settings.items()]
    with (dest / "pyproject.toml").open("a") as pyproject:
        pyproject.write("\n".join(lines) + "\n")


def module_of(path: str) -> str:
    """src/loopwright/ui/agui.py -> loopwright.ui.agui (the prefix of its mutant names)."""
    return path.removeprefix("src/").removesuffix(".py").replace("/", ".")


def results(dest: Path) -> dict[str, str]:
    """Every mutant's name and status (killed, survived, timeout, no tests, ...)."""
    out = subprocess.run([str(MUTMUT), "results", "--all", "true"], cwd=dest, check=True,
                         capture_output=True, text=True).stdout
    found = (re.match(r"\s+(\S+): (.+)$", line) for line in out.splitlines())
    return {m[1]: m[2] for m in found if m}


def report(dest: Path, modules: list[str], statuses: dict[str, str], diffs: bool) -> list[float]:
    by_module: dict[str, Counter[str]] = defaultdict(Counter)
    survivors: dict[str, list[str]] = defaultdict(list)
    for name, status in statuses.items():
        module = name.rsplit(".", 1)[0]
        by_module[module][status] += 1
        if status != "killed":
            survivors[module].append(name)
    scores = []
    print(f"\n{'module':<34} {'mutants':>7} {'killed':>6} {'survived':>8} {'timeout':>7} {'other':>5} {'score':>6}")
    for path in modules:
        module = module_of(path)
        counts = by_module[module]
        total = sum(counts.values())
        other = total - counts["killed"] - counts["survived"] - counts["timeout"]
        tested = total - counts["timeout"]
        score = 100.0 * counts["killed"] / tested if tested else 0.0
        scores.append(score)
        print(f"{path:<34} {total:>7} {counts['killed']:>6} {counts['survived']:>8} "
              f"{counts['timeout']:>7} {other:>5} {score:>5.1f}%")
    listed = [name for path in modules for name in survivors[module_of(path)]]
    shown: dict[str, str] = {}
    if diffs and listed:
        shown = json.loads(subprocess.run([sys.executable, "-c", SHOW], cwd=dest, input=" ".join(listed),
                                          check=True, capture_output=True, text=True).stdout)
    for name in listed:
        print(f"\n{statuses[name]}: {name}")
        if name in shown:
            print(shown[name].strip())
    return scores


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="+", help="files under src/ to mutate")
    parser.add_argument("--tests", nargs="+", default=["tests"],
                        help="test files, folders or node ids to run (default: tests)")
    parser.add_argument("--max-children", type=int, default=2, help="mutants run at once (default 2)")
    parser.add_argument("--min-score", type=float, default=90.0, help="percent each module must kill")
    parser.add_argument("--no-diffs", action="store_true", help="list survivors without their diffs")
    parser.add_argument("--keep", action="store_true", help="keep the copy and print its path")
    parser.add_argument("--only", nargs="+", default=[], metavar="NAME",
                        help="run only these mutants (names or globs, as `mutmut run` takes them: the "
                             "survivors of an earlier run, say); the others are left out of the counts")
    args = parser.parse_args()
    for path in args.modules + args.tests:
        if not (ROOT / path.split("::")[0]).exists():
            parser.error(f"{path} does not exist under {ROOT}")
    for path in args.modules:
        if not (path.startswith("src/") and path.endswith(".py")):
            parser.error(f"{path} is not a .py file under src/")
    if not MUTMUT.exists():
        parser.error(f"{MUTMUT} is missing: install the dev extra (mutmut)")

    dest = Path(tempfile.mkdtemp(prefix="loopwright-mutmut-"))
    try:
        copy_tree(dest)
        configure(dest, args.modules, args.tests)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        started = time.monotonic()
        run = subprocess.run([str(MUTMUT), "run", "--max-children", str(args.max_children), *args.only],
                             cwd=dest, env=env, capture_output=True, text=True)
        elapsed = time.monotonic() - started
        if run.returncode != 0:
            print(run.stdout[-4000:], run.stderr[-4000:], sep="\n", file=sys.stderr)
            print(f"mutmut run failed with status {run.returncode}", file=sys.stderr)
            return 2
        print(f"mutmut run took {elapsed:.0f} s ({' '.join(args.tests)}, -m 'not slow', "
              f"{args.max_children} at once)")
        statuses = results(dest)
        if args.only:  # the mutants not named were not run: they are no part of the figures
            statuses = {name: status for name, status in statuses.items() if status != "not checked"}
            print(f"only the {len(statuses)} mutants named with --only were run")
        scores = report(dest, args.modules, statuses, not args.no_diffs)
    finally:
        if args.keep:
            print(f"kept {dest}")
        else:
            shutil.rmtree(dest, ignore_errors=True)
    return 0 if all(score >= args.min_score for score in scores) else 1


if __name__ == "__main__":
    sys.exit(main())
