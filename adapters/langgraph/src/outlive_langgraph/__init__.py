"""outlive inside LangGraph: the user's graph, checkpointer and thread, with the five records.

``outlive_task`` (Functional API) and ``outlive_node`` (``StateGraph``) make a step input-keyed
and fenced; ``attempt_config(worker, config)`` adds the attempt's identity to the user's config
(the thread stays the user's); ``run``/``astream`` invoke for an attempt. The backends keep the
core ledger beside the checkpoints: ``langgraph+sqlite:///PATH`` (one SQLite file),
``langgraph+memory://``, ``langgraph+postgres://…``; ``backend.checkpointer`` is a saver whose
writes for a replaced attempt are refused, ``backend.fence(saver)`` wraps your own.
"""

from __future__ import annotations

try:
    import langgraph  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("outlive_langgraph needs LangGraph: pip install 'outlive[langgraph]'") from exc

from ._backend import (
    LangGraphBackend,
    LangGraphMemoryBackend,
    LangGraphSqliteBackend,
    step_thread_id,
)
from ._checkpoint import FencedAsyncSqliteSaver, FencedCheckpointer, may_write
from ._context import OWNER_KEYS, Durability, owner_of
from ._dispatch import graph_attempt, run_attempt
from ._engine import (
    OutliveTask,
    astream,
    attempt_config,
    begin,
    current_worker,
    durability_for,
    invoke_work,
    node_step,
    outlive_node,
    outlive_task,
    persist_for,
    rejoin,
    run,
)

__all__ = [
    "OWNER_KEYS",
    "Durability",
    "FencedAsyncSqliteSaver",
    "FencedCheckpointer",
    "LangGraphBackend",
    "LangGraphMemoryBackend",
    "LangGraphSqliteBackend",
    "OutliveTask",
    "astream",
    "attempt_config",
    "begin",
    "current_worker",
    "durability_for",
    "graph_attempt",
    "invoke_work",
    "may_write",
    "node_step",
    "outlive_node",
    "outlive_task",
    "owner_of",
    "persist_for",
    "rejoin",
    "run",
    "run_attempt",
    "step_thread_id",
]
