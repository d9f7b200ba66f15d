"""outlive's conformance suite with every attempt's writes made from inside a Restate handler.

``restate+handler://`` runs each attempt of the scenario as an invocation of a handler served by
this process: steps are that invocation's ``ctx.run_typed`` entries, its fenced writes durable
calls from inside it (the handler shape's own backend). Golden, 24 protected, witnesses; each
run compared with ``memory://``.
"""

from __future__ import annotations

import pytest

from outlive_conformance.suite import ConformanceSuite
from outlive_restate.server import RestateServer


class TestRestateConformanceInHandler(ConformanceSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend_url(cls, restate_server: RestateServer) -> str:
        return restate_server.url.replace("restate://", "restate+handler://", 1)
