"""outlive on Temporal: ``temporal://HOST:PORT[/NAMESPACE]``.

The ledger of each work is an entity workflow whose updates run the core ledger in a validator;
steps are activities that Temporal never retries (outlive admits successors instead).
"""

from __future__ import annotations

from .backend import StepReport, TemporalBackend, workflow_id
from .devserver import DevServer

__all__ = ["DevServer", "StepReport", "TemporalBackend", "workflow_id"]
