"""The conformance scenario's story told inside a user's ``@workflow.defn`` that extends ``Work``.

The harness (``outlive_conformance.harness``) plays the controller and the workers from outside on
a logical clock. Here nobody plays the controller: the work is a user's workflow, the model calls
and the post are the user's activities, silence is Temporal's heartbeat timeout and takeover is
the ``Work`` driver's. The test process plays only the *world*: the model (which text each call
really read), the feed that receives the announcement (a ``MemoryReceiver``), the worker that
pauses or crashes at the scenario's silent step, and the correction of the input. What the world
saw is judged by the conformance suite's own judge (``outlive_conformance.judge``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

from temporalio import activity, workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from outlive import MemoryReceiver, Receipt
    from outlive import ledger as L
    from outlive.errors import OutliveError
    from outlive.hashing import content_hash, input_key, short
    from outlive.records import Candidate, InputVersion, Policy
    from outlive_temporal import Attempt, Work, WorkHandle, current_attempt


@dataclass
class World:
    """One run's world, kept by the test process (activities run there)."""

    story: dict[str, Any]
    feed: MemoryReceiver = field(default_factory=MemoryReceiver)
    truth: dict[str, str] = field(default_factory=dict)     # result id -> hash of the text read
    op_applied: dict[str, int] = field(default_factory=dict)
    calls: int = 0
    posts: int = 0
    silent_fired: bool = False
    published: bool = False
    late: str | None = None          # what the woken worker's late write met
    stale_landed: int = 0
    redone: asyncio.Event = field(default_factory=asyncio.Event)


#: workflow id -> its world
WORLDS: dict[str, World] = {}


def consumer_figure(content: dict[str, Any], pattern: str, quotes: str) -> str | None:
    """The figure a consumer quotes from a digest's content."""
    m = re.search(pattern, str((content.get("sections") or {}).get(quotes, "")))
    return m.group(1) if m else None


def _first_sentence(text: str) -> str:
    m = re.match(r"(.+?[.!?])(\s|$)", text)
    return m.group(1) if m else text


async def _publish(world: World, wid: str) -> None:
    if not world.published:
        world.published = True
        await WorkHandle.of(activity.client(), wid).publish(
            world.story["new_version"], world.story["versions"][world.story["new_version"]])


@activity.defn
async def story_summarise(text: str) -> dict[str, str]:
    """The model call. At the story's silent step, attempt #1 stops heartbeating (its worker is
    paused or gone); a paused one wakes once its successor redid the step and makes its write."""
    info = current_attempt()
    world = WORLDS[info.workflow_id]
    st = world.story
    out = {"summary": _first_sentence(text)}
    key = input_key(info.step, {info.step: content_hash(text)})
    world.truth[L.result_id(info.workflow_id, info.step, key, info.attempt)] = content_hash(text)
    world.calls += 1
    if info.attempt == 1 and info.step == st["silent_step"] and not world.silent_fired:
        world.silent_fired = True
        if st["change"] == "during":
            await _publish(world, info.workflow_id)
        if st["silent"] == "crashed":
            await asyncio.Event().wait()      # never answers again; cancelled at worker shutdown
        try:
            await asyncio.shield(world.redone.wait())
        except asyncio.CancelledError:
            pass
        # woken: it records the step with the token it was started with
        write = L.StepWrite(step=info.step, sources={info.step: content_hash(text)}, input_key=key,
                            result=f'{{"summary": "{out["summary"]}"}}',
                            result_id=L.result_id(info.workflow_id, info.step, key, 1))
        try:
            await info.execute(L.RecordSteps(attempt=1, token=info.token, entries=(write,), at=0))
            world.late = "applied"
            world.stale_landed += 1
        except OutliveError as exc:
            world.late = type(exc).__name__
        return out
    if info.step == st["silent_step"] and info.attempt > 1:
        world.redone.set()
    return out


@activity.defn
async def story_post(op_key: str, sent_key: str | None, payload: dict[str, str]) -> str:
    """The announcement. The first poster dies (if the story says so) right after the feed
    applied the post: it never answers, and the attempt's heartbeat timeout says so."""
    info = activity.info()
    world = WORLDS[info.workflow_id or ""]

    def apply(_: Any) -> str:
        world.op_applied[op_key] = world.op_applied.get(op_key, 0) + 1
        return f"P{len(world.feed.applied) + 1}"

    receipt: Receipt = world.feed.receive(sent_key, payload, apply)
    world.posts += 1
    if world.story["dies"] == "yes" and world.posts == 1:
        await asyncio.Event().wait()
    if world.story["change"] == "after":
        await _publish(world, info.workflow_id or "")
    return str(receipt.effect_id)


@workflow.defn
class StoryWork(Work):
    """The q3 digest as a user would write it with outlive inside Temporal."""

    outlive_heartbeat: ClassVar[timedelta] = timedelta(seconds=1)

    @workflow.run
    async def run(self, story: dict[str, Any]) -> dict[str, Any]:
        self.story = story
        first = story["first_version"]
        result = await self.drive(self.attempt, story["versions"][first], version=first)
        # keep the digest current: a correction that arrived while the last attempt finished
        # gets its own attempt (pinned to it; unchanged sections restore). Without pins the
        # ledger records no version with an acceptance: nothing to compare.
        while (acc := self.outlive.state.latest_acceptance) is not None \
                and acc.version is not None and acc.version != self.outlive.state.current_version:
            result = await self.drive(self.attempt, None, version=first)
        return result

    def assess(self, candidate: Candidate, version: InputVersion | None) -> tuple[bool, str]:
        """Completeness and form only, as the harness's controller judges."""
        secs = candidate.content.get("sections") if isinstance(candidate.content, dict) else None
        if not isinstance(secs, dict) or sorted(secs) != sorted(self.story["steps"]):
            return False, "digest does not cover every section"
        if any(not isinstance(t, str) or not t or len(t) > self.story["max_summary_chars"]
               for t in secs.values()):
            return False, "a summary is empty or too long"
        return True, "complete, well-formed"

    async def attempt(self, a: Attempt, inputs: dict[str, str]) -> dict[str, Any]:
        st = self.story
        sections = {}
        for s in st["steps"]:
            out = await a.step(s, story_summarise, inputs[s], start_to_close_timeout=timedelta(minutes=5))
            sections[s] = out["summary"]
        acc = await a.accept({"title": st["title"], "sections": sections})
        op_key = st["announce"].format(work_id=st["work_id"], digest=short(acc.digest))
        sent = {"operation": op_key, "attempt": f"{op_key}#attempt-{a.number}", "none": None}[st["key"]]
        await a.effect(op_key, story_post, op_key, sent, {"announce": st["title"],
                                                        "digest": short(acc.digest)},
                       heartbeat_timeout=self.outlive_heartbeat,
                       retry_policy=RetryPolicy(maximum_attempts=1))
        return {"attempt": a.number, "digest": acc.digest, "version": acc.version}


@workflow.defn
class StoryWorkFencingOff(StoryWork):
    outlive_policy = Policy(fencing=False)

    @workflow.run
    async def run(self, story: dict[str, Any]) -> dict[str, Any]:
        return await super().run(story)


@workflow.defn
class StoryWorkPinsOff(StoryWork):
    outlive_policy = Policy(pins=False)

    @workflow.run
    async def run(self, story: dict[str, Any]) -> dict[str, Any]:
        return await super().run(story)


WORKFLOWS = [StoryWork, StoryWorkFencingOff, StoryWorkPinsOff]
ACTIVITIES: list[Callable[..., Any]] = [story_summarise, story_post]
