"""The one SQL ledger store, for SQLite and PostgreSQL alike.

Every SQL backend (``sqlite://``, ``postgresql://``, and the adapters that keep the ledger beside
an engine's own tables, ``langgraph+sqlite`` and ``langgraph+postgres``) persists a work the same
way, through :func:`command_flow`:

1. **Read** the work's head row and the rows written since the cached ``seq`` (one statement,
   so one snapshot; no lock is taken).
2. **Apply** the pure ledger and **encode** the changed records, outside any transaction.
3. **Write** in a short transaction: a conditional ``UPDATE outlive_works ... WHERE seq = ?``
   (the compare-and-set), then an upsert of the changed rows only. A missed condition means
   another writer moved the work: read again and re-apply.

Layout: ``outlive_works`` holds one small row per work (scalars such as the epoch, the attempts,
and the length of each collection); ``outlive_rows`` holds every record of every collection in its
own row, keyed ``(work_id, kind, idx)`` and stamped with the ``seq`` that last wrote it. So a
heartbeat writes the head alone, whatever the number and size of the candidates, a journal write
the head and one new row, and the journal grows by appending rows. The attempts live in the head
because nearly every command changes the current one (every write is a sign of life), and a work
has a handful: a row of their own cost every write a second row and its index entries. Files
written when attempts had rows of their own are still read (a head whose counts name
``attempts``); the first write moves them into the head, and the old rows are ignored after.

The flow is a generator that yields requests (:class:`Read`, :class:`Write`, :class:`Landed`)
and receives answers: each backend drives it with its own driver (a thread for ``sqlite3``,
psycopg's async connection for PostgreSQL), so the logic exists once. A write whose outcome is
unknown (disk full, I/O error, the connection lost mid-commit) is resolved by reading the head
back: the command either landed (the outcome is returned) or did not (``BackendUnavailable``
with ``landed=False``); only when the read-back itself fails is it ``landed=None``.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from . import codec
from ._clone import clone, evolve
from .errors import BackendUnavailable, ConfigError, CorruptRecord, InvalidRecord, OutliveError
from .ledger import Checked, Command, Outcome, apply, changed, check_work_id, checked, reads
from .records import JournalEntry, WorkState

__all__ = [
    "COLLECTIONS",
    "CachedWork",
    "POSTGRES",
    "SCHEMA",
    "SQLITE",
    "Dialect",
    "Landed",
    "Read",
    "Request",
    "SqlLedgerStore",
    "SqliteLedgerStore",
    "Steps",
    "Write",
    "WriteFailed",
    "advance",
    "command_flow",
    "sqlite_error",
    "sqlite_path",
]

#: WorkState fields kept one record per row; the rest of the state (attempts included) is the
#: head row.
COLLECTIONS = ("inputs", "journal", "candidates", "acceptances", "effects")
#: Rows of this kind hold the attempts in files from before they moved into the head; read when
#: the head says so (its counts name it), ignored once a write has moved them.
_LEGACY_ATTEMPTS = "attempts"
#: Collections the ledger only ever appends to: a write encodes only their new tail.
_APPEND_ONLY = frozenset({"inputs", "journal", "candidates", "acceptances"})


@dataclass(frozen=True)
class Dialect:
    """What differs between SQLite and PostgreSQL: parameter style and column types."""

    name: str
    schema: str

    def sql(self, text: str) -> str:
        """Statements are written with ``?``; PostgreSQL (psycopg) spells them ``%s``."""
        return text if self.name == "sqlite" else text.replace("?", "%s")


_DDL = """
CREATE TABLE IF NOT EXISTS outlive_works (
    work_id  TEXT PRIMARY KEY,
    seq      {int} NOT NULL,
    epoch    {int} NOT NULL,
    write_id TEXT NOT NULL,
    state    TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS outlive_rows (
    work_id TEXT NOT NULL,
    kind    TEXT NOT NULL,
    idx     INTEGER NOT NULL,
    wseq    {int} NOT NULL,
    body    TEXT NOT NULL,
    PRIMARY KEY (work_id, kind, idx)
);
CREATE INDEX IF NOT EXISTS outlive_rows_by_seq ON outlive_rows (work_id, wseq);
"""

SQLITE = Dialect("sqlite", _DDL.format(int="INTEGER"))
POSTGRES = Dialect("postgresql", _DDL.format(int="BIGINT"))
#: The SQLite tables (kept under this name for callers that create them beside their own).
SCHEMA = SQLITE.schema

_READ = ("SELECT CAST('' AS TEXT) AS kind, seq AS idx, state AS body FROM outlive_works "
         "WHERE work_id = ? UNION ALL "
         "SELECT kind, idx, body FROM outlive_rows WHERE work_id = ? AND wseq > ? ORDER BY 1, 2")
_INSERT_HEAD = ("INSERT INTO outlive_works (work_id, seq, epoch, write_id, state) VALUES (?,?,?,?,?) "
                "ON CONFLICT (work_id) DO NOTHING")
_UPDATE_HEAD = ("UPDATE outlive_works SET seq = ?, epoch = ?, write_id = ?, state = ? "
                "WHERE work_id = ? AND seq = ?")
_UPSERT_ROW = ("INSERT INTO outlive_rows (work_id, kind, idx, wseq, body) VALUES (?,?,?,?,?) "
               "ON CONFLICT (work_id, kind, idx) DO UPDATE SET wseq = excluded.wseq, "
               "body = excluded.body")
#: PostgreSQL: the head's compare-and-set and the changed rows in one statement. The rows are a
#: ``VALUES`` list of plain parameters (one statement text per row count, prepared by psycopg
#: once it repeats): passing them as text arrays made psycopg quote every body's JSON in Python
#: (a regular-expression substitution per ``"``), the largest single cost of a write.
_PG_WRITE = ("WITH head AS ({head} RETURNING work_id), "
             "changed AS (INSERT INTO outlive_rows (work_id, kind, idx, wseq, body) "
             "SELECT head.work_id, v.kind, v.idx, %s, v.body FROM head, (VALUES {values}) "
             "AS v(kind, idx, body) "
             "ON CONFLICT (work_id, kind, idx) DO UPDATE SET wseq = excluded.wseq, "
             "body = excluded.body) "
             "SELECT count(*) FROM head")
_PG_VALUE = "(%s::text, %s::integer, %s::text)"
_LANDED = "SELECT seq, write_id FROM outlive_works WHERE work_id = ?"
_WORKS = "SELECT work_id FROM outlive_works ORDER BY work_id"
_PG_WRITES: dict[tuple[str, int], str] = {}


def _pg_write(head: str, n: int) -> str:
    """The one-statement write of the head and ``n`` rows (texts kept: psycopg prepares them)."""
    sql = _PG_WRITES.get((head, n))
    if sql is None:
        sql = _PG_WRITES[(head, n)] = _PG_WRITE.format(
            head=head, values=", ".join([_PG_VALUE] * n))
    return sql


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


# -- the requests a driver answers ------------------------------------------------------------
@dataclass(frozen=True)
class Read:
    """Run one query; answer with its rows (a list of tuples)."""

    sql: str
    params: tuple[Any, ...]


@dataclass(frozen=True)
class Write:
    """One short transaction: ``cas`` must change exactly one row, then ``rows`` are upserted.

    Answer True once committed, False if ``cas`` changed no row (rolled back, nothing written).
    If the transaction fails otherwise, throw :class:`WriteFailed` into the flow.
    """

    cas: tuple[str, tuple[Any, ...]]
    rows_sql: str
    rows: list[tuple[Any, ...]]
    #: Bytes of encoded records this write sends (head plus rows): what a command costs on disk.
    size: int
    #: PostgreSQL: the same write as one statement (the head update and the rows joined in
    #: data-modifying CTEs, answering the number of heads changed: 1, or 0 if ``cas`` missed;
    #: with no rows, ``cas`` itself, answered by its row count). One statement is one round trip
    #: and leaves no transaction open between statements.
    single: tuple[str, tuple[Any, ...]] | None = None


@dataclass(frozen=True)
class Landed:
    """After a failed write: run this query (on a working connection) and answer its rows."""

    sql: str
    params: tuple[Any, ...]


class WriteFailed(Exception):
    """Thrown into the flow by a driver whose write failed for a reason other than the CAS."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


Request = Read | Write | Landed


class Steps:
    """What every driver does between its own I/O calls, kept in one place.

    Iterate to get each request of ``flow``; answer it by setting :attr:`answer`, or report
    that it failed with :meth:`failed`. When the flow ends, its value is :attr:`result`.
    """

    def __init__(self, flow: Generator[Request, Any, Any],
                 read_error: Callable[[Exception], Exception]) -> None:
        self.flow = flow
        self.read_error = read_error
        self.answer: Any = None
        self.result: Any = None
        self._throw: BaseException | None = None
        self._request: Request | None = None

    def __iter__(self) -> Steps:
        return self

    def __next__(self) -> Request:
        answer, throw, self.answer, self._throw = self.answer, self._throw, None, None
        try:
            self._request = self.flow.send(answer) if throw is None else self.flow.throw(throw)
        except StopIteration as stop:
            self.result = stop.value
            raise StopIteration from None
        return self._request

    def failed(self, exc: Exception) -> None:
        """The current request failed. A write, or the read-back after one, may have landed: the
        flow is told (:class:`WriteFailed`) and reads back. A read wrote nothing: the flow ends
        with ``read_error(exc)``."""
        if isinstance(self._request, (Write, Landed)):
            self._throw = WriteFailed(exc)
            return
        self.flow.close()
        raise self.read_error(exc) from exc


# -- the store --------------------------------------------------------------------------------
@dataclass
class CachedWork:
    """One work as this process last saw it: the journal kept apart, indexed by result id.

    A command is applied to a *view* of the work holding only the journal entries it reads
    (:func:`outlive.ledger.reads`), so neither applying nor writing costs more as the journal
    grows; the whole state is put together only when someone loads it. The journal list is
    shared by every cached version of the work and only ever grows at its true positions (an
    entry is immutable once written), so a version is its first ``length`` entries.
    """

    state: WorkState                 # everything but the journal (its ``journal`` is empty)
    journal: list[JournalEntry]
    index: dict[str, int]            # result id -> position in ``journal``
    length: int

    def view(self, command: Command | Checked) -> WorkState:
        wanted = reads(self.state, command)
        found = sorted(i for r in wanted if (i := self.index.get(r, self.length)) < self.length)
        return evolve(self.state, journal=tuple(self.journal[i] for i in found))

    def whole(self) -> WorkState:
        return evolve(self.state, journal=tuple(self.journal[:self.length]))

    def put(self, position: int, entry: JournalEntry) -> bool:
        """Record the journal's entry at ``position``; False if that leaves a gap."""
        if position < len(self.journal):
            return True  # already known: entries never change once written
        if position > len(self.journal):
            return False
        self.journal.append(entry)
        self.index[entry.result_id] = position
        return True


def advance(old: CachedWork | None, view: WorkState | None, new: WorkState) -> CachedWork | None:
    """``old`` moved forward to ``new``, which the ledger returned for ``view`` (``old``'s view
    for the command); None if that leaves a gap in the journal (then read the work again).

    ``old`` is spent: the new version shares its journal list and index.
    """
    added = new.journal[len(view.journal) if view is not None else 0:]
    work = CachedWork(state=evolve(new, journal=()),
                      journal=old.journal if old is not None else [],
                      index=old.index if old is not None else {},
                      length=(old.length if old is not None else 0) + len(added))
    for i, entry in enumerate(added):
        if not work.put(work.length - len(added) + i, entry):
            return None
    return work


class SqlLedgerStore:
    """Encodes and decodes works as head + rows; caches each work until another writer moves it."""

    def __init__(self, dialect: Dialect, where: str) -> None:
        self.dialect = dialect
        self.where = where  # a path or URL, for messages
        self._cache: dict[str, CachedWork] = {}
        #: Bytes the last committed write sent (head plus changed rows); benchmarks report it.
        self.last_write_bytes = 0
        #: Writes that lost the compare-and-set to another writer and were re-applied.
        self.conflicts = 0
        self._write_ids = itertools.count()
        self._write_pid = -1
        self._write_prefix = ""
        self._insert_head = dialect.sql(_INSERT_HEAD)
        self._update_head = dialect.sql(_UPDATE_HEAD)
        self._upsert_row = dialect.sql(_UPSERT_ROW)

    def write_id(self) -> str:
        """A new id for one write, unique across processes: a random prefix (drawn again in a
        forked child) and a counter, so a write does not pay for a system call to the RNG."""
        pid = os.getpid()
        if pid != self._write_pid:
            self._write_pid, self._write_prefix = pid, f"{uuid.uuid4().hex}-"
        return f"{self._write_prefix}{next(self._write_ids)}"

    # -- read ------------------------------------------------------------------------------------
    def read_request(self, work_id: str, *, full: bool = False) -> Read:
        cached = None if full else self._cache.get(work_id)
        since = cached.state.seq if cached is not None else -1
        return Read(self.dialect.sql(_READ), (work_id, work_id, since))

    def decode(self, work_id: str, rows: list[tuple[Any, ...]], *,
               full: bool = False) -> tuple[bool, CachedWork | None]:
        """``(ok, work)``; ``ok`` False means the cache could not be brought forward: read all."""
        if not rows or rows[0][0] != "":
            if rows:
                raise self._corrupt(work_id)
            self._cache.pop(work_id, None)
            return True, None
        seq = int(rows[0][1])
        cached = None if full else self._cache.pop(work_id, None)
        if cached is not None and seq == cached.state.seq and len(rows) == 1:
            self._cache[work_id] = cached
            return True, cached
        if cached is not None and seq < cached.state.seq:
            return False, None
        try:
            doc = codec.loads(rows[0][2])
            head = doc["head"]
            counts = doc["counts"]
        except (InvalidRecord, KeyError, TypeError) as exc:
            raise self._corrupt(work_id, exc) from exc
        if not isinstance(head, WorkState) or head.work_id != work_id or head.seq != seq:
            raise self._corrupt(work_id)
        # The cache was taken out above: if anything below fails, it is simply gone.
        work = CachedWork(state=head, journal=cached.journal if cached is not None else [],
                          index=cached.index if cached is not None else {},
                          length=counts.get("journal", -1) if isinstance(counts, dict) else -1)
        legacy = isinstance(counts, dict) and _LEGACY_ATTEMPTS in counts
        lists: dict[str, list[Any]] = {
            k: list(getattr(cached.state, k)) if cached is not None else []
            for k in (*COLLECTIONS, *((_LEGACY_ATTEMPTS,) if legacy else ())) if k != "journal"}
        for kind, idx, body in rows[1:]:
            if kind == _LEGACY_ATTEMPTS and not legacy:
                continue  # moved into the head by a later write: the head's are current
            try:
                item = codec.loads(body)
            except InvalidRecord as exc:
                raise self._corrupt(work_id, exc) from exc
            if kind == "journal":
                if not isinstance(item, JournalEntry):
                    raise self._corrupt(work_id)
                if not work.put(idx, item):
                    if full:
                        raise self._corrupt(work_id)
                    return False, None  # a gap: the cache is older than rows we skipped
                continue
            items = lists.get(kind)
            if items is None:
                raise self._corrupt(work_id)
            if idx > len(items):
                if full:
                    raise self._corrupt(work_id)
                return False, None
            if idx < len(items):
                items[idx] = item
            else:
                items.append(item)
        if (any(len(lists[k]) != counts.get(k) for k in lists)
                or not 0 <= work.length <= len(work.journal)):
            if full:
                raise self._corrupt(work_id)
            return False, None
        fields: dict[str, Any] = {k: tuple(v) for k, v in lists.items()}
        work.state = replace(head, journal=(), **fields)
        self._cache[work_id] = work
        return True, work

    def _corrupt(self, work_id: str, cause: BaseException | None = None) -> CorruptRecord:
        self._cache.pop(work_id, None)
        why = f": {cause.message if isinstance(cause, OutliveError) else cause}" if cause else ""
        return CorruptRecord(f"{self.where}: the ledger rows of {work_id!r} are corrupt{why}",
                             work_id=work_id)

    # -- write -----------------------------------------------------------------------------------
    def write_request(self, work_id: str, old: CachedWork | None, view: WorkState | None,
                      new: WorkState, write_id: str) -> Write:
        """The head (compare-and-set on the old ``seq``) and only the rows that changed.

        ``view`` is what the ledger was given (``old`` with only the journal entries it reads),
        ``new`` what it returned: the journal rows written are the entries ``new`` appended.
        """
        rows: list[tuple[Any, ...]] = []
        size = 0
        for kind in COLLECTIONS:
            before: tuple[Any, ...] = getattr(view, kind) if view is not None else ()
            after: tuple[Any, ...] = getattr(new, kind)
            if after is before:
                continue  # the ledger hands back the very tuple it did not change
            base = 0
            if kind == "journal":  # the view held some entries; new ones go after the whole
                base = (old.length if old is not None else 0) - len(before)
            if kind in _APPEND_ONLY and len(after) >= len(before):
                if any(a is not b and a != b for a, b in zip(before, after, strict=False)):
                    raise InvalidRecord(f"{kind} is append-only")  # pragma: no cover - ledger bug
                start = len(before)
            else:
                start = 0
            for i in range(start, len(after)):
                item = after[i]
                if i < len(before) and (item is before[i] or item == before[i]):
                    continue
                body = codec.dumps(item)
                size += len(body)
                rows.append((work_id, kind, base + i, new.seq, body))
        counts = {k: len(getattr(new, k)) for k in COLLECTIONS}
        counts["journal"] += (old.length if old is not None else 0) - (
            len(view.journal) if view is not None else 0)
        empty: dict[str, Any] = {k: () for k in COLLECTIONS}
        head = codec.dumps({"head": evolve(new, **empty), "counts": counts})
        size += len(head)
        cas: tuple[str, tuple[Any, ...]]
        if old is None:
            cas = (self._insert_head, (work_id, new.seq, new.epoch, write_id, head))
        else:
            cas = (self._update_head, (new.seq, new.epoch, write_id, head, work_id, old.state.seq))
        single = None
        if self.dialect.name == "postgresql":
            if rows:
                params: list[Any] = [*cas[1], new.seq]
                for r in rows:
                    params += r[1:3]
                    params.append(r[4])
                single = (_pg_write(cas[0], len(rows)), tuple(params))
            else:
                single = cas  # the head alone: answered by its row count
        return Write(cas=cas, rows_sql=self._upsert_row, rows=rows, size=size, single=single)

    def landed_request(self, work_id: str) -> Landed:
        return Landed(self.dialect.sql(_LANDED), (work_id,))

    def works_sql(self) -> str:
        return _WORKS

    def remember(self, old: CachedWork | None, view: WorkState | None, new: WorkState) -> None:
        """After a committed write: the cache moves forward without re-reading."""
        work = advance(old, view, new)
        if work is None:
            self._cache.pop(new.work_id, None)
        else:
            self._cache[new.work_id] = work

    def cached(self, work_id: str) -> CachedWork | None:
        return self._cache.get(work_id)

    def forget(self, work_id: str) -> None:
        self._cache.pop(work_id, None)


def _now_ms() -> int:
    """The store's clock: a worker's reported time is never taken as later than this."""
    return int(time.time() * 1000)


def _load(store: SqlLedgerStore, work_id: str) -> Generator[Request, Any, CachedWork | None]:
    ok, work = store.decode(work_id, (yield store.read_request(work_id)))
    if not ok:
        _, work = store.decode(work_id, (yield store.read_request(work_id, full=True)), full=True)
    return work


def load_flow(store: SqlLedgerStore, work_id: str) -> Generator[Request, Any, WorkState | None]:
    """Read one work (the cache brought forward, or a full read when it cannot be)."""
    check_work_id(work_id)
    work = yield from _load(store, work_id)
    # A copy of what can change in place: nothing a caller does to it reaches the cache.
    return clone(work.whole()) if work is not None else None


def command_flow(store: SqlLedgerStore, work_id: str,
                 command: Command) -> Generator[Request, Any, Outcome]:
    """Read, apply and encode outside any lock; write with a compare-and-set; retry on conflict.

    When this process has the work cached, the command is first applied to the cache and
    written at once: the compare-and-set on the cached ``seq`` proves the cache was current, so
    the usual case (one process writing its own work) costs one round trip, not two. A rejection
    or a no-op answered from the cache is never trusted: the work is read and applied again.
    """
    check_work_id(work_id)
    prepared = checked(command)   # checked and copied once, however many times it is applied
    optimistic = store.cached(work_id)
    work: CachedWork | None
    view: WorkState | None
    while True:
        if optimistic is not None:
            work, optimistic = optimistic, None
            view = work.view(prepared)
            try:
                new, outcome = apply(view, prepared, work_id=work_id, now=_now_ms())
            except OutliveError:
                continue  # decided on a possibly stale copy: decide again on the stored state
            if not changed(view, new):
                continue
        else:
            work = yield from _load(store, work_id)
            view = work.view(prepared) if work is not None else None
            new, outcome = apply(view, prepared, work_id=work_id, now=_now_ms())
            if not changed(view, new):
                return outcome
        write_id = store.write_id()
        request = store.write_request(work_id, work, view, new, write_id)
        try:
            committed = yield request
        except WriteFailed as failed:
            store.forget(work_id)
            landed = yield from _read_back(store, work_id, new, write_id, failed)
            if landed:
                store.last_write_bytes = request.size
                return outcome
            raise BackendUnavailable(
                f"{store.where}: the write of {type(command).__name__} to {work_id!r} failed "
                f"({failed.cause}); read back: it did not land, nothing was written",
                work_id=work_id, landed=False) from failed.cause
        if committed:
            store.remember(work, view, new)
            store.last_write_bytes = request.size
            return outcome
        store.forget(work_id)
        store.conflicts += 1


def _read_back(store: SqlLedgerStore, work_id: str, new: WorkState, write_id: str,
               failed: WriteFailed) -> Generator[Request, Any, bool]:
    """Did the failed write land? Its ``write_id`` is in the head exactly when it did."""
    try:
        rows = yield store.landed_request(work_id)
    except WriteFailed as again:
        raise BackendUnavailable(
            f"{store.where}: the write to {work_id!r} failed ({failed.cause}) and reading it "
            f"back failed too ({again.cause}): whether it landed is unknown; read the work "
            "again before retrying", work_id=work_id, landed=None) from failed.cause
    if not rows:
        return False
    seq, found = int(rows[0][0]), str(rows[0][1])
    if found == write_id:
        return True
    if seq <= new.seq:
        return False  # the head is at or before our seq and is not ours: ours never landed
    raise BackendUnavailable(
        f"{store.where}: the write to {work_id!r} failed ({failed.cause}) and other writes "
        "followed before it could be read back: whether it landed is unknown; read the work "
        "again before retrying", work_id=work_id, landed=None) from failed.cause


# -- the sqlite3 driver (synchronous; backends run it on a thread of their own) -----------------
_BUSY = frozenset({"SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_BUSY_SNAPSHOT", "SQLITE_BUSY_RECOVERY",
                   "SQLITE_LOCKED_SHAREDCACHE"})
_CORRUPT = frozenset({"SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_CORRUPT_INDEX",
                      "SQLITE_CORRUPT_SEQUENCE", "SQLITE_CORRUPT_VTAB"})


def _busy(exc: sqlite3.Error) -> bool:
    name = getattr(exc, "sqlite_errorname", "")
    return name in _BUSY or (not name and ("locked" in str(exc) or "busy" in str(exc)))


def sqlite_error(exc: Exception, where: str) -> Exception:
    """A sqlite3 error outside a write, in outlive's tree: damaged file or unusable storage."""
    name = getattr(exc, "sqlite_errorname", "")
    if name in _CORRUPT or (not name and isinstance(exc, sqlite3.DatabaseError)
                            and not isinstance(exc, sqlite3.OperationalError)):
        return InvalidRecord(f"{where}: the database is damaged: {exc}", path=where)
    return BackendUnavailable(f"{where}: {exc}; nothing was written", path=where, landed=False)


class SqliteLedgerStore:
    """Drives the flows on a ``sqlite3`` connection the caller owns, from the caller's thread.

    ``wait(seconds)`` is called while another process holds the write lock (the caller decides
    how to wait: ``time.sleep`` on a thread of its own); ``lock_timeout`` bounds the wait.
    """

    def __init__(self, path: str, *, lock_timeout: float = 30.0,
                 wait: Callable[[float], None] | None = None) -> None:
        import time

        self.path = path
        self.store = SqlLedgerStore(SQLITE, path)
        self.lock_timeout = lock_timeout
        self._wait = wait or time.sleep
        self._clock = time.monotonic
        #: Times a write found another process holding the lock and waited.
        self.busy_retries = 0
        #: Called with the open transaction just before COMMIT (tests inject faults here).
        self.before_commit: Callable[[sqlite3.Connection], None] | None = None

    def _retrying(self, fn: Callable[[], Any]) -> Any:
        deadline = self._clock() + self.lock_timeout
        delay = 0.0002
        while True:
            try:
                return fn()
            except sqlite3.Error as exc:
                if not _busy(exc):
                    raise
                if self._clock() > deadline:
                    raise BackendUnavailable(
                        f"{self.path}: another process held the write lock for over "
                        f"{self.lock_timeout:.0f} s; nothing was written",
                        path=self.path, landed=False) from exc
                self.busy_retries += 1
                self._wait(delay)
                delay = min(delay * 2, 0.004)

    def _query(self, conn: sqlite3.Connection, sql: str,
               params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self._retrying(lambda: conn.execute(sql, params).fetchall())  # type: ignore[no-any-return]

    def _write(self, conn: sqlite3.Connection, req: Write) -> bool:
        cur = conn.cursor()   # one cursor for the transaction's statements
        self._retrying(lambda: cur.execute("BEGIN IMMEDIATE"))
        try:
            if cur.execute(*req.cas).rowcount != 1:
                cur.execute("ROLLBACK")
                return False
            if len(req.rows) == 1:
                cur.execute(req.rows_sql, req.rows[0])
            elif req.rows:
                cur.executemany(req.rows_sql, req.rows)
            if self.before_commit is not None:
                self.before_commit(conn)
            cur.execute("COMMIT")
            return True
        except BaseException:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise

    def drive(self, conn: sqlite3.Connection, flow: Generator[Request, Any, Any]) -> Any:
        """Run ``flow`` to its end on ``conn`` (autocommit mode: ``isolation_level=None``)."""
        steps = Steps(flow, lambda exc: sqlite_error(exc, self.path))
        for req in steps:
            try:
                steps.answer = (self._write(conn, req) if isinstance(req, Write)
                                else self._query(conn, req.sql, req.params))
            except BackendUnavailable as exc:
                if not isinstance(req, Landed):
                    raise  # the lock was never taken: nothing was written
                steps.failed(exc)
            except sqlite3.Error as exc:
                steps.failed(exc)
        return steps.result

    # -- entry points ----------------------------------------------------------------------------
    def run(self, conn: sqlite3.Connection, work_id: str, command: Command) -> Outcome:
        """One command in short transactions of its own (``conn`` in autocommit mode)."""
        return self.drive(conn, command_flow(self.store, work_id, command))  # type: ignore[no-any-return]

    def load(self, conn: sqlite3.Connection, work_id: str) -> WorkState | None:
        return self.drive(conn, load_flow(self.store, work_id))  # type: ignore[no-any-return]

    def works(self, conn: sqlite3.Connection) -> list[str]:
        rows = self._retrying(lambda: conn.execute(_WORKS).fetchall())
        return [str(r[0]) for r in rows]

    # -- for callers that hold their own transaction (kept for langgraph+sqlite) -----------------
    def read(self, conn: sqlite3.Connection, work_id: str) -> tuple[int, WorkState | None]:
        """The work's ``seq`` and state (``-1, None`` if absent)."""
        state = self.load(conn, work_id)
        return (state.seq if state is not None else -1), state

    def execute(self, conn: sqlite3.Connection, work_id: str, command: Command,
                commit: Callable[[], None]) -> Outcome:
        """Apply ``command`` inside the caller's open write transaction, then ``commit()``.

        The caller holds the write lock for the whole command; prefer :meth:`run`, which takes
        it for the write alone. On failure the error propagates and the caller rolls back.
        """
        flow = command_flow(self.store, work_id, command)
        answer: Any = None
        committed = False
        try:
            while True:
                try:
                    req = flow.send(answer)
                except StopIteration as stop:
                    if not committed:
                        commit()  # nothing changed: end the caller's transaction all the same
                    out: Outcome = stop.value
                    return out
                if isinstance(req, Write):
                    if conn.execute(*req.cas).rowcount != 1:
                        # Applied to a stale cache: nothing was written; the flow reads again,
                        # now inside the caller's transaction.
                        answer = False
                        continue
                    if req.rows:
                        conn.executemany(req.rows_sql, req.rows)
                    commit()
                    committed = answer = True
                else:
                    answer = conn.execute(req.sql, req.params).fetchall()
        except BaseException:
            self.store.forget(work_id)
            flow.close()
            raise

