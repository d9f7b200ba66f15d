"""outlive on Temporal: ``temporal://HOST:PORT[/NAMESPACE]``.

The ledger of each work is an entity workflow whose updates run the core ledger in a validator;
steps are activities that Temporal never retries (outlive admits successors instead).
"""

from __future__ import annotations

from typing import Any

from .backend import StepReport, TemporalBackend, workflow_id

__all__ = ["DevServer", "StepReport", "TemporalBackend", "workflow_id"]


def __getattr__(name: str) -> Any:
    # Lazy, so ``python -m outlive_temporal.devserver`` does not import itself twice.
    if name == "DevServer":
        from .devserver import DevServer

        return DevServer
    raise AttributeError(name)
