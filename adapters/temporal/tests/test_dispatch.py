"""The Temporal dispatcher of outlive's Supervisor: after the first dispatch, the engine drives.

The supervisor (this test process) opens the work on a SQLite ledger, admits attempt #1 and
dispatches it to Temporal, then stops supervising. Two worker processes run the attempts; the one
running step s2 is SIGKILLed. Temporal's heartbeat timeout on the attempt's activity starts the
takeover: the engine marks #1 unknown, admits #2 and runs it on the other worker, which restores
s1 and finishes the work; its candidate is judged on the way by the judge activity the engine
runs beside each attempt (the attempt's own activity holds no controller credential).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet_support import worker_fleet
from temporalio.client import Client

from outlive import open_backend
from outlive.records import AttemptState, Contract
from outlive.supervisor import Lease, Supervisor, WorkDefinition
from outlive_temporal import DevServer, OutlivePlugin, TemporalDispatcher
from outlive_temporal._dispatch import supervise_workflow_id
from outlive_temporal.testing import WorkerProcess


@pytest.fixture
def fleet(temporal_server: DevServer, tmp_path: Path) -> Iterator[tuple[str, list[WorkerProcess]]]:
    with worker_fleet(temporal_server.address, "dispatch", 2, tmp_path) as (queue, workers):
        yield queue, workers


async def test_the_engine_takes_over_a_killed_attempt_with_no_supervisor_left(
        temporal_server: DevServer, fleet: tuple[str, list[WorkerProcess]], tmp_path: Path) -> None:
    queue, workers = fleet
    work_id = f"digest/supervised/{uuid.uuid4().hex[:8]}"
    tag = work_id.rsplit("/", 1)[-1]
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    definition = WorkDefinition(
        work_id=work_id, attempt="temporal_engine_app:supervised_attempt",
        inputs="temporal_engine_app:supervised_inputs",
        contract=Contract(name="digest-form", version="1", assessor="editor"),
        lease=Lease(heartbeat_interval=500, missed_beats=4))
    client = await Client.connect(temporal_server.address, plugins=[OutlivePlugin()])
    backend = await open_backend(url)
    try:
        sup = Supervisor(backend, definition, TemporalDispatcher(client, queue))
        await sup.publish("v1", {"s1": "slow:0:alpha", "s2": "slow:4:beta", "s3": "slow:0:gamma"})
        status = await sup.tick()
        assert any("dispatched #1" in a for a in status.actions)
        del sup   # the supervisor is gone; nothing outside Temporal drives the work any more

        marker = tmp_path / f"{tag}.started.s2.1"
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        (victim,) = [w for w in workers if str(w.pid) == marker.read_text().split()[0]]
        victim.kill()

        await client.get_workflow_handle(supervise_workflow_id(work_id)).result()
        st = await backend.load(work_id)
        assert st is not None
        assert [(a.token, a.state) for a in st.attempts] == [(1, AttemptState.UNKNOWN),
                                                            (2, AttemptState.FINISHED)]
        assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1), ("s2", 2), ("s3", 2),
                                                             ("assembly", 2)]
        assert st.latest_acceptance is not None and st.latest_acceptance.version == "v1"
        assert not (tmp_path / f"{tag}.started.s1.2").exists()   # restored, not re-run
        # the attempt's activity holds no controller: a judge activity beside each attempt
        # judged #2's candidate (the attempt waited for it in ctx.submit)
        events = [e async for e in client.get_workflow_handle(
            supervise_workflow_id(work_id)).fetch_history_events()]
        kinds = [e.activity_task_scheduled_event_attributes.activity_type.name for e in events
                 if e.HasField("activity_task_scheduled_event_attributes")]
        assert kinds.count("outlive_run_attempt") == 2
        assert kinds.count("outlive_judge_attempt") == 2
    finally:
        await backend.close()
