from __future__ import annotations

from collections.abc import AsyncIterator
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
