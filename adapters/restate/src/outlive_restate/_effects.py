"""Senders for ``Worker.effect``: the operation key travels as the receiver's idempotency key.

* The receiver is a Restate handler: :func:`restate_sender` sends the key as Restate's own
  ``idempotency-key``. Restate then runs the handler at most once per key and answers a repeat
  with the stored response ("PreviouslyAccepted") for the service's idempotency retention
  (24 h by default). A resend after that window is a new invocation: the receiver applies it
  again. So the guarantee is "once, as far as Restate can tell, for as long as it keeps the key".
* Any other HTTP receiver: :func:`http_sender` sends the ``Idempotency-Key`` header; what that
  buys is the receiver's promise, not Restate's.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

import httpx

from outlive.errors import InvalidRecord
from outlive.records import Receipt

__all__ = ["http_sender", "restate_sender"]

AsyncSender = Callable[[str | None, Any], Awaitable[Receipt]]


def _headers(name: str, op_key: str | None) -> dict[str, str]:
    """A JSON body's headers, with the operation key under ``name`` when there is one."""
    return {"content-type": "application/json", **({name: op_key} if op_key is not None else {})}


def restate_sender(ingress: str, service: str, handler: str, *, key: str | None = None,
                   timeout: float = 30.0) -> AsyncSender:
    """Call ``service[/key]/handler`` through the ingress with the operation key as idempotency key.

    Uses ``/send`` then attaches to the invocation, so Restate itself says whether the key was
    already seen (``status: PreviouslyAccepted``). The handler returns ``{"effect_id": ...}``.
    """
    target = f"{ingress.rstrip('/')}/{service}"
    if key is not None:
        target += f"/{quote(key, safe='')}"
    target += f"/{handler}"

    async def send(op_key: str | None, payload: Any) -> Receipt:
        headers = _headers("idempotency-key", op_key)
        try:
            async with httpx.AsyncClient(timeout=timeout) as http:
                r = await http.post(f"{target}/send", content=json.dumps(payload),
                                    headers=headers)
                r.raise_for_status()
                sent = r.json()
                inv = sent["invocationId"]
                out = await http.get(f"{ingress.rstrip('/')}/restate/invocation/{inv}/attach")
        except httpx.TransportError as exc:  # no answer: the worker records it as ambiguous
            raise ConnectionError(f"{service}/{handler}: {exc!r}") from exc
        if out.status_code != 200:
            raise InvalidRecord(f"{service}/{handler} failed: {out.text[:300]}")
        body = out.json()
        dup = sent.get("status") == "PreviouslyAccepted"
        return Receipt(effect_id=str(body["effect_id"]), duplicate=dup, key=op_key,
                       note="already seen (Restate idempotency key)" if dup else "")

    return send


def http_sender(url: str, *, timeout: float = 30.0) -> AsyncSender:
    """POST the payload with ``Idempotency-Key: <operation key>``; the receiver answers
    ``{"effect_id": ..., "duplicate": bool}``."""

    async def send(op_key: str | None, payload: Any) -> Receipt:
        headers = _headers("Idempotency-Key", op_key)
        try:
            async with httpx.AsyncClient(timeout=timeout) as http:
                r = await http.post(url, content=json.dumps(payload), headers=headers)
        except httpx.TransportError as exc:  # no answer: the worker records it as ambiguous
            raise ConnectionError(f"{url}: {exc!r}") from exc
        r.raise_for_status()
        body = r.json()
        return Receipt(effect_id=str(body["effect_id"]), duplicate=bool(body.get("duplicate")),
                       key=op_key, note=str(body.get("note", "")))

    return send
