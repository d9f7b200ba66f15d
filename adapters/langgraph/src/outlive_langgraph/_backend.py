"""``langgraph+sqlite:///PATH`` and ``langgraph+memory://``: outlive's ledger beside LangGraph's checkpoints.

LangGraph restores a task's result by *position* (checkpoint, step, task name, call index) and no
saver offers compare-and-set, so neither outlive's input-keyed journal nor its fenced ledger can
be expressed with checkpoints alone. The ledger therefore lives beside the checkpoints, and is
the core's own:

* ``langgraph+sqlite``: the core SQL ledger store (tables ``outlive_works``, ``outlive_journal``)
  in the **same file** as LangGraph's ``checkpoints``/``writes`` tables, on one aiosqlite
  connection shared with an ``AsyncSqliteSaver`` (its own thread: off the event loop). The
  saver's writes for an outlive attempt check the owner token inside their own transaction
  (:mod:`._checkpoint`).
* ``langgraph+memory``: the core ``memory://`` ledger and an ``InMemorySaver`` (one process).

The graph-side shape (the user's ``@entrypoint`` or ``StateGraph`` on the user's thread) is in
:mod:`._engine`. ``run_step`` is the external-worker shape the conformance harness drives: each
``Worker.step`` body runs as the one task (the entrypoint's node) of an invocation of a one-task
program on the attempt's own thread ``outlive:<work>:<attempt>``. Either way a step counts as
journaled only when outlive's fenced write has committed: LangGraph saves task results in the
background, even under ``durability="sync"``.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, ClassVar, Protocol

import aiosqlite
from langchain_core.runnables import RunnableConfig
from langgraph._internal._constants import CONFIG_KEY_CHECKPOINTER, CONFIG_KEY_DURABILITY, NS_SEP
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.func import entrypoint
from langgraph.pregel import Pregel

from outlive import Worker
from outlive import ledger as L
from outlive._memory import MemoryBackend
from outlive.backend import Backend, StepCall
from outlive.errors import BackendUnavailable, InvalidRecord
from outlive.ledger import Command, Outcome
from outlive.records import WorkState
from outlive.sqlstore import SCHEMA, SqliteLedgerStore, sqlite_path

from ._checkpoint import (
    _RETURN,
    FencedAsyncSqliteSaver,
    FencedCheckpointer,
    QueuesEntries,
    TaskWrites,
)
from ._config import parse_url
from ._context import (
    IN_NODE,
    INSIDE_TASK,
    PENDING_TASK_WRITE,
    Durability,
    TaskWrite,
    owner_of,
    running_task_id,
)
from ._errors import database_error

__all__ = [
    "Durability",
    "LangGraphBackend",
    "LangGraphMemoryBackend",
    "LangGraphSqliteBackend",
    "step_thread_id",
]


def step_thread_id(work_id: str, attempt: int) -> str:
    """The thread of ``run_step``'s own one-task program (the external-worker shape only)."""
    return f"outlive:{work_id}:{attempt}"


#: ``run_step``'s bodies while they run, by a random key (only the key enters the checkpoint).
_BODIES: dict[str, Callable[[], Awaitable[Any]]] = {}


