"""The explorer's "same run beside memory://" on a real Temporal dev server."""

from __future__ import annotations

from outlive_conformance.explore import Explorer
from outlive_temporal import DevServer


def test_fencing_off_on_temporal_beside_memory_is_identical(temporal_server: DevServer) -> None:
    url = temporal_server.url
    answer = Explorer.create(backends=[url]).run({"backend": url, "switches": {"fencing": "off"}})
    memory, engine = answer["runs"]
    assert (memory["backend"], engine["backend"]) == ("memory://", url)
    assert engine["ok"], engine.get("error")
    assert answer["agreement"] == {"identical": True, "differences": []}
    assert engine["outcome"]["stale_writes_applied"] == 3 and engine["outcome"]["model_calls"] == 7
    assert engine["svg"].count('class="item step bad stale journal"') == 1      # s4 at t9
    assert engine["svg"].replace(url, "memory://") == memory["svg"]
