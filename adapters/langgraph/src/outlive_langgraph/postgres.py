"""Where the ``langgraph+postgres://`` scheme resolves to (the core's lazy table names this module).

Kept apart from the package's ``__init__`` because it needs the ``postgres`` extra (psycopg and
LangGraph's PostgreSQL saver): ``pip install 'outlive[langgraph-postgres]'``.
"""

from __future__ import annotations

from ._postgres import FencedAsyncPostgresSaver, LangGraphPostgresBackend

__all__ = ["FencedAsyncPostgresSaver", "LangGraphPostgresBackend"]
