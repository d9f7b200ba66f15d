"""The shared conformance suite (golden runs, 24 protected runs, witnesses) on a real server."""

from __future__ import annotations

from outlive_conformance.suite import ConformanceSuite


class TestTemporalConformance(ConformanceSuite):
    """``backend_url`` comes from conftest: the session's dev server."""
