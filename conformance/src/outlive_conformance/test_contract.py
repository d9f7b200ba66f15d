"""Run the backend contract on the backend named by ``--outlive-backend``:

    pytest --pyargs outlive_conformance --outlive-backend sqlite:///x.db

Tests that need a feature the backend does not declare in ``capabilities`` are skipped, with the
feature named in the reason.
"""

from __future__ import annotations

import pytest

from outlive_conformance.contract import BackendContractSuite, DurableBackendContract


class TestContract(BackendContractSuite, DurableBackendContract):
    @pytest.fixture(scope="class")
    @classmethod
    def backend_url(cls, outlive_backend_url: str) -> str:
        return outlive_backend_url
