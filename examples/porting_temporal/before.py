"""BEFORE: an ordinary Temporal workflow, as a Temporal user writes it today.

Summarise each section of a report with a model call (an activity), assemble a digest, post one
announcement to an external feed (an activity with Temporal's default retry policy). A newsletter
later takes the digest of the most recently finished workflow and quotes its revenue figure.

Run it: ``python examples/porting_temporal/before.py`` (starts its own dev server). It replays the
article's situation: execution A pauses while summarising section 3; the report is corrected
(4.1 -> 4.7 million); an operator starts execution B for the corrected report (a new workflow id:
the old one is still running); B's post activity dies just after the feed applied the post and
Temporal retries it; then A wakes up and finishes. Temporal keeps each execution consistent — but
A and B are two owners of one piece of work, and nothing refuses A.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import Worker

V1 = {"s1": "A steady quarter for the group.", "s2": "Revenue was 4.1 million.",
      "s3": "Costs fell by 3 percent.", "s4": "The outlook is cautious."}
V2 = {**V1, "s2": "Revenue was 4.7 million."}


class Feed:
    """The external announcement feed (a third party). It dedupes only keys it is given."""

    def __init__(self) -> None:
        self.posts: list[str] = []
        self._keys: dict[str, str] = {}

    def post(self, text: str, key: str | None = None) -> str:
        if key is not None and key in self._keys:
            return self._keys[key]
        self.posts.append(text)
        post_id = f"P{len(self.posts)}"
        if key is not None:
            self._keys[key] = post_id
        return post_id


@dataclass
class World:
    """What the stand-in model and the feed do, so a test can pause, kill and count."""

    feed: Feed = field(default_factory=Feed)
    calls: list[str] = field(default_factory=list)
    pause_on: str | None = None
    paused: asyncio.Event = field(default_factory=asyncio.Event)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    die_after_post: bool = False


WORLD = World()


def revenue(text: str) -> str:
    m = re.search(r"(\d+\.\d) million", text)
    return m.group(1) if m else "?"


# --- workflow ---
@activity.defn
async def summarise(text: str) -> str:
    WORLD.calls.append(text)
    if text == WORLD.pause_on and not WORLD.paused.is_set():
        WORLD.paused.set()
        await WORLD.wake.wait()  # the worker is paused, not dead
    return text.strip()  # stand-in for the model call


@activity.defn
async def post_announcement(digest: str) -> str:
    post_id = WORLD.feed.post(f"Q3 digest: {digest}")  # no idempotency key
    if WORLD.die_after_post:
        WORLD.die_after_post = False
        raise RuntimeError("process died after the feed applied the post")
    return post_id


@workflow.defn(sandboxed=False)
class DigestWorkflow:
    @workflow.run
    async def run(self, report: dict[str, str]) -> dict[str, str]:
        opts: dict[str, Any] = {"start_to_close_timeout": timedelta(seconds=60)}
        summaries = [await workflow.execute_activity(summarise, report[k], **opts)
                     for k in sorted(report)]
        digest = " ".join(summaries)
        post_id = await workflow.execute_activity(
            post_announcement, digest, retry_policy=RetryPolicy(
                initial_interval=timedelta(milliseconds=100)), **opts)
        return {"digest": digest, "post": post_id}
# --- workflow ---


async def seed_situation(address: str) -> dict[str, Any]:
    global WORLD
    WORLD = World(pause_on=V1["s3"])
    client = await Client.connect(address)
    queue = f"digest-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[DigestWorkflow],
                      activities=[summarise, post_announcement]):
        # Execution A starts on report v1 and goes silent in section 3.
        a = await client.start_workflow(DigestWorkflow.run, V1, id=f"digest/q3-report@{queue}/a",
                                        task_queue=queue)
        await WORLD.paused.wait()
        # The corrected report arrives; an operator starts the job again for it.
        WORLD.die_after_post = True
        await client.execute_workflow(DigestWorkflow.run, V2, id=f"digest/q3-report@{queue}/b",
                                      task_queue=queue)
        # Execution A wakes up and carries on as if nothing happened.
        WORLD.wake.set()
        # The newsletter takes the digest of the most recently finished execution: A's.
        latest = await a.result()
    return {"calls": len(WORLD.calls), "posts": list(WORLD.feed.posts),
            "newsletter_quotes": revenue(latest["digest"])}


if __name__ == "__main__":
    from outlive_temporal.devserver import DevServer

    with DevServer() as srv:
        print(asyncio.run(seed_situation(srv.address)))
