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


def test_the_skeleton_files_are_where_every_adapter_has_them() -> None:
    """``_config`` (URL -> validated config), ``_backend``, ``_engine``, ``_dispatch``,
    ``_errors`` (one mapper), ``testing``; the benchmark is not in the package."""
    import sqlite3

    from outlive_langgraph import _backend, _config, _errors

    assert _config.parse_url("langgraph+memory://?durability=exit").durability == "exit"
    assert _config.parse_url("langgraph+memory://").durability == "sync"
    for bad in ("langgraph+memory://?durability=later", "langgraph+memory://?fsync=off"):
        try:
            _config.parse_url(bad)
        except outlive.ConfigError:
            pass
        else:
            raise AssertionError(f"{bad} was accepted")
    assert isinstance(_errors.database_error(sqlite3.OperationalError("locked"), "u"),
                      outlive.BackendUnavailable)
    assert isinstance(_errors.database_error(sqlite3.DatabaseError("not a database"), "u"),
                      outlive.InvalidRecord)
    assert _errors.database_error(ValueError("mine"), "u") is None
    assert outlive_langgraph.LangGraphSqliteBackend is _backend.LangGraphSqliteBackend
    package = Path(outlive_langgraph.__file__).parent
    assert not (package / "bench.py").exists()
