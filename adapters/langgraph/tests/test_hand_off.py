"""``langgraph+sqlite``'s calls into its connection's thread: fewer.

The saver's reads at the start of every invocation (``aget_tuple``) are one call in aiosqlite's
thread, answering what LangGraph's own ``AsyncSqliteSaver.aget_tuple`` answers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.func import entrypoint, task
from langgraph.types import interrupt

import outlive
from outlive_langgraph import FencedAsyncSqliteSaver


async def _open(tmp_path: Path) -> tuple[outlive.Backend, FencedAsyncSqliteSaver]:
    b = await outlive.open_backend(f"langgraph+sqlite:///{tmp_path}/lg.db")
    saver = b.checkpointer  # type: ignore[attr-defined]
    assert isinstance(saver, FencedAsyncSqliteSaver)
    return b, saver


def _plain(t: CheckpointTuple | None) -> Any:
    if t is None:
        return None
    return (t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)


async def _threads(saver: FencedAsyncSqliteSaver) -> None:
    """Two threads with several checkpoints each, one stopped at an interrupt (pending writes)."""
    @task
    async def double(x: int) -> int:
        return 2 * x

    @entrypoint(checkpointer=saver)
    async def prog(n: int) -> int:
        total = sum([await double(i) for i in range(n)])
        return total + int(interrupt("more?") if n > 2 else 0)

    await prog.ainvoke(2, {"configurable": {"thread_id": "t-done"}})
    await prog.ainvoke(3, {"configurable": {"thread_id": "t-waiting"}})


async def test_aget_tuple_answers_what_the_savers_own_does(tmp_path: Path) -> None:
    b, saver = await _open(tmp_path)
    try:
        await _threads(saver)
        configs: list[RunnableConfig] = [{"configurable": {"thread_id": "nobody"}},
                                         {"configurable": {"thread_id": "t-done", "checkpoint_ns": "x"}}]
        for thread in ("t-done", "t-waiting"):
            configs.append({"configurable": {"thread_id": thread}})
            async for t in saver.alist({"configurable": {"thread_id": thread}}):
                configs.append(t.config)
        configs.append({"configurable": {"thread_id": "t-done", "checkpoint_id": "no-such-id"}})
        assert len(configs) > 6
        seen_writes = False
        for config in configs:
            mine = await saver.aget_tuple(config)
            theirs = await AsyncSqliteSaver.aget_tuple(saver, config)
            assert _plain(mine) == _plain(theirs), config
            seen_writes = seen_writes or bool(mine and mine.pending_writes)
        assert seen_writes  # the comparison covered pending writes too
    finally:
        await b.close()


async def test_aget_tuple_is_one_call_in_the_connection_thread(tmp_path: Path) -> None:
    b, saver = await _open(tmp_path)
    try:
        await _threads(saver)
        calls: list[Any] = []
        run = saver.conn._execute

        async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
            calls.append(fn)
            return await run(fn, *args, **kwargs)

        saver.conn._execute = counted  # type: ignore[method-assign]
        got = await saver.aget_tuple({"configurable": {"thread_id": "t-waiting"}})
        assert got is not None and got.pending_writes
        assert len(calls) == 1
        await saver.adelete_thread("t-done")
        assert len(calls) == 2
        assert await saver.aget_tuple({"configurable": {"thread_id": "t-done"}}) is None
        assert [t async for t in saver.alist({"configurable": {"thread_id": "t-done"}})] == []
        assert await saver.aget_tuple({"configurable": {"thread_id": "t-waiting"}}) is not None
    finally:
        await b.close()
