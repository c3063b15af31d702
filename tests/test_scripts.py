"""The set-up scripts: the README's test command (`scripts/install.sh --dev`) installs what
the tests need, and on a machine missing a system package, as a user who cannot install
it, stops at once saying the one command to run."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def as_another_user() -> list[str]:
    """A command prefix that runs as an unprivileged user (nobody, when we are root)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot drop to another user")
    return [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]


def test_the_dev_install_without_root_stops_at_once_naming_the_one_command_for_missing_packages():
    work = Path(tempfile.mkdtemp(prefix="lw-install-"))
    try:
        work.chmod(0o777)
        bin_dir = work / "bin"  # a PATH with no chromium, node or npm on it
        bin_dir.mkdir()
        for tool in ("bash", "dirname", "id"):
            found = shutil.which(tool)
            assert found is not None
            (bin_dir / tool).symlink_to(found)
        env = {"PATH": str(bin_dir), "HOME": str(work), "LOOPWRIGHT_VENV": str(work / "venv"),
               "LOOPWRIGHT_CACHE": str(work / "cache")}  # fmt: skip
        out = subprocess.run(
            [*as_another_user(), str(bin_dir / "bash"), str(ROOT / "scripts" / "install.sh"), "--dev"],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert out.returncode == 1, out.stderr
        assert out.stdout == ""
        [line] = out.stderr.splitlines()
        assert "missing (chromium nodejs npm)" in line
        assert line.endswith(f"run 'sudo {ROOT}/scripts/test_deps.sh --system', then this command again")
        assert sorted(p.name for p in work.iterdir()) == ["bin"]  # no venv, no cache: nothing started
    finally:
        shutil.rmtree(work)


def test_the_test_dependencies_once_installed_are_checked_and_nothing_is_installed_again():
    out = subprocess.run([str(ROOT / "scripts" / "test_deps.sh")], capture_output=True, text=True, timeout=120,
                         check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""  # nothing was installed: it was all there (how long it takes is not a test's business)
