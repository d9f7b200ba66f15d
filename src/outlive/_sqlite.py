"""``sqlite:///PATH``: the default. WAL, synchronous=FULL, short write transactions.

The store (:mod:`outlive.sqlstore`) reads the work, applies the pure ledger and encodes the
changed records with no lock held; the write lock (``BEGIN IMMEDIATE``) is held only for the
conditional update of the head row and the upsert of the changed rows. Every ``sqlite3`` call
runs on one thread of this backend's own, so the event loop never waits for a lock or an fsync.

What an embedded file cannot do: fence a process that is paused *while* it holds the write lock.
SQLite's lock is a file lock with no owner the database could cut off; every other writer waits
(up to ``lock_timeout``, then ``BackendUnavailable``) for as long as that pause lasts. Short
transactions make that window the write alone; a server database (``postgresql://``) closes it.

Options: ``?mode=ro`` opens an existing file read-only (``outlive inspect``: it never creates or
changes the file); ``?mode=rw`` (the default) creates the file and its tables if needed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import functools
import os
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from .backend import Backend, url_options, valid_runner
from .errors import BackendUnavailable, ConfigError, InvalidRecord, OutliveError
from .ledger import Command, Outcome
from .records import WorkState
from .sqlstore import SCHEMA, SqliteLedgerStore, check_layout, sqlite_error, sqlite_path

__all__ = ["SqliteBackend"]

T = TypeVar("T")


def _settle(fut: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if fut.cancelled():
        return  # the caller stopped waiting; the call itself ran to its end all the same
    if exc is None:
        fut.set_result(result)
    else:
        fut.set_exception(exc)


#: A call for the thread: the function, the loop (or a stand-in) and future its answer goes to,
#: and whether it may share a transaction with the calls next to it (:class:`_Group`).
_Job = tuple[Callable[[], Any], Any, Any, bool]

#: At most this many calls share one commit: the write lock is held for the batch's Python.
_GROUP_MAX = 64


class _Group:
    """What the writer thread needs to let queued commands share one transaction.

    ``begin()`` before the first, ``commit()`` after the last (raises if it failed or a
    command broke the shared transaction: then ``abort()`` and each runs again on its own).
    """

    def begin(self) -> None:
        raise NotImplementedError

    def commit(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError

    @property
    def broken(self) -> bool:
        raise NotImplementedError


def _one(fn: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    try:
        return fn(), None
    except BaseException as exc:  # handed to the caller, as an executor would
        return None, exc


def _answer(loop: Any, fut: Any, result: Any, error: BaseException | None) -> None:
    try:
        loop.call_soon_threadsafe(_settle, fut, result, error)
    except RuntimeError:
        pass  # the loop was closed meanwhile: nobody is waiting


def _nothing() -> None:
    return None


class _NoLoop:
    """Stands in for the loop of :meth:`_Writer.wait`'s call: its answer sets an event."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def call_soon_threadsafe(self, *_: Any) -> None:
        self.event.set()


