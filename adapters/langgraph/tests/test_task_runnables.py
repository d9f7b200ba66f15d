"""What an outlive LangGraph task costs beyond LangGraph's own: built once, no extra asyncio task.

LangGraph builds a task's runnable (signature inspection, a channel writer) on every call unless
it can find the task's function by module and qualified name; then it keeps the one it built.
A module-level ``outlive_task`` is found that way.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.func import entrypoint, task
from langgraph.pregel._call import get_runnable_for_task

import outlive
from outlive import Controller, Worker
from outlive_langgraph import outlive_task, persist_for, run


@outlive_task(external=("i",))
async def module_step(i: int) -> dict[str, int]:
    return {"i": i}


def test_a_module_level_outlive_task_is_built_once() -> None:
    body = module_step._task_body
    assert get_runnable_for_task(body) is get_runnable_for_task(body)


def test_a_step_defined_in_a_function_is_built_per_call_as_langgraph_does() -> None:
    @outlive_task(external=("i",))
    async def local_step(i: int) -> dict[str, int]:
        return {"i": i}

    body = local_step._task_body
    assert get_runnable_for_task(body) is not get_runnable_for_task(body)


@task
async def raw_module_step(i: int) -> dict[str, int]:
    return {"i": i}


async def test_under_exit_a_step_costs_no_more_asyncio_tasks_than_a_raw_task(
        tmp_path: Path) -> None:
    """Progress saved at the end (``"exit"``) writes no journal entry per step, so nothing is
    sent or waited for: the step runs in LangGraph's task itself. Before, it ran in a task of
    its own that the body then waited on (one more task and its wait per step: 1.2x raw)."""
    b = await outlive.open_backend(f"langgraph+sqlite:///{tmp_path}/lg.db")
    try:
        ctl = Controller(b, clock=lambda: 0)
        await ctl.open_work("w")
        await ctl.publish("w", "v1", {"doc": "x"})
        worker = Worker(b, await ctl.admit("w"), None, clock=lambda: 1)
        worker.persist = persist_for("exit")
        await worker.start()
        loop = asyncio.get_running_loop()
        made: list[int] = [0]

        def counting(lp: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
            made[0] += 1
            return asyncio.Task(coro, loop=lp, **kw)

        @entrypoint(checkpointer=InMemorySaver())
        async def raw_prog(n: int) -> int:
            for i in range(n):
                await raw_module_step(i)
            return n

        @entrypoint(checkpointer=b.checkpointer)
        async def outlive_prog(n: int) -> int:
            for i in range(n):
                await module_step(i)
            return n

        async def tasks(n: int, call: Any) -> int:
            made[0] = 0
            loop.set_task_factory(counting)   # type: ignore[arg-type]
            try:
                await call(n)
            finally:
                loop.set_task_factory(None)
            return made[0]

        cfg = {"configurable": {"thread_id": "raw"}}
        raw = [await tasks(n, lambda n: raw_prog.ainvoke(n, cfg, durability="exit"))
               for n in (10, 20)]
        ours = [await tasks(n, lambda n: run(outlive_prog, n, worker=worker, durability="exit",
                                             config={"configurable": {"thread_id": f"o{n}"}}))
                for n in (10, 20)]
        await worker.finish()
        per_step_raw, per_step_ours = (raw[1] - raw[0]) / 10, (ours[1] - ours[0]) / 10
        assert per_step_raw >= 1   # LangGraph runs each task in an asyncio task of its own
        assert per_step_ours == per_step_raw, (raw, ours)
        assert len(worker.steps) == 20   # the first ten were restored for the second run
    finally:
        await b.close()
