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
from typing import Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.func import entrypoint, task
from langgraph.graph import END, START, StateGraph

import outlive
from outlive import Controller, Worker
from outlive import ledger as L
from outlive_langgraph import LangGraphBackend, current_worker, outlive_task, run

from ._q3 import V1, V2, first_attempt


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
        snapshot = await digest.aget_state(config)
        assert snapshot.values == {"revenue": V1["s2"]}, "the thread now shows the stale 4.1 M"
        chain = [t async for t in b.checkpointer.alist(config)]
        parents = Counter(t.parent_config["configurable"]["checkpoint_id"]
                          for t in chain if t.parent_config)
        assert max(parents.values()) >= 2, "two checkpoints share one parent: the chain forked"
    finally:
        await b.close()


async def test_the_same_program_on_outlive_refuses_the_late_writer(tmp_path: Path) -> None:
    b = await outlive.open_backend(f"langgraph+sqlite:///{tmp_path}/lg.db")
    assert isinstance(b, LangGraphBackend)
    held, release = asyncio.Event(), asyncio.Event()
    try:
        @outlive_task(step=lambda section, **_: section, external=("section",))
        async def summarise(section: str, text: str) -> str:
            if text == V1["s3"] and not held.is_set():
                held.set()
                await release.wait()
            return text

        @entrypoint(checkpointer=b.checkpointer)
        async def digest(report: dict[str, str]) -> str:
            parts = [await summarise(section=k, text=v) for k, v in report.items()]
            worker = current_worker()
            return (await worker.candidate(await worker.assemble({"revenue": parts[1]}))).digest

        ctl, w1 = await first_attempt(b)
        stale = asyncio.create_task(run(digest, V1, worker=w1))
        await asyncio.wait_for(held.wait(), 10)
        await ctl.publish("q3", "v2", V2)
        await b.execute("q3", Controller(b).stamp(L.MarkUnknown(attempt=1, at=5)))
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


class Draft(TypedDict, total=False):
    report: str
    draft: str


async def test_a_paused_attempt_cannot_fork_the_users_thread(lg_url: str) -> None:
    """The fence is inside LangGraph's own writes: the woken attempt's plain node (no outlive
    step at all) finishes, and its ``put_writes``/``put`` are refused with ``StaleOwner``."""
    await paused_attempt_cannot_fork(lg_url)


async def paused_attempt_cannot_fork(url: str) -> None:
    """#1 paused in a plain node, #2 runs on the same thread, #1 wakes: through the saver the
    backend hands out by default (``backend.checkpointer``), #1's writes are refused."""
    b = await outlive.open_backend(url)
    assert isinstance(b, LangGraphBackend)
    held, release = asyncio.Event(), asyncio.Event()
    try:
        async def draft(state: Draft) -> Draft:   # the user's own node, not an outlive step
            if state["report"] == "v1" and not held.is_set():
                held.set()
                await release.wait()
            return {"draft": f"digest of {state['report']}"}

        g = StateGraph(Draft)
        g.add_node(draft)
        g.add_edge(START, "draft")
        g.add_edge("draft", END)
        graph = g.compile(checkpointer=b.checkpointer)

        ctl, w1 = await first_attempt(b)
        thread: RunnableConfig = {"configurable": {"thread_id": "q3-report"}}
        stale = asyncio.create_task(run(graph, {"report": "v1"}, worker=w1, config=thread))
        await asyncio.wait_for(held.wait(), 10)
        await ctl.publish("q3", "v2", V2)
        await b.execute("q3", Controller(b).stamp(L.MarkUnknown(attempt=1, at=5)))
        w2 = Worker(b, await ctl.admit("q3"), V2)
        await w2.start()
        assert (await run(graph, {"report": "v2"}, worker=w2, config=thread))["draft"] == \
            "digest of v2"
        release.set()
        with pytest.raises(outlive.StaleOwner):
            await stale
        snapshot = await graph.aget_state(thread)
        assert snapshot.values["draft"] == "digest of v2", "the thread still shows #2's state"
        history = [t async for t in b.checkpointer.alist(thread)]
        parents = Counter(t.parent_config["configurable"]["checkpoint_id"]
                          for t in history if t.parent_config)
        assert max(parents.values()) == 1, "no two checkpoints share a parent: no fork"
        # Each checkpoint names the attempt that wrote it (the config's scalars reach metadata).
        writers = {t.metadata.get("outlive_attempt") for t in history}
        assert writers == {1, 2}
        assert all(t.metadata.get("outlive_attempt") == 2 for t in history
                   if t.metadata.get("source") == "loop" and t.metadata.get("step", 0) >= 1)
    finally:
        await b.close()


async def test_the_users_own_saver_is_fenced_too(tmp_path: Path) -> None:
    """``backend.fence(saver)``: the user's own AsyncSqliteSaver, checked against the ledger."""
    b = await outlive.open_backend("langgraph+memory://")
    assert isinstance(b, LangGraphBackend)
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "mine.db")) as mine:
        saver = b.fence(mine)

        async def draft(state: Draft) -> Draft:
            return {"draft": state["report"]}

        g = StateGraph(Draft)
        g.add_node(draft)
        g.add_edge(START, "draft")
        graph = g.compile(checkpointer=saver)
        ctl, w1 = await first_attempt(b, start=False)
        thread: RunnableConfig = {"configurable": {"thread_id": "mine"}}
        assert (await run(graph, {"report": "a"}, worker=w1, config=thread))["draft"] == "a"
        await b.execute("q3", Controller(b).stamp(L.MarkUnknown(attempt=1, at=5)))
        await ctl.admit("q3")
        before = [t async for t in mine.alist(thread)]
        with pytest.raises(outlive.StaleOwner):
            await run(graph, {"report": "b"}, worker=w1, config=thread)
        assert [t async for t in mine.alist(thread)] == before, "nothing written"
    await b.close()
