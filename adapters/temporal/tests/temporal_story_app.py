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
import json
import re
from collections.abc import Awaitable, Callable
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
    from outlive.records import Candidate, InputVersion, Part, Policy, WorkState
    from outlive.rules import LatestAccepted, LatestFinished, Rule, StrictCurrent, dependable
    from outlive_temporal import Attempt, Work, WorkHandle, current_attempt
    from outlive_temporal.testing import go_silent


@dataclass
class Reading:
    """What the newsletter saw under one rule when it was ready."""

    started: bool
    figure: str | None
    required: str | None


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
    #: step -> (text read, input key, result id, summary) of the attempt that falls silent
    first: dict[str, tuple[str, str, str, str]] = field(default_factory=dict)
    woken_ran: list[str] = field(default_factory=list)   # steps the woken worker ran on
    #: rule -> what the newsletter read when it was ready (after the first post, and after a
    #: correction published after acceptance); a strict reader that found nothing waits
    readings: dict[str, Reading] = field(default_factory=dict)
    redone: asyncio.Event = field(default_factory=asyncio.Event)
    over: asyncio.Event = field(default_factory=asyncio.Event)   # the story's work has ended

    def handle(self, wid: str) -> WorkHandle:
        """The work, as this world's activities reach it (their worker's client)."""
        return WorkHandle.of(activity.client(), wid)
    late_done: asyncio.Event = field(default_factory=asyncio.Event)


#: workflow id -> its world
WORLDS: dict[str, World] = {}


def consumer_figure(content: Any, pattern: str, quotes: str) -> str | None:
    """The figure a consumer quotes from a digest's content."""
    if not isinstance(content, dict):
        return None
    m = re.search(pattern, str((content.get("sections") or {}).get(quotes, "")))
    return m.group(1) if m else None


def rules(story: dict[str, Any]) -> dict[str, Rule]:
    """The newsletter's three rules, as the conformance switch names them."""
    return {"strict": StrictCurrent(fail_open=story["consumer"]["fail_open"]),
            "accepted": LatestAccepted(), "finished": LatestFinished()}


def read(story: dict[str, Any], st: WorkState, rule: Rule) -> Reading | None:
    """What the newsletter quotes under ``rule`` from ``st``; None: it waits."""
    dep = dependable(st, rule)
    if dep is None:
        return None
    assert st.current_version is not None
    c = story["consumer"]
    return Reading(started=True, figure=consumer_figure(dep.content, c["pattern"], c["quotes"]),
                   required=story["figures"][st.current_version])


def _first_sentence(text: str) -> str:
    m = re.match(r"(.+?[.!?])(\s|$)", text)
    return m.group(1) if m else text


async def _beating(call: Awaitable[Any]) -> Any:
    """Await ``call`` from an activity, heartbeating meanwhile: on a loaded machine an update or
    a query can take longer than the heartbeat timeout, and this attempt is not silent."""
    send = asyncio.ensure_future(call)
    while not send.done():
        activity.heartbeat()
        await asyncio.wait({send}, timeout=0.2)
    return send.result()


async def _gone(world: World) -> None:
    """A crashed worker: it never answers. Its activity task is released only once the story is
    over (Temporal refused its completion long before: its heartbeat timed out), so a sweep of
    hundreds of stories does not run out of activity slots."""
    await world.over.wait()
    raise RuntimeError("this worker crashed")


async def _publish(world: World, wid: str) -> None:
    """The correction, published from inside a step or a post; it lands before this attempt
    can be taken for silent."""
    if world.published:
        return
    world.published = True
    await _beating(world.handle(wid).publish(
        world.story["new_version"], world.story["versions"][world.story["new_version"]]))


