"""A real Restate server for the whole session, started and stopped by the project's launcher.

No mocks and no skips: if the server cannot start, every test that needs it errors with the
launcher's reason (binary missing -> run `make engine-restate`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from outlive_restate.server import RestateServer


@pytest.fixture(scope="session")
def restate_server() -> Iterator[RestateServer]:
    with RestateServer() as srv:
        yield srv


@pytest.fixture(scope="session")
def restate_url(restate_server: RestateServer) -> str:
    return restate_server.url
