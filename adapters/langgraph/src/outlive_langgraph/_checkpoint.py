"""Fencing inside LangGraph's own writes: a stale owner's ``put``/``put_writes`` is refused.

LangGraph's savers have no owner token and no compare-and-set: a paused invocation that wakes
after its successor started on the same thread appends its checkpoint anyway, and the thread's
chain forks. Every invocation outlive drives carries its attempt in ``configurable``
(:func:`~outlive_langgraph.attempt_config`); these savers ask the work's ledger whether that
token may still write before letting LangGraph's write through.

* :class:`FencedAsyncSqliteSaver` (``langgraph+sqlite``): LangGraph's ``AsyncSqliteSaver`` on the
  ledger's own file. The check reads the ledger's rows **inside the checkpoint write's
  transaction** (``BEGIN IMMEDIATE``, read the work's head, the saver's insert, ``COMMIT``), so no
  admission can commit between the check and the write. aiosqlite runs it off the event loop, in
  one call on its thread.
* ``FencedAsyncPostgresSaver`` (``langgraph+postgres``, in :mod:`.postgres`): one statement whose
  inserts are conditional on the work's ledger head (share-locked) being the one checked.
* :class:`FencedCheckpointer`: wraps any other saver (one of the user's own, an
  ``InMemorySaver``): it loads the ledger, checks, then writes. Two databases cannot share a
  transaction, so a pause between the check and the write is not covered there; say so.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar, cast

import aiosqlite
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.checkpoint.sqlite.utils import load_pending_writes, pending_writes_sql

from outlive.backend import Backend
from outlive.errors import ConfigError, NotFound, OutliveError
from outlive.ledger import RecordSteps, check_owner
from outlive.records import WorkState
from outlive.sqlstore import SqliteLedgerStore

from ._context import TaskWrite, is_special, note_wait, owner_of

__all__ = ["FencedAsyncSqliteSaver", "FencedCheckpointer", "QueuesEntries", "TaskWrites",
           "may_write"]

_RETURN = "__return__"  # the channel LangGraph saves a Functional API task's result on


def may_write(state: WorkState | None, work_id: str, attempt: int, token: int) -> None:
    """Raise the ledger's own rejection (``StaleOwner``, ``UnknownToken``) if the token may not write.

    Asks the ledger's published owner check (:func:`outlive.ledger.check_owner`).
    """
    if state is None:
        raise NotFound(f"work {work_id!r} is not open", work_id=work_id)
    check_owner(state, attempt, token)


class TaskWrites:
    """LangGraph writes a saver already committed in a step's journal transaction.

    One commit per step instead of two: the backend writes LangGraph's rows for a task's writes
    together with the journal entry (:meth:`wrote` records them); when LangGraph then calls
    ``put_writes`` for that task, :meth:`claim` answers whether that exact write (same place,
    same channels, the very objects) is already committed, or which predicted rows to remove
    before writing.
    """

    def __init__(self) -> None:
        self.prewritten: dict[str, tuple[TaskWrite, Sequence[tuple[str, Any]]]] = {}
        #: LangGraph ``put_writes`` calls whose rows shared the journal entry's transaction
        #: (answered as already committed, or written with it; benchmarks, tests).
        self.merged = 0
        #: Task id -> what writes that task's rows together with a journal entry when LangGraph
        #: saves them (``run_step``'s program); answers whether it wrote them.
        self.on_write: dict[str, Callable[[TaskWrite, Sequence[tuple[str, Any]]],
                                          Awaitable[bool]]] = {}
        #: Work -> the ``outlive_task`` steps that returned to the user's code while their
        #: journal write was in flight (``durability="async"``: :meth:`fly`), each with its
        #: attempt; and (work, attempt) -> the first error of such a write that failed.
        self.flying: dict[str, dict[asyncio.Task[Any], int]] = {}
        self.flight_errors: dict[tuple[str, int], BaseException] = {}

    #: Entries kept for LangGraph calls that never come (an invocation cancelled after the task
    #: returned, ``durability="exit"``); the oldest go first.
    KEEP = 4096

    def fly(self, work_id: str, attempt: int, step: asyncio.Task[Any]) -> None:
        """``step`` (a running ``Worker.step`` whose journal write was sent) returns to the
        user's code before its commit; :meth:`landed` is the barrier that waits for it."""
        self.flying.setdefault(work_id, {})[step] = attempt
        step.add_done_callback(lambda done: self._landed_one(work_id, done))

    def _landed_one(self, work_id: str, step: asyncio.Task[Any]) -> None:
        """Forget a step that ended; keep its error for the attempt's next barrier."""
        tasks = self.flying.get(work_id)
        attempt = tasks.pop(step, None) if tasks is not None else None
        if tasks is not None and not tasks:
            del self.flying[work_id]
        if attempt is None or step.cancelled():
            return
        error = step.exception()
        if error is not None:
            self.flight_errors.setdefault((work_id, attempt), error)
            while len(self.flight_errors) > self.KEEP:
                del self.flight_errors[next(iter(self.flight_errors))]

    async def landed(self, work_id: str, attempt: int | None) -> None:
        """The barrier: wait for this process's journal writes on ``work_id`` in flight now (not
        for those sent meanwhile: a write of LangGraph's waiting here would never end while the
        graph keeps stepping), then raise the error of any that failed for ``attempt`` (the
        same typed error its own ``await`` would have raised; again at every later barrier)."""
        tasks = self.flying.get(work_id)
        if tasks:
            steps = list(tasks)
            await asyncio.wait(steps)
            for step in steps:
                self._landed_one(work_id, step)
        if attempt is not None:
            error = self.flight_errors.get((work_id, attempt))
            if error is not None:
                raise error

    async def after_flights(self, config: RunnableConfig) -> None:
        """The barrier for a write of LangGraph's made for an attempt (its final checkpoint,
        a task's writes): the attempt's steps in flight land first, and their error is raised."""
        if self.flying or self.flight_errors:
            owner = owner_of(config)
            if owner is not None and self.in_flight_for(owner[0]):
                await self.landed(owner[0], owner[1])

    def in_flight_for(self, work_id: str) -> bool:
        """Whether a barrier on ``work_id`` has anything to wait for or to raise."""
        return work_id in self.flying or bool(self.flight_errors)

    def wrote(self, slot: TaskWrite, writes: Sequence[tuple[str, Any]]) -> None:
        self.prewritten[slot.task_id] = (slot, writes)
        while len(self.prewritten) > self.KEEP:
            del self.prewritten[next(iter(self.prewritten))]

    async def journal_on_write(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                               task_id: str, task_path: str) -> bool:
        """LangGraph saves the writes of a task a step's journal entry waits for: write both in
        one transaction, at the place LangGraph gives; False: write LangGraph's rows as usual
        (also for LangGraph's special channels: errors, interrupts, which are never merged)."""
        hook = self.on_write.pop(task_id, None)
        if hook is None or not writes or any(w[0] in WRITES_IDX_MAP for w in writes):
            return False
        conf = config.get("configurable") or {}
        slot = TaskWrite(thread_id=str(conf.get("thread_id")),
                         checkpoint_ns=str(conf.get("checkpoint_ns", "")),
                         checkpoint_id=str(conf.get("checkpoint_id")), task_id=task_id,
                         task_path=task_path)
        wrote = await hook(slot, writes)
        if wrote:
            self.merged += 1
        return wrote

    def claim(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
              task_path: str) -> tuple[bool, TaskWrite | None]:
        """``(already committed, predicted rows to remove in this write's transaction)``."""
        entry = self.prewritten.pop(task_id, None)
        if entry is None:
            return False, None
        slot, done = entry
        if slot.matches(config, task_path) and len(writes) == len(done) \
                and all(c == d and v is u for (c, v), (d, u) in zip(writes, done, strict=True)):
            self.merged += 1
            return True, None
        return False, slot


