"""``langgraph+postgres://USER@HOST:PORT/DB``: LangGraph's PostgresSaver with the ledger beside it.

The checkpoints are LangGraph's (``AsyncPostgresSaver``: tables ``checkpoints``,
``checkpoint_writes``, ``checkpoint_blobs``); the ledger is the core's ``postgresql://`` store
(:class:`outlive._postgres.PostgresLedger`: ``outlive_works`` + ``outlive_rows``) in the same
database: one SQL ledger store for every backend, with the same compare-and-set, the same
append-only rows and the same session settings (``lock_timeout``,
``idle_in_transaction_session_timeout``). URL options: ``durability`` plus the core's.

``backend.checkpointer`` is fenced by default (:class:`FencedAsyncPostgresSaver`): each
``put``/``put_writes`` made for an outlive attempt runs in one transaction that first takes a
share lock on the work's ledger head, asks the ledger whether the token may write, then does
LangGraph's own statements. A ledger write (an admission) waits for that lock, so none can commit
between the check and the write; a paused writer holding it is cut off by the server
(``idle_in_transaction_session_timeout``) and its write never lands.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import replace
from typing import Any

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import DictRow, dict_row, tuple_row

from outlive._postgres import _OPTIONS as _LEDGER_OPTIONS
from outlive._postgres import PostgresLedger, while_busy
from outlive.errors import BackendUnavailable
from outlive.ledger import Command, Outcome
from outlive.records import WorkState
from outlive.sqlstore import Read, Write, load_flow

from ._backend import _CoreLedgerBackend
from ._checkpoint import _RETURN, TaskWrites, may_write
from ._context import TaskWrite, owner_of

__all__ = ["FencedAsyncPostgresSaver", "LangGraphPostgresBackend"]

#: The attempt a fenced ``aput``/``aput_writes`` in this task writes for (None: not fenced).
_WRITING_FOR: ContextVar[tuple[str, int, int] | None] = ContextVar(
    "outlive_langgraph_pg_owner", default=None)
#: A predicted task row to remove in this task's ``put_writes`` transaction (see ``TaskWrites``).
_STRAY: ContextVar[TaskWrite | None] = ContextVar("outlive_langgraph_pg_stray", default=None)
#: LangGraph rows a ledger write carries into its transaction: (statement, rows, written flag).
_ALSO: ContextVar[tuple[str, list[Any], list[bool]] | None] = ContextVar(
    "outlive_langgraph_pg_also", default=None)
_LOCK_HEAD = "SELECT seq FROM outlive_works WHERE work_id = %s FOR SHARE"
#: How the core's one-statement ledger write ends (its answer: 1 if the compare-and-set took).
_ANSWER = " SELECT count(*) FROM head"
#: LangGraph's insert of a task's rows (``AsyncPostgresSaver``'s columns, ``DO NOTHING`` as
#: its own insert of a regular channel), only for a ledger write that took.
_INSERT_TASK_ROWS = (
    "INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, "
    "idx, channel, type, blob) SELECT v.thread_id, v.checkpoint_ns, v.checkpoint_id, v.task_id, "
    "v.task_path, v.idx::int, v.channel, v.type, v.blob::bytea FROM head, (VALUES {values}) AS "
    "v(thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob) "
    "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO NOTHING")
_DELETE_TASK_WRITES = ("DELETE FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_ns = %s "
                       "AND checkpoint_id = %s AND task_id = %s")


class _Ledger(PostgresLedger):
    """The core's PostgreSQL ledger; a write can carry LangGraph's task rows along.

    The core sends a ledger write as one statement: data-modifying CTEs (``head``: the
    compare-and-set on the work's head row; ``changed``: its records) answering
    ``SELECT count(*) FROM head``. LangGraph's rows join as one more CTE that inserts only
    ``FROM head`` — only if the compare-and-set took — so the write stays one statement: one
    round trip, atomic, and no transaction left open for a paused process to hold.
    """

    async def _write(self, req: Write) -> bool:
        also = _ALSO.get()
        if also is None or req.single is None or not req.single[0].endswith(_ANSWER):
            return await super()._write(req)
        sql, params = req.single
        rows, wrote = also[1], also[2]
        values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s)"] * len(rows))
        merged = (sql[:-len(_ANSWER)] + ", langgraph AS (" + _INSERT_TASK_ROWS.format(values=values)
                  + ")" + _ANSWER, (*params, *(v for row in rows for v in row)))
        took = await super()._write(replace(req, single=merged))
        if took:
            wrote.append(True)
        return took


class FencedAsyncPostgresSaver(AsyncPostgresSaver, TaskWrites):
    """``AsyncPostgresSaver`` whose writes for an outlive attempt are checked in their transaction.

    ``BEGIN``; ``SELECT ... FOR SHARE`` on the work's head row in ``outlive_works`` (the row every
    ledger write updates, so no ledger write can commit until this transaction ends); read the
    work through the core's SQL ledger store (its cache, when the head's ``seq`` says it is
    current); ask the ledger; LangGraph's own statements; ``COMMIT``. A refused write leaves
    nothing. Writes without an attempt in the config, and all reads, are LangGraph's own.
    """

    def __init__(self, conn: psycopg.AsyncConnection[DictRow], ledger: PostgresLedger) -> None:
        AsyncPostgresSaver.__init__(self, conn)
        TaskWrites.__init__(self)
        #: The core's ledger in the same database: the fence reads the work through its store.
        self.ledger = ledger
        #: Awaited inside the fenced transaction, after the check and before LangGraph's
        #: statements (tests pause a writer here).
        self.before_write: Callable[[tuple[str, int, int]], Awaitable[None]] | None = None

    def task_rows(self, slot: TaskWrite, value: Any) -> tuple[str, list[Any]]:
        """LangGraph's rows for a task that returned ``value`` (what ``aput_writes`` would write:
        its statement, and the rows in its column order)."""
        return self.INSERT_CHECKPOINT_WRITES_SQL, self._dump_writes(
            slot.thread_id, slot.checkpoint_ns, slot.checkpoint_id, slot.task_id, slot.task_path,
            [(_RETURN, value)])

    async def _as_owner(self, config: RunnableConfig, write: Callable[[], Awaitable[Any]]) -> Any:
        owner = owner_of(config)
        if owner is None and _STRAY.get() is None:
            return await write()
        token = _WRITING_FOR.set(owner)
        try:
            # Rolled back by the server while a ledger writer held the head: nothing landed.
            return await while_busy(write, self.ledger.options["timeout"])
        finally:
            _WRITING_FOR.reset(token)

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        out: RunnableConfig = await self._as_owner(
            config, lambda: super(FencedAsyncPostgresSaver, self).aput(
                config, checkpoint, metadata, new_versions))
        return out

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        done, stray = self.claim(config, writes, task_id, task_path)
        if done:
            return  # committed with the step's journal entry, in its transaction
        token = _STRAY.set(stray)
        try:
            await self._as_owner(config, lambda: super(FencedAsyncPostgresSaver, self).aput_writes(
                config, writes, task_id, task_path))
        finally:
            _STRAY.reset(token)

    @asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[psycopg.AsyncCursor[DictRow]]:
        """LangGraph's statements run on this cursor: inside the fence's transaction when owned.

        (``_cursor`` is the one place ``AsyncPostgresSaver`` opens a cursor; the version range in
        pyproject.toml keeps it.)
        """
        owner, stray = _WRITING_FOR.get(), _STRAY.get()
        if owner is None and stray is None:
            async with super()._cursor(pipeline=pipeline) as cur:
                yield cur
            return
        conn = self.conn
        assert isinstance(conn, psycopg.AsyncConnection)
        # Not pipelined: a writer paused inside this transaction must be "idle in transaction"
        # for the server to cut it off, and in a pipeline without Sync it is not.
        async with self.lock, conn.transaction(), \
                conn.cursor(binary=True, row_factory=dict_row) as cur:
            if owner is not None:
                await self._check(conn, owner)
                if self.before_write is not None:
                    await self.before_write(owner)
            if stray is not None:
                await cur.execute(_DELETE_TASK_WRITES, (stray.thread_id, stray.checkpoint_ns,
                                                        stray.checkpoint_id, stray.task_id))
            yield cur

    async def _check(self, conn: psycopg.AsyncConnection[Any], owner: tuple[str, int, int]) -> None:
        work, attempt, token = owner
        store = self.ledger.store
        async with conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(_LOCK_HEAD, (work,))
            head = await cur.fetchone()
            cached = store.cached(work)
            if head is not None and cached is not None and cached.state.seq == int(head[0]):
                state: WorkState | None = cached.state  # the owner check reads no journal entry
            else:
                flow = load_flow(store, work)
                answer: Any = None
                while True:
                    try:
                        req = flow.send(answer)
                    except StopIteration as stop:
                        state = stop.value
                        break
                    assert isinstance(req, Read)
                    await cur.execute(req.sql, req.params)
                    answer = await cur.fetchall()
        may_write(state, work, attempt, token)


class LangGraphPostgresBackend(_CoreLedgerBackend):
    """Checkpoints and the fenced ledger in one PostgreSQL database."""

    capabilities = frozenset({"atomic-commands", "durable", "multi-process"})
    store_options = tuple(_LEDGER_OPTIONS)
    merges_task_writes = True

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.ledger: PostgresLedger = _Ledger(url, extra_options=("durability",))
        self.conninfo = self.ledger.conninfo
        self._saver: FencedAsyncPostgresSaver | None = None
        self._saver_conn: psycopg.AsyncConnection[Any] | None = None

    @property
    def checkpointer(self) -> BaseCheckpointSaver[Any]:
        """LangGraph's ``AsyncPostgresSaver``, fenced in each write's own transaction."""
        if self._saver is None:
            raise BackendUnavailable(f"{self.url}: backend not started (use open_backend)")
        return self._saver

    async def start(self) -> None:
        try:
            # The ledger's session settings: a paused writer inside a fenced transaction is
            # cut off by the server, and a lock wait gives up (and is retried) instead of hanging.
            options = self.ledger.options
            self._saver_conn = await psycopg.AsyncConnection.connect(
                self.conninfo, autocommit=True, prepare_threshold=0, row_factory=dict_row,
                connect_timeout=10,
                options=(f"-c lock_timeout={options['lock_timeout']} "
                         f"-c idle_in_transaction_session_timeout="
                         f"{options['idle_in_transaction_session_timeout']} "
                         "-c synchronous_commit=on"))
            self._saver = FencedAsyncPostgresSaver(self._saver_conn, self.ledger)
            await self._saver.setup()
        except psycopg.OperationalError as exc:
            await self.close()
            raise BackendUnavailable(f"{self.url}: PostgreSQL is not reachable: {exc}",
                                     url=self.url) from exc
        try:
            await self.ledger.start()
        except BaseException:
            await self.close()
            raise

    async def record_with_task_write(self, work_id: str, command: Command, slot: TaskWrite | None,
                                     value: Any) -> tuple[Outcome, bool]:
        """The ledger's write and LangGraph's row for the task in one transaction."""
        if slot is None or self._saver is None:
            return await self.ledger.execute(work_id, command), False
        saver = self._saver
        sql, rows = saver.task_rows(slot, value)
        wrote: list[bool] = []
        token = _ALSO.set((sql, rows, wrote))
        try:
            out = await self.ledger.execute(work_id, command)
        finally:
            _ALSO.reset(token)
        if wrote:
            saver.wrote(slot, value)
        return out, bool(wrote)

    async def close(self) -> None:
        self._program = None  # bound to this saver; a restarted backend builds a new one
        await self.ledger.close()
        if self._saver_conn is not None:
            await self._saver_conn.close()
        self._saver_conn = None
        self._saver = None
