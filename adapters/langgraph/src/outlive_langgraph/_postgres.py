"""``langgraph+postgres://USER@HOST:PORT/DB``: LangGraph's PostgresSaver with the ledger beside it.

The checkpoints are LangGraph's (``AsyncPostgresSaver``: tables ``checkpoints``,
``checkpoint_writes``, ``checkpoint_blobs``); the ledger is the core's ``postgresql://`` store
(:class:`outlive._postgres.PostgresLedger`: ``outlive_works`` + ``outlive_rows``) in the same
database: one SQL ledger store for every backend, with the same compare-and-set, the same
append-only rows and the same session settings (``lock_timeout``,
``idle_in_transaction_session_timeout``). URL options: ``durability`` plus the core's.

``backend.checkpointer`` is fenced by default (:class:`FencedAsyncPostgresSaver`): each
``put``/``put_writes`` made for an outlive attempt asks the ledger whether the token may write
(on the work as this process last saw it), then sends LangGraph's own statements as **one
statement** whose every insert is conditional on the work's head still being at the ``seq`` that
was checked, under a share lock on that head row. A ledger write (an admission) that committed
since the check moves ``seq``: nothing lands, the work is read again and asked again. One that is
in flight waits for the lock or makes the statement wait for it and then see the new ``seq``. So
a stale owner's write is refused and nothing of it lands, in one round trip (LangGraph's unfenced
saver pipelines its statements in one too), with no transaction left open between two messages.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import re
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
)
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import DictRow, dict_row, tuple_row

from outlive._postgres import _OPTIONS as _LEDGER_OPTIONS
from outlive._postgres import PostgresLedger, while_busy
from outlive.errors import BackendUnavailable, OutliveError
from outlive.ledger import Command, Heartbeat, Outcome, RecordSteps
from outlive.records import WorkState
from outlive.sqlstore import Read, Write, load_flow, pg_write_carries, pg_write_with

from ._backend import _CoreLedgerBackend
from ._checkpoint import (
    HoldsWrites,
    Owner,
    QueuesEntries,
    TaskWrites,
    may_write,
)
from ._context import TaskWrite, is_special, note_wait, owner_of

__all__ = ["FencedAsyncPostgresSaver", "LangGraphPostgresBackend"]

#: The secrets of waiting attempts (see ``LangGraphBackend.record_wait``), beside LangGraph's tables.
_SECRETS_TABLE = ("CREATE TABLE IF NOT EXISTS outlive_langgraph_secrets (work_id TEXT NOT NULL, "
                  "attempt INTEGER NOT NULL, secret TEXT NOT NULL, PRIMARY KEY (work_id, attempt))")
_KEEP_SECRET = ("INSERT INTO outlive_langgraph_secrets (work_id, attempt, secret) "
                "VALUES (%s, %s, %s) ON CONFLICT (work_id, attempt) DO UPDATE SET secret = "
                "EXCLUDED.secret")
_KEPT_SECRET = "SELECT secret FROM outlive_langgraph_secrets WHERE work_id = %s AND attempt = %s"

#: The attempt a fenced ``aput``/``aput_writes`` in this task writes for (None: not fenced).
_WRITING_FOR: ContextVar[tuple[str, int, int] | None] = ContextVar(
    "outlive_langgraph_pg_owner", default=None)
#: LangGraph rows a ledger write carries into its transaction: (statement, rows, written flag).
_ALSO: ContextVar[tuple[str, list[Any], list[bool], Callable[[], Any] | None] | None] = ContextVar(
    "outlive_langgraph_pg_also", default=None)
#: LangGraph's statements a queued entries' ledger write carries (set around that write by
#: :meth:`FencedAsyncPostgresSaver._carry_entries`), and whether they went in its statement.
_CARRY: ContextVar[tuple[FencedAsyncPostgresSaver, list[tuple[str, Sequence[Any]]], list[bool]]
                   | None] = ContextVar("outlive_langgraph_pg_carry", default=None)
_LOCK_HEAD = "SELECT seq FROM outlive_works WHERE work_id = %s FOR SHARE"
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
#: A fenced write as one statement: the head row at the checked ``seq``, share-locked (a ledger
#: write in flight is waited for, and one committed meanwhile leaves no row: READ COMMITTED
#: checks the locked row's newest version against the condition again); each of LangGraph's
#: inserts is a CTE that inserts ``FROM fence``; the answer is 1 if it took.
_FENCE = "WITH fence AS (SELECT 1 FROM outlive_works WHERE work_id = %s AND seq = %s FOR SHARE)"
_TOOK = " SELECT count(*) FROM fence"
#: The shape of LangGraph's write statements (one row: ``INSERT INTO t (cols) VALUES (%s, ...)
#: [ON CONFLICT ...]``) that can be made conditional. Any other shape is sent in the locked
#: transaction instead.
_INSERT = re.compile(r"^\s*INSERT\s+INTO\s+(\w+)\s*\(([^()]*)\)\s*VALUES\s*\(\s*((?:%s\s*,\s*)*%s)\s*\)"
                     r"((?:\s+ON\s+CONFLICT\b[^;%]*)?)\s*;?\s*$", re.S | re.I)
_COLUMNS = ("SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid WHERE c.oid = ANY(%s::regclass[]) "
            "AND a.attnum > 0 AND NOT a.attisdropped")
_TABLES = ["checkpoints", "checkpoint_blobs", "checkpoint_writes"]
#: Parameters per fenced statement beyond which the write goes to the locked transaction
#: (PostgreSQL takes at most 65,535 in one statement).
_MAX_PARAMS = 30000
#: Compare-and-set attempts before a write falls back to the locked transaction (each failed
#: attempt means the work's head moved: another writer committed in between).
_CAS_TRIES = 8


class _Ledger(PostgresLedger):
    """The core's PostgreSQL ledger; a write can carry LangGraph's task rows along.

    The core sends a ledger write as one statement: data-modifying CTEs (``head``: the
    compare-and-set on the work's head row; ``changed``: its records) answering
    ``SELECT count(*) FROM head``. LangGraph's rows join as one more CTE that inserts only
    ``FROM head`` — only if the compare-and-set took — so the write stays one statement: one
    round trip, atomic, and no transaction left open for a paused process to hold.
    """

    def __init__(self, url: str, *, extra_options: tuple[str, ...] = ()) -> None:
        super().__init__(url, extra_options=extra_options)
        #: Work -> how many of this process's commands on it are in flight.
        self._in_flight: dict[str, int] = {}
        #: Work -> a future set when none is in flight any more (made by :meth:`settled` only).
        self._settle: dict[str, asyncio.Future[None]] = {}

    async def execute(self, work_id: str, command: Command) -> Outcome:
        """The core's command, known to be in flight until it ends (see :meth:`settled`)."""
        busy = self._in_flight
        busy[work_id] = busy.get(work_id, 0) + 1
        try:
            return await super().execute(work_id, command)
        finally:
            left = busy[work_id] - 1
            if left:
                busy[work_id] = left
            else:
                del busy[work_id]
                waiter = self._settle.pop(work_id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)

    async def settled(self, work_id: str) -> None:
        """Wait until none of this process's commands on ``work_id`` is in flight: then the
        store's cache holds every change this process made to it. (A fenced write sent
        meanwhile would find the head moved by our own journal entry and have to try again.)"""
        while work_id in self._in_flight:
            waiter = self._settle.get(work_id)
            if waiter is None:
                waiter = self._settle[work_id] = asyncio.get_running_loop().create_future()
            await asyncio.shield(waiter)

    async def _write(self, req: Write) -> bool:
        carry = _CARRY.get()
        if carry is not None and req.single is not None and pg_write_carries(req.single):
            saver, calls, carried = carry
            merged = saver.carried_statement(req.single, calls)
            if merged is not None:
                took = await super()._write(replace(req, single=merged))
                if took:
                    carried.append(True)
                return took
        also = _ALSO.get()
        if also is None:
            return await super()._write(req)
        rows, wrote, on_send = also[1], also[2], also[3]
        values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s)"] * len(rows))
        merged = pg_write_with(req.single, [(_INSERT_TASK_ROWS.format(values=values),
                                             [v for row in rows for v in row])])
        if merged is None:
            return await super()._write(req)
        if on_send is not None:
            on_send()   # the task may return now: its caller awaits this write's end
        took = await super()._write(replace(req, single=merged))
        if took:
            wrote.append(True)
        return took


