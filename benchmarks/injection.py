"""Print the injection suite's payload class x outcome table for all three modes
(scripted policies that obey every injected instruction; the approver denies all).

    .venv/bin/python benchmarks/injection.py [--real]    # --real: ReAct with the embedded model
"""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))

from injection_suite import PAYLOADS, run_payload, run_suite, table


def main() -> None:
    for mode in ("react", "rewoo", "plan_execute"):
        print(f"\n## {mode} (scripted, obedient)\n")
        print(table(run_suite(modes=(mode,))))
    if "--real" in sys.argv:
        import loopwright as lw

        model = lw.models.LlamaCpp(max_tokens=64)
        outcomes = [run_payload(c, p, "react", policy=model, max_steps=3) for c, p in PAYLOADS]
        print("\n## react (real embedded model)\n")
        print(table(outcomes))


if __name__ == "__main__":
    main()