class FencedCheckpointer(BaseCheckpointSaver[Any]):
    """Any LangGraph saver, with outlive attempts' writes checked against the ledger first."""

    #: An attempt's ``interrupt()`` and ``Command(resume=...)`` are recorded by the saver.
    records_waits = True

    def __init__(self, inner: BaseCheckpointSaver[Any], backend: Backend, *,
                 peek: Callable[[str], WorkState | None] | None = None) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner
        self.backend = backend
        #: Reads a work without copying it (the check only reads), where the backend can.
        self.peek = peek

    async def _check(self, config: RunnableConfig) -> None:
        owner = owner_of(config)
        if owner is not None:
            work, attempt, token = owner
            state = self.peek(work) if self.peek is not None else await self.backend.load(work)
            may_write(state, work, attempt, token)

    def _sync_check(self, config: RunnableConfig) -> None:
        if owner_of(config) is not None:
            raise ConfigError("an outlive attempt's checkpoints are written through the async "
                              "API (ainvoke/astream); the fence check reads the ledger")

    # -- writes: fenced --------------------------------------------------------------------------
    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        await self._check(config)
        return await self.inner.aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        await self._check(config)
        if is_special(writes):
            await note_wait(config, writes)
        await self.inner.aput_writes(config, writes, task_id, task_path)

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        self._sync_check(config)
        return self.inner.put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        self._sync_check(config)
        self.inner.put_writes(config, writes, task_id, task_path)

    # -- everything else: the inner saver's ----------------------------------------------------
    @property
    def config_specs(self) -> list[Any]:
        return self.inner.config_specs

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.inner.get_tuple(config)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self.inner.aget_tuple(config)

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None
             ) -> Iterator[CheckpointTuple]:
        return self.inner.list(config, filter=filter, before=before, limit=limit)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None
                    ) -> AsyncIterator[CheckpointTuple]:
        async for item in self.inner.alist(config, filter=filter, before=before, limit=limit):
            yield item

    def delete_thread(self, thread_id: str) -> None:
        self.inner.delete_thread(thread_id)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.inner.adelete_thread(thread_id)

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.inner.get_next_version(current, channel)

    def get_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Any:
        return self.inner.get_delta_channel_history(config=config, channels=channels)

    async def aget_delta_channel_history(self, *, config: RunnableConfig,
                                         channels: Sequence[str]) -> Any:
        return await self.inner.aget_delta_channel_history(config=config, channels=channels)


