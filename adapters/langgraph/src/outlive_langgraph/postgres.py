"""``langgraph+postgres://USER@HOST:PORT/DB``: LangGraph's PostgresSaver with the ledger beside it.

The checkpoints are LangGraph's (``AsyncPostgresSaver``: tables ``checkpoints``,
``checkpoint_writes``, ``checkpoint_blobs``); the ledger is the core's ``postgresql://`` store
(:class:`outlive._postgres.PostgresLedger`: ``outlive_works`` + ``outlive_rows``) in the same
database: one SQL ledger store for every backend, with the same compare-and-set, the same
append-only rows and the same session settings (``lock_timeout``,
``idle_in_transaction_session_timeout``). URL options: ``durability`` plus the core's.
"""

from __future__ import annotations

from typing import Any

import psycopg
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row

from outlive._postgres import PostgresLedger
from outlive.errors import BackendUnavailable, InvalidRecord
from outlive.ledger import Command, Outcome
from outlive.records import WorkState

from .backend import LangGraphBackend

__all__ = ["LangGraphPostgresBackend"]


class LangGraphPostgresBackend(LangGraphBackend):
    """Checkpoints and the fenced ledger in one PostgreSQL database."""

    capabilities = frozenset({"atomic-commands", "durable", "multi-process"})

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.ledger = PostgresLedger(url, extra_options=("durability",))
        self.conninfo = self.ledger.conninfo
        self._saver: AsyncPostgresSaver | None = None
        self._saver_conn: psycopg.AsyncConnection[Any] | None = None

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
        except psycopg.OperationalError as exc:
            await self.close()
            raise BackendUnavailable(f"{self.url}: PostgreSQL is not reachable: {exc}",
                                     url=self.url) from exc
        try:
            await self.ledger.start()
        except BaseException:
            await self.close()
            raise

    def _engine_error(self, exc: Exception) -> Exception | None:
        if isinstance(exc, psycopg.OperationalError):
            return BackendUnavailable(f"{self.url}: {exc}", url=self.url)
        if isinstance(exc, psycopg.DatabaseError):
            return InvalidRecord(f"{self.url}: checkpoint database error: {exc}", url=self.url)
        return None

    async def execute(self, work_id: str, command: Command) -> Outcome:
        return await self.ledger.execute(work_id, command)

    async def load(self, work_id: str) -> WorkState | None:
        return await self.ledger.load(work_id)

    async def works(self) -> list[str]:
        return await self.ledger.works()

    async def close(self) -> None:
        self._program = None  # bound to this saver; a restarted backend builds a new one
        await self.ledger.close()
        if self._saver_conn is not None:
            await self._saver_conn.close()
        self._saver_conn = None
        self._saver = None
