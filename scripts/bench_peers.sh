#!/usr/bin/env bash
# Regenerate docs/benchmarks.md (and docs/img/peers.png, docs/img/modes_cost.png):
# make or refresh one virtual environment per framework, run every peer harness in its
# own environment in this one session, measure the three modes, write the page.
# About 3 minutes the first time (installs), about 1 minute after.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
peers=$here/benchmarks/peers
results=$peers/results
mkdir -p "$results"

# A framework that fails to install is reported on the page with its error, not skipped.
"$peers/setup.sh" || echo "some environments failed to install; run.py records the errors"
py=$peers/.venvs/report/bin/python
"$py" "$peers/run.py" --rounds "${BENCH_ROUNDS:-3}" --out "$results/peers.json"
"$py" "$here/benchmarks/modes_cost.py" --json "$results/modes.json" \
  --markdown "$results/modes.md" --png "$here/docs/img/modes_cost.png" >/dev/null
"$py" "$peers/report.py" --peers "$results/peers.json" --modes-md "$results/modes.md" \
  --out "$here/docs/benchmarks.md" --png "$here/docs/img/peers.png"
