"""The test server's launcher survives a port taken between its pick and the server's bind.

``free_port`` finds a port free and lets it go; another process (another test worker's
connection, which gets it as its own port) can take it before restate-server binds it. The server
then exits at once: the launcher starts it again on new ports. Without that, a fixture's server
failed to start, and every test of its module with it (seen in a CI run with two test workers).
"""

from __future__ import annotations

import socket

import httpx

from outlive_restate.server import RestateServer


def test_a_port_taken_before_the_server_binds_it_is_picked_again() -> None:
    srv = RestateServer()
    taken = srv.fabric_port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        with srv:
            assert srv.fabric_port != taken
            assert httpx.get(f"{srv.admin}/health", timeout=5).status_code == 200
