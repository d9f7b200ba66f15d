"""outlive on Restate: ``restate://HOST:INGRESS_PORT?admin=ADMIN_PORT``.

The ledger of a work is a Restate Virtual Object keyed by the work id (exclusive handlers: one
writer per key); steps run as ``ctx.run_typed`` journal entries; a durable timer can mark a
silent attempt unknown. :mod:`outlive_restate.server` starts a real server for tests and sweeps.
"""

from __future__ import annotations

from .backend import RestateBackend, parse_url

__all__ = ["RestateBackend", "parse_url"]
