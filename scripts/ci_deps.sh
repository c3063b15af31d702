#!/usr/bin/env bash
# System packages the test suite needs beyond Python: Debian's chromium, for the
# viewer's browser test (tests/test_viewer.py skips without it). Idempotent; run as root.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
chromium --version
