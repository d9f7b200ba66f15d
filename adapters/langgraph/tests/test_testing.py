"""The adapter's launchers (``outlive_langgraph.testing``) and the skeleton's import paths."""

from __future__ import annotations

from pathlib import Path

import outlive
import outlive_langgraph
from outlive_langgraph import _dispatch, _engine
from outlive_langgraph.testing import sqlite_url


async def test_sqlite_url_is_a_fresh_ledger_removed_afterwards() -> None:
    with sqlite_url("durability=exit") as url:
        assert url.startswith("langgraph+sqlite:///") and url.endswith("?durability=exit")
        async with await outlive.open_backend(url) as b:
            assert await b.works() == []
            await outlive.Controller(b).open_work("w")
            assert await b.works() == ["w"]
        path = Path(url.removeprefix("langgraph+sqlite://").split("?")[0])
        assert path.exists()
    assert not path.exists()


def test_run_attempt_moved_to_dispatch_and_is_still_importable() -> None:
    assert outlive_langgraph.run_attempt is _dispatch.run_attempt
    assert _engine.run_attempt is _dispatch.run_attempt  # type: ignore[attr-defined]
    assert "graph_attempt" in outlive_langgraph.__all__
