"""``sqlite:///PATH``: the default. WAL, synchronous=FULL, one transaction per ledger command.

Each command is ``BEGIN IMMEDIATE``; read the work's row; apply the pure ledger; a conditional
``UPDATE ... WHERE seq = ?``; ``COMMIT``. The journal is append-only, so it lives in its own
table and a command inserts only its new entries; the rest of the state (attempts, candidates,
acceptances, effects) is one JSON document per work. Both are cached in-process and re-read
whenever another process moved ``seq``. A killed process loses nothing a command reported done.

Options: ``?mode=ro`` opens an existing file read-only (``outlive inspect``: it never creates or
changes the file); ``?mode=rw`` (the default) creates the file and its tables if needed.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time

from .backend import Backend, url_options
from .errors import BackendUnavailable, ConfigError, InvalidRecord
from .ledger import Command, Outcome
from .records import WorkState
from .sqlstore import SCHEMA, SqliteLedgerStore, sqlite_path


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
        self._store = SqliteLedgerStore(self.path)
        self._lock = threading.Lock()
        #: Seconds to wait for another process's write lock before BackendUnavailable.
        self.lock_timeout = 30.0

    async def start(self) -> None:
        parent = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(parent):
            raise BackendUnavailable(f"{self.url}: directory {parent} does not exist", url=self.url)
        if self.read_only:
            if not os.path.isfile(self.path):
                raise BackendUnavailable(f"{self.url}: no database file at {self.path}",
                                         url=self.url)
            try:
                conn = sqlite3.connect(f"file:{os.path.abspath(self.path)}?mode=ro", uri=True,
                                       isolation_level=None, check_same_thread=False)
                conn.execute("SELECT 1 FROM outlive_works LIMIT 1").fetchall()
            except sqlite3.DatabaseError as exc:
                raise InvalidRecord(f"{self.path}: not a usable outlive database: {exc}",
                                    path=self.path) from exc
            self._conn = conn
            return
        try:
            # Setting up may wait for another process (blocking once, at start); afterwards the
            # busy timeout is 0 and `execute` waits by yielding to the event loop instead.
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                   timeout=self.lock_timeout)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.executescript(SCHEMA)
            conn.execute("PRAGMA busy_timeout=0")
        except sqlite3.DatabaseError as exc:
            raise InvalidRecord(f"{self.path}: not a usable outlive database: {exc}",
                                path=self.path) from exc
        self._conn = conn

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise BackendUnavailable(f"{self.url}: backend not started (use open_backend)")
        return self._conn

    def _execute(self, work_id: str, command: Command) -> Outcome | None:
        """One attempt at the transaction; None if another process holds the write lock."""
        conn = self._db()
        with self._lock:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    return None
                raise BackendUnavailable(f"{self.path}: {exc}", path=self.path) from exc
            except sqlite3.DatabaseError as exc:
                raise BackendUnavailable(f"{self.path}: {exc}", path=self.path) from exc
            try:
                return self._store.execute(conn, work_id, command,
                                           lambda: conn.execute("COMMIT").close())
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    async def execute(self, work_id: str, command: Command) -> Outcome:
        """Never blocks the event loop on another process's lock: it yields and retries."""
        if self.read_only:
            raise ConfigError(f"{self.url}: opened read-only (mode=ro); nothing was written",
                              url=self.url)
        deadline = time.monotonic() + self.lock_timeout
        delay = 0.0005
        while True:
            try:
                out = self._execute(work_id, command)
            except sqlite3.DatabaseError as exc:
                raise InvalidRecord(f"{self.path}: database error: {exc}",
                                    path=self.path) from exc
            if out is not None:
                return out
            if time.monotonic() > deadline:
                raise BackendUnavailable(
                    f"{self.path}: the write lock was held by another process for over "
                    f"{self.lock_timeout:.0f} s; nothing was written", path=self.path)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    async def load(self, work_id: str) -> WorkState | None:
        conn = self._db()
        deadline = time.monotonic() + self.lock_timeout
        while True:
            with self._lock:
                try:
                    # One read transaction: the head and the journal rows from one snapshot,
                    # even while another process commits between the statements.
                    conn.execute("BEGIN")
                    try:
                        return self._store.read(conn, work_id)[1]
                    finally:
                        conn.execute("COMMIT")
                except sqlite3.OperationalError as exc:
                    if not ("locked" in str(exc) or "busy" in str(exc)) or \
                            time.monotonic() > deadline:
                        raise BackendUnavailable(f"{self.path}: {exc}", path=self.path) from exc
                except sqlite3.DatabaseError as exc:
                    raise InvalidRecord(f"{self.path}: database error: {exc}",
                                        path=self.path) from exc
            await asyncio.sleep(0.002)

    async def works(self) -> list[str]:
        rows = self._db().execute("SELECT work_id FROM outlive_works ORDER BY work_id").fetchall()
        return [str(r[0]) for r in rows]

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
