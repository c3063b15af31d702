"""llama-cpp-python's OpenAI-compatible server on the embedded model, for the benchmarks
that measure a served model next to the embedded one (game24.py, quality.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import loopwright as lw


@contextmanager
def llama_server(threads: int, model_path: str | None = None) -> Iterator[str]:
    """llama-cpp-python's OpenAI-compatible server on the embedded model (or the GGUF
    file `model_path`), on a free port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", model_path or str(lw.models.default_model_path()),
             "--model_alias", "smollm2", "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048",
             "--n_threads", str(threads), "--n_threads_batch", str(threads)],
            stdout=log, stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}/v1"
        try:
            deadline = time.monotonic() + 120
            while True:
                if process.poll() is not None:
                    log.seek(0)
                    raise SystemExit(f"llama_cpp.server exited: {log.read()[-1500:].decode(errors='replace')}")
                try:
                    with urllib.request.urlopen(f"{url}/models", timeout=1) as response:
                        if response.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit("llama_cpp.server did not start within 120 s")
                time.sleep(0.3)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
