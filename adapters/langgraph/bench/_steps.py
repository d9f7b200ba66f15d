"""The steps of ``bench_langgraph.py``'s entrypoint measure, in a module as an application has them.

LangGraph builds a raw ``@task``'s runnable on every call, wherever it is defined; an
``outlive_task`` that LangGraph finds by its module and name is built once.
"""

from __future__ import annotations

from langgraph.func import task

from outlive_langgraph import outlive_task


@task
async def raw_step(i: int) -> dict[str, int]:
    return {"i": i}


@outlive_task(external=["i"])
async def outlive_step(i: int) -> dict[str, int]:
    return {"i": i}
