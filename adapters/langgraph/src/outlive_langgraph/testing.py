"""Launchers for tests and demos: a context manager that yields a ``langgraph+`` URL.

``sqlite_url()`` yields ``langgraph+sqlite:///`` on a file in a temporary directory (removed
afterwards); ``postgres_url()`` starts a throwaway PostgreSQL (``initdb`` in a temp dir, a free
loopback port, stopped by its own PID) and yields a ``langgraph+postgres://`` URL on a fresh
database. :class:`PostgresServer` is that launcher, for a server shared by many databases (a
test session's fixture).
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .pgserver import PostgresServer

__all__ = ["PostgresServer", "postgres_url", "sqlite_url"]


@contextmanager
def sqlite_url(options: str = "") -> Iterator[str]:
    """``langgraph+sqlite:///<tmp>/lg.db[?options]``: ledger and checkpoints in one new file."""
    with tempfile.TemporaryDirectory(prefix="outlive-lg-") as d:
        yield f"langgraph+sqlite:///{Path(d) / 'lg.db'}" + (f"?{options}" if options else "")


@contextmanager
def postgres_url(options: str = "") -> Iterator[str]:
    """``langgraph+postgres://…`` on a throwaway server's new database, stopped afterwards."""
    with PostgresServer() as server:
        url = server.create_database(f"lg_{uuid.uuid4().hex[:8]}")
        yield url + (f"?{options}" if options else "")
