"""Fixtures: a fresh LangGraph-backed outlive backend per test (file or in-memory)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import outlive
from outlive_langgraph.testing import PostgresServer


@pytest.fixture(params=["langgraph+sqlite", "langgraph+memory"])
def lg_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "langgraph+sqlite":
        return f"langgraph+sqlite:///{tmp_path}/lg.db"
    return "langgraph+memory://"


@pytest.fixture
async def backend(lg_url: str) -> AsyncIterator[outlive.Backend]:
    b = await outlive.open_backend(lg_url)
    try:
        yield b
    finally:
        await b.close()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """A PostgreSQL started by this project (initdb in a temp dir, free loopback port)."""
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.cleanup()
