"""outlive's LangGraph tasks are built once, not on every call.

LangGraph builds a task's runnable (signature inspection, a channel writer) on every call unless
it can find the task's function by module and qualified name; then it keeps the one it built.
A module-level ``outlive_task`` is found that way.
"""

from __future__ import annotations

from langgraph.pregel._call import get_runnable_for_task

from outlive_langgraph import outlive_task


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
