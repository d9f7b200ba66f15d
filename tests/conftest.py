from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import outlive


@pytest.fixture(params=["memory", "sqlite"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[outlive.Backend]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'o.db'}"
    b = await outlive.open_backend(url)
    try:
        yield b
    finally:
        await b.close()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[object]:
    """A PostgreSQL started by this project for the session (initdb in a temp dir, a free
    loopback port, stopped by its PID)."""
    from outlive._pgserver import PostgresServer

    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.cleanup()
