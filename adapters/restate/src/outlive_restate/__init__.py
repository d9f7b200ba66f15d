"""outlive on Restate, inside the user's own handlers.

* In the user's Service, Virtual Object or Workflow handler, :func:`attempt` / :func:`worker` give
  the attempt's :class:`~outlive.Worker` from ``ctx``: steps are ``ctx.run_typed`` entries,
  restored by input key from the work's ledger, every write fenced by the attempt's token.
* The user's app serves :func:`services` (the ledger object and the lease object) beside its own
  services and is registered once, as any Restate deployment; outlive registers nothing.
* :meth:`RestateBackend.start_work` hands a work to Restate: its own delayed sends keep the lease,
  a silent attempt is cancelled with Restate's cancel, marked ``unknown`` and replaced.
  :class:`RestateDispatcher` is the same for :class:`outlive.supervisor.Supervisor`. With
  ``contract=`` (and ``assessor=``, ``announce=``) the lease also judges each finished attempt's
  candidate and announces the accepted one, inside Restate: no controller process after the start.
* The owner shape: :func:`keep_ledger` on the user's own Virtual Object keeps each work's ledger
  in the object keyed by the work id, so the attempt's exclusive handler holds the ledger's lock.
* Effects: :func:`restate_sender` sends ``Worker.effect``'s operation key as Restate's own
  idempotency key (:func:`http_sender`: as any HTTP receiver's ``Idempotency-Key``).

``restate://HOST:INGRESS_PORT?admin=ADMIN_PORT&ledger=OBJECT`` opens the client side.
"""

from __future__ import annotations

try:
    import restate
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError("outlive_restate needs the Restate SDK: pip install 'outlive[restate]'") from exc

from typing import Any

from ._backend import RestateBackend
from ._config import RestateConfig, parse_url
from ._dispatch import LEASE, RestateDispatcher, dispatch_key, lease_object
from ._effects import http_sender, restate_sender
from ._engine import HandlerBackend, OwnedBackend, attempt, attempt_headers, worker
from ._ledger import LEDGER, keep_ledger, ledger_object

__all__ = [
    "LEASE",
    "LEDGER",
    "HandlerBackend",
    "OwnedBackend",
    "RestateBackend",
    "RestateConfig",
    "RestateDispatcher",
    "app",
    "attempt",
    "attempt_headers",
    "dispatch_key",
    "http_sender",
    "keep_ledger",
    "parse_url",
    "restate_sender",
    "services",
    "worker",
]


def services(*, ledger: bool = True) -> list[restate.VirtualObject]:
    """outlive's objects for the user's app: the lease object, and outlive's ledger object.

    ``ledger=False`` when every work's ledger lives on the user's own object (:func:`keep_ledger`).
    """
    return [lease_object, *([ledger_object] if ledger else [])]


def app(*more: Any, protocol: str | None = None) -> Any:
    """An ASGI app serving ``more`` (the user's services) and :func:`services`."""
    return restate.app([*more, *services()], protocol=protocol)  # type: ignore[arg-type]
