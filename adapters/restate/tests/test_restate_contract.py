"""The shared backend contract (typed rejections, nothing half-written, durability) on Restate."""

from __future__ import annotations

import pytest

from outlive_conformance.contract import BackendContractSuite, DurableBackendContract


class TestRestateContract(BackendContractSuite, DurableBackendContract):
    @pytest.fixture(scope="class")
    @classmethod
    def backend_url(cls, restate_url: str) -> str:
        return restate_url