@dataclass(eq=False)
class Carried:
    """A checkpoint of ``run_step``'s program held for the step's journal transaction."""

    sql: str
    rows: list[tuple[Any, ...]]
    #: True once committed in the journal entry's transaction; False: write it yourself.
    done: asyncio.Future[bool]


#: One of LangGraph's statements (statement, rows), and those of one write.
Statement = tuple[str, list[tuple[Any, ...]]]
Rows = list[Statement]


_Call = TypeVar("_Call")


@dataclass(eq=False)
class HeldWrites(Generic[_Call]):
    """A fenced ``put_writes`` waiting for another fenced write of its attempt to carry it."""

    calls: list[_Call]
    #: True once committed in another write's transaction; False: write it yourself.
    sent: asyncio.Future[bool]


class HoldsWrites(Generic[_Call]):
    """A saver whose fenced ``put_writes`` may wait briefly to ride the attempt's next write.

    Shared by both fenced savers: the SQLite one's checkpoint transaction and the PostgreSQL
    one's next fenced statement carry what waits here (one commit fewer); a write nobody took
    within :attr:`hold_seconds` is released, and its caller writes it alone.
    """

    #: How long a held ``put_writes`` waits for a write to carry it (0: never).
    hold_seconds: float
    _held: dict[tuple[str, int, int], list[HeldWrites[_Call]]]
    #: Held ``put_writes`` another write carried.
    held: int

    def _settle_held(self, held: list[HeldWrites[_Call]], sent: bool) -> None:
        """Tell each held ``put_writes`` whether the write that took it committed (False:
        each is written again by its own call, checked on its own)."""
        for h in held:
            if not h.sent.done():
                h.sent.set_result(sent)
                if sent:
                    self.held += 1

    async def _hold(self, owner: tuple[str, int, int], calls: list[_Call]) -> bool:
        """Wait for the attempt's next write to commit ``calls`` with its own; False: it did not
        come in time (or failed), write them yourself."""
        loop = asyncio.get_running_loop()
        held = HeldWrites(calls, loop.create_future())
        self._held.setdefault(owner, []).append(held)
        timer = loop.call_later(self.hold_seconds, self._release_held, owner, held)
        try:
            return await held.sent
        finally:
            timer.cancel()
            self._drop_held(owner, held)

    def _drop_held(self, owner: tuple[str, int, int], held: HeldWrites[_Call]) -> bool:
        waiting = self._held.get(owner)
        if waiting is None or held not in waiting:
            return False
        waiting.remove(held)
        if not waiting:
            del self._held[owner]
        return True

    def _release_held(self, owner: tuple[str, int, int], held: HeldWrites[_Call]) -> None:
        if self._drop_held(owner, held) and not held.sent.done():
            held.sent.set_result(False)


