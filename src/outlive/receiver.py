"""The receiver's half of "once": remember operation keys, atomically with the effect.

Only the receiver saw whether an effect happened, so only it can recognise a retry. Keys are kept
for ``retention`` clock units; a retry arriving later is applied as a *new* effect and the receipt
says so (``possibly_duplicated=True``) — never claimed as "once". A known key arriving with a
different payload is not a retry: it is refused with :class:`~outlive.errors.EffectConflict`.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

from .errors import EffectConflict
from .hashing import content_hash
from .records import Receipt

__all__ = ["MemoryReceiver", "SqliteReceiver"]


def _ms() -> int:
    return int(time.time() * 1000)


class MemoryReceiver:
    """Keys and effects in one dict, under one lock: atomic within the process."""

    def __init__(self, *, retention: int | None = None, clock: Callable[[], int] = _ms) -> None:
        self.retention = retention
        self.clock = clock
        self._keys: dict[str, tuple[str, int, str]] = {}
        self._lock = threading.Lock()
        self.applied: list[tuple[str, str | None, Any]] = []

    def receive(self, key: str | None, payload: Any, apply: Callable[[Any], str]) -> Receipt:
        """Apply ``payload`` once per ``key``; ``apply`` performs the effect and names it."""
        digest = content_hash(payload)
        with self._lock:
            now = self.clock()
            note = ""
            if key is not None and key in self._keys:
                effect_id, at, seen = self._keys[key]
                if self.retention is None or now - at <= self.retention:
                    if seen != digest:
                        raise EffectConflict(f"key {key!r} was applied with another payload",
                                             key=key, effect_id=effect_id)
                    return Receipt(effect_id=effect_id, duplicate=True, key=key, note="already seen")
                note = "key expired after retention: applied as a new effect"
            effect_id = apply(payload)
            self.applied.append((effect_id, key, payload))
            if key is not None:
                self._keys[key] = (effect_id, now, digest)
            return Receipt(effect_id=effect_id, duplicate=False, key=key, note=note,
                           possibly_duplicated=bool(note))


class SqliteReceiver:
    """Keys in a table; ``apply(conn, payload)`` writes the effect in the same transaction."""

    def __init__(self, path: str, *, retention: int | None = None,
                 clock: Callable[[], int] = _ms) -> None:
        self.retention = retention
        self.clock = clock
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
        # The receiver's key is its promise of "once": it must survive a power cut, not only a crash.
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS outlive_receiver_keys (key TEXT PRIMARY KEY, "
            "effect_id TEXT NOT NULL, at INTEGER NOT NULL, payload_digest TEXT NOT NULL)"
        )
        self._lock = threading.Lock()

    def receive(self, key: str | None, payload: Any,
                apply: Callable[[sqlite3.Connection, Any], str]) -> Receipt:
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                now = self.clock()
                note = ""
                digest = content_hash(payload)
                if key is not None:
                    row = conn.execute(
                        "SELECT effect_id, at, payload_digest FROM outlive_receiver_keys "
                        "WHERE key=?", (key,)).fetchone()
                    if row is not None:
                        if self.retention is None or now - int(row[1]) <= self.retention:
                            conn.execute("COMMIT")
                            if str(row[2]) != digest:
                                raise EffectConflict(
                                    f"key {key!r} was applied with another payload",
                                    key=key, effect_id=str(row[0]))
                            return Receipt(effect_id=str(row[0]), duplicate=True, key=key,
                                           note="already seen")
                        note = "key expired after retention: applied as a new effect"
                effect_id = apply(conn, payload)
                if key is not None:
                    conn.execute(
                        "INSERT OR REPLACE INTO outlive_receiver_keys VALUES (?,?,?,?)",
                        (key, effect_id, now, digest),
                    )
                conn.execute("COMMIT")
                return Receipt(effect_id=effect_id, duplicate=False, key=key, note=note,
                               possibly_duplicated=bool(note))
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def close(self) -> None:
        self._conn.close()
