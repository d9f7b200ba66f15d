"""outlive on LangGraph: the five records beside LangGraph's checkpoints.

``langgraph+sqlite:///PATH`` keeps outlive's fenced, input-keyed ledger in the same SQLite file as
the SqliteSaver checkpoints; ``langgraph+memory://`` pairs an InMemorySaver with an in-process
ledger. ``outlive_task`` turns an ordinary Functional-API function into an input-keyed, fenced
step, so porting a LangGraph workflow is a few-line change.
"""

from __future__ import annotations

from .backend import (
    Durability,
    LangGraphBackend,
    LangGraphMemoryBackend,
    LangGraphSqliteBackend,
    step_thread_id,
)
from .program import (
    OutliveTask,
    current_worker,
    durability_for,
    outlive_task,
    persist_for,
    run,
)

__all__ = [
    "Durability",
    "LangGraphBackend",
    "LangGraphMemoryBackend",
    "LangGraphSqliteBackend",
    "OutliveTask",
    "current_worker",
    "durability_for",
    "outlive_task",
    "persist_for",
    "run",
    "step_thread_id",
]
