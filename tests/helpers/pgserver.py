"""A throwaway PostgreSQL server for the tests and the journal benchmark: initdb in a
temporary folder, listening only on a unix socket in that folder, stopped and removed at
the end. Uses Debian's `postgresql` package (scripts/test_deps.sh installs it); as root the
server runs as the `postgres` user, since initdb refuses root.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

INSTALL = "sudo scripts/test_deps.sh --system (it runs: apt-get install -y postgresql)"


def find_bin() -> Path:
    """The folder holding initdb and pg_ctl; RuntimeError saying how to install them."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    found = shutil.which("initdb")
    if found:
        candidates.insert(0, str(Path(found).resolve().parent))
    for folder in candidates:
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    raise RuntimeError(f"PostgreSQL is not installed (no initdb/pg_ctl found): run {INSTALL}")


class PostgresServer:
    def __init__(self) -> None:
        self.bin = find_bin()
        self.root = Path(tempfile.mkdtemp(prefix="lw-pg-"))
        self.data = self.root / "data"
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # initdb refuses root: the server runs as postgres
            shutil.chown(self.root, "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.user = "postgres"
        self.started = False

    def _run(self, *args: str) -> None:
        subprocess.run([*self.as_user, *args], check=True, capture_output=True, text=True, timeout=120)

    def start(self, *, durable: bool = False) -> PostgresServer:
        """initdb and start. durable: fsync on, as a production server (the tests run
        without it: a killed client, not a killed server, is what they test)."""
        try:
            self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", self.user, "--auth=trust",
                      "-E", "UTF8", "--no-sync")
            options = f"-k {self.root} -c listen_addresses='' -c max_connections=60"
            if not durable:
                options += " -c fsync=off"
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-w", "-t", "60",
                      "-l", str(self.root / "log"), "start")
        except subprocess.CalledProcessError as exc:
            log = (self.root / "log").read_text() if (self.root / "log").exists() else ""
            self.stop()
            raise RuntimeError(f"could not start PostgreSQL: {exc.stderr}\n{log}") from exc
        self.started = True
        return self

    def dsn(self, schema: str | None = None) -> str:
        """A DSN for the server's postgres database, in `schema` when given."""
        base = f"postgresql:///postgres?host={self.root}&user={self.user}"
        return base if schema is None else base + f"&options=-csearch_path%3D{schema}"

    def new_schema(self) -> str:
        """A fresh, empty schema: one journal's worth of isolation, cheaper than a database."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return name

    def restart(self) -> None:
        """Stop the server (dropping every connection) and start it again, same options."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "-t", "60",
                  "-l", str(self.root / "log"), "restart")

    def stop(self) -> None:
        if self.started:
            subprocess.run([*self.as_user, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                            "-w", "stop"], capture_output=True, timeout=60)
            self.started = False
        shutil.rmtree(self.root, ignore_errors=True)
