"""The conformance suite on LangGraph: golden runs, 24 protected runs, witnesses, vs memory://."""

from __future__ import annotations

from pathlib import Path

import pytest

from outlive_conformance.suite import ConformanceSuite


class TestLangGraphSqlite(ConformanceSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend_url(cls, tmp_path_factory: pytest.TempPathFactory) -> str:
        path: Path = tmp_path_factory.mktemp("lg-conformance") / "lg.db"
        return f"langgraph+sqlite:///{path}"


class TestLangGraphSqliteExit(ConformanceSuite):
    """LangGraph durability "exit" for the step invocations: same outcomes (outlive journals)."""

    @pytest.fixture(scope="class")
    @classmethod
    def backend_url(cls, tmp_path_factory: pytest.TempPathFactory) -> str:
        path: Path = tmp_path_factory.mktemp("lg-conformance-exit") / "lg.db"
        return f"langgraph+sqlite:///{path}?durability=exit"


class TestLangGraphMemory(ConformanceSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend_url(cls) -> str:
        return "langgraph+memory://"
