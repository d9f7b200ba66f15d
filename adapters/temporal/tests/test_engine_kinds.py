"""Inside the user's workflow, as a Temporal user expects it: an alive step is never silence, an
error is an answer that goes through Temporal's retry policy, attempts do not share the workflow
object's state, and arguments and results go through Temporal's data converter."""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import temporal_kinds_app as app
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from outlive.errors import GaveUp, InputConflict, NotFound, WorkFailed
from outlive.records import AttemptState
from outlive.rules import Dependable, StrictCurrent
from outlive.runtime import WorkStatus
from outlive_temporal import DevServer, OutlivePlugin, WorkHandle, start_work, typed_error


def _id(prefix: str) -> str:
    return f"{prefix}/{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
async def client(temporal_server: DevServer) -> Client:
    return await Client.connect(temporal_server.address, plugins=[OutlivePlugin()])


@pytest.fixture(scope="module")
async def queue(client: Client) -> AsyncIterator[str]:
    name = f"kinds-{uuid.uuid4().hex[:8]}"
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        async with Worker(client, task_queue=name, workflows=app.WORKFLOWS,
                          activities=app.ACTIVITIES, activity_executor=pool):
            yield name


async def _events(client: Client, wid: str) -> list[Any]:
    return [e async for e in client.get_workflow_handle(wid).fetch_history_events()]


@pytest.mark.parametrize("sync", ["no", "yes"])
async def test_a_step_longer_than_the_lease_that_never_heartbeats_is_not_taken_over(
        client: Client, queue: str, sync: str) -> None:
    """The activity runs 3 s against a 1 s heartbeat timeout and never calls ``heartbeat()``:
    outlive's wrapper beats for it, so the attempt is alive, not silent, and finishes."""
    wid = _id("kinds/long")
    text = f"long-{sync}-{uuid.uuid4().hex[:6]}"
    res = await client.execute_workflow(app.LongStepWork.run, {"s1": text, "sync": sync}, id=wid,
                                        task_queue=queue)
    assert res == {"attempt": 1, "text": text.upper()}
    assert app.CALLS[text] == 1
    st = await WorkHandle.of(client, wid).ledger()
    assert [a.state for a in st.attempts] == [AttemptState.FINISHED]
    events = await _events(client, wid)
    assert not any(e.HasField("activity_task_timed_out_event_attributes") for e in events)


@pytest.mark.parametrize("prefix", ["503", "shape"])
async def test_a_transient_error_is_retried_by_temporal_not_a_new_attempt(
        client: Client, queue: str, prefix: str) -> None:
    """A 503 on the first call, or a TypeError raised inside the activity (an answer of an
    unexpected shape; only calling an activity with arguments it does not take is a programming
    error): Temporal's retry policy runs the activity again, in the same attempt; the work
    finishes on attempt #1 with one journal entry per step."""
    wid = _id(f"kinds/{prefix}")
    tag = uuid.uuid4().hex[:6]
    res = await client.execute_workflow(app.FlakyWork.run,
                                        {"s1": f"{prefix}:1:{tag}", "s2": "ok"},
                                        id=wid, task_queue=queue)
    assert res == {"attempt": 1, "text": f"{tag.upper()} OK"}
    assert app.CALLS[f"{prefix}:1:{tag}"] == 2
    st = await WorkHandle.of(client, wid).ledger()
    assert [a.state for a in st.attempts] == [AttemptState.FINISHED]
    assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1), ("s2", 1), ("assembly", 1)]


@pytest.mark.parametrize(("prefix", "kind", "text"), [
    ("400", "BadRequest", "400 Bad Request"),
    ("fatal", "NonRetryable", "the model refused the prompt")])
async def test_a_non_retryable_error_fails_the_work_at_once_naming_it(
        client: Client, queue: str, prefix: str, kind: str, text: str) -> None:
    """Temporal's ``ApplicationError(non_retryable=True)`` and ``outlive.NonRetryable`` alike:
    one call, the attempt recorded ``failed`` with the error, the work failed with it."""
    wid = _id(f"kinds/{prefix}")
    tag = f"{prefix}:{uuid.uuid4().hex[:6]}"
    with pytest.raises(WorkflowFailureError) as info:
        await client.execute_workflow(app.FlakyWork.run, {"s1": tag}, id=wid, task_queue=queue)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == kind, cause
    assert "step 's1'" in cause.message and text in cause.message
    assert app.CALLS[tag] == 1, "a non-retryable error is not retried, nor given a successor"
    st = await WorkHandle.of(client, wid).ledger()
    assert len(st.attempts) == 1 and st.attempts[0].state is AttemptState.FAILED
    err = st.attempts[0].error
    assert err is not None and err.type == kind and text in err.message and not err.retryable
    assert st.failure is not None and st.failure.type == kind


