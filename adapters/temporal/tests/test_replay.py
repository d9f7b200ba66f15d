"""Replay safety: recorded histories of the in-engine shape replay without nondeterminism.

``histories/*.json`` were recorded from real runs (a takeover after a silent step, a rebuild for a
corrected input, a run that continued as new mid-attempt). A change to the workflow side of
outlive (the driver, the ledger it applies, the carry) that would break a running work fails
here. Re-record deliberately with ``OUTLIVE_RECORD_HISTORIES=1 pytest this file`` — and only with
a versioning story for the works already running (docs/engines/temporal.md).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest
import temporal_engine_app as app
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer, Worker
from temporalio.workflow import NondeterminismError

from outlive_temporal import DevServer, OutlivePlugin, WorkHandle

HISTORIES = Path(__file__).parent / "histories"
CASES = ["takeover", "rebuild", "continue_as_new"]


def _replayer() -> Replayer:
    return Replayer(workflows=app.WORKFLOWS, plugins=[OutlivePlugin()])


async def _run_cases(client: Client, queue: str) -> dict[str, list[WorkflowHistory]]:
    """Run each case once on a real server and fetch every run's history."""
    out: dict[str, list[WorkflowHistory]] = {}
    tag = uuid.uuid4().hex[:8]
    hold = app.HOLD["replay-b"] = asyncio.Event()
    try:
        h = await client.start_workflow(app.HoldWork.run, {"s1": "replay-a", "s2": "replay-b"},
                                        id=f"replay/takeover/{tag}", task_queue=queue)
        await h.result()
    finally:
        hold.set()
    out["takeover"] = [await h.fetch_history()]
    h = await client.start_workflow(app.FleetWork.run, {"s1": "rp-a", "s2": "slow:1.5:rp-b"},
                                    id=f"replay/rebuild/{tag}", task_queue=queue)
    await asyncio.sleep(0.5)
    await WorkHandle(h).publish("v2", {"s1": "rp-a", "s2": "slow:0:rp-c"})
    await h.result()
    out["rebuild"] = [await h.fetch_history()]
    h = await client.start_workflow(app.SmallCanWork.run, {"n": 5, "size": 10},
                                    id=f"replay/can/{tag}", task_queue=queue)
    await h.result()
    runs = []
    async for wf in client.list_workflows(f"WorkflowId = '{h.id}'"):
        runs.append(await client.get_workflow_handle(h.id, run_id=wf.run_id).fetch_history())
    out["continue_as_new"] = runs
    return out


@pytest.fixture(scope="module")
async def live(temporal_server: DevServer) -> dict[str, list[WorkflowHistory]]:
    client = await Client.connect(temporal_server.address, plugins=[OutlivePlugin()])
    queue = f"replay-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=app.WORKFLOWS, activities=app.ACTIVITIES):
        cases = await _run_cases(client, queue)
    if os.environ.get("OUTLIVE_RECORD_HISTORIES") == "1":
        HISTORIES.mkdir(exist_ok=True)
        for name, runs in cases.items():
            for i, hist in enumerate(runs):
                (HISTORIES / f"{name}.{i}.json").write_text(hist.to_json())
    return cases


async def test_todays_runs_replay_deterministically(live: dict[str, list[WorkflowHistory]]) -> None:
    assert len(live["continue_as_new"]) >= 2, "the small work must have continued as new"
    for name, runs in live.items():
        for hist in runs:
            await _replayer().replay_workflow(hist)   # raises on nondeterminism
        assert runs, name


@pytest.mark.parametrize("case", CASES)
async def test_recorded_histories_replay(case: str) -> None:
    files = sorted(HISTORIES.glob(f"{case}.*.json"))
    assert files, f"no recorded history for {case}"
    for path in files:
        hist = WorkflowHistory.from_json(path.stem, path.read_text())
        await _replayer().replay_workflow(hist)


async def test_a_changed_workflow_body_is_caught_by_replay() -> None:
    """The replayer is a real check: the recorded takeover replayed against a body that skips a
    step fails with a nondeterminism error."""
    path = HISTORIES / "takeover.0.json"
    hist = WorkflowHistory.from_json("takeover", path.read_text())
    with pytest.raises(NondeterminismError):
        await Replayer(workflows=[app.ChangedHoldWork], plugins=[OutlivePlugin()]) \
            .replay_workflow(hist)
