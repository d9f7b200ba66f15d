"""AFTER: the same workflow on outlive, running on Temporal (``temporal://``).

The diff against ``before.py``, walked through in ``docs/porting-temporal.md``:

1. the report is published as a *version*; each attempt is admitted (owner token) and pinned to it
   — instead of starting a second execution for the corrected report;
2. ``workflow.execute_activity(summarise, ...)`` -> ``worker.step("s2", summarise, s2=...)``: each
   step still runs as a Temporal activity (no server retries), is restored by input key, and its
   journal write is fenced by the owner token;
3. the worker submits a *candidate*; the controller (not the worker) accepts it for a version;
4. the post is an *effect keyed by operation* (``announce:<work>:<digest>``) that the feed
   dedupes — not an activity Temporal retries blindly;
5. the newsletter asks ``dependable(StrictCurrent())`` instead of "the latest finished execution".

Run it: ``python examples/porting_temporal/after.py`` — the same situation as ``before.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from typing import Any

import outlive
from outlive import Contract, Controller, Receipt, StaleOwner, StrictCurrent, Worker

try:
    from .before import V1, V2, World, revenue
except ImportError:  # run as a script: python examples/porting_temporal/after.py
    from before import V1, V2, World, revenue  # type: ignore[no-redef]

CONTRACT = Contract(name="digest-form", version="1", assessor="editor")


class PosterDied(Exception):
    """The process died right after the feed applied the post, before anything was recorded."""


def make_summarise(world: World) -> Any:
    async def summarise(**section: str) -> str:
        (text,) = section.values()
        world.calls.append(text)
        if text == world.pause_on and not world.paused.is_set():
            world.paused.set()
            await world.wake.wait()  # the worker is paused, not dead
        return text.strip()

    return summarise


async def work(w: Worker, report: dict[str, str], world: World) -> str:
    """One attempt: the same steps as DigestWorkflow.run, through outlive."""
    summarise = make_summarise(world)
    summaries = [await w.step(k, summarise, **{k: report[k]}) for k in sorted(report)]
    digest = " ".join(summaries)
    cand = await w.candidate({"digest": digest})
    return cand.digest


async def announce(w: Worker, work_id: str, digest_id: str, text: str, world: World) -> Receipt:
    def send(key: str | None, payload: Any) -> Receipt:
        post_id = world.feed.post(f"Q3 digest: {payload['digest']}", key=key)
        if world.die_after_post:
            world.die_after_post = False
            raise PosterDied(post_id)
        return Receipt(effect_id=post_id, duplicate=False, key=key)

    return await w.effect(f"announce:{work_id}:{digest_id}", {"digest": text}, send)


async def seed_situation(url: str) -> dict[str, Any]:
    world = World(pause_on=V1["s3"])
    tick = itertools.count(1)
    work_id = f"digest/q3-report#{uuid.uuid4().hex[:6]}"
    async with await outlive.open_backend(url) as backend:
        ctl = Controller(backend, clock=lambda: next(tick))
        await ctl.open_work(work_id)
        await ctl.publish(work_id, "v1", V1)
        # Attempt #1 is admitted (token written before dispatch), pinned to v1; it goes silent.
        a1 = await ctl.admit(work_id)
        w1 = Worker(backend, a1, V1, clock=lambda: next(tick))
        await w1.start()
        late = asyncio.create_task(work(w1, V1, world))
        await world.paused.wait()
        # The corrected report arrives; silence is `unknown`; a successor gets a larger token.
        await ctl.publish(work_id, "v2", V2)
        await backend.execute(work_id, outlive.ledger.MarkUnknown(attempt=a1.number,
                                                                   at=next(tick)))
        a2 = await ctl.admit(work_id)
        w2 = Worker(backend, a2, V2, clock=lambda: next(tick))
        await w2.start()
        digest_id = await work(w2, V2, world)
        acc = await ctl.assess(work_id, digest_id, CONTRACT, lambda c, v: (True, "complete"))
        text = (await ctl.state(work_id)).candidate(digest_id).content["digest"]  # type: ignore[union-attr]
        world.die_after_post = True
        try:
            await announce(w2, work_id, digest_id, text, world)
        except PosterDied:
            # #2 died after the feed applied the post: #3 settles it with the same key.
            await backend.execute(work_id, outlive.ledger.MarkUnknown(attempt=a2.number,
                                                                       at=next(tick)))
            a3 = await ctl.admit(work_id)
            w3 = Worker(backend, a3, V2, clock=lambda: next(tick))
            await w3.start()
            await announce(w3, work_id, digest_id, text, world)
        # Attempt #1 wakes up: its next write is refused by the owner token.
        world.wake.set()
        try:
            await late
            late_worker = "applied"
        except StaleOwner:
            late_worker = "refused (StaleOwner)"
        dep = await ctl.dependable(work_id, StrictCurrent())
        assert dep is not None
        return {"calls": len(world.calls), "posts": list(world.feed.posts),
                "newsletter_quotes": revenue(dep.content["digest"]),
                "accepted_for": acc.version, "late_worker": late_worker}


if __name__ == "__main__":
    from outlive_temporal.devserver import DevServer

    with DevServer() as srv:
        print(asyncio.run(seed_situation(srv.url)))
