"""``langgraph+sqlite:///PATH`` and ``langgraph+memory://``: outlive on LangGraph's Functional API.

LangGraph restores a task's result by *position* (checkpoint, step, task name, call index) and no
saver offers compare-and-set, so neither of outlive's input-keyed journal nor its fenced ledger can
be expressed with checkpoints alone. The ledger therefore lives beside the checkpoints:

* ``langgraph+sqlite``: tables ``outlive_works`` (the ledger head: attempts, epoch, inputs,
  candidates, acceptances, effects) and ``outlive_journal`` (append-only, one row per entry) in
  the *same SQLite file* as the SqliteSaver's ``checkpoints``/``writes`` tables, on the saver's own
  connection and lock. Each command is one ``BEGIN IMMEDIATE`` transaction: read, apply
  :func:`outlive.ledger.apply`, a conditional ``UPDATE ... WHERE seq = ?``, append new journal
  rows, ``COMMIT``. A rejected command rolls back and writes nothing.
* ``langgraph+memory``: an InMemorySaver and a dict guarded by a lock (one process, no durability).

Each step body runs as a LangGraph ``@task`` inside an ``@entrypoint`` invocation that uses the real
checkpointer, on thread ``outlive:<work id>:<attempt>``. A step counts as journaled only when
outlive's own fenced write has committed: LangGraph writes task results in the background even
under ``durability="sync"`` (ENGINE-NOTES pitfall 14).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.func import entrypoint, task
from langgraph.pregel import Pregel

from outlive.backend import Backend, StepCall
from outlive.errors import BackendUnavailable, ConfigError, InvalidRecord
from outlive.ledger import Command, OpenWork, Outcome, apply
from outlive.records import WorkState
from outlive.sqlstore import SCHEMA, SqliteLedgerStore, sqlite_path

from ._context import INSIDE_TASK
from ._savers import LoopSqliteSaver

__all__ = [
    "Durability",
    "journal_prefix",
    "LangGraphBackend",
    "LangGraphMemoryBackend",
    "LangGraphSqliteBackend",
    "step_thread_id",
]

Durability = Literal["sync", "async", "exit"]
_DURABILITIES: tuple[Durability, ...] = ("sync", "async", "exit")

def journal_prefix(old: WorkState | None, new: WorkState) -> int | None:
    """How many journal entries ``new`` shares with ``old`` as a prefix (None: rewritten).

    The ledger only ever appends to the journal, so each entry is encoded and written once and a
    step's cost does not grow with the number of steps before it.
    """
    if old is None:
        return 0
    k = len(old.journal)
    if len(new.journal) < k:
        return None
    for a, b in zip(old.journal, new.journal, strict=False):
        if a is not b and a != b:
            return None
    return k


def step_thread_id(work_id: str, attempt: int) -> str:
    """The LangGraph thread an attempt's steps run on: one checkpoint chain per attempt."""
    return f"outlive:{work_id}:{attempt}"


def _durability(url: str) -> Durability:
    query = parse_qs(urlsplit(url).query)
    value = query.get("durability", ["sync"])[-1]
    for known in _DURABILITIES:
        if value == known:
            return known
    raise ConfigError(f"{url}: durability must be one of {', '.join(_DURABILITIES)}", url=url)


