"""The shared backend contract (typed rejections, nothing half-written, durability) on LangGraph."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from outlive_conformance.contract import BackendContractSuite, DurableBackendContract
from outlive_langgraph.pgserver import PostgresServer


class TestLangGraphSqliteContract(BackendContractSuite, DurableBackendContract):
    @pytest.fixture(scope="class")
    @classmethod
    def backend_url(cls, tmp_path_factory: pytest.TempPathFactory) -> str:
        path: Path = tmp_path_factory.mktemp("lg-contract") / "lg.db"
        return f"langgraph+sqlite:///{path}"


class TestLangGraphMemoryContract(BackendContractSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend_url(cls) -> str:
        return "langgraph+memory://"


class TestLangGraphPostgresContract(BackendContractSuite, DurableBackendContract):
    @pytest.fixture(scope="class")
    @classmethod
    def backend_url(cls, pg_server: PostgresServer) -> str:
        return pg_server.create_database(f"contract_{uuid.uuid4().hex[:8]}")
