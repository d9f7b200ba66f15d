"""Run the suite on the backend named by ``--outlive-backend``:

    pytest --pyargs outlive_conformance --outlive-backend sqlite:///x.db   # this suite and the contract
"""

from __future__ import annotations

import pytest

from outlive_conformance.suite import ConformanceSuite


class TestConformance(ConformanceSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend_url(cls, outlive_backend_url: str) -> str:
        return outlive_backend_url
