"""Where the ``temporal://`` scheme resolves to (the core's lazy table names this module)."""

from __future__ import annotations

from ._backend import MAX_BATCH_STEPS, MAX_COMMAND_BYTES, StepReport, TemporalBackend, work_id_of, workflow_id
from ._config import parse_url

__all__ = ["MAX_BATCH_STEPS", "MAX_COMMAND_BYTES", "StepReport", "TemporalBackend", "parse_url",
           "work_id_of", "workflow_id"]
