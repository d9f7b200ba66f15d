"""AFTER: the same workflow on outlive, running on LangGraph (``langgraph+sqlite``).

The diff against ``before.py``, line by line in ``docs/porting-langgraph.md``:

1. the report is published as a *version*; each attempt is admitted (owner token) and pinned to it;
2. ``@task`` -> ``@outlive_task``: steps are restored by input key and every write is fenced;
3. the entrypoint submits a *candidate*; the controller (not the worker) accepts it for a version;
4. the post is an *effect keyed by operation* (``announce:<work>:<digest>``), not a bare call;
5. the newsletter asks ``dependable(StrictCurrent())`` instead of reading the latest state.

Run it: ``python examples/porting_langgraph/after.py`` — the same situation as ``before.py``.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
from dataclasses import dataclass, field
from typing import Any

from langgraph.func import entrypoint

import outlive
from outlive import Contract, Controller, Receipt, StrictCurrent, Worker
from outlive_langgraph import LangGraphBackend, current_worker, outlive_task, run

V1 = {"s1": "A steady quarter for the group.", "s2": "Revenue was 4.1 million.",
      "s3": "Costs fell by 3 percent.", "s4": "The outlook is cautious."}
V2 = {**V1, "s2": "Revenue was 4.7 million."}
WORK = "digest/q3-report"
CONTRACT = Contract(name="digest-form", version="1", assessor="editor")


class Feed:
    """The external announcement feed (a third party). It dedupes only keys it is given."""

    def __init__(self) -> None:
        self.posts: list[str] = []
        self._keys: dict[str, str] = {}

    def seen(self, key: str | None) -> bool:
        return key is not None and key in self._keys

    def post(self, text: str, key: str | None = None) -> str:
        if key is not None and key in self._keys:
            return self._keys[key]
        self.posts.append(text)
        post_id = f"P{len(self.posts)}"
        if key is not None:
            self._keys[key] = post_id
        return post_id


class PosterDied(BaseException):
    """The process died right after the feed applied the post, before anything was recorded.

    A death, not a transport failure (which the worker reports as ``EffectAmbiguous``).
    """


@dataclass
class World:
    feed: Feed = field(default_factory=Feed)
    calls: list[str] = field(default_factory=list)
    pause_on: str | None = None
    paused: asyncio.Event = field(default_factory=asyncio.Event)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    die_after_post: bool = False


def revenue(text: str) -> str:
    m = re.search(r"(\d+\.\d) million", text)
    return m.group(1) if m else "?"


def build(backend: LangGraphBackend, world: World) -> tuple[Any, Any]:
    @outlive_task(step=lambda section, **_: section, external=("section",))  # was: @task
    async def summarise(section: str, text: str) -> str:        # inputs declared = the key
        world.calls.append(text)
        if text == world.pause_on and not world.paused.is_set():
            world.paused.set()
            await world.wake.wait()
        return text.strip()

    def send(key: str | None, payload: dict[str, str]) -> Receipt:
        seen = world.feed.seen(key)
        post_id = world.feed.post(payload["text"], key=key)     # the key goes to the receiver
        if world.die_after_post:
            world.die_after_post = False
            raise PosterDied(post_id)
        return Receipt(effect_id=post_id, duplicate=seen, key=key)

    @entrypoint(checkpointer=backend.checkpointer)              # the same database as the ledger
    async def digest_workflow(report: dict[str, str]) -> str:
        summaries = [await summarise(section=k, text=report[k]) for k in sorted(report)]
        cand = await current_worker().candidate({"digest": " ".join(summaries)})
        return cand.digest                                      # finished, not yet accepted

    @entrypoint(checkpointer=backend.checkpointer)
    async def announce_workflow(accepted: dict[str, str]) -> str:
        receipt = await current_worker().effect(
            f"announce:{WORK}:{accepted['digest']}",             # keyed by operation
            {"text": f"Q3 digest: {accepted['text']}"}, send)
        return receipt.effect_id

    return digest_workflow, announce_workflow


async def seed_situation(url: str) -> dict[str, Any]:
    backend = await outlive.open_backend(url)
    assert isinstance(backend, LangGraphBackend)
    try:
        world = World(pause_on=V1["s3"])
        digest_wf, announce_wf = build(backend, world)
        ctl = Controller(backend, clock=lambda: 0)
        await ctl.open_work(WORK)
        await ctl.publish(WORK, "v1", V1)
        # Attempt #1 is admitted (written down before dispatch) and goes silent in section 3.
        w1 = Worker(backend, await ctl.admit(WORK), V1)
        await w1.start()
        a = asyncio.create_task(run(digest_wf, V1, worker=w1))
        await world.paused.wait()
        # The corrected report arrives; #1 is unknown (not failed); #2 is admitted on v2.
        await ctl.publish(WORK, "v2", V2)
        await backend.execute(WORK, outlive.ledger.MarkUnknown(attempt=1, at=5))
        w2 = Worker(backend, await ctl.admit(WORK), V2)
        await w2.start()
        digest = await run(digest_wf, V2, worker=w2)
        accepted = await ctl.assess(WORK, digest, CONTRACT, lambda c, v: (True, "complete"))
        cand = (await ctl.state(WORK)).candidate(digest)
        assert cand is not None
        post = {"digest": digest, "text": cand.content["digest"]}
        world.die_after_post = True
        try:
            await run(announce_wf, post, worker=w2)
        except PosterDied:
            # #2 died after the feed applied the post: #3 settles the open intent, same key.
            await backend.execute(WORK, outlive.ledger.MarkUnknown(attempt=2, at=13))
            w3 = Worker(backend, await ctl.admit(WORK), V2)
            await w3.start()
            assert [e.op_key for e in w3.open_effects()] == [f"announce:{WORK}:{digest}"]
            await run(announce_wf, post, worker=w3)
        # Attempt #1 wakes up: its next write is refused, and it stops.
        world.wake.set()
        stale: str = "not refused"
        try:
            await a
        except outlive.StaleOwner:
            stale = "refused (StaleOwner)"
        dep = await ctl.dependable(WORK, StrictCurrent())
        assert dep is not None
        return {"calls": len(world.calls), "posts": list(world.feed.posts),
                "accepted_for": accepted.version, "late_worker": stale,
                "newsletter_quotes": revenue(dep.content["digest"])}
    finally:
        await backend.close()


async def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        out = await seed_situation(f"langgraph+sqlite:///{d}/after.db")
    print(f"model calls: {out['calls']}")
    for p in out["posts"]:
        print(f"posted: {p}")
    print(f"accepted for: {out['accepted_for']}; late worker: {out['late_worker']}")
    print(f"newsletter quotes: {out['newsletter_quotes']} million")


if __name__ == "__main__":
    asyncio.run(main())
