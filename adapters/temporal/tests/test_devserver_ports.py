"""The Temporal dev server's launcher starts it again on new ports when a port it picked free
was taken before the server bound it (first start only; see tests/test_launch_ports.py)."""

from __future__ import annotations

import socket

from outlive_temporal.devserver import DevServer


def test_the_dev_server_starts_on_new_ports_when_its_port_was_taken() -> None:
    srv = DevServer()
    taken = srv.port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", taken))
        s.listen()
        with srv:
            assert srv.port != taken
            assert srv.address.endswith(f":{srv.port}")