async def _woken_flush(world: World, info: Any) -> L.Outcome:
    """Progress saved at the end: the woken worker goes on where it stopped (one model call per
    remaining step, on the version it is pinned to), then flushes every result with its
    candidate - one fenced write, as ``Work`` does with ``outlive_progress = "end"``."""
    st = world.story
    version = st["first_version"]
    steps = list(st["steps"])
    for s in steps[steps.index(info.step) + 1:]:
        text = st["versions"][version][s]
        key = input_key(s, {s: content_hash(text)})
        rid = L.result_id(info.workflow_id, s, key, info.attempt)
        world.truth[rid] = content_hash(text)
        world.calls += 1
        world.woken_ran.append(s)
        world.first[s] = (text, key, rid, _first_sentence(text))
    writes = tuple(L.StepWrite(step=s, sources={s: content_hash(t)}, input_key=k,
                               result=json.dumps({"summary": summary}), result_id=rid)
                   for s, (t, k, rid, summary) in world.first.items())
    parts = tuple(Part(step=w.step, input_key=w.input_key, sources=w.sources, result_id=w.result_id)
                  for w in writes)
    content = {"title": st["title"], "sections": {s: v[3] for s, v in world.first.items()}}
    # the content is journaled as the assembly of the steps, as Attempt.accept does it
    assembly, part = L.assembly_write(info.workflow_id, info.attempt, parts, content)
    writes, parts = (*writes, assembly), (*parts, part)
    digest = L.candidate_digest(info.workflow_id, version if st["pins"] == "on" else None, parts,
                                content)
    out = await info.execute(L.SubmitCandidate(attempt=info.attempt, token=info.token,
                                               digest=digest, parts=parts, content=content, at=0,
                                               flush=writes))
    world.stale_landed += len(writes) + 1
    return out


@activity.defn
async def story_summarise(text: str) -> dict[str, str]:
    """The model call. At the story's silent step, attempt #1 stops heartbeating (its worker is
    paused or gone); a paused one wakes once its successor redid the step and makes its write."""
    info = current_attempt()
    world = WORLDS[info.workflow_id]
    st = world.story
    out = {"summary": _first_sentence(text)}
    key = input_key(info.step, {info.step: content_hash(text)})
    rid = L.result_id(info.workflow_id, info.step, key, info.attempt)
    world.truth[rid] = content_hash(text)
    world.calls += 1
    if not world.silent_fired or world.silent_attempt == info.attempt:
        world.first[info.step] = (text, key, rid, out["summary"])
    if info.step == st["silent_step"] and not world.silent_fired:
        # the first attempt to reach the silent step falls silent there (#1, unless a loaded
        # machine already made Temporal time #1 out earlier)
        world.silent_fired = True
        world.silent_attempt = info.attempt
        go_silent()   # the plugin's wrapper would otherwise heartbeat for this worker
        if st["change"] == "during":
            await _publish(world, info.workflow_id)
        if st["silent"] == "crashed":
            await _gone(world)
        while not (world.redone.is_set() or world.over.is_set()):
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                # Temporal timed this activity out; the SDK cancels it when a heartbeat sent
                # before the silence is refused. A paused worker knows nothing of that: it
                # wakes all the same and makes its write.
                pass
        if world.over.is_set():
            return out
        # woken: it writes with the token it was started with
        try:
            if st["progress"] == "end":
                await _woken_flush(world, info)
            else:
                write = L.StepWrite(step=info.step, sources={info.step: content_hash(text)},
                                    input_key=key, result=json.dumps(out), result_id=rid)
                await info.execute(L.RecordSteps(attempt=info.attempt, token=info.token,
                                                 entries=(write,), at=0))
                world.stale_landed += 1
            world.late = "applied"
        except OutliveError as exc:
            world.late = type(exc).__name__
        finally:
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
    """The announcement, sent with the operation key, a per-attempt key or none (``key``). After
    the first post the correction comes (if it comes after acceptance) and the newsletter is
    ready; the first poster then dies (if the story says so): it never answers, and the
    attempt's heartbeat timeout says so."""
    info = activity.info()
    wid = info.workflow_id or ""
    world = WORLDS[wid]
    sent_key = {"operation": op_key, "attempt": f"{op_key}#attempt-{current_attempt().attempt}",
                "none": None}[key]

    def apply(_: Any) -> str:
        world.op_applied[op_key] = world.op_applied.get(op_key, 0) + 1
        return f"P{len(world.feed.applied) + 1}"

    receipt: Receipt = world.feed.receive(sent_key, payload, apply)
    world.posts += 1
    if world.posts == 1:
        if world.story["change"] == "after":
            await _publish(world, wid)
        state = await _beating(world.handle(wid).ledger())
        for name, rule in rules(world.story).items():
            got = read(world.story, state, rule)
            if got is not None:
                world.readings[name] = got
        if world.story["dies"] == "yes":
            go_silent()
            await _gone(world)
    return str(receipt.effect_id)


