"""Launchers start their server again on new ports when a port they picked free was taken before
the server bound it (``free_port`` lets the port go; another process's connection can get it as
its own port first), but only at the first start: a restarted server keeps the address its
clients were given. Without that, a fixture's server failed to start, and every test of its
module with it (seen in a CI run with two test workers, on restate-server's fabric port)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from outlive._launch import Launcher, stop_process, wait_until
from outlive._pgserver import PostgresServer
from outlive.errors import BackendUnavailable
from outlive_restate.server import RestateServer
from outlive_temporal.devserver import DevServer


@contextmanager
def squatting(port: int) -> Iterator[None]:
    """Another process's socket on ``port`` (listening, so a server's bind fails)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()
        yield


def test_postgres_starts_on_a_new_port_when_its_port_was_taken() -> None:
    srv = PostgresServer()
    taken = srv.port
    with squatting(taken), srv:
        assert srv.port != taken
        assert f":{srv.port}/" in srv.url


def test_a_restarted_postgres_keeps_its_port_and_says_it_is_taken() -> None:
    with PostgresServer() as srv:
        port = srv.port
        srv.stop()
        with squatting(port), pytest.raises(BackendUnavailable, match="in use"):
            srv.start(timeout=10)
        assert srv.port == port


def test_the_temporal_dev_server_starts_on_new_ports_when_its_port_was_taken() -> None:
    srv = DevServer()
    taken = srv.port
    with squatting(taken), srv:
        assert srv.port != taken
        assert srv.address.endswith(f":{srv.port}")


def test_the_restate_server_starts_on_new_ports_when_its_port_was_taken() -> None:
    srv = RestateServer()
    taken = srv.fabric_port
    with squatting(taken), srv:
        assert srv.fabric_port != taken
        assert httpx.get(f"{srv.admin}/health", timeout=5).status_code == 200


class _PanicsOnce(Launcher):
    """A launcher whose first start is a real process that logs a bind error above a long trace
    and exits (as the Temporal dev server's Go panic does); the next one starts."""

    name = "panics"

    def __init__(self) -> None:
        super().__init__(ready_timeout=30)
        self.starts = 0
        self.repicked = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return "memory://"

    def _once(self) -> None:
        self.starts += 1
        code = ("print('listen tcp 127.0.0.1:1: bind: address already in use'); "
                "[print(f'goroutine frame {i}') for i in range(60)]; raise SystemExit(2)"
                if self.starts == 1 else "import time; time.sleep(30)")
        self.proc = self.spawn([sys.executable, "-c", code])
        wait_until(lambda: self.starts > 1, what=self.name, timeout=self.ready_timeout,
                   proc=self.proc, log=self.log_tail)

    def start(self) -> _PanicsOnce:
        self._on_free_ports(self._once, self._repick)
        return self

    def _repick(self) -> None:
        self.repicked += 1

    def stop(self) -> None:
        stop_process(self.proc)


def test_a_port_taken_is_told_from_the_whole_log_of_the_start_not_its_tail() -> None:
    """The error carries the log's last 30 lines, which a long trace pushes the bind error out
    of: the launcher reads what the failed start logged (a CI run's Temporal dev server exited
    so, and was not started again)."""
    srv = _PanicsOnce()
    try:
        with srv:
            assert (srv.starts, srv.repicked) == (2, 1)
    finally:
        srv.cleanup()
