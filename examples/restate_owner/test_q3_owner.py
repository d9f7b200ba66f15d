"""The article's story on a real Restate server: the user's object runs each attempt, Restate's
timers and cancel replace the silent one."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from outlive_restate.server import RestateServer

pytestmark = pytest.mark.asyncio(loop_scope="session")
HERE = Path(__file__).parent


async def test_the_owner_example_tells_the_article_story(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("q3_owner_example", HERE / "q3_owner.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with RestateServer(app="q3_app:app", pythonpath=(str(HERE),)) as server:
        out = await mod.main(server, tmp_path / "calls")
    # #1: s1, s2 and the held s3 (its result never lands); #2: s2, s3, s4 (s1 restored)
    assert out == {"calls": 6, "posts": 1, "figure": "4.7", "late_landed": 0}