class LangGraphBackend(Backend):
    """Shared part: the step program (an ``@entrypoint`` around one ``@task``) and ``run_step``."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.durability: Durability = _durability(url)
        self._bodies: dict[str, Callable[[], Awaitable[Any]]] = {}
        self._tasks: dict[str, Any] = {}
        self._program: Pregel[Any, Any, Any, Any] | None = None

    # -- the engine side -----------------------------------------------------------------------
    @property
    def checkpointer(self) -> BaseCheckpointSaver[Any]:
        """The saver whose database also holds the ledger; pass it to your own ``@entrypoint``."""
        raise NotImplementedError

    def _task_for(self, step: str) -> Any:
        """One ``@task`` per step name, so checkpoint writes are labelled by the step."""
        found = self._tasks.get(step)
        if found is None:
            bodies = self._bodies

            async def body(key: str) -> Any:
                return await bodies[key]()

            # No retry policy: a retried body would be a second model call the ledger never saw.
            found = task(name=f"outlive:{step}")(body)  # type: ignore[arg-type]
            self._tasks[step] = found
        return found

    def _step_program(self) -> Pregel[Any, Any, Any, Any]:
        if self._program is None:
            tasks = self._task_for

            @entrypoint(checkpointer=self.checkpointer)
            async def outlive_step(call: dict[str, str]) -> Any:
                return await tasks(call["step"])(call["key"])

            self._program = outlive_step
        return self._program

    def _engine_error(self, exc: Exception) -> Exception | None:
        """Translate a checkpointer's own error into outlive's tree (None: not ours, re-raise)."""
        return None

    async def run_step(self, call: StepCall, fn: Callable[[], Awaitable[Any]]) -> Any:
        """Run the body once as a ``@task`` in an entrypoint invocation on the attempt's thread.

        Inside an entrypoint that is already running (``outlive_task``), the body is already a
        task, so it is awaited directly. The body is held in an in-process registry by a random
        key: only the key crosses into the checkpoint, never the closure.
        """
        if INSIDE_TASK.get():
            return await fn()
        key = uuid.uuid4().hex
        self._bodies[key] = fn
        config: RunnableConfig = {
            "configurable": {"thread_id": step_thread_id(call.work_id, call.attempt)}}
        try:
            return await self._step_program().ainvoke(
                {"step": call.step, "key": key}, config, durability=self.durability)
        except sqlite3.DatabaseError as exc:
            raise InvalidRecord(f"{self.url}: checkpoint database error: {exc}",
                                url=self.url) from exc
        except Exception as exc:
            mapped = self._engine_error(exc)
            if mapped is None:
                raise
            raise mapped from exc
        finally:
            self._bodies.pop(key, None)


class LangGraphMemoryBackend(LangGraphBackend):
    """``langgraph+memory://``: InMemorySaver checkpoints, the ledger in a dict under a lock."""

    capabilities = frozenset({"atomic-commands"})

    def __init__(self, url: str = "langgraph+memory://") -> None:
        super().__init__(url)
        self._saver = InMemorySaver()
        self._works: dict[str, WorkState] = {}
        self._lock = threading.Lock()

    @property
    def checkpointer(self) -> BaseCheckpointSaver[Any]:
        return self._saver

    async def execute(self, work_id: str, command: Command) -> Outcome:
        with self._lock:
            state = self._works.get(work_id)
            new, outcome = apply(state, command, work_id=work_id)
            if new is not state or isinstance(command, OpenWork):
                self._works[work_id] = new
            return outcome

    async def load(self, work_id: str) -> WorkState | None:
        with self._lock:
            return self._works.get(work_id)

    async def works(self) -> list[str]:
        with self._lock:
            return sorted(self._works)


class LangGraphSqliteBackend(LangGraphBackend):
    """``langgraph+sqlite:///PATH``: checkpoints and the fenced ledger in one SQLite file."""

    capabilities = frozenset({"atomic-commands", "durable", "multi-process"})

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.path = sqlite_path(url)
        self._saver: LoopSqliteSaver | None = None
        self._store = SqliteLedgerStore(self.path)

    @property
    def checkpointer(self) -> BaseCheckpointSaver[Any]:
        return self._db()

    async def start(self) -> None:
        parent = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(parent):
            raise BackendUnavailable(f"{self.url}: directory {parent} does not exist", url=self.url)
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
            conn.execute("PRAGMA synchronous=FULL")
            saver = LoopSqliteSaver(conn)
            with saver.lock:
                saver.setup()  # creates checkpoints/writes and switches the file to WAL
                conn.executescript(SCHEMA)
                conn.commit()
                # A truncated or damaged file fails here, before anything is written, not mid-run.
                problems = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall()]
                if problems != ["ok"]:
                    raise sqlite3.DatabaseError("; ".join(str(p) for p in problems[:3]))
        except sqlite3.DatabaseError as exc:
            if conn is not None:
                conn.close()
            raise InvalidRecord(f"{self.path}: not a usable outlive/LangGraph database: {exc}",
                                path=self.path) from exc
        self._saver = saver

    def _db(self) -> LoopSqliteSaver:
        if self._saver is None:
            raise BackendUnavailable(f"{self.url}: backend not started (use open_backend)",
                                     url=self.url)
        return self._saver

    def _execute(self, work_id: str, command: Command) -> Outcome:
        saver = self._db()
        conn = saver.conn
        with saver.lock:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise BackendUnavailable(f"{self.path}: {exc}", path=self.path) from exc
            try:
                return self._store.execute(conn, work_id, command, conn.commit)
            except BaseException:
                if conn.in_transaction:
                    conn.rollback()
                raise

    async def execute(self, work_id: str, command: Command) -> Outcome:
        try:
            return self._execute(work_id, command)
        except sqlite3.DatabaseError as exc:
            raise InvalidRecord(f"{self.path}: database error: {exc}", path=self.path) from exc

    async def load(self, work_id: str) -> WorkState | None:
        saver = self._db()
        with saver.lock:
            conn = saver.conn
            try:
                # One snapshot for the head row and the journal rows: another process may commit
                # between two autocommit selects, which would look like a corrupt ledger.
                own = not conn.in_transaction
                if own:
                    conn.execute("BEGIN")
                try:
                    return self._store.read(conn, work_id)[1]
                finally:
                    if own:
                        conn.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                raise InvalidRecord(f"{self.path}: database error: {exc}",
                                    path=self.path) from exc

    async def works(self) -> list[str]:
        saver = self._db()
        with saver.lock:
            rows = saver.conn.execute(
                "SELECT work_id FROM outlive_works ORDER BY work_id").fetchall()
        return [str(r[0]) for r in rows]

    async def close(self) -> None:
        self._program = None  # bound to this saver; a restarted backend builds a new one
        if self._saver is not None:
            self._saver.conn.close()
            self._saver = None
