"""BEFORE: an ordinary LangGraph Functional API workflow, as a LangGraph user writes it today.

Summarise each section of a report with a model call (``@task``), assemble a digest, post one
announcement to an external feed (``@task``), all in an ``@entrypoint`` with a SQLite checkpointer. A
newsletter later reads the thread's latest state and quotes the revenue figure.

Run it: ``python examples/porting_langgraph/before.py``. It replays the article's situation:
worker A pauses while summarising section 3, the report is corrected (4.1 -> 4.7 million), an
operator starts worker B on the thread, B's process dies just after the feed applied its post and
is resumed, and A wakes up and finishes. Nothing in LangGraph refuses A.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.func import entrypoint, task

V1 = {"s1": "A steady quarter for the group.", "s2": "Revenue was 4.1 million.",
      "s3": "Costs fell by 3 percent.", "s4": "The outlook is cautious."}
V2 = {**V1, "s2": "Revenue was 4.7 million."}


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


class PosterDied(Exception):
    """The process died right after the feed applied the post, before anything was recorded."""


@dataclass
class World:
    """What the stand-in model and the feed do, so a test can pause, kill and count."""

    feed: Feed = field(default_factory=Feed)
    calls: list[str] = field(default_factory=list)
    pause_on: str | None = None          # a section text to hold the first time it is seen
    paused: asyncio.Event = field(default_factory=asyncio.Event)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    die_after_post: bool = False


def revenue(text: str) -> str:
    m = re.search(r"(\d+\.\d) million", text)
    return m.group(1) if m else "?"


def build(saver: BaseCheckpointSaver[Any], world: World) -> Any:
    @task
    async def summarise(text: str) -> str:
        world.calls.append(text)
        if text == world.pause_on and not world.paused.is_set():
            world.paused.set()
            await world.wake.wait()  # the worker is paused, not dead
        return text.strip()  # stand-in for the model call (each section is one sentence)

    @task
    async def post_announcement(digest: str) -> str:
        post_id = world.feed.post(f"Q3 digest: {digest}")  # no idempotency key
        if world.die_after_post:
            world.die_after_post = False
            raise PosterDied(post_id)
        return post_id

    @entrypoint(checkpointer=saver)
    async def digest_workflow(report: dict[str, str]) -> dict[str, str]:
        summaries = [await summarise(report[k]) for k in sorted(report)]
        digest = " ".join(summaries)
        post_id = await post_announcement(digest)
        return {"digest": digest, "post": post_id}

    return digest_workflow


async def seed_situation(db: str) -> dict[str, Any]:
    async with AsyncSqliteSaver.from_conn_string(db) as saver:
        world = World(pause_on=V1["s3"])
        wf = build(saver, world)
        config: RunnableConfig = {"configurable": {"thread_id": "digest/q3-report"}}
        # Worker A starts on report v1 and goes silent in section 3.
        a = asyncio.create_task(wf.ainvoke(V1, config))
        await world.paused.wait()
        # The corrected report arrives; an operator restarts the job on the same thread.
        world.die_after_post = True
        try:
            await wf.ainvoke(V2, config)
        except PosterDied:
            # B's process died after the feed applied its post: resume the thread, as the
            # LangGraph docs suggest (completed tasks are restored, the failed one reruns).
            await wf.ainvoke(None, config)
        # Worker A wakes up and carries on as if nothing happened.
        world.wake.set()
        await a
        latest = (await wf.aget_state(config)).values
        return {"calls": len(world.calls), "posts": list(world.feed.posts),
                "newsletter_quotes": revenue(latest["digest"])}


async def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        out = await seed_situation(f"{d}/before.db")
    print(f"model calls: {out['calls']}")
    for p in out["posts"]:
        print(f"posted: {p}")
    print(f"newsletter quotes: {out['newsletter_quotes']} million")


if __name__ == "__main__":
    asyncio.run(main())
