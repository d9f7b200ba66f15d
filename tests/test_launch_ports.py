"""Launchers start their server again on new ports when a port they picked free was taken before
the server bound it (``free_port`` lets the port go; another process's connection can get it as
its own port first), but only at the first start: a restarted server keeps the address its
clients were given. Without that, a fixture's server failed to start, and every test of its
module with it (seen in a CI run with two test workers, on restate-server's fabric port)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

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
