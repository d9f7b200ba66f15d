"""``langgraph+postgres://USER@HOST:PORT/DB``: LangGraph's PostgresSaver with the ledger beside it.

The checkpoints are LangGraph's (``AsyncPostgresSaver``: tables ``checkpoints``,
``checkpoint_writes``, ``checkpoint_blobs``); the ledger is ``outlive_works`` + ``outlive_journal``
in the same database. A command is one transaction: ``SELECT ... FOR UPDATE`` the work's row,
:func:`outlive.ledger.apply`, a conditional ``UPDATE ... WHERE seq = %s``, append journal rows,
``COMMIT`` (``synchronous_commit`` on). The row lock plus the ``seq`` condition make it a
compare-and-set across processes; a rejected command rolls back and writes nothing.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row

from outlive import codec
from outlive.errors import BackendUnavailable, ConfigError, InvalidRecord
from outlive.ledger import Command, Outcome, apply
from outlive.records import JournalEntry, WorkState

from .backend import LangGraphBackend, journal_prefix

__all__ = ["LangGraphPostgresBackend"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outlive_works (
    work_id     TEXT PRIMARY KEY,
    seq         BIGINT NOT NULL,
    epoch       BIGINT NOT NULL,
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


def conninfo(url: str) -> str:
    """``langgraph+postgres://u@h:p/db?durability=sync`` -> ``postgresql://u@h:p/db``."""
    parts = urlsplit(url)
    if not parts.hostname or not parts.path.strip("/"):
        raise ConfigError(f"{url}: expected langgraph+postgres://USER@HOST:PORT/DATABASE", url=url)
    return urlunsplit(("postgresql", parts.netloc, parts.path, "", ""))


