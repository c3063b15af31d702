#!/usr/bin/env bash
# System packages the test suite needs beyond Python: Debian's chromium, for the
# viewer's browser test (tests/test_viewer.py skips without it), and Debian's postgresql,
# whose server binaries (/usr/lib/postgresql/*/bin) the PostgresStore tests start in a
# temporary folder of their own (the package's own cluster service is not used).
# Idempotent; run as root.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
updated=0
need() {  # need COMMAND-TEST PACKAGE...
  if ! eval "$1" >/dev/null 2>&1; then
    [ "$updated" = 1 ] || { apt-get update -qq; updated=1; }
    shift
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
  fi
}
need "command -v chromium" chromium
need "ls /usr/lib/postgresql/*/bin/initdb" postgresql
chromium --version
ls /usr/lib/postgresql/*/bin/initdb

# The Node MCP server the MCP tests talk to (@modelcontextprotocol/server-everything), into
# $LOOPWRIGHT_CACHE/node (default ~/.cache/loopwright, kept between checkouts like the
# wheelhouse): installed here, never fetched at test time. Needs node and npm.
cache=${LOOPWRIGHT_CACHE:-$HOME/.cache/loopwright}
everything_version=2026.8.31
node_dir="$cache/node"
if [ ! -x "$node_dir/node_modules/.bin/mcp-server-everything" ] \
  || ! grep -q "\"version\": \"$everything_version\"" "$node_dir/node_modules/@modelcontextprotocol/server-everything/package.json" 2>/dev/null; then
  if ! command -v npm >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
  fi
  mkdir -p "$node_dir"
  npm install --prefix "$node_dir" --no-audit --no-fund --silent \
    "@modelcontextprotocol/server-everything@$everything_version"
fi
echo "mcp-server-everything $everything_version in $node_dir"

# A real OTLP receiver for the OpenTelemetry end-to-end test: Arize Phoenix from PyPI, in its
# own virtual environment ($LOOPWRIGHT_CACHE/phoenix; about 0.9 GB, kept apart from .venv's pins).
phoenix_version=20.26.1
phoenix_dir="$cache/phoenix"
if ! "$phoenix_dir/bin/python" -c "import sys, phoenix; sys.exit(phoenix.__version__ != '$phoenix_version')" 2>/dev/null; then
  python3 -m venv "$phoenix_dir"
  "$phoenix_dir/bin/python" -m pip install -q --disable-pip-version-check "arize-phoenix==$phoenix_version"
fi
echo "arize-phoenix $phoenix_version in $phoenix_dir"
