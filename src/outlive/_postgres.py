"""``postgresql://USER@HOST:PORT/DB``: the ledger on a PostgreSQL server, for many processes.

The same store as ``sqlite://`` (:mod:`outlive.sqlstore`: head row + one row per record, read
and apply with no lock, a short write transaction whose conditional ``UPDATE ... WHERE seq = ?``
is the compare-and-set), driven with psycopg's async connections so the event loop never waits.

What a server adds over an embedded file: a paused or dead holder is cut off. Every session
runs with ``idle_in_transaction_session_timeout`` (the server ends a session that sits inside a
transaction, so a worker SIGSTOPped mid-write loses its locks) and ``lock_timeout`` (a write that
waits for a row lock gives up and is retried, never stuck). Row locks are per work, so a paused
writer never holds up other works at all. ``synchronous_commit=on``: a commit is durable.

URL options (milliseconds): ``lock_timeout`` (default 2000),
``idle_in_transaction_session_timeout`` (default 10000), ``pool`` (connections per backend,
default 4), ``timeout`` (how long a command may keep retrying a busy work, default 30000);
``group`` (default 64): at most this many reads and writes queued at the same moment go to the
server together, in one pipeline and one transaction (one commit; ``group=1``: each alone).

Group commit: when many works' commands are in flight (a runtime recovering a thousand works),
the requests queued while the previous batch was at the server are sent as one pipeline with no
sync between them, which PostgreSQL runs as one implicit transaction: one round trip and one
commit for the batch. No answer of the batch is given before its commit. If a statement fails,
the whole batch was rolled back and each request runs again on its own; if the connection is
lost, whether the batch committed is unknown and each command reads back, as a single write
does. Writes go in order of work id, so two batches never wait on each other's rows in a cycle.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from contextlib import asynccontextmanager
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg_errors

from .backend import Backend, url_options, valid_runner
from .errors import BackendUnavailable, ConfigError
from .ledger import Command, Outcome
from .records import WorkState
from .sqlstore import (
    POSTGRES,
    Read,
    Request,
    SqlLedgerStore,
    Steps,
    Write,
    check_layout,
    command_flow,
    load_flow,
)

__all__ = ["PostgresBackend", "PostgresLedger", "postgres_options", "while_busy"]

_OPTIONS = {"lock_timeout": 2000, "idle_in_transaction_session_timeout": 10000, "pool": 4,
            "timeout": 30000, "group": 64}
#: Errors after which the transaction was rolled back by the server and may simply be retried.
_RETRY = (pg_errors.LockNotAvailable, pg_errors.SerializationFailure, pg_errors.DeadlockDetected)
_IDLE = psycopg.pq.TransactionStatus.IDLE
_T = TypeVar("_T")


async def while_busy(write: Callable[[], Awaitable[_T]], timeout_ms: int,
                     on_busy: Callable[[], object] = lambda: None) -> _T:
    """``write()``, again (1 ms apart) while the server rolls it back because another session
    holds the work (nothing was written); after ``timeout_ms`` the last such error is raised.

    The one retry loop of every PostgreSQL ledger write, the core's and ``langgraph+postgres``'s
    fenced checkpoint writes alike.
    """
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        try:
            return await write()
        except _RETRY:
            if time.monotonic() > deadline:
                raise
            on_busy()
            await asyncio.sleep(0.001)


def postgres_options(url: str, extra: tuple[str, ...] = ()) -> tuple[str, dict[str, int]]:
    """``SCHEME://u@h:p/db?lock_timeout=500`` -> (``postgresql://u@h:p/db``, options).

    ``extra`` names options the caller reads itself (``langgraph+postgres``'s ``durability``).
    """
    parts = urlsplit(url)
    if not parts.hostname or not parts.path.strip("/"):
        raise ConfigError(f"{url}: expected {parts.scheme}://USER@HOST:PORT/DATABASE", url=url)
    options = dict(_OPTIONS)
    for key, value in url_options(url, (*_OPTIONS, *extra)).items():
        if key in extra:
            continue
        try:
            options[key] = int(value)
        except ValueError as exc:
            raise ConfigError(f"{url}: {key} must be an integer (milliseconds)", url=url) from exc
        if options[key] < 1:
            raise ConfigError(f"{url}: {key} must be positive", url=url)
    return urlunsplit(("postgresql", parts.netloc, parts.path, "", "")), options


def _work_of(req: Request) -> str:
    """The work a write is about, for a batch's lock order (reads take no lock: first)."""
    return req.work_id if isinstance(req, Write) else ""


class _Pool:
    """Idle connections, last in first out, and the callers waiting for one.

    What ``asyncio.LifoQueue`` did for the pool, without its task accounting (an ``Event``
    cleared on every put) and method layers: taking an idle connection is a list pop.
    """

    __slots__ = ("free", "waiters")

    def __init__(self) -> None:
        #: Idle connections (None: a place to open one in), the one given back last at the end.
        self.free: list[psycopg.AsyncConnection[Any] | None] = []
        self.waiters: collections.deque[asyncio.Future[psycopg.AsyncConnection[Any] | None]] = (
            collections.deque())

    async def get(self) -> psycopg.AsyncConnection[Any] | None:
        if self.free:
            return self.free.pop()
        fut: asyncio.Future[psycopg.AsyncConnection[Any] | None] = (
            asyncio.get_running_loop().create_future())
        self.waiters.append(fut)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.put_nowait(fut.result())   # handed over as we were cancelled: pass it on
            else:
                try:
                    self.waiters.remove(fut)
                except ValueError:
                    pass
            raise

    def put_nowait(self, conn: psycopg.AsyncConnection[Any] | None) -> None:
        waiters = self.waiters
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(conn)
                return
        self.free.append(conn)


#: The server's clock, in ms since the epoch (``clock_timestamp()``: the time of the statement,
#: not of a transaction begun earlier).
_SERVER_MS = "SELECT CAST(floor(extract(epoch FROM clock_timestamp()) * 1000) AS bigint)"
#: Seconds between two reads of the server's clock (between them it is carried forward on this
#: process's monotonic clock).
_RESYNC = 30.0

#: The server's own guard on every write: ``at_ms`` (the latest time the write may record: the
#: store's clock when the command was applied, every time in it is clamped to that) must not be
#: ahead of the server's clock by more than ``tolerance_ms``; else the statement fails with
#: SQLSTATE ``OL001`` and writes nothing. Host estimates of the server's clock can be wrong (a
#: process clock that jumped, a suspended VM); the server's clock cannot be ahead of itself.
_GUARD_FN = """
CREATE OR REPLACE FUNCTION outlive_not_ahead(at_ms bigint, tolerance_ms bigint)
RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
DECLARE server_ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000);
BEGIN
  IF at_ms > server_ms + tolerance_ms THEN
    RAISE EXCEPTION USING ERRCODE = 'OL001', MESSAGE = format(
      'outlive: a write dated %s ms ahead of the server''s clock', at_ms - server_ms);
  END IF;
  RETURN 1;
END $$;
"""
#: SQLSTATE of the guard's refusal.
_AHEAD = "OL001"
#: How far ahead of the server's clock a write's time may be (its clock may step back a little).
AHEAD_TOLERANCE_MS = 1000
#: How the store's one-statement write ends (``sqlstore``), and how a guarded one ends: the head's
#: count, joined with the guard's one row, so the guard is evaluated in the same statement.
_ANSWER = " SELECT count(*) FROM head"
_GUARDED_ANSWER = ", guard AS (SELECT outlive_not_ahead(%s, %s) AS ok) SELECT count(*) FROM head, guard"
#: Statement texts with the guard, by the store's statement text (psycopg prepares each text).
_GUARDED: dict[str, str] = {}


def _guarded(sql: str, head_alone: bool) -> str:
    """``sql`` (the store's write) with the server's guard on the write's time."""
    text = _GUARDED.get(sql)
    if text is None:
        if head_alone:
            text = f"WITH head AS ({sql} RETURNING wnum){_GUARDED_ANSWER}"
        else:
            assert sql.endswith(_ANSWER), sql
            text = sql[:-len(_ANSWER)] + _GUARDED_ANSWER
        if len(_GUARDED) < 4096:
            _GUARDED[sql] = text
    return text


class _ClockAhead(Exception):
    """The server refused a write dated ahead of its clock (nothing was written)."""


#: The channel a runtime's events go through (``LISTEN/NOTIFY``).
_CHANNEL = "outlive_events"
#: The first key of a runner's advisory lock ("outl"); the second is from its id.
_RUNNER_NS = 0x6F75746C


def _runner_key(runner: str) -> int:
    """31 bits of the runner id's hash: a collision can only make a dead runner look alive."""
    return int.from_bytes(hashlib.sha256(runner.encode()).digest()[:4], "big") & 0x7FFFFFFF


class PostgresLedger:
    """Ledgers in ``outlive_works`` / ``outlive_log`` of one database, on a small pool.

    Shared by ``postgresql://`` and ``langgraph+postgres://`` (beside LangGraph's checkpoints).
    """

    def __init__(self, url: str, *, extra_options: tuple[str, ...] = ()) -> None:
        self.url = url
        self.conninfo, self.options = postgres_options(url, extra_options)
        self.store = SqlLedgerStore(POSTGRES, url)
        self._idle: _Pool | None = None
        #: One cursor per pooled connection for its writes (psycopg builds a cursor per
        #: ``conn.execute``); a write's result is one small row.
        self._cursors: dict[psycopg.AsyncConnection[Any], psycopg.AsyncCursor[Any]] = {}
        self._all: list[psycopg.AsyncConnection[Any]] = []
        #: Times a write waited for another session's row lock (``lock_timeout``) and retried.
        self.busy_retries = 0
        #: Awaited with the connection just before a write is sent (fault-injection tests).
        self.before_write: Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]] | None = None
        #: The server's clock as last read (ms) and this process's monotonic clock (s) when
        #: the answer arrived: see :meth:`server_now`.
        self._server_ms = 0
        self._synced = 0.0
        #: Requests waiting for the next batch (group commit), and the batches under way.
        self._queued: list[tuple[Request, asyncio.Future[Any]]] = []
        self._senders = 0
        #: The connections holding runners' advisory locks (:meth:`hold_runner`).
        self._runners: dict[str, psycopg.AsyncConnection[Any]] = {}

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        settings = (f"-c lock_timeout={self.options['lock_timeout']} "
                    f"-c idle_in_transaction_session_timeout="
                    f"{self.options['idle_in_transaction_session_timeout']} "
                    "-c synchronous_commit=on")
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.conninfo, autocommit=True, connect_timeout=10, options=settings)
        except psycopg.Error as exc:
            raise BackendUnavailable(f"{self.url}: PostgreSQL is not reachable: {exc}",
                                     url=self.url, landed=False) from exc
        self._all.append(conn)
        return conn

    async def start(self) -> None:
        conn = await self._connect()
        try:
            async with conn.transaction():
                # Several processes may start at once: CREATE ... IF NOT EXISTS can still race.
                await conn.execute("SELECT pg_advisory_xact_lock(7265726)")
                cur = await conn.execute("SELECT to_regclass('outlive_rows') IS NOT NULL")
                row = await cur.fetchone()
                check_layout(["outlive_rows"] if row and row[0] else [], self.url)
                await conn.execute(POSTGRES.schema)
                await conn.execute(_GUARD_FN)
        except ConfigError:
            await self.close()
            raise
        except psycopg.Error as exc:
            await self.close()
            raise BackendUnavailable(f"{self.url}: cannot create the ledger tables: {exc}",
                                     url=self.url) from exc
        # Last in, first out: one caller at a time keeps reusing the connection it just used,
        # whose server process is awake and warm. Taken in turn (a FIFO), each statement went to
        # the server process idle the longest: a fenced write took 470 us where the same
        # statement on one connection took 270-380 us.
        try:
            await self._sync_clock(conn)
        except psycopg.Error as exc:
            await self.close()
            raise BackendUnavailable(f"{self.url}: cannot read the server's clock: {exc}",
                                     url=self.url) from exc
        self.store.now = self.server_now
        self._idle = _Pool()
        for _ in range(self.options["pool"] - 1):
            self._idle.put_nowait(None)  # opened on first use, when the others are all busy
        self._idle.put_nowait(conn)

    async def _sync_clock(self, conn: psycopg.AsyncConnection[Any]) -> None:
        cur = await conn.execute(_SERVER_MS)
        row = await cur.fetchone()
        self._synced = time.monotonic()
        assert row is not None
        self._server_ms = int(row[0])

    def server_now(self) -> int:
        """The server's clock now, in ms: the store's clock for every command, whichever host
        applies it (a host whose clock runs ahead cannot stretch a lease or date a record in
        the future). Read from the server at start and again every :data:`_RESYNC` seconds, and
        carried forward on this process's monotonic clock from the moment the answer arrived,
        so it is never ahead of the server's (it lags by at most one round trip, plus the two
        clocks' drift since the last read).
        """
        return self._server_ms + int((time.monotonic() - self._synced) * 1000)

    async def _resync_clock(self) -> None:
        idle, conn = await self._take()
        try:
            await self._sync_clock(conn)
        finally:
            idle.put_nowait(conn)

    async def _take(self) -> tuple[_Pool, psycopg.AsyncConnection[Any]]:
        """A connection of the pool, idle and outside any transaction, and the queue it goes
        back to (give it back with ``put_nowait`` whatever happens).

        One that is broken, or that a cancelled caller left with a command still in progress
        (a task cancelled while awaiting the server), is closed and replaced: handed out again,
        it would fail the next caller's command ("another command is already in progress").
        """
        idle = self._idle
        if idle is None:
            raise BackendUnavailable(f"{self.url}: backend not started (use open_backend)")
        conn = idle.free.pop() if idle.free else await idle.get()
        if (conn is not None and not conn.closed and not conn.broken
                and conn.pgconn.transaction_status == _IDLE):
            return idle, conn   # the usual case
        try:
            if conn is not None:
                if conn in self._all:
                    self._all.remove(conn)
                self._cursors.pop(conn, None)
                stale, conn = conn, None
                try:
                    await stale.close()
                except psycopg.Error:
                    pass
            return idle, await self._connect()
        except BaseException:
            idle.put_nowait(None)  # its place in the pool, to be opened by a later caller
            raise

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """:meth:`_take` and give back, as a context."""
        idle, conn = await self._take()
        try:
            yield conn
        finally:
            idle.put_nowait(conn)  # to the queue it came from, even if close() dropped it

    def _cursor(self, conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncCursor[Any]:
        cur = self._cursors.get(conn)
        if cur is None:
            cur = self._cursors[conn] = conn.cursor()
        return cur

    async def _query(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        idle, conn = await self._take()
        try:   # a cursor of its own: a long read's rows are not kept after it
            cur = await conn.execute(sql, params)
            return await cur.fetchall()
        finally:
            idle.put_nowait(conn)

    def _with_guard(self, req: Write,
                    single: tuple[str, tuple[Any, ...]]) -> tuple[str, tuple[Any, ...]]:
        """``single`` with the server's guard on its time: every time in the write is at most the
        store's clock as this host reads it now (the ledger clamped them to it when it applied).
        Answered by the count of heads changed, whether it carries rows or not."""
        sql, params = single
        return (_guarded(sql, single is req.cas or single == req.cas),
                (*params, self.server_now(), AHEAD_TOLERANCE_MS))

    async def _write_once(self, req: Write, single: tuple[str, tuple[Any, ...]]) -> bool:
        sql, params = self._with_guard(req, single)
        idle, conn = await self._take()
        try:
            if self.before_write is not None:
                await self.before_write(conn)
            cur = self._cursor(conn)
            try:
                await cur.execute(sql, params)
            except psycopg.Error as exc:
                if exc.sqlstate == _AHEAD:
                    raise _ClockAhead(str(exc)) from exc
                raise
            row = await cur.fetchone()
        finally:
            idle.put_nowait(conn)
        return row is not None and int(row[0]) == 1

    def _busy(self) -> None:
        self.busy_retries += 1

    async def _write(self, req: Write) -> bool:
        """One statement, so one round trip and no transaction left open between statements."""
        single = req.single
        assert single is not None
        try:
            try:
                return await self._write_once(req, single)   # usual: no other session holds it
            except _RETRY:
                self._busy()
                await asyncio.sleep(0.001)
            return await while_busy(functools.partial(self._write_once, req, single),
                                    self.options["timeout"], self._busy)
        except _RETRY as exc:
            raise BackendUnavailable(
                f"{self.url}: the work stayed locked by another session for over "
                f"{self.options['timeout']} ms; nothing was written",
                url=self.url, landed=False) from exc

    def _read_error(self, exc: Exception) -> Exception:
        return BackendUnavailable(f"{self.url}: {exc}; nothing was written", url=self.url,
                                  landed=False)

    # -- group commit ------------------------------------------------------------------------
    async def _request(self, req: Request) -> Any:
        """``req``'s answer: sent alone, or with the requests queued beside it (one batch)."""
        # A subclass that adds to a write from its caller's context (langgraph+postgres: the
        # task rows of a checkpoint) sends each alone, in that context.
        if (self.options["group"] <= 1 or self.before_write is not None
                or type(self)._write is not PostgresLedger._write):
            return await self._alone(req)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queued.append((req, fut))
        if self._senders < self.options["pool"]:
            self._senders += 1
            asyncio.get_running_loop().create_task(self._sender())
        return await fut

    async def _sender(self) -> None:
        """Send what is queued, a batch at a time, until nothing is (one of at most ``pool``)."""
        try:
            while self._queued:
                batch = self._queued[:self.options["group"]]
                del self._queued[:len(batch)]
                if len(batch) == 1:
                    await self._answer_alone(*batch[0])
                    continue
                await self._send_batch(batch)
        finally:
            self._senders -= 1

    async def _alone(self, req: Request) -> Any:
        return (await self._write(req) if isinstance(req, Write)
                else await self._query(req.sql, req.params))

    async def _answer_alone(self, req: Request, fut: asyncio.Future[Any]) -> None:
        """``req`` sent on its own; its answer (or error, as a direct call raises it) to ``fut``."""
        try:
            answer = await self._alone(req)
        except BaseException as exc:
            if not fut.done():
                fut.set_exception(exc)
        else:
            if not fut.done():
                fut.set_result(answer)

    async def _send_batch(self, batch: list[tuple[Request, asyncio.Future[Any]]]) -> None:
        batch.sort(key=lambda item: _work_of(item[0]))   # stable: a work's requests keep order
        idle, conn = await self._take()
        curs: list[psycopg.AsyncCursor[Any]] = []
        try:
            try:
                async with conn.pipeline():
                    for req, _ in batch:
                        cur = conn.cursor()
                        if isinstance(req, Write):
                            assert req.single is not None
                            await cur.execute(*self._with_guard(req, req.single))
                        else:
                            await cur.execute(req.sql, req.params)
                        curs.append(cur)
                answers: list[Any] = []
                for (req, _), cur in zip(batch, curs, strict=True):
                    if isinstance(req, Write):
                        row = await cur.fetchone()    # guarded: the count of heads changed
                        answers.append(row is not None and int(row[0]) == 1)
                    else:
                        answers.append(await cur.fetchall())
            finally:
                idle.put_nowait(conn)
        except psycopg.Error as exc:
            if conn.broken or conn.closed:
                # Lost with the batch at the server: committed or not, nobody can say. Each
                # command is told as a lost single write is, and reads back.
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                return
            # A statement failed: the server rolled the whole batch back. Each alone, as if
            # no batch had been. Not on this connection: statements psycopg prepared inside the
            # failed pipeline were never made on the server, yet its cache names them
            # ("prepared statement ... does not exist" for the next command sent on it); closed,
            # it is replaced when next taken.
            await conn.close()
            for req, fut in batch:
                await self._answer_alone(req, fut)
            return
        except BaseException as exc:
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
            raise
        for (_, fut), answer in zip(batch, answers, strict=True):
            if not fut.done():
                fut.set_result(answer)

    async def drive(self, flow: Generator[Request, Any, Any]) -> Any:
        steps = Steps(flow, self._read_error)
        for req in steps:
            try:
                steps.answer = await self._request(req)
            except BackendUnavailable as exc:
                if isinstance(req, Read):
                    raise
                steps.failed(exc)
            except psycopg.Error as exc:
                steps.failed(exc)
        return steps.result

    async def execute(self, work_id: str, command: Command) -> Outcome:
        if time.monotonic() - self._synced > _RESYNC:
            try:
                await self._resync_clock()
            except psycopg.Error as exc:
                raise BackendUnavailable(f"{self.url}: {exc}; nothing was written", url=self.url,
                                         landed=False) from exc
        try:
            return await self.drive(command_flow(self.store, work_id, command))  # type: ignore[no-any-return]
        except _ClockAhead:
            pass
        # The server refused a time ahead of its clock: this host's reading of it was wrong.
        # Read it again and apply the command again (its times clamped to the server's).
        try:
            await self._resync_clock()
            return await self.drive(command_flow(self.store, work_id, command))  # type: ignore[no-any-return]
        except _ClockAhead as exc:
            raise BackendUnavailable(
                f"{self.url}: the server refused a write dated ahead of its clock twice ({exc}); "
                "nothing was written", url=self.url, landed=False) from exc
        except psycopg.Error as exc:
            raise BackendUnavailable(f"{self.url}: {exc}; nothing was written", url=self.url,
                                     landed=False) from exc

    async def load(self, work_id: str) -> WorkState | None:
        return await self.drive(load_flow(self.store, work_id))  # type: ignore[no-any-return]

    async def works(self) -> list[str]:
        try:
            rows = await self._query(self.store.works_sql(), ())
        except psycopg.Error as exc:
            raise BackendUnavailable(f"{self.url}: {exc}", url=self.url) from exc
        return [str(r[0]) for r in rows]

    async def notify(self, message: str) -> None:
        """Sent with the batch under way (a notification is delivered when its transaction
        commits, so listeners hear of nothing the batch then rolls back), not a round trip."""
        try:
            await self._request(Read("SELECT pg_notify(%s, %s)", (_CHANNEL, message)))
        except psycopg.Error as exc:
            raise BackendUnavailable(f"{self.url}: {exc}", url=self.url) from exc

    async def hold_runner(self, runner: str) -> bool:
        """A session advisory lock on a connection of its own: the server drops it when the
        session ends, and a process that ends, however it ends, ends its sessions (a paused
        one keeps them)."""
        if not valid_runner(runner):
            return False
        conn = await self._connect()
        await conn.execute("SELECT pg_advisory_lock(%s, %s)", (_RUNNER_NS, _runner_key(runner)))
        self._runners[runner] = conn
        return True

    async def release_runner(self, runner: str) -> None:
        conn = self._runners.pop(runner, None)
        if conn is not None:
            await self._close_own(conn)

    async def _close_own(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Close a connection of its own (:meth:`_connect`, not the pool's) before the ledger."""
        with contextlib.suppress(ValueError):
            self._all.remove(conn)
        with contextlib.suppress(psycopg.Error, OSError):
            await conn.close()

    async def runner_gone(self, runner: str) -> bool:
        if not valid_runner(runner):
            return False
        try:
            rows = await self._query(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
                "AND classid = %s::oid AND objid = %s::oid",
                (_RUNNER_NS, _runner_key(runner)))
        except psycopg.Error:
            return False   # cannot tell: the lease decides
        return int(rows[0][0]) == 0

    async def watch_runner(self, runner: str) -> bool:
        """Wait for the runner's advisory lock on a connection of its own: the server grants it
        the moment the holder's session ends (no poll), then it is let go at once."""
        if not valid_runner(runner):
            return False
        conn = await self._connect()
        try:
            await conn.execute("SET lock_timeout = 0")
            await conn.execute("SELECT pg_advisory_lock(%s, %s)",
                               (_RUNNER_NS, _runner_key(runner)))
            await conn.execute("SELECT pg_advisory_unlock(%s, %s)",
                               (_RUNNER_NS, _runner_key(runner)))
        finally:
            await self._close_own(conn)
        return True

    async def listen(self) -> AsyncIterator[str]:
        """A connection of its own that LISTENs; closed with the ledger."""
        conn = await self._connect()
        await conn.execute(f"LISTEN {_CHANNEL}")
        async for note in conn.notifies():
            yield note.payload

    async def close(self) -> None:
        conns, self._all, self._idle = self._all, [], None
        self._runners.clear()
        self._cursors.clear()
        for conn in conns:
            await conn.close()


class PostgresBackend(Backend):
    """``postgresql://``: durable, many processes and machines, a paused holder cut off."""

    capabilities = frozenset({"atomic-commands", "durable", "multi-process"})

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.ledger = PostgresLedger(url)

    async def start(self) -> None:
        await self.ledger.start()

    async def execute(self, work_id: str, command: Command) -> Outcome:
        return await self.ledger.execute(work_id, command)

    async def load(self, work_id: str) -> WorkState | None:
        return await self.ledger.load(work_id)

    async def works(self) -> list[str]:
        return await self.ledger.works()

    listens = True

    async def notify(self, message: str) -> None:
        await self.ledger.notify(message)

    def listen(self) -> AsyncIterator[str]:
        return self.ledger.listen()

    async def hold_runner(self, runner: str) -> bool:
        return await self.ledger.hold_runner(runner)

    async def release_runner(self, runner: str) -> None:
        await self.ledger.release_runner(runner)

    async def runner_gone(self, runner: str) -> bool:
        return await self.ledger.runner_gone(runner)

    async def watch_runner(self, runner: str) -> bool:
        return await self.ledger.watch_runner(runner)

    @property
    def busy_retries(self) -> int:
        return self.ledger.busy_retries

    async def close(self) -> None:
        await self.ledger.close()