def _attempt_of(command: Command) -> int | None:
    """The attempt a worker's command writes for (None: a controller's command)."""
    attempt = getattr(command, "attempt", None)
    return attempt if isinstance(attempt, int) and hasattr(command, "token") else None


async def _nothing_in_flight(work_id: str) -> None:
    """A ledger that does not track its commands in flight (the fence then may miss and retry)."""


class _Recorder:
    """Stands in for the cursor of a fenced write: LangGraph's statements are kept, not sent,
    and go to the server together once its ``aput``/``aput_writes`` has made them all."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Sequence[Any]]] = []

    async def execute(self, query: str, params: Sequence[Any] | None = None, **_: Any) -> _Recorder:
        self.calls.append((query, tuple(params or ())))
        return self

    async def executemany(self, query: str, params_seq: Any, **_: Any) -> None:
        self.calls.extend((query, tuple(params)) for params in params_seq)


class _FencedCursor:
    """``async with saver._cursor(...) as cur`` for a fenced ``aput``: a :class:`_Recorder`, its
    statements sent fenced when the block ends without an error (a plain class: this is on
    every superstep's path, and a generator-based context manager costs more)."""

    __slots__ = ("owner", "recorder", "saver")

    def __init__(self, saver: FencedAsyncPostgresSaver, owner: tuple[str, int, int]) -> None:
        self.saver = saver
        self.owner = owner
        self.recorder = _Recorder()

    async def __aenter__(self) -> _Recorder:
        return self.recorder

    async def __aexit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        if kind is None:
            await self.saver._fenced(self.owner, None, self.recorder.calls, False)
        return False


class FencedAsyncPostgresSaver(AsyncPostgresSaver, TaskWrites, QueuesEntries,
                               HoldsWrites[tuple[str, Sequence[Any]]]):
    """``AsyncPostgresSaver`` whose writes for an outlive attempt are fenced in the write itself.

    The owner check is asked on the work as this process last saw it (the core store's cache;
    the work is read when there is none), then LangGraph's statements go out as one statement
    conditional on the head's ``seq`` (``_FENCE``): it lands whole only if no ledger write
    committed since the state that was checked, and waits for one in flight. Otherwise nothing
    lands, the work is read again and asked again (a refusal is raised only on a fresh read).
    A statement of another shape than LangGraph's inserts, a predicted task row to remove, or a
    head that keeps moving: one transaction holding the share lock through the check (the
    earlier way, 4 or 5 round trips). Writes without an attempt in the config, and all reads, are
    LangGraph's own.
    """

    #: An attempt's ``interrupt()`` and ``Command(resume=...)`` are recorded by the saver.
    records_waits = True

    def __init__(self, conn: psycopg.AsyncConnection[DictRow], ledger: PostgresLedger) -> None:
        AsyncPostgresSaver.__init__(self, conn)
        TaskWrites.__init__(self)
        #: The core's ledger in the same database: the fence reads the work through its store.
        self.ledger = ledger
        #: Awaited after the owner check and before LangGraph's statements are sent (inside the
        #: transaction on the locked way); tests pause a writer here.
        self.before_write: Callable[[tuple[str, int, int]], Awaitable[None]] | None = None
        #: False sends every fenced write the locked way (tests of that way).
        self.one_statement = True
        #: Fenced writes sent as one statement, and those sent the locked way (benchmarks, tests).
        self.statements = 0
        self.locked = 0
        #: Fenced statements that found the head moved and were sent again (tests, benchmarks).
        self.missed = 0
        #: How long a fenced ``put_writes`` waits for the next fenced write to carry it (0: never).
        self.hold_seconds = 0.005
        #: Fenced ``put_writes`` sent in the next write's statement (tests, benchmarks).
        self.held = 0
        self._held = {}
        #: Node steps' journal entries, queued for the attempt's next fenced write to carry.
        self._init_entries()
        #: Task id -> the end of a journal write carrying that task's row, sent but maybe not
        #: committed yet (its task returned once it was sent).
        self.in_flight: dict[str, asyncio.Future[None]] = {}
        #: LangGraph ``put_writes`` that came while their task's journal write was in flight.
        self.waited = 0
        self._types: dict[str, dict[str, str]] = {}
        self._shapes: dict[tuple[str, str], str | None] = {}

    async def setup(self) -> None:
        """LangGraph's tables, then their column types (the fenced statement casts to them)."""
        await super().setup()
        async with self.lock, self.conn.cursor(row_factory=tuple_row) as cur:  # type: ignore[union-attr]
            await cur.execute(_COLUMNS, (_TABLES,))
            for table, column, type_ in await cur.fetchall():
                self._types.setdefault(str(table), {})[str(column)] = str(type_)

    def task_rows(self, slot: TaskWrite, writes: Sequence[tuple[str, Any]]) -> tuple[str, list[Any]]:
        """LangGraph's rows for ``writes`` of the task at ``slot``, of regular channels (what
        ``aput_writes`` would write: its statement, and the rows in its column order)."""
        return self.INSERT_CHECKPOINT_WRITES_SQL, self._dump_writes(
            slot.thread_id, slot.checkpoint_ns, slot.checkpoint_id, slot.task_id, slot.task_path,
            writes)

    async def _as_owner(self, config: RunnableConfig, write: Callable[[], Awaitable[Any]]) -> Any:
        owner = owner_of(config)
        if owner is None:
            return await write()
        await self.after_flights(config)   # the steps it follows, landed first
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
        if self.on_write and await self.journal_on_write(config, writes, task_id, task_path):
            return  # written with the step's journal entry, in its statement
        if is_special(writes):
            await note_wait(config, writes)   # a person's wait begins or ends
        landing = self.in_flight.get(task_id)
        if landing is not None:
            self.waited += 1
            await asyncio.shield(landing)   # the row's journal write, sent: wait for its end
        await self.after_flights(config)   # the steps it follows, landed first
        owner = owner_of(config)
        done, stray = self.claim(config, writes, task_id, task_path)
        if done:
            return  # committed with the step's journal entry, in its transaction
        if stray is None and owner is None:
            await super().aput_writes(config, writes, task_id, task_path)  # not fenced: LangGraph's
            return
        special = any(w[0] in WRITES_IDX_MAP for w in writes)
        # ``AsyncPostgresSaver.aput_writes``'s statements, its rows made here on the loop (its
        # ``to_thread`` hop costs more than a step's few rows), sent fenced (``_fenced``).
        conf = config["configurable"]
        query = self.UPSERT_CHECKPOINT_WRITES_SQL if special else self.INSERT_CHECKPOINT_WRITES_SQL
        calls: list[tuple[str, Sequence[Any]]] = [
            (query, tuple(row)) for row in self._dump_writes(
                conf["thread_id"], conf["checkpoint_ns"], conf["checkpoint_id"], task_id,
                task_path, writes)]
        hold = stray is None and not special and self.hold_seconds > 0
        # Rolled back by the server while a ledger writer held the head: nothing landed.
        await while_busy(functools.partial(self._fenced, owner, stray, calls, hold),
                         self.ledger.options["timeout"])

    def _cursor(self, *, pipeline: bool = False) -> Any:
        """Where LangGraph's statements go: for a fenced ``aput``, kept and sent fenced at the end
        (:class:`_FencedCursor`); otherwise LangGraph's own cursor.

        (A fenced ``aput_writes`` makes its statements itself and sends them the same way,
        :meth:`_fenced`.) A fenced ``put_writes`` of regular channels is held (up to
        :attr:`hold_seconds`) for the next fenced write of the same attempt, which sends both
        as one statement: LangGraph saves a superstep's task writes and then, at once, its
        checkpoint, and awaits only the checkpoint. One commit for the two instead of two, and
        the task writes no longer land beside the next step's journal entry (each waits for the
        other on the work's head row). A held write not taken in time is sent alone, as before.

        (``_cursor`` is the one place ``AsyncPostgresSaver`` opens a cursor; the version range in
        pyproject.toml keeps it.)
        """
        owner = _WRITING_FOR.get()
        if owner is None:
            return super()._cursor(pipeline=pipeline)
        return _FencedCursor(self, owner)

    async def _fenced(self, owner: tuple[str, int, int] | None, stray: TaskWrite | None,
                      calls: list[tuple[str, Sequence[Any]]], hold: bool) -> None:
        """LangGraph's statements ``calls`` for ``owner``, fenced: held for the attempt's next
        fenced write (``hold``, see :meth:`_cursor`), carried by the ledger write of the node
        steps' queued journal entries (:class:`~._checkpoint.QueuesEntries`), or sent as one
        statement conditional on the head; with a predicted task row to remove
        (``stray``), or when none of those can be made, in the locked transaction."""
        if stray is None and owner is not None:
            if hold and await self._hold(owner, calls):
                return  # sent, whole, in the statement of the write that took it
            held = self._held.pop(owner, [])
            if held:
                calls = [c for h in held for c in h.calls] + calls
            try:
                if self.has_entries(owner):
                    command = await self._before_write(owner)
                    if command is not None and await self._send_entries(owner, command, calls):
                        self._settle_held(held, True)
                        return  # committed in the statement of the node steps' entries
                statement = self._one_statement(calls)
                if statement is None or not await self._compare_and_write(owner, *statement):
                    await self._locked_write(owner, None, calls)
            except BaseException:
                self._settle_held(held, False)
                raise
            self._settle_held(held, True)
            return
        if owner is not None:
            await self.flush_entries(owner)   # the entries first: nothing lands without them
        await self._locked_write(owner, stray, calls)

    async def _carry_entries(self, owner: Owner, command: RecordSteps,
                             rows: list[tuple[str, Sequence[Any]]] | None) -> bool:
        """The ledger's write of the queued entries ``command``, with LangGraph's statements
        ``rows`` as CTEs ``FROM head`` (they land only if its compare-and-set took); True if
        they went in its statement (else the entries went alone: write them yourself)."""
        if not rows:
            await self.ledger.execute(owner[0], command)
            return False
        carried: list[bool] = []
        token = _CARRY.set((self, rows, carried))
        try:
            await self.ledger.execute(owner[0], command)
        finally:
            _CARRY.reset(token)
        return bool(carried)

    def carried_statement(self, single: tuple[str, tuple[Any, ...]],
                          calls: list[tuple[str, Sequence[Any]]]
                          ) -> tuple[str, tuple[Any, ...]] | None:
        """The core's one-statement ledger write with LangGraph's inserts as CTEs ``FROM head``
        (they land only if its compare-and-set took), or None when one cannot be made so."""
        if not self.one_statement:
            return None
        ctes: list[tuple[str, Sequence[Any]]] = []
        for query, args in calls:
            shape = self._conditional(query, "head")
            if shape is None:
                return None
            ctes.append((shape, args))
        if len(single[1]) + sum(len(args) for _, args in ctes) > _MAX_PARAMS:
            return None
        return pg_write_with(single, ctes)

    def _one_statement(self, calls: list[tuple[str, Sequence[Any]]]
                       ) -> tuple[str, list[Any]] | None:
        """LangGraph's inserts as CTEs of one statement conditional on the fence, or None."""
        if not self.one_statement or not calls:
            return None
        parts: list[str] = []
        params: list[Any] = []
        for i, (query, args) in enumerate(calls):
            shape = self._conditional(query, "fence")
            if shape is None:
                return None
            parts.append(f", w{i} AS ({shape})")
            params.extend(args)
        if len(params) > _MAX_PARAMS:
            return None
        return _FENCE + "".join(parts) + _TOOK, params

    def _conditional(self, query: str, source: str) -> str | None:
        """``INSERT INTO t (cols) VALUES (%s, ...) rest`` -> ``INSERT INTO t (cols) SELECT
        %s::type, ... FROM <source> rest`` (typed from the table: a bare parameter in a SELECT
        list would be taken as text), or None for any other shape."""
        key = (query, source)
        shape = self._shapes.get(key, "")
        if shape == "":
            shape = self._shapes[key] = self._shape(query, source)
        return shape

    def _shape(self, query: str, source: str) -> str | None:
        m = _INSERT.match(query)
        if m is None:
            return None
        table, cols, values, rest = m.groups()
        names = [c.strip() for c in cols.split(",")]
        types = self._types.get(table)
        if types is None or len(names) != values.count("%s") or any(n not in types for n in names):
            return None
        typed = ", ".join(f"%s::{types[n]}" for n in names)
        return (f"INSERT INTO {table} ({', '.join(names)}) SELECT {typed} FROM {source}"
                f"{rest.rstrip()}")

    async def _compare_and_write(self, owner: tuple[str, int, int], sql: str,
                                 params: list[Any]) -> bool:
        """Check on the work as last seen, write conditional on its ``seq``; False: give up.

        This process's own commands on the work that are in flight are waited for first (they
        move the head: a statement sent meanwhile would miss), so the cache is as new as this
        process knows. A refusal on a cached state is not trusted (the cache may be behind):
        the work is read again and asked again, and only a refusal on that fresh read is raised.
        """
        work, attempt, token = owner
        ledger = self.ledger
        settled = ledger.settled if isinstance(ledger, _Ledger) else _nothing_in_flight
        store = ledger.store
        conn = self.conn
        assert isinstance(conn, psycopg.AsyncConnection)
        use_cache = True
        for _ in range(_CAS_TRIES):
            await settled(work)
            cached = store.cached(work) if use_cache else None
            state: WorkState | None
            if cached is not None:
                state, fresh = cached.state, False
            else:
                state, fresh = await ledger.load(work), True
            try:
                may_write(state, work, attempt, token)
            except OutliveError:
                if fresh:
                    raise
                use_cache = False
                continue
            assert state is not None
            if self.before_write is not None:
                await self.before_write(owner)
            async with self.lock:
                # A command of ours that started while this waited for the connection: let it
                # land and ask again on what it left, rather than send a statement bound to miss.
                await settled(work)
                now = store.cached(work)
                if now is not None and now.state.seq != state.seq:
                    use_cache = True
                    continue
                async with conn.cursor(binary=True, row_factory=tuple_row) as cur:
                    await cur.execute(sql, (work, state.seq, *params))
                    row = await cur.fetchone()
            if row is not None and int(row[0]) == 1:
                self.statements += 1
                return True
            # The head moved since that state: by a command of this process (then the cache has
            # it once that command ends), or by another process (read the work again).
            self.missed += 1
            await settled(work)
            now = store.cached(work)
            use_cache = now is not None and now.state.seq != state.seq
        return False

    async def _locked_write(self, owner: tuple[str, int, int] | None, stray: TaskWrite | None,
                            calls: list[tuple[str, Sequence[Any]]]) -> None:
        """The statements in one transaction that share-locks the head before the check."""
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
            for query, args in calls:
                await cur.execute(query, args)
        self.locked += 1

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


#: Entries in one batch of journal writes at most (each carries its task's row).
_BATCH = 64


@dataclass(eq=False)
class _Batch:
    """Journal entries queued while the attempt's last write on the work is at the server."""

    owner: tuple[int, int]
    #: The steps in flight when the batch opened: it is sent once they ended.
    after: list[asyncio.Task[Any]]
    items: list[tuple[RecordSteps, TaskWrite, Sequence[tuple[str, Any]],
                      asyncio.Future[tuple[Outcome, bool]]]] = field(default_factory=list)
    sender: asyncio.Task[None] | None = None
    #: Set when the batch's write ended (LangGraph's ``put_writes`` of its tasks wait for it).
    landed: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())


