"""The in-engine shape, in one process: a step in the user's workflow, takeover by Temporal's own
heartbeat timeout, a rebuild when the input moves on, bounded state, replay."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import temporal_engine_app as app
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Worker

from outlive import ledger as L
from outlive.errors import InvalidRecord, NotController, NotFound, PayloadTooLarge
from outlive.records import AttemptState, Contract
from outlive.rules import LatestAccepted, LatestFinished, PinnedVersion, Requires, StrictCurrent
from outlive_temporal import (
    DevServer,
    FileStore,
    OutlivePlugin,
    WorkHandle,
    rule_from_text,
    rule_to_text,
    typed_error,
)


def _id(prefix: str) -> str:
    return f"{prefix}/{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
async def client(temporal_server: DevServer) -> Client:
    return await Client.connect(temporal_server.address, plugins=[OutlivePlugin()])


@pytest.fixture(scope="module")
async def queue(client: Client) -> AsyncIterator[str]:
    name = f"engine-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=name, workflows=app.WORKFLOWS, activities=app.ACTIVITIES):
        yield name


async def _history_events(client: Client, wid: str) -> list[Any]:
    return [e async for e in client.get_workflow_handle(wid).fetch_history_events()]


@pytest.mark.parametrize("rule", [
    StrictCurrent(), StrictCurrent(fail_open=True), LatestAccepted(),
    PinnedVersion(version="v2"), LatestFinished(contract=Requires(name="q3", version="2")),
    StrictCurrent(contract=Requires(name="q3@x", version="1:b", assessor="judge:v4")),
    PinnedVersion(version="v@1", contract=Contract(name="q3", version="2", assessor="judge")),
])
def test_a_rules_text_names_its_contract_and_reads_back_the_same_rule(rule: Any) -> None:
    assert rule_from_text(rule_to_text(rule)) == rule


@pytest.mark.parametrize("text", ["strictest", "strict@q3", "strict@q3:1:a:b", "strict@:1",
                                  "pinned:", '{"rule": "pinned"}', '{"rule": "strict", '
                                  '"contract": {"name": "q3"}}', "{", 7])
def test_a_bad_rule_text_is_a_typed_error(text: Any) -> None:
    with pytest.raises(InvalidRecord):
        rule_from_text(text)


async def test_steps_run_as_the_users_activities_and_restore_by_input_key(
        client: Client, queue: str) -> None:
    wid = _id("digest/plain")
    app.CALLS.clear()
    res = await client.execute_workflow(app.HoldWork.run, {"s1": "a", "s2": "b"}, id=wid,
                                        task_queue=queue)
    assert res["attempt"] == 1 and res["text"] == "A B"
    st = await WorkHandle.of(client, wid).ledger()
    assert [a.state for a in st.attempts] == [AttemptState.FINISHED]
    # the workflow's assembled content is journaled as the assembly of its steps (content bound)
    assert [e.step for e in st.journal] == ["s1", "s2", "assembly"]
    assert st.journal[-1].sources == {"s1": st.journal[0].result_id, "s2": st.journal[1].result_id}
    assert st.acceptances[0].version == "v1"
    dep = await WorkHandle.of(client, wid).dependable("strict")
    assert dep is not None and dep.content == {"digest": "A B"}
    # a consumer names the contract it requires (the work's is accepted/1 by "workflow")
    work = WorkHandle.of(client, wid)
    assert await work.dependable("strict@accepted:1") == dep
    assert await work.dependable("strict@accepted:1:workflow") == dep
    assert await work.dependable(StrictCurrent(contract=Contract(
        name="accepted", version="1", assessor="workflow"))) == dep
    assert await work.dependable("strict@accepted:2") is None
    assert await work.dependable("pinned:v1@accepted:1:someone-else") is None
    assert await work.dependable(LatestAccepted(contract=Requires(name="q3", version="1"))) is None
    # only the user's activities ran: no outlive activity, no update per step
    events = await _history_events(client, wid)
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name for e in events
                 if e.HasField("activity_task_scheduled_event_attributes")]
    assert scheduled == ["held", "held"]
    assert not any(e.HasField("workflow_execution_update_accepted_event_attributes") for e in events)


async def test_a_silent_step_is_taken_over_by_the_engine(client: Client, queue: str) -> None:
    """Attempt #1's step s2 stops heartbeating: Temporal times it out, the workflow marks #1
    unknown, admits #2 with a larger token, and #2 restores s1 by input key."""
    wid = _id("digest/silent")
    app.CALLS.clear()
    hold = app.HOLD["silent-b"] = asyncio.Event()
    try:
        res = await client.execute_workflow(app.HoldWork.run, {"s1": "silent-a", "s2": "silent-b"},
                                            id=wid, task_queue=queue)
    finally:
        hold.set()
    assert res["attempt"] == 2
    st = await WorkHandle.of(client, wid).ledger()
    assert [(a.number, a.token, a.state) for a in st.attempts] == [
        (1, 1, AttemptState.UNKNOWN), (2, 2, AttemptState.FINISHED)]
    assert app.CALLS.count("silent-a") == 1          # s1 restored, not re-run
    assert app.CALLS.count("silent-b") == 2          # the silent call and the successor's
    events = await _history_events(client, wid)
    timed_out = [e for e in events if e.HasField("activity_task_timed_out_event_attributes")]
    assert len(timed_out) == 1