@workflow.defn
class StoryWork(Work):
    """The q3 digest as a user would write it with outlive inside Temporal.

    The story's protections and progress are this execution's settings (``outlive_policy``,
    ``outlive_progress``), set from its input before the work opens."""

    #: The lease: long enough that a loaded machine's slow activity start is not taken for
    #: silence (starts were seen up to 2.9 s after Temporal recorded them, at load average 25).
    outlive_heartbeat: ClassVar[timedelta] = timedelta(seconds=4)

    @workflow.run
    async def run(self, story: dict[str, Any]) -> dict[str, Any]:
        self.story = story
        self.outlive_policy = Policy(fencing=story["fencing"] == "on", pins=story["pins"] == "on")
        self.outlive_progress = story["progress"]
        self.outlive_epoch_floor = story["epoch_floor"]
        first = story["first_version"]
        result = await self.drive(self.attempt, story["versions"][first], version=first)
        # keep the digest current: a correction that arrived while the last attempt finished
        # gets its own attempt (pinned to it; unchanged sections restore). Without pins the
        # ledger records no version with an acceptance: nothing to compare.
        while (acc := self.outlive.state.latest_acceptance) is not None \
                and acc.version is not None and acc.version != self.outlive.state.current_version:
            result = await self.drive(self.attempt, None, version=first)
        steps = {str(a.number): {"restored": list(a.restored), "ran": list(a.ran)}
                 for a in self.outlive.attempts}
        return {**result, "steps": steps}

    def assess(self, candidate: Candidate, version: InputVersion | None) -> tuple[bool, str]:
        """Completeness and form only, as the harness's controller judges."""
        secs = candidate.content.get("sections") if isinstance(candidate.content, dict) else None
        if not isinstance(secs, dict) or sorted(secs) != sorted(self.story["steps"]):
            return False, "digest does not cover every section"
        if any(not isinstance(t, str) or not t or len(t) > self.story["max_summary_chars"]
               for t in secs.values()):
            return False, "a summary is empty or too long"
        return True, "complete, well-formed"

    async def post(self, a: Attempt, op_key: str, digest: str) -> None:
        st = self.story
        await a.effect(op_key, story_post, op_key, st["key"],
                       {"announce": st["title"], "digest": short(digest)},
                       heartbeat_timeout=self.outlive_heartbeat,
                       retry_policy=RetryPolicy(maximum_attempts=1))

    async def attempt(self, a: Attempt, inputs: dict[str, str]) -> dict[str, Any]:
        st = self.story
        # a post an earlier attempt left unconfirmed is settled first, with its own key
        for eff in self.outlive.state.effects:
            if not L.is_settled(eff):
                digest = next(acc.digest for acc in self.outlive.state.acceptances
                              if eff.op_key == self.op_key(acc.digest))
                await self.post(a, eff.op_key, digest)
        sections = {}
        for s in st["steps"]:
            out = await a.step(s, story_summarise, inputs[s], start_to_close_timeout=timedelta(minutes=5))
            sections[s] = out["summary"]
        acc = await a.accept({"title": st["title"], "sections": sections})
        await self.post(a, self.op_key(acc.digest), acc.digest)
        return {"attempt": a.number, "digest": acc.digest, "version": acc.version}

    def op_key(self, digest: str) -> str:
        return str(self.story["announce"].format(work_id=self.story["work_id"], digest=short(digest)))


WORKFLOWS = [StoryWork]
ACTIVITIES: list[Callable[..., Any]] = [story_summarise, story_post]
