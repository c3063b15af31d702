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
