"""A synchronous node or step runs in a thread: the loop that renews the lease stays free.

A plain ``def`` node wrapped by ``outlive_node`` (or a plain ``def`` step under ``outlive_task``)
used to run on the event loop. While it ran, nothing else on that loop did: not the worker's
lease renewal, so a live attempt whose node took longer than its lease went silent and was
taken over (issue 39). LangGraph itself runs a plain node in a thread; outlive's now does too.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypedDict

from langgraph.func import entrypoint
from langgraph.graph import END, START, StateGraph

import outlive
from outlive.records import AttemptState
from outlive.supervisor import AttemptContext, Lease, Supervisor, TaskDispatcher, WorkDefinition
from outlive_langgraph import LangGraphBackend, graph_attempt, outlive_node, outlive_task, run

from .test_resume import _worker

#: Lease: a beat every 200 ms, silence after 400 ms. The sync node lasts at least 4 beats.
LEASE = Lease(heartbeat_interval=200, missed_beats=2, start_grace=30_000)
BEATS = 4


class Review(TypedDict, total=False):
    text: str
    verdict: str


def _beats_seen_from_a_thread(backend: outlive.Backend, loop: asyncio.AbstractEventLoop,
                              work: str, wanted: int) -> int:
    """Block this (worker) thread until the ledger shows ``wanted`` more lease renewals, and
    return how many it saw. The ledger is read on the graph's loop: a loop blocked by this very
    body answers nothing, and 0 renewals are seen."""
    def beats() -> int | None:
        fut = asyncio.run_coroutine_threadsafe(backend.load(work), loop)
        try:
            st = fut.result(timeout=0.5)
        except FutureTimeout:
            fut.cancel()
            return None
        return st.attempts[-1].heartbeats if st is not None else None

    start = beats()
    if start is None:
        return 0
    seen, deadline = 0, time.monotonic() + 20
    while seen < wanted and time.monotonic() < deadline:
        time.sleep(0.05)
        now = beats()
        seen = 0 if now is None else now - start
    return seen


async def test_a_sync_node_longer_than_the_lease_is_not_taken_over(tmp_path: Any) -> None:
    url = f"langgraph+sqlite:///{tmp_path / 'lg.db'}"
    seen: list[int] = []
    async with await outlive.open_backend(url) as backend:
        assert isinstance(backend, LangGraphBackend)
        loop = asyncio.get_running_loop()

        @outlive_node(inputs=("text",))
        def review(state: Review) -> Review:            # a plain def: blocking, as users write
            seen.append(_beats_seen_from_a_thread(backend, loop, "review/1", BEATS))
            return {"verdict": state["text"].upper()}

        def build(ctx: AttemptContext) -> Any:
            g = StateGraph(Review)
            g.add_node(review)
            g.add_edge(START, "review")
            g.add_edge("review", END)
            return g.compile(checkpointer=backend.checkpointer)

        definition = WorkDefinition(
            work_id="review/1", contract=outlive.Contract(name="c", version="1", assessor="t"),
            attempt=graph_attempt(build, input=lambda ctx: {"text": ctx.inputs["text"]},
                                  candidate=lambda out: {"verdict": out["verdict"]}),
            inputs=lambda version: {"text": "ok"}, lease=LEASE)
        async with Supervisor(backend, definition, TaskDispatcher(backend)) as sup:
            await sup.publish("v1", {"text": "ok"})
            done = await asyncio.wait_for(sup.run(), 60)
        st = await backend.load("review/1")
    assert seen and seen[0] >= BEATS, "the lease was renewed while the sync node ran"
    assert st is not None and done.acceptance.version == "v1"
    assert [a.state for a in st.attempts] == [AttemptState.FINISHED], "never taken over"


async def test_a_sync_step_runs_off_the_loop(backend: outlive.Backend) -> None:
    """The same for ``outlive_task`` over a plain ``def``, inside an ``@entrypoint``."""
    assert isinstance(backend, LangGraphBackend)
    loop = asyncio.get_running_loop()
    threads: list[bool] = []

    @outlive_task
    def shout(text: str) -> str:
        try:
            asyncio.get_running_loop()
            threads.append(False)   # called on the event loop
        except RuntimeError:
            threads.append(True)
        # The loop answers a call made from here: it is not blocked by this body.
        assert asyncio.run_coroutine_threadsafe(asyncio.sleep(0, "free"), loop).result(5) == "free"
        return text.upper()

    @entrypoint(checkpointer=backend.checkpointer)
    async def program(text: str) -> str:
        return await shout(text)

    w = await _worker(backend)
    assert await run(program, "A", worker=w) == "A".upper()
    assert threads == [True]
