"""Fixtures: a fresh LangGraph-backed outlive backend per test (file or in-memory)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import outlive


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
