"""What the backend, the fenced savers and the graph-side helpers share (private)."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Literal

from langchain_core.runnables import RunnableConfig

Durability = Literal["sync", "async", "exit"]
DURABILITIES: tuple[Durability, ...] = ("sync", "async", "exit")

#: True while a step body is being called from inside a running graph (an ``outlive_task`` or
#: ``outlive_node``): ``run_step`` must then not start a second invocation.
INSIDE_TASK: ContextVar[bool] = ContextVar("outlive_langgraph_inside_task", default=False)

#: Keys added to the user's ``configurable``: plain scalars, so LangGraph also copies them into
#: every checkpoint's metadata (each checkpoint names the attempt that wrote it).
OWNER_KEYS = ("outlive_work", "outlive_attempt", "outlive_token")


def owner_of(config: RunnableConfig | None) -> tuple[str, int, int] | None:
    """(work, attempt, token) a checkpoint write was made for, or None (not an outlive attempt)."""
    conf = (config or {}).get("configurable") or {}
    work, attempt, token = (conf.get(k) for k in OWNER_KEYS)
    if work is None or attempt is None or token is None:
        return None
    return str(work), int(attempt), int(token)
