"""The Restate dispatcher: Restate's own delayed sends keep the lease, Restate's cancel ends it.

``outlive_lease`` is a Virtual Object keyed by work id, served by the user's app beside the
ledger (:func:`~outlive_restate.services`). Its handlers are short, and it is a different object
from the one that runs the attempt, so a lease check never waits behind the attempt it checks (a
delayed call to an object queues behind that object's running exclusive handler).

* ``start`` (called once by any client, then the client may go away): admits attempt #1 in the
  work's ledger, sends the user's handler an invocation for it, and arms a check.
* ``check`` (a delayed send to itself, every ``lease``): reads the attempt's record in the ledger.
  If the attempt wrote nothing during the lease (its record is the one the previous check saw),
  it is silent: its invocation is cancelled with Restate's cancel, it is marked ``unknown`` (never
  failed), a successor is admitted with a larger token and its invocation sent to the same
  handler. A finished or stopped attempt ends the checks.
* Every invocation carries the attempt in its headers and the idempotency key
  ``outlive:{work}#{attempt}``: a repeated dispatch of one attempt attaches to the same invocation.

Times come from ``ctx.time()`` (journaled); nothing here reads a clock outside the journal.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import restate
from restate.serde import BytesSerde

from outlive import ledger as L
from outlive.errors import InvalidRecord, OutliveError
from outlive.records import Attempt, AttemptState, WorkState

from . import _errors
from ._engine import attempt_headers
from ._ledger import EXECUTE, LEDGER, LOAD

__all__ = ["LEASE", "dispatch_key", "lease_object", "start_request"]

#: Name of the lease Virtual Object.
LEASE = "outlive_lease"

_B = BytesSerde()
_LIVE = (AttemptState.ADMITTED, AttemptState.RUNNING)

lease_object = restate.VirtualObject(
    LEASE, description="outlive: keeps each work's attempt alive or replaces it (Restate timers)")


def dispatch_key(work_id: str, number: int) -> str:
    """The idempotency key of attempt ``number``'s invocation: one invocation per attempt."""
    return f"outlive:{work_id}#{number}"