async def test_a_corrected_input_makes_the_engine_rebuild_for_it(client: Client, queue: str) -> None:
    """v2 is published while #1 works on v1: #1's candidate is for an old version, so the work
    admits #2 pinned to v2, which restores the unchanged section and redoes the changed one."""
    wid = _id("digest/rebuild")
    app.CALLS.clear()
    handle = await client.start_workflow(app.FleetWork.run, {"s1": "rb-a", "s2": "slow:1.5:rb-b"},
                                         id=wid, task_queue=queue)
    await asyncio.sleep(0.5)
    await WorkHandle(handle).publish("v2", {"s1": "rb-a", "s2": "slow:0:rb-b2"})
    res = await handle.result()
    assert res["attempt"] == 2
    st = await WorkHandle(handle).ledger()
    assert [a.pinned_version for a in st.attempts] == ["v1", "v2"]
    assert [a.state for a in st.attempts] == [AttemptState.STOPPED, AttemptState.FINISHED]
    assert [(e.step, e.attempt) for e in st.journal] == [
        ("s1", 1), ("s2", 1), ("assembly", 1), ("s2", 2), ("assembly", 2)]
    assert st.acceptances[-1].version == "v2"
    dep = await WorkHandle(handle).dependable("strict")
    assert dep is not None and dep.content == {"digest": "RB-A RB-B2"}


async def test_an_attempts_activity_cannot_issue_the_controllers_commands(
        client: Client, queue: str) -> None:
    """The work's workflow holds the controller's credential (derived in workflow code from the
    workers' secret): a step's activity that sends ``MarkUnknown``, ``MarkStopped``, ``Accept``
    or a publish of its own is refused ``NotController``, and the work goes on as its
    workflow drives it."""
    wid = _id("digest/usurp")
    res = await client.execute_workflow(app.UsurpWork.run, {"s1": "x"}, id=wid, task_queue=queue)
    assert res["met"] == "NotController,NotController,NotController,NotController," \
                         "NotController:x"
    assert res["attempt"] == 1
    st = await WorkHandle.of(client, wid).ledger()
    assert st.controller_key_hash is not None
    assert [v.version for v in st.inputs] == ["v1"]
    assert [a.state for a in st.attempts] == [AttemptState.FINISHED]
    assert st.acceptances[-1].digest == res["digest"]


async def test_waiting_for_a_signal_is_waiting_not_silence(client: Client, queue: str) -> None:
    """The attempt waits for a signal for several leases (1 s each): the ledger says
    ``waiting`` and why, a controller's MarkUnknown leaves it alone, and after the signal the
    same attempt finishes (no successor)."""
    wid = _id("digest/approval")
    handle = await client.start_workflow(app.ApprovalWork.run, {"s1": "ap-a", "s2": "ap-b"},
                                         id=wid, task_queue=queue)
    work = WorkHandle(handle)

    async def last_attempt() -> Any:
        try:
            st = await work.ledger()
        except NotFound:                             # its first workflow task has not run yet
            return None
        return st.attempts[-1] if st.attempts else None

    for _ in range(300):
        att = await last_attempt()
        if att is not None and att.state is AttemptState.WAITING:
            break
        await asyncio.sleep(0.05)
    assert att is not None
    assert att.state is AttemptState.WAITING and att.waiting_for == "approval by the editor"
    await asyncio.sleep(3.5)                         # three leases and more
    out = await work.execute(L.MarkUnknown(attempt=att.number, at=0))
    assert out.kind == "unchanged"                   # waiting is not silence
    # a client holding another secret than the workers' proves nothing: refused, nothing written
    stranger = WorkHandle(handle, credential="not the workers' key")
    with pytest.raises(NotController):
        await stranger.execute(L.MarkUnknown(attempt=att.number, at=0))
    with pytest.raises(NotController):
        await stranger.publish("v2", {"s1": "ap-a", "s2": "ap-c"})
    assert [v.version for v in (await work.ledger()).inputs] == ["v1"]
    assert (await work.ledger()).attempts[-1].state is AttemptState.WAITING
    await handle.signal(app.ApprovalWork.approve)
    res = await handle.result()
    assert res["attempt"] == 1
    st = await work.ledger()
    assert [a.state for a in st.attempts] == [AttemptState.FINISHED]
    assert st.acceptances[-1].digest == res["digest"]


