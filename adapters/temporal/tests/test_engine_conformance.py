"""The conformance scenario inside a user's workflow: the protected stories end clean, and removing
a protection breaks its story - judged by the conformance suite's own judge, beside ``memory://``.

The shared suite (``test_conformance.py``, the 864-run sweep) drives a backend from outside on a
logical clock and compares every field of a run, ticks included, with ``memory://``. Inside the
engine there is no outside driver: silence is a heartbeat timeout in wall-clock time, takeover is
the ``Work`` driver's. So each story here is told by the world (the model, the feed, the paused or
crashed worker, the correction; ``temporal_story_app``) and judged on what the ticks do not
decide: the invariants, the posts the feed applied, the stale writes the ledger counted, the
versions accepted in order. Which of the 24 protected runs cannot be told in this shape, and why:
docs/engines/temporal.md, "Conformance inside the engine".
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import temporal_story_app as app
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Worker

from outlive import ledger as L
from outlive.hashing import short
from outlive.records import WorkState
from outlive.rules import StrictCurrent, dependable
from outlive_conformance.harness import RunSummary
from outlive_conformance.judge import Observations, judge
from outlive_conformance.scenario import Scenario, q3_report
from outlive_conformance.suite import reference_run
from outlive_temporal import DevServer, OutlivePlugin, WorkHandle

#: The protected runs this shape can tell: progress is per step (a step in the workflow is
#: journaled when its activity returns), the change comes during the silence or after the first
#: acceptance, the first poster dies or does not.
PROTECTED = [{"silent": s, "change": c, "dies": d}
             for s in ("paused", "crashed") for c in ("never", "during", "after") for d in ("yes", "no")]
#: One protection removed, the story that needs it: (name, workflow, story, broken invariant).
WITNESSES = [
    ("fencing", app.StoryWorkFencingOff, {"silent": "paused", "change": "never", "dies": "no"},
     "no_stale_write"),
    ("pins", app.StoryWorkPinsOff, {"silent": "paused", "change": "during", "dies": "no"},
     "parts_match_version"),
    ("key", app.StoryWork, {"silent": "crashed", "change": "never", "dies": "yes", "key": "none"},
     "one_effect_per_operation"),
]


def _story(sc: Scenario, sw: dict[str, str]) -> dict[str, Any]:
    return {"steps": list(sc.steps), "versions": sc.versions, "first_version": sc.first_version,
            "new_version": sc.new_version, "title": sc.title, "announce": sc.announce,
            "work_id": sc.work_id, "max_summary_chars": sc.max_summary_chars,
            "silent_step": sc.silent_step, "key": "operation", **sw}


@pytest.fixture(scope="module")
async def story_queue(temporal_server: DevServer) -> AsyncIterator[tuple[Client, str]]:
    client = await Client.connect(temporal_server.address, plugins=[OutlivePlugin()])
    name = f"story-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=name, workflows=app.WORKFLOWS, activities=app.ACTIVITIES,
                      graceful_shutdown_timeout=timedelta(seconds=0)):
        yield client, name


async def _tell(client: Client, queue: str, sc: Scenario, workflow: Any,
                sw: dict[str, str]) -> tuple[dict[str, bool], WorkState, app.World]:
    wid = f"story/{uuid.uuid4().hex[:10]}"
    world = app.WORLDS[wid] = app.World(story=_story(sc, sw))
    try:
        await client.execute_workflow(workflow.run, world.story, id=wid, task_queue=queue)
    except WorkflowFailureError as exc:
        world.failed = f"{type(exc.cause).__name__}: {exc.cause}"
    st = await WorkHandle.of(client, wid).state()
    dep = dependable(st, StrictCurrent(fail_open=sc.consumer.fail_open))
    figure = None
    if dep is not None and isinstance(dep.content, dict):
        figure = app.consumer_figure(dep.content, sc.consumer.pattern, sc.consumer.quotes)
    assert st.current_version is not None
    seen = Observations(
        truth=dict(world.truth), pins={a.number: a.pinned_version for a in st.attempts},
        stale_landed=world.stale_landed, op_applied=dict(world.op_applied),
        consumer_started=dep is not None, consumer_figure=figure,
        consumer_required=sc.figure(st.current_version))

    def announced(state: WorkState, digest: str) -> bool:
        key = sc.announce.format(work_id=sc.work_id, digest=short(digest))
        return L.is_settled(state.effect(key))

    return judge(st, seen, sc, announced=announced), st, world


def _switches(sc: Scenario, sw: dict[str, str]) -> Any:
    return sc.defaults.set(silent=sw["silent"], change=sw["change"], dies=sw["dies"], progress="step",
                           fencing=sw.get("fencing", "on"), pins=sw.get("pins", "on"),
                           rule="strict", key=sw.get("key", "operation"))


def _accepted_versions(ref: RunSummary) -> list[str | None]:
    return [a.recorded_version for a in ref.accepted]


async def _compare(client: Client, queue: str, stories: list[dict[str, str]]) -> list[str]:
    """Tell each story inside the engine, beside the same switches on memory://; the differences."""
    sc = q3_report()
    told = await asyncio.gather(*(
        _tell(client, queue, sc, app.BY_POLICY[sw.get("fencing", "on"), sw.get("pins", "on")], sw)
        for sw in stories))
    problems: list[str] = []
    for sw, (verdict, st, world) in zip(stories, told, strict=True):
        ref = await reference_run(sc, _switches(sc, sw))
        label = ",".join(f"{k}={v}" for k, v in sw.items())
        got = {"invariants": verdict, "posts": len(world.feed.applied),
               "stale_writes_applied": st.stale_writes_applied,
               "accepted_versions": [a.version for a in st.acceptances]}
        want = {"invariants": ref.invariants, "posts": ref.posts,
                "stale_writes_applied": ref.stale_writes_applied,
                "accepted_versions": _accepted_versions(ref)}
        if world.failed is not None:
            problems.append(f"{label}: the work failed ({world.failed})")
        elif sw.get("fencing") == "off" and sw["silent"] == "paused":
            # Inside the engine a replaced attempt's orchestration cannot go on: the driver
            # cancelled its coroutine, so the woken worker makes only its own late write (the
            # harness's woken worker carries on: more stale writes, a second digest, a second
            # post). Removing fencing must still show: the late write lands.
            if verdict["no_stale_write"] or ref.invariants["no_stale_write"] \
                    or st.stale_writes_applied != 1:
                problems.append(f"{label}: fencing off, yet {got} (memory:// {want})")
        elif got != want:
            problems.append(f"{label}: {got} != memory:// {want}")
        if sw["silent"] == "paused" and sw.get("fencing", "on") == "on" and world.late != "StaleOwner":
            problems.append(f"{label}: the woken worker's late write met {world.late}")
    return problems


async def test_protected_stories_end_clean_inside_the_users_workflow(
        story_queue: tuple[Client, str]) -> None:
    client, queue = story_queue
    problems = await _compare(client, queue, PROTECTED)   # all twelve at once: seconds
    assert not problems, "\n".join(problems)


async def test_removing_one_protection_breaks_its_story_inside_the_users_workflow(
        story_queue: tuple[Client, str]) -> None:
    client, queue = story_queue
    sc = q3_report()
    told = await asyncio.gather(*(_tell(client, queue, sc, wf, sw) for _, wf, sw, _ in WITNESSES))
    for (name, _, _, broken), (verdict, _, _) in zip(WITNESSES, told, strict=True):
        assert not verdict[broken], f"without {name}: {broken} still holds ({verdict})"
