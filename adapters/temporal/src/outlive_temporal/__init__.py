"""outlive on Temporal.

Two shapes. **Inside the engine** (the default for Temporal users): your ``@workflow.defn`` class
extends :class:`Work` and is the work's ledger; :meth:`Attempt.step` runs your own activities on
your own workers; :class:`OutlivePlugin` registers outlive on your client and workers; Temporal's
heartbeat timeouts drive takeover. **Client-driven** (``temporal://HOST:PORT``): the ledger is an
entity workflow and a session outside Temporal (a long-running agent process) drives
``Controller``/``Worker`` through :class:`TemporalBackend`.
"""

from __future__ import annotations

from typing import Any

from ._backend import StepReport, TemporalBackend, workflow_id
from ._dispatch import TemporalDispatcher
from ._engine import Attempt, Work, rule_from_text, rule_to_text
from ._errors import typed_error
from ._handle import AttemptRef, WorkHandle, current_attempt, start_work
from ._plugin import OutlivePlugin
from ._store import BlobStore, FileStore, StoreCodec

__all__ = ["Attempt", "AttemptRef", "BlobStore", "DevServer", "FileStore", "OutlivePlugin",
           "StepReport", "StoreCodec", "TemporalBackend", "TemporalDispatcher", "Work", "WorkHandle",
           "current_attempt", "rule_from_text", "rule_to_text", "start_work", "typed_error",
           "workflow_id"]


def __getattr__(name: str) -> Any:
    # Lazy, so ``python -m outlive_temporal.devserver`` does not import itself twice.
    if name == "DevServer":
        from .devserver import DevServer

        return DevServer
    raise AttributeError(name)