class _Answers:
    """The writer thread's answers to one event loop, read by a reader of the loop's own.

    Stands in for the loop in a job: its ``call_soon_threadsafe`` (called on the writer thread)
    queues the answer and writes one byte to a socket the loop watches; the loop's reader
    settles every queued answer. The loop's own ``call_soon_threadsafe`` built a handle per
    answer and woke the loop through its self-pipe, whose reader reads until the pipe is empty:
    an exception raised and caught on every wake-up. A no-op round trip through the thread
    went from 65 K to 51 K instructions (callgrind).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.done: collections.deque[tuple[Any, Any, BaseException | None]] = collections.deque()
        self._read, self._write = socket.socketpair()
        self._read.setblocking(False)
        self._write.setblocking(False)
        try:
            loop.add_reader(self._read.fileno(), self._drain)
        except BaseException:   # a loop that watches no sockets: the caller uses the loop's own
            self._read.close()
            self._write.close()
            raise

    def call_soon_threadsafe(self, _settle_fn: Any, fut: Any, result: Any,
                             error: BaseException | None) -> None:
        """On the writer thread: ``_settle(fut, result, error)`` on the loop, soon."""
        self.done.append((fut, result, error))
        self.wake()

    def wake(self) -> None:
        """On the writer thread: the loop settles what is queued (one byte for any number)."""
        try:
            self._write.send(b"\0")
        except (BlockingIOError, InterruptedError):
            pass  # full of wake-ups the loop has not read yet: it will come to this answer
        except OSError:
            pass  # closed: the loop has ended (its close() settled what was queued)

    def _drain(self) -> None:
        try:
            self._read.recv(4096)   # readable, so this never waits; every byte is a wake-up
        except (BlockingIOError, InterruptedError):
            pass
        done = self.done
        while done:   # an answer queued after the recv above is taken now or at its own byte
            _settle(*done.popleft())

    def close(self) -> None:
        """On the loop's thread, once the writer thread has ended: every answer still queued
        is settled, then the reader goes."""
        try:
            self.loop.remove_reader(self._read.fileno())
        except (RuntimeError, ValueError, OSError, AttributeError):
            pass   # the loop is closed
        done = self.done
        while done:
            _settle(*done.popleft())
        self._read.close()
        self._write.close()


class _Writer:
    """One thread that runs this backend's ``sqlite3`` calls, in the order they were asked.

    A call is a deque append and one byte on a socket pair to wake the thread; the answer goes
    back the same way, to a reader on the caller's loop (:class:`_Answers`; a call from a
    second loop is answered by that loop's ``call_soon_threadsafe``). The socket is the point:
    a write to a local socket is a *synchronous* wake-up for the kernel's scheduler (the writer
    is about to sleep), so the thread is woken on the caller's CPU, where a futex
    (``queue.SimpleQueue``, ``run_in_executor``) wakes it on an idle one. On a 2-core virtual
    machine that is 10-15 us a round trip against 13-80 us (an idle virtual CPU is slow to
    wake), every time.

    A daemon thread: a call still running when the interpreter exits is cut off as a killed
    process's would be (the file stays whole; the caller's loop is gone anyway).
    """

    def __init__(self, group: _Group | None = None) -> None:
        self._jobs: collections.deque[_Job | None] = collections.deque()
        self._wake, waiter = socket.socketpair()
        self._wake.setblocking(False)
        #: The answer channel of the first loop that calls (the thread closes it as it ends).
        self._answers: _Answers | None = None
        self._box: list[_Answers | None] = [None]
        self._plain = False
        # The thread holds the deque, its socket and the box, not this object: a backend dropped
        # without close() still ends its thread (the finalizer asks it to stop).
        self._thread = threading.Thread(target=self._run,
                                        args=(self._jobs, waiter, self._box, group),
                                        name="outlive-sqlite", daemon=True)
        self._thread.start()
        weakref.finalize(self, self._close, self._jobs, self._wake)

    @staticmethod
    def _post(jobs: collections.deque[_Job | None], wake: socket.socket, job: _Job | None) -> None:
        jobs.append(job)
        try:
            wake.send(b"\0")
        except (BlockingIOError, InterruptedError):
            pass  # the socket is full of wake-ups not read yet: the thread will get to this one
        except OSError:
            pass  # closed (stopped): nothing runs after stop()

    @staticmethod
    def _close(jobs: collections.deque[_Job | None], wake: socket.socket) -> None:
        _Writer._post(jobs, wake, None)
        wake.close()   # what was sent is still read; then the thread sees the end

    @staticmethod
    def _run(jobs: collections.deque[_Job | None], waiter: socket.socket,
             box: list[_Answers | None], group: _Group | None) -> None:
        try:
            while True:
                woken = waiter.recv(4096)
                while jobs:   # every call asked so far, whatever the wake-ups that came
                    job = jobs.popleft()
                    if job is None:
                        return
                    nxt = jobs[0] if jobs else None
                    if group is not None and job[3] and nxt is not None and nxt[3]:
                        batch = [job]
                        while len(batch) < _GROUP_MAX and jobs:
                            nxt = jobs[0]
                            if nxt is None or not nxt[3]:
                                break
                            batch.append(nxt)
                            jobs.popleft()
                        _Writer._run_group(batch, group)
                        del batch
                    else:
                        _answer(job[1], job[2], *_one(job[0]))
                    del job, nxt
                if not woken:
                    return   # the other end is closed and nothing is left to run
        finally:
            waiter.close()
            answers = box[0]
            if answers is not None:   # closed on its loop, after the answers sent before
                try:
                    answers.loop.call_soon_threadsafe(answers.close)
                except RuntimeError:
                    answers.close()   # the loop is closed: nothing reads it any more

    @staticmethod
    def _run_group(batch: list[_Job], group: _Group) -> None:
        """Commands queued together share one transaction and one commit (one fsync for the
        batch, where each had its own); their answers wait for that commit. If the commit
        fails, or a command breaks the shared transaction, nothing of the batch landed: each
        runs again on its own, as it would have without the batch."""
        done: list[tuple[Any, BaseException | None]] = []
        try:
            group.begin()
            for job in batch:
                done.append(_one(job[0]))
                if group.broken:
                    raise RuntimeError("the shared transaction was broken")
            group.commit()
        except BaseException:
            group.abort()
            for job in batch:
                _answer(job[1], job[2], *_one(job[0]))
            return
        woken: list[_Answers] = []
        for job, (result, error) in zip(batch, done, strict=True):
            loop = job[1]
            if type(loop) is _Answers:   # queued now, one wake-up per loop below
                loop.done.append((job[2], result, error))
                if loop not in woken:
                    woken.append(loop)
            else:
                _answer(loop, job[2], result, error)
        for answers in woken:
            answers.wake()

    def call(self, fn: Callable[[], T], *, grouped: bool = False) -> asyncio.Future[T]:
        """``fn()`` on the thread; await the future for its value (or its exception).

        ``grouped``: ``fn`` is a ledger command or read that may share a transaction with the
        grouped calls queued beside it; its answer waits for that transaction's commit (a read
        may see the batch's writes, so it must not be answered before they are durable)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        answers: Any = self._answers
        if answers is None or answers.loop is not loop:
            answers = self._answers_for(loop)
        self._post(self._jobs, self._wake, (fn, answers, fut, grouped))
        return fut

    def _answers_for(self, loop: asyncio.AbstractEventLoop) -> Any:
        """Where answers to a call from ``loop`` go: the first loop's own reader, else the
        loop's ``call_soon_threadsafe``."""
        if self._answers is None and not self._plain:
            try:
                self._answers = self._box[0] = _Answers(loop)
                return self._answers
            except (NotImplementedError, RuntimeError, OSError):
                self._plain = True
        return loop

    def wait(self) -> None:
        """Block until every call asked so far has finished (from any thread but this one)."""
        finished = threading.Event()
        self._post(self._jobs, self._wake, (_nothing, _NoLoop(finished), None, False))
        finished.wait()

    def stop(self) -> None:
        """The thread ends once the calls asked before this have run."""
        self._close(self._jobs, self._wake)


