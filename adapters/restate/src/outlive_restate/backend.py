"""Where the ``restate://`` scheme resolves to (the core's lazy table names this module)."""

from __future__ import annotations

from ._backend import RestateBackend

__all__ = ["RestateBackend"]