class LangGraphPostgresBackend(_CoreLedgerBackend):
    """Checkpoints and the fenced ledger in one PostgreSQL database."""

    capabilities = frozenset({"atomic-commands", "durable", "multi-process"})
    store_options = tuple(_LEDGER_OPTIONS)
    merges_task_writes = True
    #: An ``outlive_task``'s body returns once its journal write is sent (see ``_engine``).
    returns_when_sent = True

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.ledger: PostgresLedger = _Ledger(url, extra_options=("durability",))
        self.conninfo = self.ledger.conninfo
        self._saver: FencedAsyncPostgresSaver | None = None
        self._saver_conn: psycopg.AsyncConnection[Any] | None = None
        #: Work -> the batch of journal entries being queued (``durability="async"``).
        self._batches: dict[str, _Batch] = {}

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
            await self._secrets_sql(_SECRETS_TABLE, ())
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
                                     writes: Sequence[tuple[str, Any]], *,
                                     announce: bool = True,
                                     on_send: Callable[[], Any] | None = None
                                     ) -> tuple[Outcome, bool]:
        """The ledger's write and LangGraph's rows for the task in one transaction.

        With ``on_send`` (the task returns once the write is sent), LangGraph's own
        ``put_writes`` of the task may come before the commit: it waits for it (``in_flight``)
        and is then answered as done, or written as usual if the rows did not land.
        """
        if slot is None or self._saver is None:
            return await self.execute(work_id, command), False
        saver = self._saver
        await self._flush_entries(work_id, command)   # the node steps' entries it follows
        if on_send is not None and type(command) is RecordSteps and saver.flying.get(work_id):
            # Another step's write is at the server (``durability="async"``): this one joins
            # the next batch instead of waiting for it, and its task returns now.
            return await self._batched(work_id, command, slot, writes, on_send)
        if saver.in_flight_for(work_id):
            await saver.landed(work_id, _attempt_of(command))   # a step's write still in flight
        sql, rows = saver.task_rows(slot, writes)
        wrote: list[bool] = []
        landed: asyncio.Future[None] | None = None
        if on_send is not None:
            landed = saver.in_flight[slot.task_id] = asyncio.get_running_loop().create_future()
        token = _ALSO.set((sql, rows, wrote, on_send))
        try:
            out = await self.ledger.execute(work_id, command)
        finally:
            _ALSO.reset(token)
            if wrote and announce:
                saver.wrote(slot, writes)
            if landed is not None:
                if saver.in_flight.get(slot.task_id) is landed:
                    del saver.in_flight[slot.task_id]
                landed.set_result(None)
        return out, bool(wrote)

    async def _batched(self, work_id: str, command: RecordSteps, slot: TaskWrite,
                       writes: Sequence[tuple[str, Any]], on_send: Callable[[], Any]
                       ) -> tuple[Outcome, bool]:
        """``record_with_task_write`` while this process's last journal write on the work is
        still at the server: queue the entry (and its task's row) for the batch sent once that
        write ended, one statement for all entries queued meanwhile, and let the task return
        (``on_send``) now. As raw LangGraph's task writes queue on its connection, a step never
        waits for the one before; the barrier (``landed``) waits for the batch."""
        saver = self._saver
        assert saver is not None
        loop = asyncio.get_running_loop()
        batch = self._batches.get(work_id)
        if batch is None or batch.owner != (command.attempt, command.token) \
                or len(batch.items) >= _BATCH:
            # After every step in flight now (the earlier batch's among them), not this one's.
            batch = _Batch((command.attempt, command.token), list(saver.flying.get(work_id, ())))
            self._batches[work_id] = batch
            # In a context of its own: the step's (its task's row, its node) is not the batch's.
            batch.sender = loop.create_task(self._send_batch(work_id, batch),
                                            context=contextvars.Context())
        done: asyncio.Future[tuple[Outcome, bool]] = loop.create_future()
        batch.items.append((command, slot, writes, done))
        saver.in_flight[slot.task_id] = batch.landed
        on_send()
        return await done

    async def _send_batch(self, work_id: str, batch: _Batch) -> None:
        """Send ``batch`` once the writes before it ended: one ledger command journaling every
        entry queued, LangGraph's rows for their tasks in its statement. A write before it that
        failed fails the batch with the same error (nothing of it is sent)."""
        saver = self._saver
        assert saver is not None
        try:
            if batch.after:
                await asyncio.wait(batch.after)
                for step in batch.after:
                    saver._landed_one(work_id, step)
            if self._batches.get(work_id) is batch:
                del self._batches[work_id]   # later entries go to a batch of their own
            error = saver.flight_errors.get((work_id, batch.owner[0]))
            if error is not None:
                raise error
            commands = [c for c, _slot, _w, _d in batch.items]
            merged = RecordSteps(attempt=batch.owner[0], token=batch.owner[1],
                                 entries=tuple(e for c in commands for e in c.entries),
                                 at=max(c.at for c in commands), secret=commands[0].secret)
            rows = [row for _c, slot, writes, _d in batch.items
                    for row in saver.task_rows(slot, writes)[1]]
            wrote: list[bool] = []
            token = _ALSO.set((saver.INSERT_CHECKPOINT_WRITES_SQL, rows, wrote, None))
            try:
                out = await self.ledger.execute(work_id, merged)
            finally:
                _ALSO.reset(token)
            for _c, slot, writes, done in batch.items:
                if wrote:
                    saver.wrote(slot, writes)
                if not done.done():
                    done.set_result((out, bool(wrote)))
        except BaseException as exc:
            for *_rest, done in batch.items:
                if not done.done():
                    done.set_exception(exc)
        finally:
            if self._batches.get(work_id) is batch:
                del self._batches[work_id]
            for _c, slot, _w, _d in batch.items:
                if saver.in_flight.get(slot.task_id) is batch.landed:
                    del saver.in_flight[slot.task_id]
            if not batch.landed.done():
                batch.landed.set_result(None)

    async def execute(self, work_id: str, command: Command) -> Outcome:
        """The core's command, after this process's journal writes on the work still in flight
        (``durability="async"``) landed: it depends on them, and its compare-and-set would
        miss while one is at the server. A heartbeat neither waits nor raises their error."""
        saver = self._saver
        if saver is not None and saver.in_flight_for(work_id) and type(command) is not Heartbeat:
            await saver.landed(work_id, _attempt_of(command))
        await self._flush_entries(work_id, command)   # the node steps' entries it follows
        return await self.ledger.execute(work_id, command)

    def _entry_saver(self) -> QueuesEntries | None:
        return self._saver

    async def _secrets_sql(self, query: str, params: tuple[Any, ...]) -> Any:
        saver = self._saver
        if saver is None:
            raise BackendUnavailable(f"{self.url}: backend not started (use open_backend)")
        async with saver.lock, saver.conn.cursor(row_factory=tuple_row) as cur:  # type: ignore[union-attr]
            await cur.execute(query, params)
            return await cur.fetchone() if cur.description is not None else None

    async def keep_secret(self, work_id: str, attempt: int, secret: str) -> None:
        """In a table beside LangGraph's, in the same database (see ``record_wait``)."""
        await self._secrets_sql(_KEEP_SECRET, (work_id, attempt, secret))

    async def kept_secret(self, work_id: str, attempt: int) -> str | None:
        row = await self._secrets_sql(_KEPT_SECRET, (work_id, attempt))
        return None if row is None else str(row[0])

    async def close(self) -> None:
        self._program = None  # bound to this saver; a restarted backend builds a new one
        await self.ledger.close()
        if self._saver_conn is not None:
            await self._saver_conn.close()
        self._saver_conn = None
        self._saver = None
