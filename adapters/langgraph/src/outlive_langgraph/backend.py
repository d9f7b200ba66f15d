"""Old home of the ``langgraph+sqlite``/``langgraph+memory`` backends, now in :mod:`._backend`.

An environment installed before the move still names this module in its ``outlive.backends``
entry points (they are written at install time); it resolves here until it is reinstalled.
"""

from __future__ import annotations

from ._backend import LangGraphBackend, LangGraphMemoryBackend, LangGraphSqliteBackend

__all__ = ["LangGraphBackend", "LangGraphMemoryBackend", "LangGraphSqliteBackend"]
