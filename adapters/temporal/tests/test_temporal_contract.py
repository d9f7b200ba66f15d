"""The shared backend contract (typed rejections, nothing half-written, durability) on Temporal."""

from __future__ import annotations

from outlive_conformance.contract import BackendContractSuite, DurableBackendContract


class TestTemporalContract(BackendContractSuite, DurableBackendContract):
    """``backend_url`` comes from conftest: the session's dev server (SQLite file)."""