async def test_retries_spent_admit_one_successor_then_the_work_gives_up_naming_the_error(
        client: Client, queue: str) -> None:
    """Always 503: three tries (Temporal's policy) in attempt #1, a successor with a new token,
    three more, then ``GaveUp`` with the last error: six paid calls, not a loop."""
    wid = _id("kinds/spent")
    tag = f"503:99:{uuid.uuid4().hex[:6]}"
    with pytest.raises(WorkflowFailureError) as info:
        await client.execute_workflow(app.FlakyWork.run, {"s1": tag}, id=wid, task_queue=queue)
    err = typed_error(info.value.cause)
    assert isinstance(err, GaveUp), info.value.cause
    assert err.details["last_error"]["type"] == "RuntimeError"
    assert "503 Service Unavailable" in err.details["last_error"]["message"]
    assert app.CALLS[tag] == 6
    st = await WorkHandle.of(client, wid).ledger()
    assert [(a.number, a.token, a.state) for a in st.attempts] == [
        (1, 1, AttemptState.FAILED), (2, 2, AttemptState.FAILED)]
    assert st.failure is not None and st.failure.type == "RuntimeError"
    assert "503 Service Unavailable" in st.failure.message and st.failure.retryable


async def _wait_for(work: WorkHandle, check: Any) -> Any:
    for _ in range(400):
        try:
            st = await work.ledger()
        except NotFound:
            st = None
        if st is not None and check(st):
            return st
        await asyncio.sleep(0.05)
    raise AssertionError("the work never reached the expected state")


async def test_an_approval_given_to_attempt_one_does_not_approve_its_successor(
        client: Client, queue: str) -> None:
    """#1 drafts, is approved by update, and works on; the report is corrected meanwhile, so #1's
    candidate is for an old version and #2 (pinned to v2) drafts again. The approval #1 got
    lives in the workflow object: #2 starts from the work's initial state and waits for its own."""
    wid = _id("kinds/approval")
    tag = uuid.uuid4().hex[:6]
    v1 = {"s1": f"a-{tag}", "s2": f"slow:1.5:b-{tag}"}
    v2 = {"s1": f"a2-{tag}", "s2": f"slow:0:b-{tag}"}
    handle = await client.start_workflow(app.ApprovedWork.run, v1, id=wid, task_queue=queue)
    work = WorkHandle(handle)
    await _wait_for(work, lambda st: st.attempts and st.attempts[-1].state is AttemptState.WAITING)
    await handle.execute_update(app.ApprovedWork.approve, "ann")
    await _wait_for(work, lambda st: [e.step for e in st.journal] == ["s1"]
                    and st.attempts[-1].state is AttemptState.RUNNING)
    await work.publish("v2", v2)
    st = await _wait_for(work, lambda st: len(st.attempts) == 2
                         and st.attempts[-1].state is AttemptState.WAITING)
    assert st.attempts[-1].pinned_version == "v2"
    await asyncio.sleep(1.0)                 # #2 would have finished by now with #1's approval
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    assert (await work.ledger()).attempts[-1].state is AttemptState.WAITING
    await handle.execute_update(app.ApprovedWork.approve, "bob")
    res = await handle.result()
    assert res == {"attempt": 2, "version": "v2", "approved_by": "bob"}
    st = await work.ledger()
    assert st.acceptances[-1].version == "v2"


async def test_a_workflow_taking_and_returning_dataclasses_runs_unchanged(
        client: Client, queue: str) -> None:
    """``run(self, report: Report) -> Digest``; the activity takes a ``Section`` and returns a
    ``Summary``. Each part is canonicalised through the data converter, so the step reading
    ``report.intro`` is checked against the part ``intro``; a step given the whole report and an
    earlier result in one dataclass needs no ``reads=``. After a correction of the body, #2
    restores the intro (a ``Summary`` again) and redoes the body and the headline."""
    wid = _id("kinds/typed")
    tag = uuid.uuid4().hex[:6]
    v1 = app.Report(title="Q3", intro=app.Section("Intro", f"intro-{tag}"),
                    body=app.Section("Body", f"slow:1.5:body-{tag}"))
    v2 = app.Report(title="Q3", intro=v1.intro, body=app.Section("Body", f"slow:0:body2-{tag}"))
    handle = await client.start_workflow(app.TypedWork.run, v1, id=wid, task_queue=queue)
    work = WorkHandle(handle)
    await _wait_for(work, lambda st: [e.step for e in st.journal] == ["intro"])
    await work.publish("v2", v2)
    res = await handle.result()
    assert isinstance(res, app.Digest)
    assert res.attempt == 2
    assert res.lines == [app.Summary("Intro", f"INTRO-{tag.upper()}"),
                         app.Summary("Body", f"BODY2-{tag.upper()}")]
    assert app.CALLS[f"intro-{tag}"] == 1, "the intro was restored by input key"
    st = await work.ledger()
    assert [(e.step, e.attempt) for e in st.journal] == [
        ("intro", 1), ("body", 1), ("headline", 1), ("assembly", 1), ("body", 2),
        ("headline", 2), ("assembly", 2)]
    assert res.title == f"Q3: INTRO-{tag.upper()}"
    # the headline read the whole report (every part) and the intro's summary (derived)
    entry = st.journal[-2]
    assert {"title", "intro", "body"} <= set(entry.sources)
    assert "headline.intro" in entry.sources
    assert st.acceptances[-1].version == "v2"
    dep = await work.dependable("strict")
    assert dep is not None and dep.content["lines"][1] == {"heading": "Body",
                                                              "line": f"BODY2-{tag.upper()}"}


