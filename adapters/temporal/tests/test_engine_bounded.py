"""Bounded workflow state: with a store on the plugin, continue-as-new carries only the head of
the ledger inline; the journal travels in chunks and large results one by one, each by
reference. (The 10,000-step work is ``make bench-temporal-long``.)"""

from __future__ import annotations

import uuid
from typing import Any

import temporal_engine_app as app
from temporalio.client import Client
from temporalio.worker import Worker

from outlive_temporal import DevServer, FileStore, OutlivePlugin, WorkHandle


async def _run(server: DevServer, tmp_path: Any, workflow: Any, spec: dict[str, int]) \
        -> tuple[Any, Any, list[Any]]:
    store = FileStore(str(tmp_path / "blobs"))
    client = await Client.connect(server.address, plugins=[OutlivePlugin(store=store)])
    queue = f"bounded-{uuid.uuid4().hex[:8]}"
    wid = f"bounded/{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=app.WORKFLOWS,
                      activities=app.ACTIVITIES, max_concurrent_activities=20):
        res = await client.execute_workflow(workflow, spec, id=wid, task_queue=queue)
        handle = client.get_workflow_handle(wid)
        st = await WorkHandle(handle).ledger()
        events = [e async for e in handle.fetch_history_events()]
    return res, st, events


async def test_a_long_work_under_a_small_cap_carries_only_the_head(
        temporal_server: DevServer, tmp_path: Any) -> None:
    """400 small steps under a 60 KB cap (the journal alone passes it by ~156 steps): the
    journal is carried by reference in chunks, so the cap counts only the head."""
    res, st, events = await _run(temporal_server, tmp_path, app.CappedWork.run,
                                 {"n": 400, "size": 100})
    assert res == {"bytes": 40_000, "attempt": 1, "generation": 3}
    assert len(st.journal) == 400 and [e.step for e in st.journal[:3]] == ["s0", "s1", "s2"]
    # the last run's first event holds the user's input, the head and references: no journal
    assert events[0].ByteSize() < 4_000


async def test_one_megabyte_step_results_pass(temporal_server: DevServer, tmp_path: Any) -> None:
    """Four results of 1 MB across continue-as-new (every 3 steps): each travels by reference;
    no event in history carries one."""
    res, st, events = await _run(temporal_server, tmp_path, app.SmallCanWork.run,
                                 {"n": 4, "size": 1_000_000})
    assert res == {"bytes": 4_000_000, "attempt": 1, "generation": 1}
    assert len(st.journal) == 4
    assert all(isinstance(e.result, dict) for e in st.journal)
    assert max(e.ByteSize() for e in events) < 16_000