Owner = tuple[str, int, int]


class QueuesEntries:
    """A saver that carries the journal entries of steps inside a running node
    (:func:`~outlive_langgraph.node_step`) in the attempt's next fenced write.

    An entry waits here (``queue_entry``) instead of being a commit of its own; the attempt's
    next fenced write (the node's ``put_writes``, the superstep's checkpoint) sends the queued
    entries as one ledger command with LangGraph's statements in its transaction
    (``_carry_entries``, the saver's own), so nothing the node returned lands without them.
    Another ledger command of the attempt first sends them alone (:meth:`flush_entries`), and
    so does a timer (:attr:`entry_seconds`) when no write comes. A refusal of the entries (a
    replaced attempt, a bad entry) is kept: every later write of that attempt through this
    saver raises it again, so none lands without the entries it follows.
    """

    #: How long queued entries wait for a write to carry them before they go alone.
    entry_seconds: float
    #: Ledger commands carried in one of LangGraph's writes, and sent alone (tests, benchmarks).
    carried_entries: int
    flushed_entries: int

    def _init_entries(self) -> None:
        self.entry_seconds = 1.0
        self.carried_entries = 0
        self.flushed_entries = 0
        self.entries: dict[Owner, list[RecordSteps]] = {}
        self._entry_timers: dict[Owner, asyncio.TimerHandle] = {}
        #: The attempt's write carrying its entries, sent but maybe not ended.
        self._carrying: dict[Owner, asyncio.Future[Any]] = {}
        #: The ledger's refusal of an attempt's entries, raised again by its later writes.
        self.refused: dict[Owner, OutliveError] = {}

    def queue_entry(self, owner: Owner, command: RecordSteps) -> None:
        """Hold ``command`` (a step's journal entry) for the attempt's next fenced write."""
        queued = self.entries.get(owner)
        if queued is None:
            queued = self.entries[owner] = []
            self._entry_timers[owner] = asyncio.get_running_loop().call_later(
                self.entry_seconds, self._flush_soon, owner)
        queued.append(command)

    def has_entries(self, owner: Owner) -> bool:
        """Whether a write for ``owner`` must carry (or wait for, or re-raise) entries first."""
        return owner in self.entries or owner in self._carrying or owner in self.refused

    def _take_entries(self, owner: Owner) -> RecordSteps | None:
        """The queued entries as one command (None: none), no longer queued."""
        timer = self._entry_timers.pop(owner, None)
        if timer is not None:
            timer.cancel()
        queued = self.entries.pop(owner, None)
        if not queued:
            return None
        if len(queued) == 1:
            return queued[0]
        return replace(queued[-1], entries=tuple(e for c in queued for e in c.entries))

    def behind_carrier(self, owner: Owner) -> bool:
        """Whether an entry of ``owner`` queued now must wait for :meth:`after_carrier`."""
        return owner in self._carrying or owner in self.refused

    async def after_carrier(self, owner: Owner) -> None:
        """Let the attempt's carrier in flight end and raise a kept refusal: a node step's
        entry queues behind an earlier superstep's still at the server (``durability="async"``)
        only once that one took, so a replaced attempt's graph runs no further node."""
        while (carrying := self._carrying.get(owner)) is not None:
            await asyncio.wait((carrying,))
        refused = self.refused.get(owner)
        if refused is not None:
            raise refused

    async def _before_write(self, owner: Owner) -> RecordSteps | None:
        """Let the attempt's carrier in flight end, raise a kept refusal, take the queue."""
        await self.after_carrier(owner)
        return self._take_entries(owner)

    async def flush_entries(self, owner: Owner) -> None:
        """Send the attempt's queued entries on their own (another command of it comes next)."""
        if not self.has_entries(owner):
            return
        command = await self._before_write(owner)
        if command is not None:
            await self._send_entries(owner, command, None)
            self.flushed_entries += 1

    def _flush_soon(self, owner: Owner) -> None:
        """No write came in time: the entries go alone (a failure is kept for the next write)."""
        self._entry_timers.pop(owner, None)
        if owner in self.entries and owner not in self._carrying:
            task = asyncio.get_running_loop().create_task(self.flush_entries(owner))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _send_entries(self, owner: Owner, command: RecordSteps,
                            rows: Any) -> bool:
        """``command`` with LangGraph's statements (``rows``, the saver's own way to add them
        to the ledger's write); True if they went in its transaction. Entries whose write
        failed are queued again; a refusal is kept for the attempt's later writes."""
        ended = self._carrying[owner] = asyncio.get_running_loop().create_future()
        try:
            carried = await self._carry_entries(owner, command, rows)
        except OutliveError as exc:
            self.refused[owner] = exc
            while len(self.refused) > TaskWrites.KEEP:
                del self.refused[next(iter(self.refused))]
            raise
        except BaseException:
            # Failed (or cancelled, maybe committed: sent again, a journaled entry is a no-op).
            self.entries.setdefault(owner, []).insert(0, command)
            raise
        finally:
            if self._carrying.get(owner) is ended:
                del self._carrying[owner]
            ended.set_result(None)
        if carried:
            self.carried_entries += 1
        return carried

    async def _carry_entries(self, owner: Owner, command: RecordSteps,
                             rows: Any) -> bool:
        raise NotImplementedError