async def test_the_runtimes_handle_api_maps_onto_the_workflow_execution(
        client: Client, queue: str) -> None:
    """A work is the user's workflow execution: starting its running id again returns the
    same execution, and with other parts for ``v1`` is an ``InputConflict``; ``result()`` is
    ``Completed`` with the acceptance, or ``WorkFailed`` naming the error; ``state()`` answers
    the runtime's ``WorkStatus`` (as ``outlive.WorkHandle.state()`` does on sqlite and
    postgresql), ``ledger()`` the raw ``WorkState``; ``dependable`` takes a rule and answers the runtime's
    ``Dependable``."""
    wid = _id("kinds/handle")
    tag = uuid.uuid4().hex[:6]
    report = {"s1": f"h1-{tag}", "s2": f"h2-{tag}"}
    first = await start_work(client, app.ApprovedWork.run, wid, report, task_queue=queue)
    again = await start_work(client, app.ApprovedWork.run, wid, report, task_queue=queue)
    assert (await first.handle.describe()).run_id == (await again.handle.describe()).run_id
    with pytest.raises(InputConflict):   # the same running id, other parts for v1
        await start_work(client, app.ApprovedWork.run, wid, {**report, "s2": "other"},
                         task_queue=queue)
    await _wait_for(first, lambda st: st.attempts and st.attempts[-1].state is AttemptState.WAITING)
    waiting = await first.state()
    assert isinstance(waiting, WorkStatus) and waiting.status == "waiting"
    assert waiting.work_id == wid and waiting.state == await first.ledger()
    await first.handle.execute_update(app.ApprovedWork.approve, "ann")
    done = await again.result()
    assert done.work_id == wid and done.acceptance.version == "v1"
    status = await first.state()
    assert status.status == "completed" and status.last_error is None
    dep = await first.dependable(StrictCurrent())
    assert isinstance(dep, Dependable) and dep.digest == done.acceptance.digest
    assert dep.acceptance == done.acceptance and dep.version == "v1"

    bad = await start_work(client, app.FlakyWork.run, _id("kinds/handle-bad"),
                           {"s1": f"400:{tag}"}, task_queue=queue)
    with pytest.raises(WorkFailed) as info:
        await bad.result()
    assert info.value.details["type"] == "BadRequest"
    status = await bad.state()
    assert status.status == "failed" and status.last_error is not None
    assert status.last_error.type == "BadRequest"


async def test_a_workflow_taking_a_pydantic_model_runs_with_the_pydantic_converter(
        temporal_server: DevServer) -> None:
    """With ``pydantic_data_converter`` on the client: ``run`` takes a model, the step takes the
    whole input (declared as every part: no ``reads=``), the result comes back a model, and the
    candidate is the model's JSON object."""
    from temporalio.contrib.pydantic import pydantic_data_converter

    client = await Client.connect(temporal_server.address, plugins=[OutlivePlugin()],
                                  data_converter=pydantic_data_converter)
    queue = f"models-{uuid.uuid4().hex[:8]}"
    wid = _id("kinds/pydantic")
    tag = uuid.uuid4().hex[:6]
    async with Worker(client, task_queue=queue, workflows=[app.ModelWork],
                      activities=[app.answer]):
        res = await client.execute_workflow(
            app.ModelWork.run, app.Question(topic="q3", detail=f"d-{tag}"), id=wid,
            task_queue=queue)
        assert isinstance(res, app.Answer)
        assert res == app.Answer(topic="q3", text=f"D-{tag.upper()}", attempt=1)
        st = await WorkHandle.of(client, wid).ledger()
    assert sorted(st.version("v1").parts) == ["detail", "topic"]
    assert sorted(st.journal[0].sources) == ["detail", "topic"]
    assert st.candidates[-1].content == {"topic": "q3", "text": f"D-{tag.upper()}",
                                         "attempt": 1}
