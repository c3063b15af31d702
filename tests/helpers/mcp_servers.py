"""Where the real third-party MCP servers the tests use are installed, and small helpers.

mcp-server-time (PyPI) comes with `scripts/install.sh --dev`; the Node server
@modelcontextprotocol/server-everything (npm) with `scripts/install.sh --dev` (scripts/test_deps.sh), into
$LOOPWRIGHT_CACHE/node (default ~/.cache/loopwright/node). A missing one fails the test, saying what to run.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("LOOPWRIGHT_CACHE") or Path.home() / ".cache" / "loopwright")
NODE_BIN = CACHE / "node" / "node_modules" / ".bin"  # where scripts/test_deps.sh installs it


def time_server() -> str:
    path = Path(sys.executable).parent / "mcp-server-time"
    if not path.exists():
        pytest.fail(f"mcp-server-time is not installed at {path}: run scripts/install.sh --dev")
    return str(path)


def everything_server() -> str:
    path = NODE_BIN / "mcp-server-everything"
    if not path.exists():
        pytest.fail(f"{path} is missing: run scripts/install.sh --dev (it installs the npm server)")
    return str(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], limit_s: float = 30.0) -> None:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listened on 127.0.0.1:{port} within {limit_s}s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def pid_wrapper(tmp: Path, command: str, *args: str) -> tuple[str, list[str], Path]:
    """`sh -c` that writes its pid then execs the server: the test can kill the real
    server process mid-run. Returns (command, args, pid file)."""
    pid_file = tmp / "server.pid"
    quoted = " ".join(f"'{a}'" for a in (command, *args))
    return "sh", ["-c", f"echo $$ > '{pid_file}'; exec {quoted}"], pid_file


def kill_pid_file(pid_file: Path, sig: int = signal.SIGKILL) -> int:
    pid = int(pid_file.read_text().strip())
    os.kill(pid, sig)
    return pid
