"""Context shared by the backend and the Functional-API helpers (private)."""

from __future__ import annotations

from contextvars import ContextVar

#: True while a step body is being called from inside a running ``@entrypoint`` as a ``@task``
#: (the engine-orchestrated shape): ``run_step`` must then not start a second invocation.
INSIDE_TASK: ContextVar[bool] = ContextVar("outlive_langgraph_inside_task", default=False)
