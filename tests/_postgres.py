"""A throwaway PostgreSQL server for tests: ``initdb`` + ``pg_ctl`` in a temporary directory.

It listens on a Unix socket only (no TCP), runs as the ``postgres`` OS user
when the tests run as root, and is stopped and removed by :meth:`Postgres.stop`.
Callers decide whether a missing server is a skip or a failure: this module
raises :class:`PostgresUnavailable` and leaves the policy to them.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any


class PostgresUnavailable(Exception):
    """No PostgreSQL server can be started here (the reason is the message)."""


def pg_bindir() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl`` (PATH first, then Debian's layout)."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    return Path(candidates[-1]).parent if candidates else None


def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=True, text=True, timeout=120, **kwargs)


class Postgres:
    """A throwaway PostgreSQL server on a Unix socket in a temporary directory."""

    def __init__(self, bindir: Path | None = None) -> None:
        bindir = bindir or pg_bindir()
        if bindir is None:
            raise PostgresUnavailable(
                "no PostgreSQL server binaries (initdb, pg_ctl): apt-get install postgresql"
            )
        self.bindir = bindir
        self.as_user: list[str] = []
        root = os.geteuid() == 0
        # as root the server runs as `postgres`, which must reach the directory: not under /root
        self.dir = Path(tempfile.mkdtemp(prefix="dpkit-pg-", dir="/tmp" if root else None))
        if root:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                shutil.rmtree(self.dir)
                raise PostgresUnavailable(
                    "running as root and there is no 'postgres' OS user for the server"
                ) from None
            runuser = shutil.which("runuser") or "runuser"
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self.as_user = [runuser, "-u", "postgres", "--"]
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.started = False

    def dsn(self, dbname: str = "postgres") -> str:
        """A libpq connection string to a database of the server."""
        return f"host={self.dir} port=5432 user=dpkit dbname={dbname}"

    def url(self, dbname: str = "postgres") -> str:
        """A SQLAlchemy URL (psycopg 3) to a database of the server."""
        return f"postgresql+psycopg://dpkit@/{dbname}?host={self.dir}&port=5432"

    def new_database(self) -> str:
        """Create an empty database and return its name."""
        name = f"db_{uuid.uuid4().hex[:12]}"
        self.psql(f"CREATE DATABASE {name};")
        return name

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        run(
            [
                *self.as_user,
                str(self.bindir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "dpkit",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
            cwd=self.dir,
            env=env,
            capture_output=True,
        )
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                "\nlisten_addresses = ''\n"  # no TCP at all
                f"unix_socket_directories = '{self.dir}'\n"
                "port = 5432\nfsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
            )
        # the server is a daemon: no pipes it could keep open, its output goes to the log
        result = subprocess.run(
            [
                *self.as_user,
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-w",
                "-t",
                "60",
                "start",
            ],
            cwd=self.dir,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
            check=False,
        )
        self.started = True
        if result.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"pg_ctl start failed ({result.returncode}):\n{log[-2000:]}")

    def psql(self, sql: str, dbname: str = "postgres") -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        out = run(
            [
                str(self.bindir / "psql"),
                "-h",
                str(self.dir),
                "-p",
                "5432",
                "-U",
                "dpkit",
                "-d",
                dbname,
                "-v",
                "ON_ERROR_STOP=1",
                "-X",
                "-q",
                "-A",
                "-t",
                "-f",
                "-",
            ],
            input=sql,
            env=env,
            capture_output=True,
            cwd=self.dir,
        )
        return out.stdout.strip()

    def stop(self) -> None:
        try:
            if self.started:
                subprocess.run(
                    [
                        *self.as_user,
                        str(self.bindir / "pg_ctl"),
                        "-D",
                        str(self.data),
                        "-m",
                        "fast",
                        "-w",
                        "-t",
                        "60",
                        "stop",
                    ],
                    cwd=self.dir,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=120,
                    check=False,
                )
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