def _settle(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


class LangGraphBackend(Backend):
    """Shared part: the step program (one ``@entrypoint`` that runs the body) and ``run_step``."""

    #: URL options besides ``durability`` that the backend's store reads (and validates) itself.
    store_options: ClassVar[tuple[str, ...]] = ()
    #: Whether a step's journal entry and LangGraph's write of its task commit as one transaction.
    merges_task_writes: ClassVar[bool] = False

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.durability: Durability = parse_url(url, self.store_options).durability
        self._program: Pregel[Any, Any, Any, Any] | None = None
        self._secrets: dict[tuple[str, int], str] = {}

    # -- a person's wait, answered from any process ---------------------------------------------
    async def record_wait(self, worker: Worker, reason: str) -> None:
        """Record ``waiting`` for ``worker``'s attempt and keep its secret beside the graph's
        checkpoints, so that :func:`~outlive_langgraph.rejoin` in another process can carry the
        attempt on when a person answers (the first process may be long gone by then).

        The secret is kept where the thread's checkpoints are (the same database), readable by
        whoever runs the graph and never handed to a step; the ledger keeps only its hash. It
        is kept before the wait is recorded (on ``langgraph+sqlite``: in the same transaction),
        so an attempt the ledger shows waiting can always be rejoined.
        """
        att = worker.attempt
        if att.secret is not None:
            await self.keep_secret(worker.work_id, att.number, att.secret)
        await worker.wait(reason)

    async def keep_secret(self, work_id: str, attempt: int, secret: str) -> None:
        """Keep the secret of a waiting attempt (this backend: in this process's memory)."""
        self._secrets[(work_id, attempt)] = secret

    async def kept_secret(self, work_id: str, attempt: int) -> str | None:
        """The secret :meth:`keep_secret` kept for the attempt, or None."""
        return self._secrets.get((work_id, attempt))

    # -- the engine side -----------------------------------------------------------------------
    @property
    def checkpointer(self) -> BaseCheckpointSaver[Any]:
        """A fenced saver in the ledger's own database; pass it to your graph's ``compile``."""
        raise NotImplementedError

    def fence(self, saver: BaseCheckpointSaver[Any]) -> BaseCheckpointSaver[Any]:
        """Your own saver, with an outlive attempt's writes checked against this ledger first."""
        return FencedCheckpointer(saver, self)

    def _step_program(self) -> Pregel[Any, Any, Any, Any]:
        """An ``@entrypoint`` that runs the body registered under a key: one task, one node.

        The entrypoint is LangGraph's task here (its run is saved by ``put_writes`` and the
        invocation's checkpoints, like any node's); a ``@task`` inside it would be a second
        task per step (its own submission, callbacks and ``put_writes``: about a third of the
        invocation's CPU) whose durability the journal already gives. One program for every
        step (the step's name is in the invocation's input), so the attempt's thread's
        checkpoint does not grow with each step. No retry policy: a retried body would be a
        second model call the ledger never saw.
        """
        if self._program is None:
            @entrypoint(checkpointer=self.checkpointer)
            async def outlive_step(call: dict[str, str]) -> None:
                # The result reaches ``run_step`` from the body, not as the program's return:
                # a step refused at its journal entry leaves no result on the thread.
                await _BODIES[call["key"]]()

            self._program = outlive_step
        return self._program

    async def record_with_task_write(self, work_id: str, command: Command, slot: TaskWrite | None,
                                     writes: Sequence[tuple[str, Any]], *,
                                     announce: bool = True,
                                     on_send: Callable[[], Any] | None = None
                                     ) -> tuple[Outcome, bool]:
        """Apply ``command`` and, in the same transaction, LangGraph's rows for ``writes`` of the
        task at ``slot``; ``(outcome, whether those rows were written)``.

        The rows are written only when the command writes (a no-op writes nothing).
        ``announce``: tell the saver, so that LangGraph's own later ``put_writes`` of them is
        answered as done (False when this *is* that ``put_writes``). ``on_send``: called when
        the write is sent, before its commit (where a store can tell; else never). This default
        (a store with no shared transaction) writes the command alone.
        """
        return await self.execute(work_id, command), False

    async def run_and_record(self, call: StepCall, fn: Callable[[], Awaitable[Any]],
                             record: Callable[[Any], Command]) -> tuple[Any, Outcome]:
        """Run a step and journal it in one transaction with LangGraph's write of its task.

        Without this, a step costs two commits: the journal entry, then LangGraph's own save of
        the task result (in the background, even under ``durability="sync"``). Inside an
        ``outlive_task`` the task's row (its envelope) is written with the journal entry before
        the task returns, and the saver answers LangGraph's later ``put_writes`` of that very
        object as already committed. In ``run_step``'s one-task program LangGraph's
        ``put_writes`` of the task that ran the body writes the journal entry with it.
        """
        node = IN_NODE.get()
        if node is not None:
            queue = self.entry_queue(call, node)
            if queue is not None:
                # A step inside a running node: its entry rides the attempt's next fenced write.
                # Steps inside its body are not the node's: they commit as any step.
                inner = IN_NODE.set(None)
                try:
                    result = await fn()   # (its size, as the rest, is checked by the ledger)
                finally:
                    IN_NODE.reset(inner)
                command = record(result)
                if isinstance(command, L.RecordSteps):
                    owner = (call.work_id, call.attempt, call.token)
                    if queue.behind_carrier(owner):
                        await queue.after_carrier(owner)   # an earlier superstep's, in flight
                    queue.queue_entry(owner, command)
                    return result, Outcome(kind="queued")
                return result, await self.execute(call.work_id, command)
        if INSIDE_TASK.get():
            pending = PENDING_TASK_WRITE.get()
            if pending is None or pending.step != call.step or pending.value \
                    or pending.slot is None or not self.merges_task_writes:
                return await super().run_and_record(call, fn, record)
            token = PENDING_TASK_WRITE.set(None)  # steps inside the body are not this task
            try:
                result = await fn()
            finally:
                PENDING_TASK_WRITE.reset(token)
            value = pending.make(call, result)
            sent = pending.sent
            outcome, wrote = await self.record_with_task_write(
                call.work_id, record(result), pending.slot, [(_RETURN, value)],
                on_send=None if sent is None else functools.partial(_settle, sent, value))
            if wrote:
                pending.value.append(value)
            return result, outcome
        saver = self.checkpointer
        if not self.merges_task_writes or not isinstance(saver, TaskWrites):
            return await super().run_and_record(call, fn, record)
        # The one-task program: once the body returned, the step's journal entry is committed
        # by LangGraph's own write of that task (the entrypoint's ``put_writes``, which the
        # saver hands to ``on_write``), with LangGraph's rows, at the place LangGraph gives.
        # ``ainvoke`` returns only once the write is done (else the entry is written below),
        # so ``Worker.step`` still returns after the commit. The program is outlive's own and
        # only ever ``ainvoke``d: nobody is streamed the result before its commit.
        results: list[Any] = []
        outcomes: list[Outcome] = []
        failed: list[BaseException] = []
        task_ids: list[str] = []

        async def on_write(slot: TaskWrite, writes: Sequence[tuple[str, Any]]) -> bool:
            if not results:
                return False
            try:
                outcome, wrote = await self.record_with_task_write(
                    call.work_id, record(results[0]), slot, writes, announce=False)
            except BaseException as exc:
                failed.append(exc)
                raise
            outcomes.append(outcome)
            return wrote

        async def body() -> Any:
            task_id = running_task_id()
            result = await fn()
            results.append(result)
            if task_id is not None:
                task_ids.append(task_id)
                saver.on_write[task_id] = on_write
            return result

        carry = saver if isinstance(saver, FencedAsyncSqliteSaver) else None
        thread = step_thread_id(call.work_id, call.attempt)
        if carry is not None:
            carry.carry_threads[thread] += 1
        try:
            result = await self.run_step(call, body)
        except BaseException:
            if failed:   # the refusal of the journal entry, not what LangGraph made of it
                raise failed[0] from None
            raise
        finally:
            for task_id in task_ids:
                saver.on_write.pop(task_id, None)
            if carry is not None:
                carry.carry_threads[thread] -= 1
                if carry.carry_threads[thread] <= 0:
                    del carry.carry_threads[thread]
                    carry.release(thread)
        if failed:
            raise failed[0]
        if outcomes:
            return result, outcomes[0]
        # LangGraph wrote no such row (another shape of write, or none before returning).
        return result, await self.execute(call.work_id, record(result))

    def entry_queue(self, call: StepCall, config: RunnableConfig) -> QueuesEntries | None:
        """Where a step inside the running node of ``config`` (:func:`node_step`) may queue its
        journal entry for the attempt's next fenced write: this backend's saver, when the node
        runs for the step's attempt on it under ``durability="sync"`` (LangGraph then starts no
        superstep before the last one's checkpoint returned); None: commit the entry now."""
        saver = self._entry_saver()
        conf = config.get("configurable") or {}
        if saver is None or conf.get(CONFIG_KEY_CHECKPOINTER) is not saver \
                or conf.get(CONFIG_KEY_DURABILITY) not in ("sync", "async") \
                or owner_of(config) != (call.work_id, call.attempt, call.token):
            return None
        return saver

    def _entry_saver(self) -> QueuesEntries | None:
        """This backend's saver, if it carries queued entries (None: it does not)."""
        return None

    async def defer_node_entry(self, config: RunnableConfig,
                               run: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        """Run an :func:`~outlive_langgraph.outlive_node`'s step; its journal entry rides the
        attempt's next fenced write.

        ``run()`` runs the step. Where it is safe - a node of a root graph, checkpointed
        by this backend's saver, under ``durability="sync"`` (or ``"async"``) - the step's entry
        is queued (:meth:`entry_queue`, as a :func:`~outlive_langgraph.node_step`'s) instead of
        committed, and the node returns its update at once: the attempt's next fenced write (the
        node's ``put_writes``, held for the superstep's checkpoint) commits the entry with
        LangGraph's statements, so nothing the node returned lands without it. LangGraph starts
        no next superstep before that ``put`` returned: a refusal of the entry is raised there,
        before any next node's body runs (and by every later write of the attempt). Anywhere
        else the entry commits before the node returns, as any step's.
        """
        if self._entry_saver() is None \
                or NS_SEP in str((config.get("configurable") or {}).get("checkpoint_ns", NS_SEP)):
            return await run()
        token = IN_NODE.set(config)   # Worker.step asks entry_queue whether it may queue
        try:
            return await run()
        finally:
            IN_NODE.reset(token)

    async def _after_flights(self, work_id: str, command: Command, *, wait: bool = True) -> None:
        """Before ``command``: this process's journal writes on the work still in flight
        (``durability="async"``) land (``wait``), and a failed one's error is raised for its
        attempt. A heartbeat neither waits nor raises (it depends on no step)."""
        saver = self._entry_saver()
        if isinstance(saver, TaskWrites) and saver.in_flight_for(work_id) \
                and type(command) is not L.Heartbeat:
            attempt = getattr(command, "attempt", None)
            mine = attempt if isinstance(attempt, int) and hasattr(command, "token") else None
            if wait:
                await saver.landed(work_id, mine)
            elif mine is not None and (work_id, mine) in saver.flight_errors:
                raise saver.flight_errors[(work_id, mine)]

    async def _flush_entries(self, work_id: str, command: Command) -> None:
        """Send the entries queued for ``command``'s attempt before the command itself (its
        effects, waits and candidate follow them in the ledger). Not before a heartbeat."""
        saver = self._entry_saver()
        if saver is None or not (saver.entries or saver._carrying or saver.refused) \
                or type(command) is L.Heartbeat:
            return
        attempt, token = getattr(command, "attempt", None), getattr(command, "token", None)
        if isinstance(attempt, int) and isinstance(token, int):
            await saver.flush_entries((work_id, attempt, token))

    async def run_step(self, call: StepCall, fn: Callable[[], Awaitable[Any]]) -> Any:
        """Run the body once as the task of an entrypoint invocation on the attempt's thread.

        Inside an entrypoint that is already running (``outlive_task``), the body is already in
        a task, so it is awaited directly. The body is held in an in-process registry by a random
        key: only the key crosses into the checkpoint, never the closure.
        """
        if INSIDE_TASK.get():
            return await fn()
        key = uuid.uuid4().hex
        out: list[Any] = []

        async def keep() -> Any:
            result = await fn()
            out.append(result)
            return result

        _BODIES[key] = keep
        # No owner keys: this one-task program's thread belongs to one attempt, so nothing can
        # fork it, and its writes are not the user's. The fenced write is the journal entry.
        config: RunnableConfig = {
            "configurable": {"thread_id": step_thread_id(call.work_id, call.attempt)}}
        # A worker that saves its progress at the end (``persist="end"``) is LangGraph's
        # ``"exit"``: the program saves its checkpoint when the invocation ends, not each task's
        # writes and each superstep's checkpoint on the way (``StepCall.persist`` is there for an
        # engine's own durability modes to match; the journal is flushed with the candidate).
        durability: Durability = "exit" if call.persist == "end" else self.durability
        try:
            await self._step_program().ainvoke(
                {"step": call.step, "key": key}, config, durability=durability)
            return out[0]
        except Exception as exc:
            mapped = database_error(exc, self.url)
            if mapped is None:
                raise
            raise mapped from exc
        finally:
            _BODIES.pop(key, None)


#: The secrets of waiting attempts (see ``LangGraphBackend.record_wait``), beside LangGraph's tables.
_SECRETS_TABLE = ("CREATE TABLE IF NOT EXISTS outlive_langgraph_secrets (work_id TEXT NOT NULL, "
                  "attempt INTEGER NOT NULL, secret TEXT NOT NULL, PRIMARY KEY (work_id, attempt))")
_KEEP_SECRET = ("INSERT OR REPLACE INTO outlive_langgraph_secrets (work_id, attempt, secret) "
                "VALUES (?, ?, ?)")
_KEPT_SECRET = "SELECT secret FROM outlive_langgraph_secrets WHERE work_id = ? AND attempt = ?"


class _Ledger(Protocol):
    async def execute(self, work_id: str, command: Command) -> Outcome: ...
    async def load(self, work_id: str) -> WorkState | None: ...
    async def works(self) -> list[str]: ...


class _CoreLedgerBackend(LangGraphBackend):
    """A backend whose ledger is one of the core's, in ``self.ledger``: its commands are that
    ledger's (``langgraph+memory``, ``langgraph+postgres``)."""

    ledger: _Ledger

    async def execute(self, work_id: str, command: Command) -> Outcome:
        return await self.ledger.execute(work_id, command)

    async def load(self, work_id: str) -> WorkState | None:
        return await self.ledger.load(work_id)

    async def works(self) -> list[str]:
        return await self.ledger.works()


class LangGraphMemoryBackend(_CoreLedgerBackend):
    """``langgraph+memory://``: an InMemorySaver beside the core ``memory://`` ledger."""

    capabilities = MemoryBackend.capabilities

    def __init__(self, url: str = "langgraph+memory://") -> None:
        super().__init__(url)
        ledger = self.ledger = MemoryBackend()
        # The fence only reads the work: no deep copy of the whole state on every LangGraph
        # write (``load`` copies; on a long journal that made each step cost more than the last).
        self._saver = FencedCheckpointer(InMemorySaver(), ledger, peek=ledger.peek)

    @property
    def checkpointer(self) -> BaseCheckpointSaver[Any]:
        return self._saver


class LangGraphSqliteBackend(LangGraphBackend):
    """``langgraph+sqlite:///PATH``: the core SQLite ledger and LangGraph's checkpoints, one file.

    One aiosqlite connection carries both: the saver's statements and the ledger's transactions
    (the core :class:`~outlive.sqlstore.SqliteLedgerStore`, run whole in the connection's own
    thread) never wait on each other's file lock, and nothing blocks the event loop. Another
    process's write lock is waited for in that thread (30 s, then ``BackendUnavailable``).
    """

    capabilities = frozenset({"atomic-commands", "durable", "multi-process"})
    merges_task_writes = True
    #: An ``outlive_task``'s body returns once its journal write is queued to the connection's
    #: thread; the user's ``await`` of the step still waits for the commit (see ``_engine``).
    returns_when_sent = True

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.path = sqlite_path(url)
        self._store = SqliteLedgerStore(self.path)
        self._saver: FencedAsyncSqliteSaver | None = None

    @property
    def checkpointer(self) -> BaseCheckpointSaver[Any]:
        return self._db()

    def _db(self) -> FencedAsyncSqliteSaver:
        if self._saver is None:
            raise BackendUnavailable(f"{self.url}: backend not started (use open_backend)",
                                     url=self.url)
        return self._saver

    async def start(self) -> None:
        parent = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(parent):
            raise BackendUnavailable(f"{self.url}: directory {parent} does not exist", url=self.url)
        conn: aiosqlite.Connection | None = None
        try:
            # Autocommit (the core store takes its own short write transactions; the fenced
            # saver opens BEGIN IMMEDIATE itself).
            conn = await aiosqlite.connect(self.path, timeout=30, isolation_level=None)
            await conn.execute("PRAGMA journal_mode=WAL")
            await conn.execute("PRAGMA synchronous=FULL")
            await conn.executescript(SCHEMA)
            await conn.execute(_SECRETS_TABLE)
            # A truncated or damaged file fails here, before anything is written, not mid-run.
            problems = [r[0] for r in await conn.execute_fetchall("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise sqlite3.DatabaseError("; ".join(str(p) for p in problems[:3]))
            saver = FencedAsyncSqliteSaver(conn, self._store)
            await saver.setup()
        except sqlite3.DatabaseError as exc:
            if conn is not None:
                await conn.close()
            raise InvalidRecord(f"{self.path}: not a usable outlive/LangGraph database: {exc}",
                                path=self.path) from exc
        self._saver = saver

    async def _in_thread(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``fn`` on the connection, in its thread, between two of the saver's writes."""
        try:
            return await self._db().in_thread(fn)
        except sqlite3.DatabaseError as exc:
            mapped = database_error(exc, self.path, path=self.path)
            assert mapped is not None  # every sqlite3.DatabaseError maps
            raise mapped from exc

    def _entry_saver(self) -> QueuesEntries | None:
        return self._saver

    async def execute(self, work_id: str, command: Command) -> Outcome:
        await self._after_flights(work_id, command)
        await self._flush_entries(work_id, command)
        store = self._store
        out: Outcome = await self._in_thread(lambda conn: store.run(conn, work_id, command))
        return out

    async def record_with_task_write(self, work_id: str, command: Command, slot: TaskWrite | None,
                                     writes: Sequence[tuple[str, Any]], *,
                                     announce: bool = True,
                                     on_send: Callable[[], Any] | None = None
                                     ) -> tuple[Outcome, bool]:
        """The core store's write transaction, with LangGraph's rows added before its COMMIT."""
        if slot is None:
            return await self.execute(work_id, command), False
        # A step's write behind one in flight need not wait for it: the connection's thread
        # runs them in order. Only a failure already known is raised now.
        await self._after_flights(work_id, command, wait=on_send is None)
        await self._flush_entries(work_id, command)
        saver = self._db()
        sql, rows = saver.task_rows(slot, writes)
        ledger = self._store
        wrote: list[bool] = []
        # The program's input checkpoint, held for this transaction (``run_step``'s thread).
        carried = saver.take(slot.thread_id) if saver.carry_threads else []

        def run(conn: sqlite3.Connection) -> Outcome:
            before = ledger.before_commit

            def also(tx: sqlite3.Connection) -> None:
                if before is not None:
                    before(tx)
                tx.executemany(sql, rows)
                for held in carried:
                    tx.executemany(held.sql, held.rows)
                wrote.append(True)

            ledger.before_commit = also  # this connection's thread, one write at a time
            try:
                return ledger.run(conn, work_id, command)
            finally:
                ledger.before_commit = before

        landed: asyncio.Future[None] | None = None
        if on_send is not None:
            # LangGraph's own ``put_writes`` of the task may come before the commit: it waits.
            landed = saver.in_flight[slot.task_id] = asyncio.get_running_loop().create_future()
        try:
            pending = self._in_thread(run)
            if on_send is not None:
                # Queued in the connection's thread by the time anything else runs on the loop
                # (aiosqlite queues before its first await): the task may return meanwhile.
                on_send()
            out: Outcome = await pending
        finally:
            for held in carried:   # committed with the entry, or left for its own write
                if not held.done.done():
                    held.done.set_result(bool(wrote))
                    saver.carried_puts += bool(wrote)
            if wrote and announce:
                saver.wrote(slot, writes)
            if landed is not None:
                if saver.in_flight.get(slot.task_id) is landed:
                    del saver.in_flight[slot.task_id]
                landed.set_result(None)
        return out, bool(wrote)

    async def record_wait(self, worker: Worker, reason: str) -> None:
        """``waiting`` and the attempt's kept secret, one transaction (see the base class)."""
        att = worker.attempt
        command = L.Wait(attempt=att.number, token=att.token, reason=reason, at=worker.clock(),
                         secret=att.secret)
        await self._after_flights(worker.work_id, command)
        await self._flush_entries(worker.work_id, command)
        ledger, row = self._store, (worker.work_id, att.number, att.secret)

        def run(conn: sqlite3.Connection) -> Outcome:
            before = ledger.before_commit

            def also(tx: sqlite3.Connection) -> None:
                if before is not None:
                    before(tx)
                if row[2] is not None:
                    tx.execute(_KEEP_SECRET, row)

            ledger.before_commit = also  # this connection's thread, one write at a time
            try:
                return ledger.run(conn, worker.work_id, command)
            finally:
                ledger.before_commit = before

        await self._in_thread(run)
        worker.waits = reason

    async def keep_secret(self, work_id: str, attempt: int, secret: str) -> None:
        def keep(conn: sqlite3.Connection) -> None:
            with conn:
                conn.execute(_KEEP_SECRET, (work_id, attempt, secret))

        await self._in_thread(keep)

    async def kept_secret(self, work_id: str, attempt: int) -> str | None:
        row = await self._in_thread(
            lambda conn: conn.execute(_KEPT_SECRET, (work_id, attempt)).fetchone())
        return None if row is None else str(row[0])

    async def load(self, work_id: str) -> WorkState | None:
        store = self._store
        state: WorkState | None = await self._in_thread(lambda conn: store.load(conn, work_id))
        return state

    async def works(self) -> list[str]:
        store = self._store
        names: list[str] = await self._in_thread(store.works)
        return names

    async def close(self) -> None:
        self._program = None  # bound to this saver; a restarted backend builds a new one
        if self._saver is not None:
            await self._saver.conn.close()
            self._saver = None
