"""The ledger kept in SQLite tables, on a connection the caller owns.

Shared by ``sqlite://`` and by adapters that keep the ledger beside an engine's own tables in the
same file (``langgraph+sqlite://``, next to the checkpoints). The caller opens the transaction
(``BEGIN IMMEDIATE``) and commits; this module reads the work, applies the pure ledger and writes
the new head with a conditional ``UPDATE … WHERE seq = ?`` plus only the new journal rows (the
journal is append-only, so a write's cost does not grow with the steps before it).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import replace
from urllib.parse import urlsplit

from . import codec
from .errors import BackendUnavailable, ConfigError, InvalidRecord
from .ledger import Command, Outcome, apply
from .records import JournalEntry, WorkState

__all__ = ["SCHEMA", "SqliteLedgerStore", "sqlite_path"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS outlive_works (
    work_id     TEXT PRIMARY KEY,
    seq         INTEGER NOT NULL,
    epoch       INTEGER NOT NULL,
    journal_len INTEGER NOT NULL,
    state       TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS outlive_journal (
    work_id TEXT NOT NULL,
    idx     INTEGER NOT NULL,
    entry   TEXT NOT NULL,
    PRIMARY KEY (work_id, idx)
);
"""


def sqlite_path(url: str) -> str:
    """``SCHEME:///rel.db`` -> ``rel.db``; ``SCHEME:////abs.db`` -> ``/abs.db``."""
    parts = urlsplit(url)
    if parts.netloc:
        raise ConfigError(
            f"{url}: use {parts.scheme}:///relative.db or {parts.scheme}:////absolute.db", url=url)
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    if not path:
        raise ConfigError(f"{url}: no database path", url=url)
    return path


class SqliteLedgerStore:
    """Reads and writes works' ledgers; caches each state until another writer moves ``seq``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._cache: dict[str, tuple[int, WorkState]] = {}

    def read(self, conn: sqlite3.Connection, work_id: str) -> tuple[int, WorkState | None]:
        """The work's ``seq`` and state (``-1, None`` if absent); call inside one transaction."""
        row = conn.execute("SELECT seq FROM outlive_works WHERE work_id = ?", (work_id,)).fetchone()
        if row is None:
            return -1, None
        seq = int(row[0])
        cached = self._cache.get(work_id)
        if cached is not None and cached[0] == seq:
            return seq, cached[1]
        text, n = conn.execute("SELECT state, journal_len FROM outlive_works WHERE work_id = ?",
                               (work_id,)).fetchone()
        head = codec.loads(text)
        prior = cached[1].journal if cached is not None and len(cached[1].journal) <= n else ()
        added = tuple(codec.loads(r[0]) for r in conn.execute(
            "SELECT entry FROM outlive_journal WHERE work_id = ? AND idx >= ? AND idx < ? "
            "ORDER BY idx", (work_id, len(prior), n)))
        if (not isinstance(head, WorkState) or head.work_id != work_id or head.seq != seq
                or len(prior) + len(added) != n
                or not all(isinstance(e, JournalEntry) for e in added)):
            raise InvalidRecord(f"{self.path}: the ledger rows of {work_id!r} are corrupt",
                                work_id=work_id)
        state = replace(head, journal=prior + added)
        self._cache[work_id] = (seq, state)
        return seq, state

    def _write(self, conn: sqlite3.Connection, work_id: str, old: WorkState | None,
               new: WorkState, seq: int) -> None:
        before = len(old.journal) if old is not None else 0
        if old is not None and new.journal[:before] != old.journal:
            raise InvalidRecord("the journal is append-only")  # pragma: no cover - ledger bug
        head = codec.dumps(replace(new, journal=()))
        if old is None:
            conn.execute("INSERT INTO outlive_works (work_id, seq, epoch, journal_len, state) "
                         "VALUES (?,?,?,?,?)", (work_id, new.seq, new.epoch, len(new.journal), head))
        else:
            # The conditional update is the compare-and-set: a concurrent writer makes it miss.
            cur = conn.execute(
                "UPDATE outlive_works SET seq = ?, epoch = ?, journal_len = ?, state = ? "
                "WHERE work_id = ? AND seq = ? AND epoch <= ?",
                (new.seq, new.epoch, len(new.journal), head, work_id, seq, new.epoch))
            if cur.rowcount != 1:
                raise BackendUnavailable(f"{work_id}: a concurrent ledger write won the race; retry",
                                         work_id=work_id)
        conn.executemany("INSERT INTO outlive_journal (work_id, idx, entry) VALUES (?,?,?)",
                         [(work_id, i, codec.dumps(new.journal[i]))
                          for i in range(before, len(new.journal))])

    def execute(self, conn: sqlite3.Connection, work_id: str, command: Command,
                commit: Callable[[], None]) -> Outcome:
        """Apply ``command`` inside the caller's open write transaction, then ``commit()``.

        On any failure the cache entry is dropped and the error propagates: the caller rolls back.
        """
        try:
            seq, state = self.read(conn, work_id)
            new, outcome = apply(state, command, work_id=work_id)
            if state is None or new is not state:
                self._write(conn, work_id, state, new, seq)
            commit()
        except BaseException:
            self._cache.pop(work_id, None)
            raise
        self._cache[work_id] = (new.seq, new)
        return outcome
