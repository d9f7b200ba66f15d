"""One mapper from the checkpoint databases' errors to outlive's tree.

LangGraph's savers raise their driver's errors (``sqlite3``, ``psycopg``). A database that cannot
be reached or stays locked is :class:`~outlive.errors.BackendUnavailable` (try again later);
one whose content is unusable (damaged file, a statement the schema refuses) is
:class:`~outlive.errors.InvalidRecord`. Anything else is not the database's and is re-raised.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from outlive.errors import BackendUnavailable, InvalidRecord

__all__ = ["database_error"]


def database_error(exc: BaseException, where: str, **context: Any) -> Exception | None:
    """outlive's error for a database error ``exc`` (None: not one, re-raise it as it is).

    ``where`` (the URL, or the file) starts the message; ``context`` (default ``url=where``)
    goes into the error's fields.
    """
    fields = context or {"url": where}
    if isinstance(exc, sqlite3.OperationalError):
        return BackendUnavailable(f"{where}: {exc}", **fields)
    if isinstance(exc, sqlite3.DatabaseError):
        return InvalidRecord(f"{where}: database error: {exc}", **fields)
    try:
        import psycopg
    except ImportError:  # langgraph+postgres not installed: no psycopg error can come
        return None
    if isinstance(exc, psycopg.OperationalError):
        return BackendUnavailable(f"{where}: {exc}", **fields)
    if isinstance(exc, psycopg.DatabaseError):
        return InvalidRecord(f"{where}: database error: {exc}", **fields)
    return None
