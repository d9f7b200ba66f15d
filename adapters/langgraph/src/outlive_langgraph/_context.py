"""What the backend, the fenced savers and the graph-side helpers share (private)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langgraph._internal._constants import (
    CONFIG_KEY_CHECKPOINT_MAP,
    CONFIG_KEY_READ,
    CONFIG_KEY_TASK_ID,
    INTERRUPT,
    NS_SEP,
    RESUME,
)
from langgraph.checkpoint.base import WRITES_IDX_MAP
from langgraph.config import get_config
from langgraph.pregel._algo import PregelTaskWrites, task_path_str

from outlive import Worker
from outlive import ledger as L

Durability = Literal["sync", "async", "exit"]
DURABILITIES: tuple[Durability, ...] = ("sync", "async", "exit")

#: True while a step body is being called from inside a running graph (an ``outlive_task`` or
#: ``outlive_node``): ``run_step`` must then not start a second invocation.
INSIDE_TASK: ContextVar[bool] = ContextVar("outlive_langgraph_inside_task", default=False)

#: Set by :func:`~outlive_langgraph.node_step` around its step: the config of the running node
#: the step is inside (its owner, saver and durability say whether the journal entry may ride
#: the node's own save). Reset inside the step's body: steps the body runs are not this one.
IN_NODE: ContextVar[RunnableConfig | None] = ContextVar("outlive_langgraph_in_node", default=None)

#: Keys added to the user's ``configurable``: plain scalars, so LangGraph also copies them into
#: every checkpoint's metadata (each checkpoint names the attempt that wrote it).
OWNER_KEYS = ("outlive_work", "outlive_attempt", "outlive_token")


#: The Worker object itself in ``configurable`` ("__" keys never reach checkpoint metadata).
WORKER_KEY = "__outlive_worker"


def worker_of(config: RunnableConfig | None) -> Worker | None:
    found = ((config or {}).get("configurable") or {}).get(WORKER_KEY)
    return found if isinstance(found, Worker) else None


async def note_wait(config: RunnableConfig, writes: Any) -> None:
    """LangGraph saves a person's wait (``interrupt()``) or its answer (``Command(resume=...)``)
    for an outlive attempt: record ``waiting`` / ``running`` in the ledger first.

    Called by every fenced saver before it writes a ``put_writes`` of LangGraph's special
    channels, so that every way of invoking the graph (``ainvoke`` with
    ``attempt_config``, ``run``, ``astream``) records the wait, whatever the durability. A wait
    also keeps the attempt's secret where the graph's database keeps it (see
    ``LangGraphBackend.record_wait``): a person may answer from any process.
    """
    worker = worker_of(config)
    if worker is None:
        return
    asked = next((v for c, v in writes if c == INTERRUPT), None)
    if asked is not None:
        first = getattr(asked[0], "value", asked[0]) if isinstance(asked, (list, tuple)) \
            and asked else asked
        reason = f"interrupt: {first if isinstance(first, str) else repr(first)}"[:200]
        record = getattr(worker.backend, "record_wait", None)
        if record is not None:
            await record(worker, reason)
        else:
            await worker.wait(reason)
    elif any(c == RESUME for c, _ in writes):
        att = worker.attempt
        await worker.backend.execute(worker.work_id, L.Resume(
            attempt=att.number, token=att.token, at=worker.clock(), secret=att.secret))
        worker.waits = None


def is_special(writes: Any) -> bool:
    """Whether ``writes`` include one of LangGraph's special channels (errors, interrupts,
    resumes, scheduled tasks): never merged with a journal entry."""
    for w in writes:    # (a loop, not any() over a generator: this runs on every task's save)
        if w[0] in WRITES_IDX_MAP:
            return True
    return False


def owner_of(config: RunnableConfig | None) -> tuple[str, int, int] | None:
    """(work, attempt, token) a checkpoint write was made for, or None (not an outlive attempt)."""
    conf = (config or {}).get("configurable") or {}
    # (three lookups, not a generator over OWNER_KEYS: this runs a few times a superstep)
    work, attempt, token = conf.get("outlive_work"), conf.get("outlive_attempt"), \
        conf.get("outlive_token")
    if work is None or attempt is None or token is None:
        return None
    return str(work), int(attempt), int(token)


@dataclass(frozen=True)
class TaskWrite:
    """Where LangGraph will save the running task's result, predicted from inside the task.

    LangGraph saves a finished task's writes with ``put_writes(config, writes, task_id,
    task_path)``, keyed by (thread, checkpoint namespace, checkpoint, task id). A fenced saver
    can write that row in the same transaction as the step's journal entry and skip LangGraph's
    own call when it comes with exactly this place and value (:meth:`matches`); anything else
    is written as usual and the predicted row removed in that write's transaction.
    """

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    task_path: str

    def matches(self, config: RunnableConfig, task_path: str) -> bool:
        conf = config.get("configurable") or {}
        return (str(conf.get("thread_id")), conf.get("checkpoint_ns", ""),
                conf.get("checkpoint_id"), task_path) == \
            (self.thread_id, self.checkpoint_ns, self.checkpoint_id, self.task_path)


def running_task_id() -> str | None:
    """LangGraph's id of the running task (None outside one)."""
    try:
        task_id = (get_config().get("configurable") or {}).get(CONFIG_KEY_TASK_ID)
    except RuntimeError:
        return None
    return task_id if isinstance(task_id, str) else None