def start_request(*, service: str, handler: str, key: str | None = None, arg: Any = None,
                  lease: timedelta = timedelta(seconds=30), max_attempts: int = 10,
                  ledger: str = LEDGER, pin: str | None = None) -> bytes:
    """The body of ``outlive_lease/{work}/start``: plain JSON any HTTP client can send."""
    ms = int(lease.total_seconds() * 1000)
    if ms <= 0 or max_attempts < 1:
        raise InvalidRecord("a lease is positive and max_attempts at least 1")
    try:
        return json.dumps({"service": service, "handler": handler, "key": key, "arg": arg,
                           "lease_ms": ms, "max_attempts": max_attempts, "ledger": ledger,
                           "pin": pin}, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidRecord(f"a start request carries JSON values only: {exc}") from exc


def _sign(att: Attempt) -> list[Any]:
    """What changes whenever the attempt writes: the same signature means silence."""
    return [att.state.value, att.heartbeats, att.last_heartbeat]


async def _ledger(ctx: restate.ObjectContext, target: dict[str, Any], handler: str,
                  body: bytes) -> Any:
    try:
        raw = await ctx.generic_call(str(target["ledger"]), handler, body, key=ctx.key())
    except restate.TerminalError as exc:
        raise _errors.from_terminal(exc) from None
    return _errors.loads(raw) if raw else None


async def _now(ctx: restate.ObjectContext) -> int:
    return int(await ctx.time() * 1000)


async def _dispatch(ctx: restate.ObjectContext, target: dict[str, Any]) -> dict[str, Any]:
    """Admit the next attempt, send its invocation to the user's handler, arm its first check."""
    out = await _ledger(ctx, target, EXECUTE, _errors.dumps(
        L.Admit(at=await _now(ctx), pin=target.get("pin"))))
    att: Attempt = out.record
    headers = attempt_headers(ctx.key(), att, str(target["ledger"]))
    arg = json.dumps(target.get("arg")).encode()
    handle = ctx.generic_send(str(target["service"]), str(target["handler"]), arg,
                              key=target.get("key"), headers=headers,
                              idempotency_key=dispatch_key(ctx.key(), att.number))
    invocation = await handle.invocation_id()
    current = {"attempt": att.number, "token": att.token, "invocation": invocation,
               "dispatched": await _now(ctx)}
    ctx.set("current", current)
    history: list[Any] = await ctx.get("history", type_hint=list) or []
    history.append(current)
    ctx.set("history", history)
    _arm(ctx, target, att.number, _sign(att))
    return current


def _arm(ctx: restate.ObjectContext, target: dict[str, Any], number: int, seen: list[Any]) -> None:
    ctx.generic_send(LEASE, "check", json.dumps({"attempt": number, "seen": seen}).encode(),
                     key=ctx.key(), send_delay=timedelta(milliseconds=int(target["lease_ms"])))


@lease_object.handler(input_serde=_B)
async def start(ctx: restate.ObjectContext, req: bytes) -> dict[str, Any]:
    """Start driving this work (already opened and published): admit #1 and dispatch it."""
    try:
        target = json.loads(req)
        for field in ("service", "handler", "ledger", "lease_ms", "max_attempts"):
            if field not in target:
                raise InvalidRecord(f"a start request needs {field!r}")
        if await ctx.get("target", type_hint=dict) is not None:
            current: dict[str, Any] = await ctx.get("current", type_hint=dict) or {}
            return current   # already driven: starting twice is not a second attempt
        ctx.set("target", target)
        return await _dispatch(ctx, target)
    except (OutliveError, ValueError) as exc:
        err = exc if isinstance(exc, OutliveError) else InvalidRecord(str(exc))
        raise _errors.to_terminal(err) from None


@lease_object.handler(input_serde=_B)
async def check(ctx: restate.ObjectContext, req: bytes) -> str:
    """A lease ran out: renew it if the attempt wrote since the last check, else replace it."""
    r = json.loads(req)
    number = int(r["attempt"])
    target: dict[str, Any] | None = await ctx.get("target", type_hint=dict)
    current: dict[str, Any] | None = await ctx.get("current", type_hint=dict)
    if target is None or current is None or current["attempt"] != number:
        return "stale timer"
    state: WorkState | None = await _ledger(ctx, target, LOAD, b"")
    att = state.attempt(number) if state is not None else None
    if state is None or att is None:
        return "no such attempt"
    if att.state in (AttemptState.FINISHED, AttemptState.STOPPED):
        return f"attempt {att.state.value}"
    if att.state in _LIVE and _sign(att) != r["seen"]:
        _arm(ctx, target, number, _sign(att))
        return "alive"
    # Silent for a whole lease (or already marked unknown): Restate's cancel ends the
    # invocation, the ledger records silence as unknown, and a successor is dispatched.
    ctx.cancel_invocation(str(current["invocation"]))
    if att.state in _LIVE:
        await _ledger(ctx, target, EXECUTE, _errors.dumps(
            L.MarkUnknown(attempt=number, at=await _now(ctx))))
    if len(state.attempts) >= int(target["max_attempts"]):
        ctx.set("gave_up", {"after": len(state.attempts), "at": await _now(ctx)})
        return "gave up"
    nxt = await _dispatch(ctx, target)
    return f"replaced by #{nxt['attempt']}"


@lease_object.handler(kind="shared")
async def status(ctx: restate.ObjectSharedContext) -> dict[str, Any]:
    """What the lease holds: the target, the current attempt, every dispatch, a give-up."""
    return {"target": await ctx.get("target", type_hint=dict),
            "current": await ctx.get("current", type_hint=dict),
            "history": await ctx.get("history", type_hint=list) or [],
            "gave_up": await ctx.get("gave_up", type_hint=dict)}
