"""A throwaway PostgreSQL for tests, sweeps and benchmarks, started by this project.

``initdb`` into a private directory, ``postgres`` on a free loopback port with its socket in that
directory, stopped by its own PID. PostgreSQL refuses to run as root, so under root the server
runs as the ``postgres`` system user (``Popen(user=...)``: the PID we hold is the server's own).
Binaries: ``$OUTLIVE_PG_BIN``, else ``initdb`` on PATH, else ``/usr/lib/postgresql/*/bin``.

    python -m outlive._pgserver -- outlive sweep --backend {url}

Used by the core's ``postgresql://`` tests and by ``langgraph+postgres`` (which asks for its own
URL scheme). Needs psycopg (``pip install 'outlive[postgres]'``) to check readiness.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One PostgreSQL cluster in ``base`` (a fresh temp dir by default), user ``outlive``.

    Under root, ``base`` and its parents must be reachable by the ``postgres`` user. ``url()``
    and ``create_database()`` answer backend URLs of ``scheme`` (``postgresql`` by default).
    """

    scheme = "postgresql"

    def __init__(self, base: str | None = None, *, scheme: str | None = None) -> None:
        if scheme is not None:
            self.scheme = scheme
        self._owned = base is None  # a temp dir of our own is removed again by stop()
        self.base = Path(base or tempfile.mkdtemp(prefix="outlive-pg-"))
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.bin = _bin_dir()
        self._user: str | None = "postgres" if os.geteuid() == 0 else None

    def url(self, db: str = "postgres") -> str:
        return f"{self.scheme}://outlive@127.0.0.1:{self.port}/{db}"

    def conninfo(self, db: str = "postgres") -> str:
        return f"postgresql://outlive@127.0.0.1:{self.port}/{db}"

    def start(self, timeout: float = 30.0) -> PostgresServer:
        data = self.base / "data"
        self.base.mkdir(parents=True, exist_ok=True)
        if self._user is not None:
            pw = pwd.getpwnam(self._user)
            os.chown(self.base, pw.pw_uid, pw.pw_gid)
        log = open(self.base / "server.log", "ab")
        if not data.exists():
            subprocess.run([str(self.bin / "initdb"), "-D", str(data), "-U", "outlive",
                            "--auth=trust", "-E", "UTF8", "--no-sync"],
                           check=True, stdout=log, stderr=log, user=self._user, cwd=self.base)
        self.proc = subprocess.Popen(
            [str(self.bin / "postgres"), "-D", str(data), "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.base}",
             "-c", "max_connections=200", "-c", "fsync=on"],
            stdout=log, stderr=log, user=self._user, cwd=self.base)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BackendUnavailable(f"postgres exited: see {self.base / 'server.log'}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    pass
                if self._ready():
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise BackendUnavailable(f"postgres did not start in {timeout}s: {self.base}/server.log")

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
        return self.url(name)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # "fast" shutdown, by our own PID
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None
        if self._owned:
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def main(argv: list[str] | None = None, *, scheme: str = "postgresql") -> int:
    """Start a server, run the command after ``--`` with ``{url}`` filled in, stop the server."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    with PostgresServer(scheme=scheme) as server:
        url = server.create_database("outlive")
        cmd = [a.replace("{url}", url) for a in args]
        if not cmd:
            print(url, flush=True)
            return 0
        return subprocess.call(cmd)


if __name__ == "__main__":
    raise SystemExit(main())
