"""``restate://...``: outlive's ledgers in Restate, reached through the ingress like any client.

Every ledger command is one call to the exclusive handler ``{ledger}/{work id}/outlive_execute``
(:mod:`._ledger`), sent with a fresh Restate idempotency key: if the connection breaks (server
restart, network blip) the call is retried with the same key, and Restate either attaches to the
invocation already running or returns its stored result, so a retry never applies a command
twice. Reads go through the shared handler ``outlive_load``.

This is the client side: a controller, an inspector, or a worker that is not Restate code (its
steps run in its own process and are journaled by the fenced write). Work that should survive
every client runs inside the user's handlers (:mod:`._engine`), dispatched and kept alive by
Restate itself (:meth:`RestateBackend.start_work`, :mod:`._dispatch`). Nothing here registers a
deployment or holds admin rights: the user's app is registered once, as any Restate app.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import httpx

from outlive import ledger as L
from outlive.backend import Backend
from outlive.errors import BackendUnavailable, ConfigError, InvalidRecord, OutliveError
from outlive.records import Contract, WorkState

from . import _errors
from ._config import parse_url
from ._dispatch import LEASE, start_request
from ._ledger import EXECUTE, LOAD

__all__ = ["RestateBackend"]


class RestateBackend(Backend):
    """The ledger in Restate K/V state, one Virtual Object key per work."""

    capabilities = frozenset({"atomic-commands", "durable", "multi-process"})

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.config = parse_url(url)
        self.ingress = self.config.ingress
        self.ledger = self.config.ledger
        self._http: httpx.AsyncClient | None = None

    # -- connection ------------------------------------------------------------------------------
    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            raise BackendUnavailable(f"{self.url}: backend not started (use open_backend)")
        return self._http

    async def start(self) -> None:
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=5.0),
            limits=httpx.Limits(max_connections=1000, max_keepalive_connections=200))
        try:
            r = await self._http.post(f"{self.ingress}/{self.ledger}/__outlive_probe__/{LOAD}",
                                      content=b"")
        except httpx.HTTPError as exc:
            await self.close()
            raise BackendUnavailable(
                f"{self.url}: the Restate ingress at {self.ingress} is unreachable ({exc!r})",
                url=self.url) from exc
        if r.status_code != 200:
            await self.close()
            raise BackendUnavailable(
                f"{self.url}: {self.ledger!r} does not keep outlive ledgers on this Restate "
                f"server (ingress answered {r.status_code}); serve outlive_restate.services() in "
                f"your app and register it once", url=self.url, status=r.status_code)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    # -- calls -----------------------------------------------------------------------------------
    async def _post(self, path: str, body: bytes, *, key: str | None,
                    extra: dict[str, str] | None = None) -> bytes:
        """POST to the ingress; retry transport failures (with the same idempotency key).

        ``key=None`` is only for reads, which are safe to repeat without one.
        """
        http = self._client()
        headers = {"content-type": "application/json"} if body else {}
        if extra:
            headers.update(extra)
        if key is not None:
            headers["idempotency-key"] = key
        deadline = time.monotonic() + self.config.retry_for
        delay = 0.02
        while True:
            try:
                r = await http.post(f"{self.ingress}{path}", content=body, headers=headers)
            except httpx.TransportError as exc:
                if time.monotonic() > deadline:
                    raise BackendUnavailable(
                        f"{self.url}: Restate ingress unreachable ({exc!r}); the command was "
                        f"not confirmed (retry with the same call: it is idempotent)",
                        url=self.url) from exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
                continue
            if r.status_code == 200:
                return r.content
            err = _error(r)
            if err is not None:
                raise err
            if r.status_code in (502, 503, 504) and time.monotonic() <= deadline:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
                continue
            raise BackendUnavailable(
                f"{self.url}: Restate answered {r.status_code} on {path}: {r.text[:300]}",
                url=self.url, status=r.status_code)

    def _path(self, work_id: str, handler: str, service: str | None = None) -> str:
        return f"/{service or self.ledger}/{quote(work_id, safe='')}/{handler}"

    async def execute(self, work_id: str, command: L.Command) -> L.Outcome:
        outcome = _errors.loads(await self._execute(work_id, command))
        if not isinstance(outcome, L.Outcome):
            raise InvalidRecord(f"{work_id}: the ledger answered with {type(outcome).__name__}")
        return outcome

    async def _execute(self, work_id: str, command: L.Command,
                       extra: dict[str, str] | None = None) -> bytes:
        """The ledger's raw answer to ``command`` (``extra``: headers of the call)."""
        if not isinstance(work_id, str) or not work_id:
            raise InvalidRecord("a work id must be a non-empty string", field="work_id")
        sent = asyncio.ensure_future(self._post(self._path(work_id, EXECUTE),
                                                _errors.dumps(command), key=uuid.uuid4().hex,
                                                extra=extra))
        # Shielded: once sent, a command is applied or rejected whole even if our caller is
        # cancelled (as an embedded backend's synchronous write would be).
        try:
            raw: bytes = await asyncio.shield(sent)
        except asyncio.CancelledError:
            sent.add_done_callback(lambda t: t.cancelled() or t.exception())
            raise
        return raw

    async def load(self, work_id: str) -> WorkState | None:
        raw = await self._post(self._path(work_id, LOAD), b"", key=None)
        if not raw:
            return None
        state = _errors.loads(raw)
        if not isinstance(state, WorkState):
            raise InvalidRecord(f"{work_id}: the ledger state is corrupt", work_id=work_id)
        return state

    async def works(self) -> list[str]:
        """Keys of the ledger object that hold state (the admin API's introspection query)."""
        if self.config.admin is None:
            raise ConfigError(f"{self.url}: listing works needs the admin API (?admin=PORT)")
        q = (f"SELECT DISTINCT service_key FROM state WHERE service_name = "
             f"'{self.ledger.replace(chr(39), chr(39) * 2)}' ORDER BY service_key")
        try:
            r = await self._client().post(f"{self.config.admin}/query", json={"query": q},
                                          headers={"accept": "application/json"})
        except httpx.HTTPError as exc:
            raise BackendUnavailable(f"{self.url}: admin unreachable ({exc!r})") from exc
        if r.status_code != 200:
            raise BackendUnavailable(f"{self.url}: admin query failed: {r.text[:300]}")
        return [str(row["service_key"]) for row in r.json().get("rows", [])]

    # -- Restate drives the work -----------------------------------------------------------------
    async def start_work(self, work_id: str, *, service: str, handler: str,
                         key: str | None = None, arg: Any = None,
                         lease: timedelta = timedelta(seconds=30), max_attempts: int = 10,
                         pin: str | None = None, adopt: tuple[int, int] | None = None,
                         renew: bool = True, contract: Contract | None = None,
                         assessor: str | None = None,
                         announce: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Hand an opened work to Restate: it admits, dispatches and replaces attempts itself.

        The user's handler ``service/handler`` (``key`` for a Virtual Object or Workflow) gets
        each attempt's invocation; ``arg`` (JSON) is its input. Returns the first dispatch
        (``{"attempt", "token", "invocation", ...}``); this process may exit right after.
        Starting twice returns the first start's dispatch. ``adopt=(attempt, token)`` hands over
        an attempt already admitted (a supervisor's) instead of admitting #1 here. Each attempt
        renews the lease every third of it while a step runs, so a live long step is not
        replaced; ``renew=False`` leaves its writes as its only signs of life.

        With ``contract``, Restate also judges: each finished attempt's candidate is judged
        inside the work's lease object (``assessor``: ``module:function`` importable in your
        deployment, its verdict journaled; None: the mechanical checks alone), a refused one is
        followed by a successor, and an accepted one is sent to ``announce`` (``{"service",
        "handler", "key"}``, a Restate handler) with the operation key as Restate's idempotency
        key. No controller process is needed after this call; :meth:`lease` shows ``done``.
        """
        body = start_request(service=service, handler=handler, key=key, arg=arg, lease=lease,
                             max_attempts=max_attempts, ledger=self.ledger, pin=pin, adopt=adopt,
                             renew=renew, contract=contract, assessor=assessor,
                             announce=announce)
        raw = await self._post(self._path(work_id, "start", LEASE), body,
                               key=f"outlive-start:{work_id}")
        got: dict[str, Any] = json.loads(raw)
        return got

    async def cancel_attempt(self, work_id: str, attempt: int) -> bool:
        """End ``attempt``'s invocation with Restate's cancel; whether Restate drove it."""
        raw = await self._post(self._path(work_id, "cancel", LEASE),
                               json.dumps({"attempt": attempt}).encode(), key=uuid.uuid4().hex)
        return bool(json.loads(raw))

    async def lease(self, work_id: str) -> dict[str, Any]:
        """What Restate's lease of the work holds: target, current attempt, dispatches, give-up."""
        raw = await self._post(self._path(work_id, "status", LEASE), b"", key=None)
        got: dict[str, Any] = json.loads(raw)
        return got


def _error(r: httpx.Response) -> OutliveError | None:
    """A terminal failure carrying an outlive error, back as the same class."""
    try:
        data = r.json()
    except ValueError:
        return None
    msg = data.get("message") if isinstance(data, dict) else None
    return _errors.from_message(msg) if isinstance(msg, str) else None