class LangGraphPostgresBackend(LangGraphBackend):
    """Checkpoints and the fenced ledger in one PostgreSQL database."""

    capabilities = frozenset({"atomic-commands", "durable", "multi-process"})

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.conninfo = conninfo(url)
        self._saver: AsyncPostgresSaver | None = None
        self._saver_conn: psycopg.AsyncConnection[Any] | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._lock = asyncio.Lock()
        self._cache: dict[str, tuple[int, WorkState]] = {}

    @property
    def checkpointer(self) -> BaseCheckpointSaver[Any]:
        if self._saver is None:
            raise BackendUnavailable(f"{self.url}: backend not started (use open_backend)")
        return self._saver

    async def start(self) -> None:
        try:
            self._saver_conn = await psycopg.AsyncConnection.connect(
                self.conninfo, autocommit=True, prepare_threshold=0, row_factory=dict_row,
                connect_timeout=10)
            self._saver = AsyncPostgresSaver(self._saver_conn)
            await self._saver.setup()
            self._conn = await psycopg.AsyncConnection.connect(self.conninfo, connect_timeout=10)
            async with self._conn.transaction():
                await self._conn.execute(_SCHEMA)
        except psycopg.OperationalError as exc:
            await self.close()
            raise BackendUnavailable(f"{self.url}: PostgreSQL is not reachable: {exc}",
                                     url=self.url) from exc

    def _db(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None:
            raise BackendUnavailable(f"{self.url}: backend not started (use open_backend)")
        return self._conn

    def _engine_error(self, exc: Exception) -> Exception | None:
        if isinstance(exc, psycopg.OperationalError):
            return BackendUnavailable(f"{self.url}: {exc}", url=self.url)
        if isinstance(exc, psycopg.DatabaseError):
            return InvalidRecord(f"{self.url}: checkpoint database error: {exc}", url=self.url)
        return None

    async def _read(self, conn: psycopg.AsyncConnection[Any], work_id: str,
                    lock: bool) -> tuple[int, WorkState | None]:
        q = "SELECT seq FROM outlive_works WHERE work_id = %s" + (" FOR UPDATE" if lock else "")
        row = await (await conn.execute(q, (work_id,))).fetchone()
        if row is None:
            return -1, None
        seq = int(row[0])
        cached = self._cache.get(work_id)
        if cached is not None and cached[0] == seq:
            return seq, cached[1]
        head_row = await (await conn.execute(
            "SELECT state, journal_len FROM outlive_works WHERE work_id = %s",
            (work_id,))).fetchone()
        assert head_row is not None
        text, n = head_row
        head = codec.loads(text)
        rows = await (await conn.execute(
            "SELECT entry FROM outlive_journal WHERE work_id = %s AND idx < %s ORDER BY idx",
            (work_id, n))).fetchall()
        entries = tuple(codec.loads(r[0]) for r in rows)
        if (not isinstance(head, WorkState) or head.work_id != work_id or head.seq != seq
                or len(entries) != n or not all(isinstance(e, JournalEntry) for e in entries)):
            raise InvalidRecord(f"{self.url}: the ledger rows of {work_id!r} are corrupt",
                                work_id=work_id)
        state = replace(head, journal=entries)
        self._cache[work_id] = (seq, state)
        return seq, state

    async def _execute(self, work_id: str, command: Command) -> Outcome:
        conn = self._db()
        async with self._lock:
            try:
                async with conn.transaction():
                    seq, state = await self._read(conn, work_id, lock=True)
                    new, outcome = apply(state, command, work_id=work_id)
                    if state is None or new is not state:
                        head = codec.dumps(replace(new, journal=()))
                        if state is None:
                            cur = await conn.execute(
                                "INSERT INTO outlive_works (work_id, seq, epoch, journal_len, "
                                "state) VALUES (%s,%s,%s,%s,%s) ON CONFLICT DO NOTHING",
                                (work_id, new.seq, new.epoch, len(new.journal), head))
                        else:
                            cur = await conn.execute(
                                "UPDATE outlive_works SET seq = %s, epoch = %s, journal_len = %s,"
                                " state = %s WHERE work_id = %s AND seq = %s AND epoch <= %s",
                                (new.seq, new.epoch, len(new.journal), head, work_id, seq,
                                 new.epoch))
                        if cur.rowcount != 1:
                            raise BackendUnavailable(
                                f"{work_id}: a concurrent ledger write won the race; retry",
                                work_id=work_id)
                        start = journal_prefix(state, new)
                        if start is None:
                            await conn.execute("DELETE FROM outlive_journal WHERE work_id = %s",
                                               (work_id,))
                            start = 0
                        rows = [(work_id, i, codec.dumps(new.journal[i]))
                                for i in range(start, len(new.journal))]
                        if rows:
                            async with conn.cursor() as c:
                                await c.executemany(
                                    "INSERT INTO outlive_journal (work_id, idx, entry) "
                                    "VALUES (%s,%s,%s) ON CONFLICT (work_id, idx) "
                                    "DO UPDATE SET entry = EXCLUDED.entry", rows)
            except BaseException:
                self._cache.pop(work_id, None)
                raise
            self._cache[work_id] = (new.seq, new)
            return outcome

    async def execute(self, work_id: str, command: Command) -> Outcome:
        try:
            return await self._execute(work_id, command)
        except psycopg.OperationalError as exc:
            raise BackendUnavailable(f"{self.url}: {exc}", url=self.url) from exc
        except psycopg.DatabaseError as exc:
            raise InvalidRecord(f"{self.url}: database error: {exc}", url=self.url) from exc

    async def load(self, work_id: str) -> WorkState | None:
        conn = self._db()
        async with self._lock:
            try:
                async with conn.transaction():
                    return (await self._read(conn, work_id, lock=False))[1]
            except psycopg.OperationalError as exc:
                raise BackendUnavailable(f"{self.url}: {exc}", url=self.url) from exc

    async def works(self) -> list[str]:
        conn = self._db()
        async with self._lock, conn.transaction():
            rows = await (await conn.execute(
                "SELECT work_id FROM outlive_works ORDER BY work_id")).fetchall()
        return [str(r[0]) for r in rows]

    async def close(self) -> None:
        self._program = None  # bound to this saver; a restarted backend builds a new one
        for c in (self._conn, self._saver_conn):
            if c is not None:
                await c.close()
        self._conn = self._saver_conn = None
        self._saver = None