class _StoreGroup(_Group):
    """:class:`_Group` on this backend's store and connection (the writer thread's only)."""

    def __init__(self, store: SqliteLedgerStore, conn: list[sqlite3.Connection | None]) -> None:
        self._store = store
        self._conn = conn

    def begin(self) -> None:
        self._store.begin_group()

    def commit(self) -> None:
        conn = self._conn[0]
        if conn is None:
            raise BackendUnavailable("the backend was closed")
        self._store.commit_group(conn)

    def abort(self) -> None:
        self._store.abort_group(self._conn[0])

    @property
    def broken(self) -> bool:
        return self._store.group_broken


def _unreadable_wal(path: str) -> bool:
    """A write-ahead log SQLite cannot read here: it needs the log's index (``-shm``), writable
    or at least present, and the directory will not take a new one."""
    parent = os.path.dirname(os.path.abspath(path))
    return (os.path.exists(f"{path}-wal") and not os.access(parent, os.W_OK)
            and not os.access(f"{path}-shm", os.W_OK))


class SqliteBackend(Backend):
    capabilities = frozenset({"atomic-commands", "durable", "multi-process"})

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.path = sqlite_path(url)
        mode = url_options(url, ("mode",)).get("mode", "rw")
        if mode not in ("ro", "rw"):
            raise ConfigError(f"{url}: mode must be ro or rw, not {mode!r}", url=url)
        #: Opened read-only: nothing is created, every write is refused before it starts.
        self.read_only = mode == "ro"
        self._conn: sqlite3.Connection | None = None
        #: The connection, for the writer thread's group commits (set once it is open).
        self._conn_box: list[sqlite3.Connection | None] = [None]
        self._thread: _Writer | None = None
        #: Runner files this backend holds locked (:meth:`hold_runner`), by runner.
        self._held: dict[str, int] = {}
        #: Seconds to wait for another process's write lock before BackendUnavailable.
        self.lock_timeout = 30.0
        self.ledger = SqliteLedgerStore(self.path, lock_timeout=self.lock_timeout,
                                        wait=time.sleep)

    def _call(self, fn: Callable[..., T], *args: Any, grouped: bool = False) -> asyncio.Future[T]:
        """``fn(connection, *args)`` on the backend's own thread (await the future)."""
        if self._conn is None or self._thread is None:
            raise BackendUnavailable(f"{self.url}: backend not started (use open_backend)")
        return self._thread.call(functools.partial(fn, self._conn, *args), grouped=grouped)

    def _layout(self, conn: sqlite3.Connection) -> None:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        check_layout(tables, self.url)

    def _open(self) -> sqlite3.Connection:
        if self.read_only:
            conn = sqlite3.connect(f"file:{os.path.abspath(self.path)}?mode=ro", uri=True,
                                   isolation_level=None)
            try:
                self._layout(conn)
                conn.execute("SELECT 1 FROM outlive_works LIMIT 1").fetchall()
            except BaseException:
                conn.close()
                raise
            return conn
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=self.lock_timeout)
        try:
            self._layout(conn)   # before anything is created or changed in the file
            # Setting up may wait for another process once; afterwards the busy timeout is 0 and
            # the store waits for a lock itself (short sleeps on this thread, counted).
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.executescript(SCHEMA)
            conn.execute("PRAGMA busy_timeout=0")
        except BaseException:
            conn.close()
            raise
        return conn

    async def start(self) -> None:
        parent = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(parent):
            raise BackendUnavailable(f"{self.url}: directory {parent} does not exist", url=self.url)
        if self.read_only and not os.path.isfile(self.path):
            raise BackendUnavailable(f"{self.url}: no database file at {self.path}", url=self.url)
        self._thread = _Writer(_StoreGroup(self.ledger, self._conn_box))
        try:
            self._conn = self._conn_box[0] = await self._thread.call(self._open)
        except OutliveError:
            self._thread.stop()
            self._thread = None
            raise
        except sqlite3.Error as exc:
            self._thread.stop()
            self._thread = None
            err = sqlite_error(exc, self.path)
            if self.read_only and _unreadable_wal(self.path):
                raise BackendUnavailable(
                    f"{self.path} cannot be read here: it has a write-ahead log "
                    f"({self.path}-wal) whose index ({self.path}-shm) is missing or read-only, "
                    f"and SQLite cannot create one in the read-only directory {parent}. This "
                    "says nothing against the database: read it where the directory is writable "
                    "(or copy the file with its -wal there)", path=self.path) from exc
            if isinstance(err, InvalidRecord) or self.read_only or "not a database" in str(exc):
                raise InvalidRecord(f"{self.path}: not a usable outlive database: {exc}",
                                    path=self.path) from exc
            raise err from exc

    async def execute(self, work_id: str, command: Command) -> Outcome:
        if self.read_only:
            raise ConfigError(f"{self.url}: opened read-only (mode=ro); nothing was written",
                              url=self.url)
        self.ledger.lock_timeout = self.lock_timeout
        return await self._call(self.ledger.run, work_id, command, grouped=True)

    async def load(self, work_id: str) -> WorkState | None:
        # a copy (made by the store): its cached state is not reachable by the caller
        return await self._call(self.ledger.load, work_id, grouped=True)

    async def works(self) -> list[str]:
        return await self._call(self.ledger.works)

    def quiesce(self) -> None:
        """Block until the SQLite call in flight on this backend's thread, if any, has finished.

        For tests that pause their own process at a chosen point (``SIGSTOP``): a write of a
        concurrent task (a lease renewal) may be running on the backend's thread at that moment,
        and a process paused inside its write keeps the file's write lock. Call this first so
        the pause lands where the test means it to.
        """
        if self._thread is not None:
            self._thread.wait()

    @property
    def busy_retries(self) -> int:
        """Times a write waited because another process held the write lock."""
        return self.ledger.busy_retries

    def _runner_file(self, runner: str) -> str:
        return os.path.join(f"{os.path.abspath(self.path)}.runners", runner)

    async def hold_runner(self, runner: str) -> bool:
        """A file per runner beside the database, ``flock``ed while the process lives: the
        kernel drops the lock when the process ends, however it ends (a paused one keeps it).
        Files left unlocked by runners gone are removed on the way (a missing file is a runner
        gone, see :meth:`runner_gone`)."""
        if self.read_only or not valid_runner(runner):
            return False
        path = self._runner_file(runner)
        for _ in range(3):
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:
                return False
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                # Still the file at that path? A sweep may have found it unlocked between the
                # open and the lock, and removed it: then make it again.
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    self._held[runner] = fd
                    self._sweep_runners(runner)
                    return True
            except OSError:
                pass
            os.close(fd)
        return False

    def _sweep_runners(self, mine: str) -> None:
        """Remove the files of runners gone (unlocked): one per runtime ever opened otherwise."""
        folder = os.path.dirname(self._runner_file(mine))
        with contextlib.suppress(OSError):
            for name in os.listdir(folder):
                if name != mine and name not in self._held and valid_runner(name):
                    self._take_if_free(os.path.join(folder, name))

    @staticmethod
    def _take_if_free(path: str) -> bool | None:
        """True (and the file removed) if no process holds its lock, False if one does, None if
        there is no such file."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False   # held: alive (or paused, which is silence, not death)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return True
        finally:
            os.close(fd)

    async def release_runner(self, runner: str) -> None:
        fd = self._held.pop(runner, None)
        if fd is not None:
            os.close(fd)

    async def runner_gone(self, runner: str) -> bool:
        """Its file unlocked (then removed) or already removed by another who found it so."""
        if not valid_runner(runner):
            return False
        path = self._runner_file(runner)
        taken = self._take_if_free(path)
        if taken is None:
            # Only a runner that held its file stamps its attempts, and only one who found the
            # file unlocked removes it.
            return os.path.isdir(os.path.dirname(path))
        return taken

    async def watch_runner(self, runner: str) -> bool:
        """A test of the runner's file lock every 0.1 s (a lock syscall, no database read): an
        embedded file has no channel to carry a process's end."""
        if not valid_runner(runner):
            return False
        while not await self.runner_gone(runner):
            await asyncio.sleep(0.1)
        return True

    async def close(self) -> None:
        held, self._held = self._held, {}
        for fd in held.values():   # a runner that ends cleanly is gone too: its attempts ended
            os.close(fd)
        if self._conn is not None and self._thread is not None:
            conn, self._conn = self._conn, None
            self._conn_box[0] = None
            await self._thread.call(conn.close)
        if self._thread is not None:
            self._thread.stop()
            self._thread = None