class FencedAsyncSqliteSaver(AsyncSqliteSaver, TaskWrites, QueuesEntries,
                              HoldsWrites[Statement]):
    """``AsyncSqliteSaver`` on the ledger's file: the owner check and the write, one transaction.

    Each write is one call in aiosqlite's thread: ``BEGIN IMMEDIATE``, read the work through the
    core's SQL ledger store, ask the ledger, the saver's own ``INSERT`` (the same statements as
    ``AsyncSqliteSaver``), ``COMMIT``. No admission can commit in between, and a refused write
    leaves nothing. Reads are the saver's own statements (``aget_tuple``'s as one call).
    """

    #: An attempt's ``interrupt()`` and ``Command(resume=...)`` are recorded by the saver.
    records_waits = True

    def __init__(self, conn: aiosqlite.Connection, store: SqliteLedgerStore) -> None:
        AsyncSqliteSaver.__init__(self, conn)
        TaskWrites.__init__(self)
        #: The core's SQL ledger store on the same file: the fence reads the work through it.
        self.store = store
        #: Threads of ``run_step``'s program with a step running: their input checkpoint is
        #: held for the step's journal transaction (:meth:`carry`).
        self.carry_threads: Counter[str] = Counter()
        #: How long an input checkpoint waits to be carried before it is written alone.
        self.carry_seconds = 1.0
        #: Input checkpoints committed in a journal entry's transaction (tests, benchmarks).
        self.carried_puts = 0
        self._carried: dict[str, list[Carried]] = {}
        #: How long a node's ``put_writes`` waits for the checkpoint to carry it (0: never).
        self.hold_seconds = 0.005
        #: Node ``put_writes`` committed in the checkpoint's transaction (tests, benchmarks).
        self.held = 0
        self._held = {}
        #: Task id -> the end of a journal write carrying that task's row, queued but maybe not
        #: committed yet (its task returned once it was queued).
        self.in_flight: dict[str, asyncio.Future[None]] = {}
        #: LangGraph ``put_writes`` that came while their task's journal write was in flight.
        self.waited = 0
        self._init_entries()

    async def in_thread(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``fn`` on the sqlite3 connection in aiosqlite's thread, as one call.

        aiosqlite's thread runs one call at a time, in the order asked: a transaction begun
        and ended inside ``fn`` needs no lock of its own, and calls asked while one runs are
        queued in the thread, not on the event loop (so they run back to back). ``_execute``/
        ``_conn`` are aiosqlite's own way to run a function in its thread (the version range
        in pyproject.toml keeps them).
        """
        raw = self.conn
        run: Callable[[Callable[[], Any]], Awaitable[Any]] = raw._execute
        return await run(lambda: fn(raw._conn))

    async def in_transaction(self, body: Callable[[sqlite3.Connection], None]) -> None:
        """Run ``body`` inside ``BEGIN IMMEDIATE`` ... ``COMMIT`` as one call in the thread,
        rolled back if it raises, so a refused or failed write leaves nothing behind."""
        def tx(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                body(conn)
                conn.commit()
            except BaseException:
                if conn.in_transaction:
                    conn.rollback()
                raise

        await self.in_thread(tx)

    async def _carry_entries(self, owner: Owner, command: RecordSteps,
                             rows: Callable[[sqlite3.Connection], None] | None) -> bool:
        """The core store's write of ``command`` with ``rows`` (LangGraph's statements) added
        before its COMMIT, in the connection's thread; True if they went in (the ledger wrote)."""
        ledger = self.store
        done: list[bool] = []

        def run(conn: sqlite3.Connection) -> None:
            before = ledger.before_commit
            if rows is not None:
                def also(tx: sqlite3.Connection) -> None:
                    if before is not None:
                        before(tx)
                    rows(tx)
                    done.append(True)

                ledger.before_commit = also  # this connection's thread, one write at a time
            try:
                ledger.run(conn, owner[0], command)
            finally:
                ledger.before_commit = before

        await self.in_thread(run)
        return bool(done)

    def _owners(self, conn: sqlite3.Connection, work_id: str) -> WorkState | None:
        """The work as the owner check needs it, inside the write's transaction.

        When the head's ``seq`` is the cached one, the cached state (everything but the journal,
        which the check never reads) is used as it is: no journal is copied on every LangGraph
        write (a whole load copies the journal, so a long run paid more for each write).
        """
        row = conn.execute(_HEAD_SEQ, (work_id,)).fetchone()
        cached = self.store.store.cached(work_id)
        if row is not None and cached is not None and cached.state.seq == int(row[0]):
            return cached.state
        return self.store.load(conn, work_id)

    def task_rows(self, slot: TaskWrite, writes: Sequence[tuple[str, Any]]
                  ) -> tuple[str, list[tuple[Any, ...]]]:
        """LangGraph's statement and rows for ``writes`` of the task at ``slot`` (what
        ``aput_writes`` would write)."""
        special = all(w[0] in WRITES_IDX_MAP for w in writes)
        return _PUT_WRITES % ("REPLACE" if special else "IGNORE"), [
            (slot.thread_id, slot.checkpoint_ns, slot.checkpoint_id, slot.task_id, slot.task_path,
             WRITES_IDX_MAP.get(channel, idx), channel, *self.serde.dumps_typed(value))
            for idx, (channel, value) in enumerate(writes)]

    async def _fenced(self, config: RunnableConfig, sql: str, rows: list[tuple[Any, ...]],
                      stray: TaskWrite | None = None) -> None:
        await self._fenced_all(config, [(sql, rows)], stray)

    async def _fenced_all(self, config: RunnableConfig, calls: Rows,
                          stray: TaskWrite | None = None) -> None:
        if not self.is_setup:   # (``setup`` takes the saver's lock even when it is done)
            await self.setup()
        owner = owner_of(config)
        if owner is not None and self.has_entries(owner):
            command = await self._before_write(owner)
            if command is not None:
                def rows(tx: sqlite3.Connection) -> None:
                    if stray is not None:
                        tx.execute(_DELETE_TASK_WRITES, (stray.thread_id, stray.checkpoint_ns,
                                                         stray.checkpoint_id, stray.task_id))
                    for sql, rows_ in calls:
                        tx.executemany(sql, rows_)

                if await self._send_entries(owner, command, rows):
                    return   # LangGraph's statements committed with the entries

        def write(conn: sqlite3.Connection) -> None:
            if owner is not None:
                work, attempt, token = owner
                may_write(self._owners(conn, work), work, attempt, token)
            if stray is not None:
                conn.execute(_DELETE_TASK_WRITES, (stray.thread_id, stray.checkpoint_ns,
                                                   stray.checkpoint_id, stray.task_id))
            for sql, rows in calls:
                conn.executemany(sql, rows)

        await self.in_transaction(write)

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        conf = config["configurable"]
        type_, blob = self.serde.dumps_typed(checkpoint)
        meta = json.dumps(get_checkpoint_metadata(config, metadata),
                          ensure_ascii=False).encode("utf-8", "ignore")
        thread = str(conf["thread_id"])
        rows = [(thread, conf["checkpoint_ns"], checkpoint["id"], conf.get("checkpoint_id"), type_,
                 blob, meta)]
        await self.after_flights(config)
        owner = owner_of(config) if self._held else None
        if owner is not None and owner in self._held:
            await self._put_with_held(config, owner, rows)
        elif not (thread in self.carry_threads and metadata.get("source") == "input"
                and owner_of(config) is None and await self.carry(thread, _PUT, rows)):
            await self._fenced(config, _PUT, rows)
        return {"configurable": {"thread_id": conf["thread_id"],
                                 "checkpoint_ns": conf["checkpoint_ns"],
                                 "checkpoint_id": checkpoint["id"]}}

    async def _put_with_held(self, config: RunnableConfig, owner: Owner,
                             rows: list[tuple[Any, ...]]) -> None:
        """The checkpoint with the ``put_writes`` held for it (and the entries queued for the
        attempt, :meth:`_fenced_all`): the superstep's one transaction."""
        held = self._held.pop(owner, [])
        calls: Rows = [c for h in held for c in h.calls]
        calls.append((_PUT, rows))
        try:
            await self._fenced_all(config, calls)
        except BaseException:
            self._settle_held(held, False)
            raise
        self._settle_held(held, True)

    async def carry(self, thread: str, sql: str, rows: list[tuple[Any, ...]]) -> bool:
        """Hold the input checkpoint of ``run_step``'s program until the step's journal entry
        commits it in its own transaction (one commit and one call into the thread fewer a step);
        False if nobody took it in time, or the entry wrote nothing: write it yourself.

        LangGraph does not wait for that checkpoint before running the task (only the next
        checkpoint's save waits for it), and the program's thread is outlive's own: nobody reads
        it in between.
        """
        loop = asyncio.get_running_loop()
        held = Carried(sql, rows, loop.create_future())
        self._carried.setdefault(thread, []).append(held)
        timer = loop.call_later(self.carry_seconds, self.release, thread)
        try:
            return await held.done
        finally:
            timer.cancel()
            waiting = self._carried.get(thread)
            if waiting is not None and held in waiting:
                waiting.remove(held)
                if not waiting:
                    del self._carried[thread]

    def take(self, thread: str) -> list[Carried]:
        """The checkpoints held for ``thread``, for a journal transaction to write (settle each)."""
        return self._carried.pop(thread, [])

    def release(self, thread: str) -> None:
        """Let the checkpoints held for ``thread`` be written alone."""
        for held in self._carried.pop(thread, []):
            if not held.done.done():
                held.done.set_result(False)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        if self.on_write and await self.journal_on_write(config, writes, task_id, task_path):
            return  # written with the step's journal entry, in its transaction
        if is_special(writes):
            await note_wait(config, writes)   # a person's wait begins or ends
        landing = self.in_flight.get(task_id) if self.in_flight else None
        if landing is not None:
            self.waited += 1
            await asyncio.shield(landing)   # the row's journal write, queued: wait for its end
        await self.after_flights(config)
        conf = config["configurable"]
        if self._carried:
            self.release(str(conf["thread_id"]))   # no journal entry will carry them now
        done, stray = self.claim(config, writes, task_id, task_path)
        if done:
            return  # committed with the step's journal entry, in its transaction
        sql, rows = self.task_rows(TaskWrite(
            thread_id=str(conf["thread_id"]), checkpoint_ns=str(conf["checkpoint_ns"]),
            checkpoint_id=str(conf["checkpoint_id"]), task_id=task_id, task_path=task_path), writes)
        if stray is None and self.entries and self.hold_seconds > 0 \
                and not any(w[0] in WRITES_IDX_MAP for w in writes):
            owner = owner_of(config)
            if owner is not None and owner in self.entries \
                    and await self._hold(owner, [(sql, rows)]):
                return  # committed with the node's entries and the superstep's checkpoint
        await self._fenced(config, sql, rows, stray)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """``AsyncSqliteSaver.aget_tuple``'s reads as one call in the connection's thread.

        The same two statements (the checkpoint, then its pending writes), in one hand-off
        instead of five (cursor, execute, fetch, execute, fetch); LangGraph calls this at the
        start of every invocation.
        """
        if not self.is_setup:
            await self.setup()
        conf = config["configurable"]
        checkpoint_ns = conf.get("checkpoint_ns", "")
        thread = str(conf["thread_id"])
        wanted = get_checkpoint_id(config)
        writes_sql = pending_writes_sql(self._has_task_path)

        def read(conn: sqlite3.Connection) -> tuple[Any, list[Any]]:
            if wanted:
                row = conn.execute(_GET, (thread, checkpoint_ns, wanted)).fetchone()
            else:
                row = conn.execute(_GET_LATEST, (thread, checkpoint_ns)).fetchone()
            if row is None:
                return None, []
            return row, conn.execute(writes_sql, (thread, checkpoint_ns, str(row[1]))).fetchall()

        row, writes = await self.in_thread(read)
        if row is None:
            return None
        thread_id, checkpoint_id, parent_checkpoint_id, type_, checkpoint, metadata = row
        if not wanted:
            config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns,
                                       "checkpoint_id": checkpoint_id}}
        return CheckpointTuple(
            config,
            self.serde.loads_typed((type_, checkpoint)),
            cast(CheckpointMetadata, json.loads(metadata) if metadata is not None else {}),
            ({"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns,
                               "checkpoint_id": parent_checkpoint_id}}
             if parent_checkpoint_id else None),
            load_pending_writes(writes, self.serde),
        )

    async def adelete_thread(self, thread_id: str) -> None:
        """The saver's two deletes, as one transaction in one call."""
        def delete(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM checkpoints WHERE thread_id = ?", (str(thread_id),))
            conn.execute("DELETE FROM writes WHERE thread_id = ?", (str(thread_id),))

        await self.in_transaction(delete)


# The statements of LangGraph's AsyncSqliteSaver (langgraph-checkpoint-sqlite 3.x), so that the
# fence check and the write run as one call in the connection's thread.
_HEAD_SEQ = "SELECT seq FROM outlive_works WHERE work_id = ?"
_GET = ("SELECT thread_id, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata "
        "FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?")
_GET_LATEST = ("SELECT thread_id, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata "
               "FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? "
               "ORDER BY checkpoint_id DESC LIMIT 1")
_PUT = ("INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
        "parent_checkpoint_id, type, checkpoint, metadata) VALUES (?, ?, ?, ?, ?, ?, ?)")
_DELETE_TASK_WRITES = ("DELETE FROM writes WHERE thread_id = ? AND checkpoint_ns = ? AND "
                       "checkpoint_id = ? AND task_id = ?")
_PUT_WRITES = ("INSERT OR %s INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, "
               "task_path, idx, channel, type, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
