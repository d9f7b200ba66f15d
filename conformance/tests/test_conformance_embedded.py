"""The conformance suite on both embedded backends."""

from __future__ import annotations

from pathlib import Path

import pytest

from outlive_conformance.contract import BackendContractSuite, DurableBackendContract
from outlive_conformance.suite import ConformanceSuite


class TestMemory(ConformanceSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend_url(cls) -> str:
        return "memory://"


class TestSqlite(ConformanceSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend_url(cls, tmp_path_factory: pytest.TempPathFactory) -> str:
        path: Path = tmp_path_factory.mktemp("conf") / "outlive.db"
        return f"sqlite:///{path}"


class TestMemoryContract(BackendContractSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend_url(cls) -> str:
        return "memory://"


class TestSqliteContract(BackendContractSuite, DurableBackendContract):
    @pytest.fixture(scope="class")
    @classmethod
    def backend_url(cls, tmp_path_factory: pytest.TempPathFactory) -> str:
        return f"sqlite:///{tmp_path_factory.mktemp('contract') / 'outlive.db'}"
