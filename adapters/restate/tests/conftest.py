"""A real Restate server for the whole session, started and stopped by the project's launcher.

No mocks and no skips: if the server cannot start, every test that needs it errors with the
launcher's reason (binary missing -> run `make engine-restate`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import outlive
from outlive_restate import RestateBackend
from outlive_restate.server import RestateServer


@pytest.fixture(scope="session")
def restate_server() -> Iterator[RestateServer]:
    # The tests' own app (restate_app.py: a user's services plus outlive's), registered once.
    with RestateServer(app="restate_app:app", pythonpath=(str(Path(__file__).parent),)) as srv:
        yield srv


@pytest.fixture(scope="session")
def restate_url(restate_server: RestateServer) -> str:
    return restate_server.url


@pytest.fixture(scope="module")
def server(restate_server: RestateServer) -> RestateServer:
    """The server a module's tests use: the session's, unless the module brings its own."""
    return restate_server


@pytest.fixture(scope="module")
async def backend(server: RestateServer) -> AsyncIterator[RestateBackend]:
    """A client of the module's server."""
    async with await outlive.open_backend(server.url) as b:
        assert isinstance(b, RestateBackend)
        yield b
