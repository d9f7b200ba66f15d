"""The in-engine shape across processes: the user's worker fleet runs the steps, Temporal drives
takeover, and no client is needed once a work has started.

Every worker and client here is a separate process (``outlive_temporal.testing``), killed or
paused by its own PID: SIGKILL for a crashed machine, SIGSTOP for a paused one.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleet_support import worker_fleet
from temporalio.client import Client

from outlive.records import AttemptState
from outlive_temporal import DevServer, OutlivePlugin, WorkHandle
from outlive_temporal.testing import WorkerProcess, start_and_die

REPORT = {"s1": "slow:0:alpha", "s2": "slow:4:beta", "s3": "slow:0:gamma"}


@pytest.fixture(scope="module")
def fleet(temporal_server: DevServer, tmp_path_factory: pytest.TempPathFactory) \
        -> Iterator[tuple[str, list[WorkerProcess], Path]]:
    """Three worker processes on one task queue (a test kills one), markers in a temp dir."""
    marks = tmp_path_factory.mktemp("fleet")
    with worker_fleet(temporal_server.address, "fleet", 3, marks) as (queue, workers):
        yield queue, workers, marks


async def _wait_for(path: Path, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path.name} never appeared: {sorted(p.name for p in path.parent.iterdir())}")


def _runner(workers: list[WorkerProcess], pid: str) -> WorkerProcess:
    (w,) = [w for w in workers if str(w.pid) == pid.splitlines()[0]]
    return w


def _alive(workers: list[WorkerProcess]) -> list[WorkerProcess]:
    return [w for w in workers if w.proc is not None and w.proc.poll() is None]


async def test_work_completes_with_every_client_killed_and_its_worker_killed_mid_step(
        temporal_server: DevServer, fleet: tuple[str, list[WorkerProcess], Path]) -> None:
    queue, workers, marks = fleet
    tag = uuid.uuid4().hex[:8]
    wid = f"digest/fleet-kill/{tag}"
    # the only client that ever talks to the work before it finishes is killed once it started it
    start_and_die(temporal_server.address, queue, "FleetWork", wid, REPORT)
    pid = await _wait_for(marks / f"{tag}.started.s2.1")
    victim = _runner(workers, pid)
    victim.kill()                                   # SIGKILL mid-step (s2 takes 4 s)
    survivors = _alive(workers)
    client = await Client.connect(temporal_server.address, plugins=[OutlivePlugin()])
    res: dict[str, Any] = await client.get_workflow_handle(wid).result()
    assert res["attempt"] == 2
    st = await WorkHandle.of(client, wid).ledger()
    assert [(a.token, a.state) for a in st.attempts] == [(1, AttemptState.UNKNOWN),
                                                        (2, AttemptState.FINISHED)]
    # s1 was journaled by #1 and restored by #2; s2 and s3 were run by the survivor for #2
    assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1), ("s2", 2), ("s3", 2),
                                                         ("assembly", 2)]
    assert (await _wait_for(marks / f"{tag}.started.s2.2")) in {str(w.pid) for w in survivors}
    assert not (marks / f"{tag}.started.s1.2").exists()
    dep = await WorkHandle.of(client, wid).dependable("strict")
    assert dep is not None and dep.content == {"digest": "ALPHA BETA GAMMA"}


async def test_paused_workers_late_completion_is_refused_by_temporal_and_its_write_by_the_token(
        temporal_server: DevServer, fleet: tuple[str, list[WorkerProcess], Path]) -> None:
    queue, workers, marks = fleet
    tag = uuid.uuid4().hex[:8]
    wid = f"digest/fleet-pause/{tag}"
    client = await Client.connect(temporal_server.address, plugins=[OutlivePlugin()])
    handle = await client.start_workflow("FleetWork", REPORT, id=wid, task_queue=queue)
    pid = await _wait_for(marks / f"{tag}.started.s2.1")
    paused = _runner(workers, pid)
    paused.pause()                                  # SIGSTOP: alive, silent
    try:
        # Temporal times the silent step out; the work admits #2 and runs s2 again (4 s long)
        await _wait_for(marks / f"{tag}.started.s2.2")
    finally:
        paused.resume()
    # the paused worker wakes while #2 works and tries the ledger write it would make
    assert (await _wait_for(marks / f"{tag}.late-write.StaleOwner")) == pid
    res: dict[str, Any] = await handle.result()
    assert res["attempt"] == 2
    await _wait_for(marks / f"{tag}.late-return.s2.1")
    assert not (marks / f"{tag}.late-write.applied").exists()
    st = await handle.query("outlive_state")
    assert "late:s2" not in st
    # Temporal's own refusal: #1's s2 activity timed out and no completion was ever recorded
    events = [e async for e in handle.fetch_history_events()]
    first = {e.event_id for e in events if e.HasField("activity_task_scheduled_event_attributes")
             and e.activity_task_scheduled_event_attributes.activity_id.startswith("outlive:1:1:")
             and e.activity_task_scheduled_event_attributes.activity_id.endswith(":s2")}
    assert len(first) == 1
    closed = [e for e in events
              for attrs in (e.activity_task_completed_event_attributes,
                            e.activity_task_timed_out_event_attributes)
              if attrs.scheduled_event_id in first]
    assert [e.HasField("activity_task_timed_out_event_attributes") for e in closed] == [True]
    await asyncio.sleep(1.0)   # give the late completion time to be sent, then re-check
    events = [e async for e in handle.fetch_history_events()]
    assert not any(e.HasField("activity_task_completed_event_attributes")
                   and e.activity_task_completed_event_attributes.scheduled_event_id in first
                   for e in events)
