"""``sqlite:///PATH``: the default. WAL, synchronous=FULL, one transaction per ledger command.

Each command is ``BEGIN IMMEDIATE``; read the work's row; apply the pure ledger; a conditional
``UPDATE ... WHERE seq = ?``; ``COMMIT``. The journal is append-only, so it lives in its own
table and a command inserts only its new entries; the rest of the state (attempts, candidates,
acceptances, effects) is one JSON document per work. Both are cached in-process and re-read
whenever another process moved ``seq``. A killed process loses nothing a command reported done.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from dataclasses import replace
from urllib.parse import urlsplit

from . import codec as _codec
from .backend import Backend
from .errors import BackendUnavailable, ConfigError, InvalidRecord
from .ledger import Command, Outcome, apply
from .records import JournalEntry, WorkState

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outlive_works (
    work_id TEXT PRIMARY KEY,
    seq     INTEGER NOT NULL,
    epoch   INTEGER NOT NULL,
    state   TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS outlive_journal (
    work_id TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    entry   TEXT NOT NULL,
    PRIMARY KEY (work_id, seq)
);
"""


def sqlite_path(url: str) -> str:
    """``sqlite:///rel.db`` -> ``rel.db``; ``sqlite:////abs.db`` -> ``/abs.db``."""
    parts = urlsplit(url)
    path = parts.path
    if parts.netloc:
        raise ConfigError(f"{url}: use sqlite:///relative.db or sqlite:////absolute.db", url=url)
    if path.startswith("/"):
        path = path[1:]
    if not path:
        raise ConfigError(f"{url}: no database path", url=url)
    return path


class SqliteBackend(Backend):
    capabilities = frozenset({"atomic-commands", "durable", "multi-process"})

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.path = sqlite_path(url)
        self._conn: sqlite3.Connection | None = None
        self._cache: dict[str, tuple[int, WorkState]] = {}
        self._lock = threading.Lock()
        #: Seconds to wait for another process's write lock before BackendUnavailable.
        self.lock_timeout = 30.0

    async def start(self) -> None:
        parent = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(parent):
            raise BackendUnavailable(f"{self.url}: directory {parent} does not exist", url=self.url)
        try:
            # Setting up may wait for another process (blocking once, at start); afterwards the
            # busy timeout is 0 and `execute` waits by yielding to the event loop instead.
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                   timeout=self.lock_timeout)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.executescript(_SCHEMA)
            conn.execute("PRAGMA busy_timeout=0")
        except sqlite3.DatabaseError as exc:
            raise InvalidRecord(f"{self.path}: not a usable outlive database: {exc}",
                                path=self.path) from exc
        self._conn = conn

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise BackendUnavailable(f"{self.url}: backend not started (use open_backend)")
        return self._conn

    def _read(self, conn: sqlite3.Connection, work_id: str) -> tuple[int, WorkState | None]:
        row = conn.execute("SELECT seq FROM outlive_works WHERE work_id = ?", (work_id,)).fetchone()
        if row is None:
            return -1, None
        seq = int(row[0])
        cached = self._cache.get(work_id)
        if cached is not None and cached[0] == seq:
            return seq, cached[1]
        text = conn.execute("SELECT state FROM outlive_works WHERE work_id = ?",
                            (work_id,)).fetchone()[0]
        head = _codec.loads(text)
        if not isinstance(head, WorkState) or head.work_id != work_id or head.seq != seq:
            raise InvalidRecord(f"{self.path}: the ledger row of {work_id!r} is corrupt",
                                work_id=work_id)
        prior = cached[1].journal if cached is not None else ()
        last = prior[-1].seq if prior else -1
        rows = conn.execute("SELECT entry FROM outlive_journal WHERE work_id = ? AND seq > ? "
                            "ORDER BY seq", (work_id, last)).fetchall()
        added = tuple(_codec.loads(r[0]) for r in rows)
        if not all(isinstance(e, JournalEntry) for e in added):
            raise InvalidRecord(f"{self.path}: a journal row of {work_id!r} is corrupt",
                                work_id=work_id)
        state = replace(head, journal=prior + added)
        self._cache[work_id] = (seq, state)
        return seq, state

    def _write(self, conn: sqlite3.Connection, work_id: str, old: WorkState | None,
               new: WorkState, seq: int) -> None:
        before = len(old.journal) if old is not None else 0
        head = _codec.dumps(replace(new, journal=()))
        if old is None:
            conn.execute("INSERT INTO outlive_works (work_id, seq, epoch, state) VALUES (?,?,?,?)",
                         (work_id, new.seq, new.epoch, head))
        else:
            cur = conn.execute(
                "UPDATE outlive_works SET seq = ?, epoch = ?, state = ? "
                "WHERE work_id = ? AND seq = ? AND epoch <= ?",
                (new.seq, new.epoch, head, work_id, seq, new.epoch),
            )
            if cur.rowcount != 1:
                raise BackendUnavailable(f"{work_id}: concurrent ledger write lost the race")
        if old is not None and new.journal[:before] != old.journal:
            raise InvalidRecord("the journal is append-only")  # pragma: no cover - ledger bug
        conn.executemany("INSERT INTO outlive_journal (work_id, seq, entry) VALUES (?,?,?)",
                         [(work_id, e.seq, _codec.dumps(e)) for e in new.journal[before:]])

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
                seq, state = self._read(conn, work_id)
                new, outcome = apply(state, command, work_id=work_id)
                if state is None or new is not state:
                    self._write(conn, work_id, state, new, seq)
                conn.execute("COMMIT")
            except BaseException:
                self._cache.pop(work_id, None)
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            self._cache[work_id] = (new.seq, new)
            return outcome

    async def execute(self, work_id: str, command: Command) -> Outcome:
        """Never blocks the event loop on another process's lock: it yields and retries."""
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
                        return self._read(conn, work_id)[1]
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
