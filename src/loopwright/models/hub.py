"""GGUF files from the Hugging Face hub: fetched once into its cache, offline after.

Opt-in (`LlamaCpp.from_pretrained`, `--model hf:OWNER/NAME/FILE.gguf`) and the only place
loopwright may reach the network for weights; the default model never does. The fetching is
huggingface_hub's own (the hub's cache layout, its offline mode, its endpoint and token
settings), imported only here and only when called. A sha256, when given, is checked on
the file on disk before anything loads it.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
from pathlib import Path
from typing import Final

from loopwright.errors import ModelChecksumError, ModelNotFoundError

HUB_PREFIX: Final = "hf:"
HUB_HINT: Final = "pip install 'loopwright[hub]'  (huggingface-hub)"
_SHA256: Final = re.compile(r"[0-9a-f]{64}")
_GLOB: Final = re.compile(r"[*?\[]")
_TRUE: Final = {"1", "on", "yes", "true"}


def parse_hub_ref(ref: str) -> tuple[str, str]:
    """`hf:OWNER/NAME/FILE` as (repo id, file name); the file may sit in folders
    (`hf:OWNER/NAME/sub/FILE.gguf`). Raises ValueError for anything else."""
    body = ref[len(HUB_PREFIX):] if ref.startswith(HUB_PREFIX) else ref
    parts = body.split("/")
    if len(parts) < 3 or not all(parts):
        raise ValueError(f"a hub model is hf:OWNER/NAME/FILE.gguf, got {ref!r}")
    return "/".join(parts[:2]), "/".join(parts[2:])


def hub_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The hub cache in use: `cache_dir`, else $HF_HUB_CACHE, else huggingface_hub's default
    (read when called, so a variable set after import counts)."""
    if cache_dir is not None:
        return Path(cache_dir)
    configured = os.environ.get("HF_HUB_CACHE")
    if configured:
        return Path(configured).expanduser()
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def repo_folder(repo_id: str, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder the hub's cache keeps model repo `repo_id` in (models--OWNER--NAME)."""
    return hub_cache_dir(cache_dir) / ("models--" + repo_id.replace("/", "--"))


def _offline() -> bool:
    """Whether HF_HUB_OFFLINE is set (read when called, like hub_cache_dir)."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def hub_file(
    repo_id: str,
    filename: str,
    *,
    sha256: str | None = None,
    revision: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """The local path of `filename` in hub repo `repo_id`: from the cache when it is there,
    else downloaded into it first. `filename` may be a glob that matches one file.

    The cache is looked in first, without asking the hub: a file once fetched is used as it
    is, with no network and no wait (the hub client retries an unreachable hub for about
    20 s before it falls back on its cache), and a newer upload under the same name is not
    taken until the cached one is deleted.

    Raises ModelNotFoundError (one line naming the cache folder to fill) when the file is
    neither cached nor fetchable, and ModelChecksumError when `sha256` is given and the
    file's differs.
    """
    expected = _expected_sha256(sha256)
    try:
        import huggingface_hub
        from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError
    except ImportError as exc:
        raise ModelNotFoundError(
            f"fetching from the Hugging Face hub needs huggingface-hub ({exc}); install it with: {HUB_HINT}"
        ) from exc
    cache = hub_cache_dir(cache_dir)
    offline = _offline()
    if _GLOB.search(filename):
        filename = _match_one(repo_id, filename, revision, cache, offline)
    try:
        try:
            path = Path(huggingface_hub.hf_hub_download(
                repo_id, filename, revision=revision, cache_dir=cache, local_files_only=True,
            ))
        except EntryNotFoundError:
            if offline:
                raise
            path = Path(huggingface_hub.hf_hub_download(repo_id, filename, revision=revision, cache_dir=cache))
    except (EntryNotFoundError, HfHubHTTPError, OSError) as exc:
        raise _not_found(repo_id, filename, cache, offline, exc) from None
    if expected is not None:
        check_sha256(path, expected)
    return path


def check_sha256(path: Path, expected: str) -> None:
    """Raise ModelChecksumError unless the sha256 of the file at `path` is `expected`."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    actual = digest.hexdigest()
    if actual != expected:
        raise ModelChecksumError(path, expected, actual)


def _expected_sha256(sha256: str | None) -> str | None:
    if sha256 is None:
        return None
    value = sha256.strip().lower()
    if not _SHA256.fullmatch(value):
        raise ValueError(f"sha256 must be 64 hexadecimal digits, got {sha256!r}")
    return value


def _match_one(repo_id: str, pattern: str, revision: str | None, cache: Path, offline: bool) -> str:
    """The one file of the repo that glob `pattern` matches: among the files of the cached
    snapshot, else among those the hub lists."""
    snapshot = _cached_snapshot(repo_id, revision, cache)
    names = [p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*")] if snapshot else []
    matches = sorted(name for name in names if fnmatch.fnmatchcase(name, pattern))
    if not matches and not offline:
        from huggingface_hub import list_repo_files

        try:
            names = list_repo_files(repo_id, revision=revision)
        except Exception:  # the client raises its HTTP library's own errors, not OSError
            return pattern  # the download then fails and reports the folder to fill
        matches = sorted(name for name in names if fnmatch.fnmatchcase(name, pattern))
    if len(matches) == 1:
        return matches[0]
    if not matches:
        return pattern  # reported as not cached, with the folder to fill
    found = ", ".join(matches) if matches else "none"
    raise ModelNotFoundError(f"{pattern!r} must match exactly one file of {repo_id}; it matches {found}")


def _cached_snapshot(repo_id: str, revision: str | None, cache: Path) -> Path | None:
    folder = repo_folder(repo_id, cache)
    ref = folder / "refs" / (revision or "main")
    commit = ref.read_text().strip() if ref.is_file() else (revision or "")
    snapshot = folder / "snapshots" / commit
    return snapshot if commit and snapshot.is_dir() else None


def _not_found(repo_id: str, filename: str, cache: Path, offline: bool, exc: Exception) -> ModelNotFoundError:
    """One line: what is missing, why it could not be fetched, and the folder to fill by hand."""
    why = (
        "HF_HUB_OFFLINE is set"
        if offline
        else f"the hub could not be reached or refused ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
    )
    return ModelNotFoundError(
        f"{repo_id}/{filename} is not in the Hugging Face hub cache and cannot be fetched: {why}; "
        f"fetch it where there is network and copy the repo's folder to {repo_folder(repo_id, cache)} "
        f"(blobs/, snapshots/<commit>/{filename}, refs/main)"
    )