def running_task_write() -> TaskWrite | None:
    """The running task's :class:`TaskWrite`, or None when it cannot be told for sure.

    Only a task called from a node of a root graph is predicted (its namespace is
    ``node:<id>|task:<id>``; LangGraph saves it under the root namespace ``""`` and the
    checkpoint the task was scheduled in). Reads LangGraph's config keys of the 1.x line.
    """
    try:
        conf = get_config().get("configurable") or {}
    except RuntimeError:
        return None
    task_id = conf.get(CONFIG_KEY_TASK_ID)
    ns = conf.get("checkpoint_ns")
    checkpoint_id = (conf.get(CONFIG_KEY_CHECKPOINT_MAP) or {}).get("")
    read = conf.get(CONFIG_KEY_READ)
    if not isinstance(task_id, str) or not isinstance(ns, str) or len(ns.split(NS_SEP)) != 2 \
            or not isinstance(checkpoint_id, str) or not isinstance(read, functools.partial):
        return None
    path = next((a.path for a in read.args if isinstance(a, PregelTaskWrites)), None)
    if path is None:
        return None
    return TaskWrite(thread_id=str(conf.get("thread_id")), checkpoint_ns="",
                     checkpoint_id=checkpoint_id, task_id=task_id, task_path=task_path_str(path))


@dataclass
class PendingTaskWrite:
    """Set by a task body while its step runs: the write LangGraph will make when it returns.

    The backend's ``run_and_record`` commits ``make(call, result)`` as that write in the step's
    journal transaction and appends it to ``value``; the body then returns that very object, so
    the saver recognises LangGraph's own ``put_writes`` of it as already committed.
    """

    step: str
    slot: TaskWrite | None
    make: Callable[[Any, Any], Any]
    value: list[Any]
    #: Set to the envelope once the journal write that carries it is sent (None: the task
    #: returns after the commit). The body may return it then; the caller awaits the commit.
    sent: asyncio.Future[Any] | None = None


async def first_of(signal: asyncio.Future[Any], step: asyncio.Task[Any]) -> None:
    """Wait until ``signal`` is set or ``step`` (a step run in a task of its own) ends, whichever
    comes first: a step may hand LangGraph its result once its journal write is on its way.
    Cancelled meanwhile, the step is cancelled too: nobody would await it."""
    try:
        await asyncio.wait((signal, step), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        step.cancel()
        raise


#: The running outlive task's pending write (None outside a task body, and inside its step's body).
PENDING_TASK_WRITE: ContextVar[PendingTaskWrite | None] = ContextVar(
    "outlive_langgraph_pending_task_write", default=None)
