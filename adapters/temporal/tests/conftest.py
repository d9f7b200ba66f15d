"""One Temporal dev server per test session, started and stopped by its own PID.

No skips: if the server cannot start, the fixture fails with the server's log tail.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from outlive import open_backend
from outlive_temporal import DevServer, TemporalBackend


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[DevServer]:
    with DevServer() as srv:
        yield srv


@pytest.fixture(scope="session")
def backend_url(temporal_server: DevServer) -> str:
    return temporal_server.url


@pytest.fixture(scope="session")
async def backend(backend_url: str) -> AsyncIterator[TemporalBackend]:
    b = await open_backend(backend_url)
    assert isinstance(b, TemporalBackend)
    try:
        yield b
    finally:
        await b.close()
