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
    silent_attempt: int = 0
    published: bool = False
    late: str | None = None          # what the woken worker's late write met
    stale_landed: int = 0
    failed: str | None = None        # the work's failure, if it failed
    redone: asyncio.Event = field(default_factory=asyncio.Event)
    late_done: asyncio.Event = field(default_factory=asyncio.Event)


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
    """The correction, published from inside a step or a post. The activity keeps beating until
    the workflow has it, so it lands before this attempt can be taken for silent (on a loaded
    machine an update can take longer than the heartbeat timeout)."""
    if world.published:
        return
    world.published = True
    send = asyncio.ensure_future(WorkHandle.of(activity.client(), wid).publish(
        world.story["new_version"], world.story["versions"][world.story["new_version"]]))
    while not send.done():
        activity.heartbeat()
        await asyncio.wait({send}, timeout=0.2)
    send.result()


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
    if info.step == st["silent_step"] and not world.silent_fired:
        # the first attempt to reach the silent step falls silent there (#1, unless a loaded
        # machine already made Temporal time #1 out earlier)
        world.silent_fired = True
        world.silent_attempt = info.attempt
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
                            result_id=L.result_id(info.workflow_id, info.step, key, info.attempt))
        try:
            await info.execute(L.RecordSteps(attempt=info.attempt, token=info.token, entries=(write,),
                                             at=0))
            world.late = "applied"
            world.stale_landed += 1
        except OutliveError as exc:
            world.late = type(exc).__name__
        world.late_done.set()
        return out
    if info.step == st["silent_step"] and info.attempt > world.silent_attempt > 0 \
            and st["silent"] == "paused":
        # the paused worker wakes while its successor redoes the step (as at the harness's
        # wake tick): this call returns only after the woken one's write was answered
        world.redone.set()
        while not world.late_done.is_set():
            activity.heartbeat()
            await asyncio.sleep(0.2)
    return out


@activity.defn
async def story_post(op_key: str, key: str, payload: dict[str, str]) -> str:
    """The announcement, sent with the operation key, a per-attempt key or none (``key``). The
    first poster dies (if the story says so) right after the feed applied the post: it never
    answers, and the attempt's heartbeat timeout says so."""
    info = activity.info()
    world = WORLDS[info.workflow_id or ""]
    sent_key = {"operation": op_key, "attempt": f"{op_key}#attempt-{current_attempt().attempt}",
                "none": None}[key]

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

    #: The lease: long enough that a loaded machine's slow activity start is not taken for
    #: silence (starts were seen up to 2.9 s after Temporal recorded them, at load average 25).
    outlive_heartbeat: ClassVar[timedelta] = timedelta(seconds=4)

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
        await a.effect(op_key, story_post, op_key, st["key"], {"announce": st["title"],
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




@workflow.defn
class StoryWorkUnprotected(StoryWork):
    outlive_policy = Policy(fencing=False, pins=False)

    @workflow.run
    async def run(self, story: dict[str, Any]) -> dict[str, Any]:
        return await super().run(story)


#: (fencing, pins) -> the workflow with that policy
BY_POLICY: dict[tuple[str, str], type[StoryWork]] = {
    ("on", "on"): StoryWork, ("off", "on"): StoryWorkFencingOff, ("on", "off"): StoryWorkPinsOff,
    ("off", "off"): StoryWorkUnprotected}

WORKFLOWS = [StoryWork, StoryWorkFencingOff, StoryWorkPinsOff, StoryWorkUnprotected]
ACTIVITIES: list[Callable[..., Any]] = [story_summarise, story_post]
