"""AFTER: the same Temporal workflow and activities, with outlive inside it.

The diff against ``before.py`` (docs/porting-temporal.md walks through it; the block between the
``--- workflow ---`` markers differs from before.py's in under 30 lines, checked by a test):

1. ``DigestWorkflow`` extends ``outlive_temporal.Work``: its execution *is* the work and holds the
   work's ledger (attempts, owner token, input-keyed journal, candidates, acceptances, effects);
2. ``run`` hands the old body to ``self.drive``: Temporal drives the attempts — a step whose
   heartbeat stops is timed out by Temporal, the attempt becomes ``unknown``, a successor with a
   larger token takes over and the predecessor is cancelled, with no client anywhere;
3. ``workflow.execute_activity(summarise, ...)`` -> ``a.step("s2", summarise, ...)``: the same
   activity on the same workers, restored by input key when its input did not change;
4. the result is *accepted* for the input version it was built from (``a.accept``);
5. the post is an *effect keyed by operation* (``a.effect``): the key travels to the feed, which
   dedupes Temporal's retry;
6. the corrected report is *published* to the same work (an update), not started as a second
   execution; the newsletter asks ``dependable("strict")``, not "the latest finished execution".

Run it: ``python examples/porting_temporal/after.py`` — the same situation as ``before.py``.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from outlive_temporal import Attempt, OutlivePlugin, Work, WorkHandle
    from outlive_temporal.testing import go_silent

    try:
        from .before import V1, V2, World, revenue
    except ImportError:  # run as a script: python examples/porting_temporal/after.py
        from before import V1, V2, World, revenue  # type: ignore[no-redef]

WORLD = World()


# --- workflow ---
@activity.defn
async def summarise(text: str) -> str:
    WORLD.calls.append(text)
    if text == WORLD.pause_on and not WORLD.paused.is_set():
        WORLD.paused.set()
        go_silent()  # a paused worker sends no heartbeat, not even outlive's
        await WORLD.wake.wait()  # the worker is paused, not dead
    return text.strip()  # stand-in for the model call


@activity.defn
async def post_announcement(digest: str, key: str) -> str:
    post_id = WORLD.feed.post(f"Q3 digest: {digest}", key=key)  # the operation key
    if WORLD.die_after_post:
        WORLD.die_after_post = False
        raise RuntimeError("process died after the feed applied the post")
    return post_id


@workflow.defn
class DigestWorkflow(Work):
    outlive_heartbeat = timedelta(seconds=5)  # a step silent this long is taken over

    @workflow.run
    async def run(self, report: dict[str, str]) -> dict[str, str]:
        return await self.drive(self.attempt, report)

    async def attempt(self, a: Attempt, report: dict[str, str]) -> dict[str, str]:
        opts: dict[str, Any] = {"start_to_close_timeout": timedelta(seconds=60)}
        summaries = [await a.step(k, summarise, report[k], **opts)
                     for k in sorted(report)]
        digest = " ".join(summaries)
        key = f"announce:{a.work_id}:{(await a.accept({'digest': digest})).digest}"
        post_id = await a.effect(
            key, post_announcement, digest, key, retry_policy=RetryPolicy(
                initial_interval=timedelta(milliseconds=100)), **opts)
        return {"digest": digest, "post": post_id}
# --- workflow ---


async def seed_situation(address: str) -> dict[str, Any]:
    global WORLD
    WORLD = World(pause_on=V1["s3"])
    client = await Client.connect(address, plugins=[OutlivePlugin()])
    queue = f"digest-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[DigestWorkflow],
                      activities=[summarise, post_announcement]):
        # One work, started once, on report v1. Its attempt #1 goes silent in section 3.
        work = await client.start_workflow(DigestWorkflow.run, V1, id=f"digest/q3-report@{queue}",
                                           task_queue=queue)
        await WORLD.paused.wait()
        # The corrected report is published to the same work; it becomes the current version.
        WORLD.die_after_post = True
        await WorkHandle(work).publish("v2", V2)
        # Temporal times the silent step out; the work marks #1 unknown and admits #2 (pinned
        # to v2), which restores s1, redoes s2-s4, is accepted for v2 and posts once.
        result = await work.result()
        # The paused worker wakes: Temporal refuses its late completion (the activity timed out)
        # and attempt #1, cancelled by the work, never writes again.
        WORLD.wake.set()
        state = await WorkHandle(work).ledger()
        dep = await WorkHandle(work).dependable("strict")
        assert dep is not None
    return {"calls": len(WORLD.calls), "posts": list(WORLD.feed.posts),
            "newsletter_quotes": revenue(dep.content["digest"]),
            "accepted_for": state.acceptances[-1].version, "result": result,
            "attempts": [(a.number, a.token, a.state.value) for a in state.attempts]}


if __name__ == "__main__":
    from outlive_temporal.devserver import DevServer

    with DevServer() as srv:
        print(asyncio.run(seed_situation(srv.address)))
