"""outlive's conformance suite on a real Restate server: golden, 24 protected, witnesses."""

from __future__ import annotations

import pytest

from outlive_conformance.suite import ConformanceSuite


class TestRestateConformance(ConformanceSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend_url(cls, restate_url: str) -> str:
        return restate_url
