#!/usr/bin/env bash
# What the test suite needs beyond Python. `scripts/install.sh --dev` runs this first, so the
# README's test command is all a fresh machine needs. Idempotent: with everything in place
# it takes about a second.
#
#   scripts/test_deps.sh            everything below
#   scripts/test_deps.sh --system   only the Debian packages (the part that needs root)
#
# - Debian packages: chromium (the viewer's browser test), postgresql (its server binaries,
#   /usr/lib/postgresql/*/bin, which the PostgresStore tests start in a temporary folder of
#   their own; the package's cluster service is not used), nodejs and npm (for the Node MCP
#   server). Installed with apt-get as root; as another user a missing one stops this at
#   once, with one line naming the one command to run.
# - The Node MCP server the MCP tests talk to (@modelcontextprotocol/server-everything), into
#   $LOOPWRIGHT_CACHE/node (default ~/.cache/loopwright, kept between checkouts like the
#   wheelhouse): installed here, never fetched at test time.
# - A real OTLP receiver for the OpenTelemetry end-to-end test: Arize Phoenix, in its own
#   virtual environment ($LOOPWRIGHT_CACHE/phoenix; about 0.9 GB, kept apart from .venv's pins).
# - The bfcl-eval wheel (BFCL's data, classes and executor), into $LOOPWRIGHT_CACHE/bfcl: the
#   BFCL multi-turn replay suite and benchmarks/tool_search.py read it as a zip, without
#   installing it or its dependencies.
set -euo pipefail

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
{ command -v node && command -v npm; } >/dev/null 2>&1 || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "the tests need Debian packages that are missing (${missing[*]}): run 'sudo $(cd "$(dirname "$0")" && pwd)/test_deps.sh --system', then this command again" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "installed ${missing[*]}"
fi
[ "${1:-}" = "--system" ] && exit 0

cache=${LOOPWRIGHT_CACHE:-$HOME/.cache/loopwright}

everything_version=2026.8.31
node_dir="$cache/node"
if [ ! -x "$node_dir/node_modules/.bin/mcp-server-everything" ] \
  || ! grep -q "\"version\": \"$everything_version\"" "$node_dir/node_modules/@modelcontextprotocol/server-everything/package.json" 2>/dev/null; then
  mkdir -p "$node_dir"
  npm install --prefix "$node_dir" --no-audit --no-fund --silent \
    "@modelcontextprotocol/server-everything@$everything_version"
  echo "mcp-server-everything $everything_version installed in $node_dir"
fi

phoenix_version=20.26.1
phoenix_dir="$cache/phoenix"
# The version from the package's metadata: importing phoenix takes seconds.
if [ ! -x "$phoenix_dir/bin/phoenix" ] || ! "$phoenix_dir/bin/python" -c \
  "import importlib.metadata as m, sys; sys.exit(m.version('arize-phoenix') != '$phoenix_version')" 2>/dev/null; then
  python3 -m venv "$phoenix_dir"
  "$phoenix_dir/bin/python" -m pip install -q --disable-pip-version-check "arize-phoenix==$phoenix_version"
  echo "arize-phoenix $phoenix_version installed in $phoenix_dir"
fi

bfcl_version=2026.3.23  # tests/test_suite_bfcl.py and benchmarks/tool_search.py name the same
bfcl_dir="$cache/bfcl"
if [ ! -f "$bfcl_dir/bfcl_eval-$bfcl_version-py3-none-any.whl" ]; then
  mkdir -p "$bfcl_dir"
  python3 -m pip download -q --disable-pip-version-check --no-deps "bfcl-eval==$bfcl_version" -d "$bfcl_dir"
  echo "bfcl-eval $bfcl_version wheel in $bfcl_dir"
fi
