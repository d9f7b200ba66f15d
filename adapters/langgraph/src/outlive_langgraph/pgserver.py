"""A throwaway PostgreSQL for ``langgraph+postgres`` tests and sweeps: the core's launcher.

``initdb`` in a temp dir, a free loopback port, stopped by its own PID (see
:mod:`outlive._pgserver`); here its URLs use the ``langgraph+postgres`` scheme.

    python -m outlive_langgraph.pgserver -- outlive sweep --backend {url}
"""

from __future__ import annotations

import sys

from outlive._pgserver import PostgresServer as _CoreServer
from outlive._pgserver import _bin_dir  # noqa: F401  (engine.mk asks it where the binaries are)
from outlive._pgserver import main as _main

__all__ = ["PostgresServer", "main"]


class PostgresServer(_CoreServer):
    """The core launcher, answering ``langgraph+postgres://`` URLs."""

    scheme = "langgraph+postgres"


def main(argv: list[str] | None = None) -> int:
    """``python -m outlive_langgraph.pgserver [OPTIONS] [-- CMD ... {url} ...]``."""
    return _main(argv, scheme=PostgresServer.scheme)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
