"""What LangGraph lets through on its own, and what outlive adds.

Two invocations on one thread (a paused worker and its successor) both succeed: the checkpoint
chain forks and the *late* writer's checkpoint becomes the thread's latest state — LangGraph has
no owner token and its savers have no compare-and-set. The same program on outlive refuses the
late worker's writes with ``StaleOwner``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.func import entrypoint, task

import outlive
from outlive import Controller, Worker
from outlive import ledger as L
from outlive_langgraph import LangGraphBackend, current_worker, outlive_task, run

from ._q3 import V1, V2


async def test_plain_langgraph_forks_and_the_stale_writer_wins(tmp_path: Path) -> None:
    b = await outlive.open_backend(f"langgraph+sqlite:///{tmp_path}/lg.db")
    assert isinstance(b, LangGraphBackend)
    held, release = asyncio.Event(), asyncio.Event()
    calls: list[str] = []
    armed = [False]
    try:
        @task
        async def summarise(section: str, text: str) -> str:
            calls.append(section)
            if armed[0] and text == V1["s3"] and not held.is_set():
                held.set()
                await release.wait()
            return text

        @entrypoint(checkpointer=b.checkpointer)
        async def digest(report: dict[str, str]) -> dict[str, str]:
            parts = [await summarise(k, v) for k, v in report.items()]
            return {"revenue": parts[1]}

        config: RunnableConfig = {"configurable": {"thread_id": "digest/q3-report"}}
        await digest.ainvoke(V1, config)  # an earlier, finished run on this thread
        armed[0] = True
        stale = asyncio.create_task(digest.ainvoke(V1, config))
        await asyncio.wait_for(held.wait(), 10)
        fresh = await digest.ainvoke(V2, config)  # the successor, on the corrected report
        assert fresh == {"revenue": V2["s2"]}
        release.set()
        late = await stale  # no error: nothing told the paused worker it lost ownership
        assert late == {"revenue": V1["s2"]}
        snapshot = await asyncio.to_thread(digest.get_state, config)
        assert snapshot.values == {"revenue": V1["s2"]}, "the thread now shows the stale 4.1 M"
        parents = Counter(t.parent_config["configurable"]["checkpoint_id"]
                          for t in b.checkpointer.list(config) if t.parent_config)
        assert max(parents.values()) >= 2, "two checkpoints share one parent: the chain forked"
    finally:
        await b.close()


async def test_the_same_program_on_outlive_refuses_the_late_writer(tmp_path: Path) -> None:
    b = await outlive.open_backend(f"langgraph+sqlite:///{tmp_path}/lg.db")
    assert isinstance(b, LangGraphBackend)
    held, release = asyncio.Event(), asyncio.Event()
    try:
        @outlive_task(step=lambda section, **_: section)
        async def summarise(section: str, text: str) -> str:
            if text == V1["s3"] and not held.is_set():
                held.set()
                await release.wait()
            return text

        @entrypoint(checkpointer=b.checkpointer)
        async def digest(report: dict[str, str]) -> str:
            parts = [await summarise(section=k, text=v) for k, v in report.items()]
            return (await current_worker().candidate({"revenue": parts[1]})).digest

        ctl = Controller(b, clock=lambda: 0)
        await ctl.open_work("q3")
        await ctl.publish("q3", "v1", V1)
        w1 = Worker(b, await ctl.admit("q3"), V1)
        await w1.start()
        stale = asyncio.create_task(run(digest, V1, worker=w1))
        await asyncio.wait_for(held.wait(), 10)
        await ctl.publish("q3", "v2", V2)
        await b.execute("q3", L.MarkUnknown(attempt=1, at=5))
        w2 = Worker(b, await ctl.admit("q3"), V2)
        await w2.start()
        good = await run(digest, V2, worker=w2)
        release.set()
        refused: Any = None
        try:
            await stale
        except outlive.StaleOwner as exc:
            refused = exc
        assert refused is not None, "the late writer is fenced"
        st = await b.load("q3")
        assert st is not None
        assert [c.digest for c in st.candidates] == [good]
        assert st.stale_writes_applied == 0
    finally:
        await b.close()