async def test_state_past_the_cap_fails_the_work_with_a_typed_error(
        client: Client, queue: str) -> None:
    """Without a store, 20 KB results would pass Temporal's 2 MB carry: the step that would
    cross the cap fails the work with PayloadTooLarge instead of wedging every workflow task."""
    wid = _id("big/capped")
    with pytest.raises(WorkflowFailureError) as info:
        await client.execute_workflow(app.BigWork.run, {"n": 200, "size": 20_000}, id=wid,
                                      task_queue=queue)
    err = typed_error(info.value.cause)
    assert isinstance(err, PayloadTooLarge), info.value.cause
    st = await WorkHandle.of(client, wid).ledger()
    assert 50 < len(st.journal) < 100
    assert st.attempts[-1].state is AttemptState.STOPPED


@pytest.mark.long
async def test_a_thousand_steps_of_20kb_continue_as_new_with_results_by_reference(
        temporal_server: DevServer, tmp_path: Any) -> None:
    store = FileStore(str(tmp_path / "blobs"))
    big = await Client.connect(temporal_server.address, plugins=[OutlivePlugin(store=store)])
    name = f"big-{uuid.uuid4().hex[:8]}"
    wid = _id("big/stored")
    async with Worker(big, task_queue=name, workflows=app.WORKFLOWS, activities=app.ACTIVITIES,
                      max_concurrent_activities=50):
        res = await big.execute_workflow(app.BigWork.run, {"n": 1000, "size": 20_000}, id=wid,
                                         task_queue=name)
        assert res == {"bytes": 20_000_000, "attempt": 1, "generation": 3}
        handle = big.get_workflow_handle(wid)
        desc = await handle.describe()
        assert desc.raw_description.workflow_execution_info.history_length < 2000
        st = await WorkHandle(handle).ledger()
    assert len(st.journal) == 1000
    assert all(isinstance(e.result, dict) for e in st.journal)   # references, not 20 KB blobs
    # history holds references: no event carries a 20 KB result; the last run's input carries
    # the ledger and one ~90-byte reference per earlier result
    timers = 0
    async for event in handle.fetch_history_events():
        limit = 100_000 if event.event_id == 1 else 16_000
        assert event.ByteSize() < limit
        timers += event.HasField("timer_started_event_attributes")
    # the last run decodes its carried journal one chunk per workflow task, then restores the
    # attempt's first 750 steps 200 per workflow task (a 1 ms timer ends each), not all in its
    # first task where a loaded worker could pass the 2 s deadlock timeout
    chunks = -(-750 // app.BigWork.outlive_journal_chunk)
    assert timers == (chunks - 1) + 750 // app.BigWork.outlive_restore_chunk


async def test_leases_are_measured_on_the_engines_clock(client: Client, queue: str) -> None:
    """A fenced write from outside (a worker's heartbeat, with the worker's own timestamp) is
    applied with the workflow's clock as ``now``: a timestamp an hour ahead cannot push the
    attempt's last sign of life past the engine's time, so it cannot stretch the lease."""
    wid = _id("digest/clock")
    handle = await client.start_workflow(app.FleetWork.run, {"s1": "slow:3:ck-a"}, id=wid,
                                         task_queue=queue)
    work = WorkHandle(handle)
    for _ in range(100):
        try:
            st = await work.ledger()
        except NotFound:
            st = None
        if st is not None and st.current_attempt is not None:
            break
        await asyncio.sleep(0.05)
    assert st is not None and st.current_attempt is not None
    att = st.current_attempt
    ahead = int(time.time() * 1000) + 3_600_000
    out = await work.execute(L.Heartbeat(attempt=att.number, token=att.token, at=ahead))
    assert out.kind == "beat"
    beat = (await work.ledger()).attempt(att.number)
    assert beat is not None
    assert beat.last_heartbeat < ahead - 3_000_000, "the worker's clock renewed the lease"
    assert abs(beat.last_heartbeat - int(time.time() * 1000)) < 60_000
    await handle.result()
