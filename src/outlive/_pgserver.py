"""A throwaway PostgreSQL for tests, sweeps and benchmarks, started by this project.

``initdb`` into a private directory, ``postgres`` on a free loopback port with its socket in that
directory, stopped by its own PID. PostgreSQL refuses to run as root, so under root the server
runs as the ``postgres`` system user (``Popen(user=...)``: the PID we hold is the server's own).
Binaries: ``$OUTLIVE_PG_BIN``, else ``initdb`` on PATH, else ``/usr/lib/postgresql/*/bin``.

    python -m outlive._pgserver -- outlive sweep --backend {url}

Used by the core's ``postgresql://`` tests and by ``langgraph+postgres`` (which asks for its own
URL scheme). Needs psycopg (``pip install 'outlive[postgres]'``) to check readiness. It is a
:class:`outlive._launch.Launcher`, like every server outlive starts (``--help`` lists options).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Self

from ._launch import Launcher, free_port, launcher_main, port_open, stop_process, wait_until
from .errors import BackendUnavailable

__all__ = ["PostgresServer", "main"]


def _bin_dir() -> Path:
    env = os.environ.get("OUTLIVE_PG_BIN")
    if env:
        return Path(env)
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    for cand in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(cand, "initdb")):
            return Path(cand)
    raise BackendUnavailable(
        "PostgreSQL binaries not found: install them (make engine-postgres does: "
        "apt-get install postgresql) or set OUTLIVE_PG_BIN")


class PostgresServer(Launcher):
    """One PostgreSQL cluster in ``base`` (a fresh temp dir by default), user ``outlive``.

    Under root, ``base`` and its parents must be reachable by the ``postgres`` user. ``url``,
    ``db_url()`` and ``create_database()`` answer backend URLs of ``scheme`` (``postgresql`` by
    default). ``cleanup()`` (or leaving the ``with`` block) removes a temp dir of its own.
    """

    name = "postgres"
    scheme = "postgresql"

    def __init__(self, base: str | os.PathLike[str] | None = None, *, scheme: str | None = None,
                 base_dir: str | os.PathLike[str] | None = None,
                 ready_timeout: float = 30.0) -> None:
        if scheme is not None:
            self.scheme = scheme
        super().__init__(base if base is not None else base_dir, ready_timeout=ready_timeout)
        self.base = self.base_dir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.bin = _bin_dir()
        self._user: str | None = "postgres" if os.geteuid() == 0 else None

    @property
    def url(self) -> str:
        """The backend URL of the server's ``postgres`` database."""
        return self.db_url("postgres")

    def db_url(self, db: str) -> str:
        return f"{self.scheme}://outlive@127.0.0.1:{self.port}/{db}"

    def conninfo(self, db: str = "postgres") -> str:
        return f"postgresql://outlive@127.0.0.1:{self.port}/{db}"

    def start(self, timeout: float | None = None) -> Self:
        data = self.base / "data"
        self.base.mkdir(parents=True, exist_ok=True)
        if self._user is not None:
            pw = pwd.getpwnam(self._user)
            os.chown(self.base, pw.pw_uid, pw.pw_gid)
        if not data.exists():
            with open(self.base / "server.log", "ab") as log:
                subprocess.run([str(self.bin / "initdb"), "-D", str(data), "-U", "outlive",
                                "--auth=trust", "-E", "UTF8", "--no-sync"],
                               check=True, stdout=log, stderr=log, user=self._user, cwd=self.base)
        def start_once() -> None:
            self.proc = self.spawn(
                [str(self.bin / "postgres"), "-D", str(data), "-p", str(self.port),
                 "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.base}",
                 "-c", "max_connections=200", "-c", "fsync=on"],
                user=self._user, cwd=self.base)
            try:
                wait_until(lambda: port_open(self.port, timeout=0.2) and self._ready(),
                           what="postgres", timeout=timeout or self.ready_timeout,
                           proc=self.proc, log=self.log_tail, interval=0.1)
            except BackendUnavailable:
                self.stop()
                raise

        def new_port() -> None:
            self.port = free_port()

        self._on_free_ports(start_once, new_port)
        return self

    def _ready(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.conninfo(), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def create_database(self, name: str) -> str:
        """A fresh database on this server; returns its backend URL."""
        import psycopg

        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.db_url(name)

    def stop(self) -> None:
        """Stop by our own PID (SIGINT: PostgreSQL's "fast" shutdown); keep the data."""
        stop_process(self.proc, sig=signal.SIGINT, timeout=20)
        self.proc = None


class _WithDatabase(PostgresServer):
    """The command line's server: its URL names a fresh database ``outlive``."""

    def start(self, timeout: float | None = None) -> Self:
        super().start(timeout)
        self.create_database("outlive")
        return self

    @property
    def url(self) -> str:
        return self.db_url("outlive")


def main(argv: Sequence[str] | None = None, *, scheme: str = "postgresql") -> int:
    """``python -m outlive._pgserver [OPTIONS] [-- CMD ... {url} ...]``."""
    module = "outlive._pgserver" if scheme == "postgresql" else "outlive_langgraph.pgserver"
    return launcher_main(
        lambda base_dir, ready_timeout: _WithDatabase(base_dir=base_dir, scheme=scheme,
                                                      ready_timeout=ready_timeout),
        prog=f"python -m {module}",
        description=f"A throwaway PostgreSQL (initdb in its own directory, a free loopback port, "
                    f"an empty database 'outlive', {scheme}:// URLs), stopped by its PID on exit.",
        argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
