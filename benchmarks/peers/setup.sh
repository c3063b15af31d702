#!/usr/bin/env bash
# Make one virtual environment per framework under benchmarks/peers/.venvs/, each with
# only that framework (pinned) installed, so that import time and memory are its own.
# Idempotent: an environment whose pins are already satisfied is left alone.
#
#   benchmarks/peers/setup.sh            all environments
#   benchmarks/peers/setup.sh NAME...    only these (bare loopwright langgraph smolagents
#                                        openai_agents pydantic_ai report
#                                        pydantic_ai_http langgraph_http)
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
venvs=$here/.venvs
py=${PYTHON:-python3}
mkdir -p "$venvs"

# name -> pip arguments. pydantic-ai is installed as pydantic-ai-slim at the same version:
# the same code without the provider SDKs (openai, anthropic, google, ...) that a
# FunctionModel run never imports.
declare -A pins=(
  [bare]=""
  [loopwright]="-e $repo"
  [langgraph]="langchain==1.5.0 langgraph==1.2.22"
  [smolagents]="smolagents==1.26.0"
  [openai_agents]="openai-agents==0.24.0"
  [pydantic_ai]="pydantic-ai-slim==2.62.0"
  [report]="matplotlib==3.11.2 -e $repo"
  # benchmarks/batch.py: the same frameworks talking to an OpenAI-compatible HTTP server
  [pydantic_ai_http]="pydantic-ai-slim[openai]==2.62.0"
  [langgraph_http]="langchain==1.5.0 langgraph==1.2.22 langchain-openai==1.7.4"
)
order=(bare loopwright langgraph smolagents openai_agents pydantic_ai report)
[ $# -gt 0 ] && order=("$@")

failed=0
for name in "${order[@]}"; do
  if [ -z "${pins[$name]+set}" ]; then echo "unknown environment: $name" >&2; exit 2; fi
  env=$venvs/$name
  log=$venvs/$name.install.log
  [ -x "$env/bin/python" ] || "$py" -m venv "$env"
  if [ -n "${pins[$name]}" ]; then
    # shellcheck disable=SC2086
    if "$env/bin/python" -m pip --disable-pip-version-check -q install ${pins[$name]} >"$log" 2>&1; then
      echo "ok       $name"
    else
      echo "FAILED   $name (see $log)"; tail -5 "$log"; failed=1
    fi
  else
    echo "ok       $name (standard library only)"
  fi
  "$env/bin/python" -m pip --disable-pip-version-check freeze >"$venvs/$name.freeze.txt" 2>/dev/null
done
exit $failed
