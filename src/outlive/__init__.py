"""outlive: work that outlives its worker.

Five durable records, each with its own checker — an attempt written before dispatch, an
input-keyed journal, an owner token every store checks, an acceptance naming the input version
and contract it was judged for, and an effect keyed by operation — behind one API, on an embedded
SQLite ledger or on Temporal, Restate or LangGraph through adapters.
"""

from __future__ import annotations

import logging

from . import errors
from ._process import SubprocessDispatcher
from .backend import Backend, StepCall, open_backend, register_backend
from .controller import Controller
from .errors import *  # noqa: F403
from .errors import __all__ as _errors_all
from .hashing import content_hash, input_key
from .ledger import MAX_PAYLOAD_BYTES
from .receiver import MemoryReceiver, SqliteReceiver
from .records import (
    Acceptance,
    Attempt,
    AttemptError,
    AttemptState,
    Candidate,
    Contract,
    Effect,
    EffectState,
    InputVersion,
    JournalEntry,
    Part,
    Policy,
    Receipt,
    WorkState,
)
from .rules import (
    Dependable,
    LatestAccepted,
    LatestFinished,
    PinnedVersion,
    Requires,
    StrictCurrent,
)
from .runtime import Kind, NonRetryable, RetryPolicy, Runtime, WorkHandle, WorkStatus
from .supervisor import (
    Assignment,
    AttemptContext,
    Completed,
    Dispatcher,
    Lease,
    Supervisor,
    TaskDispatcher,
    WorkDefinition,
)
from .worker import KEEP, External, ResultOf, Worker

__version__ = "0.1.0"

# A library leaves its logs to the application: without this, Python's last-resort handler
# prints every refused command (WARNING) to stderr of programs that never configured logging.
logging.getLogger("outlive").addHandler(logging.NullHandler())

__all__ = [
    "KEEP",
    "MAX_PAYLOAD_BYTES",
    "Acceptance",
    "Assignment",
    "Attempt",
    "AttemptContext",
    "AttemptError",
    "AttemptState",
    "Backend",
    "Candidate",
    "Completed",
    "Contract",
    "Controller",
    "Dependable",
    "Dispatcher",
    "Effect",
    "EffectState",
    "External",
    "InputVersion",
    "JournalEntry",
    "Kind",
    "NonRetryable",
    "RetryPolicy",
    "Runtime",
    "WorkHandle",
    "WorkStatus",
    "LatestAccepted",
    "Lease",
    "LatestFinished",
    "MemoryReceiver",
    "Part",
    "PinnedVersion",
    "Policy",
    "Receipt",
    "Requires",
    "ResultOf",
    "SqliteReceiver",
    "StepCall",
    "StrictCurrent",
    "SubprocessDispatcher",
    "Supervisor",
    "TaskDispatcher",
    "Worker",
    "WorkDefinition",
    "WorkState",
    "content_hash",
    "errors",
    "input_key",
    "open_backend",
    "register_backend",
    *_errors_all,
]
