"""The Restate dispatcher: Restate's own delayed sends keep the lease, Restate's cancel ends it.

``outlive_lease`` is a Virtual Object keyed by work id, served by the user's app beside the
ledger (:func:`~outlive_restate.services`). Its handlers are short, and it is a different object
from the one that runs the attempt, so a lease check never waits behind the attempt it checks (a
delayed call to an object queues behind that object's running exclusive handler).

* ``start`` (called once by any client, then the client may go away): admits attempt #1 in the
  work's ledger (or adopts the attempt a supervisor already admitted), sends the user's handler
  an invocation for it, and arms a check.
* ``check`` (a delayed send to itself): reads the attempt's record in the ledger. If the attempt
  wrote nothing since the previous check (its record is the one that check saw) and its last
  sign of life is a whole lease old, it is silent; otherwise the next check is armed for when a
  lease will have passed since that sign of life. A silent attempt's invocation is cancelled
  with Restate's cancel, it is marked ``unknown`` (never failed), a successor is admitted with a
  larger token and its invocation sent to the same handler. An attempt that waits (on a
  person, an outside event) is not silent. A finished attempt ends the checks (its candidate
  is judged: here when the work was started with a contract, else by the user's controller); a
  stopped one (its candidate was refused) is replaced like a silent one.
  ``max_attempts`` caps the attempts: then the lease gives up, said in its state, never a
  silent loop. A step longer than the lease is not silence: the dispatched invocation renews
  the lease every third of it while a step runs (``x-outlive-renew``, :mod:`._engine`).
* ``settle`` (a finished attempt's one-way send, when the work was started with a contract):
  judges the candidate in this object — the mechanical checks, the assessor's verdict as a
  journaled ``ctx.run``, ``Accept`` — replaces a refused attempt, and announces the accepted
  result to a Restate handler keyed by operation. The controller's commands carry the
  deployment's controller credential (never an argument of a ``ctx.run``). No controller
  process is needed after ``start``.
* ``cancel`` ends one attempt's invocation with Restate's cancel (a supervisor's ``stop``).
* Every invocation carries the attempt in its headers and the idempotency key
  ``outlive:{work}#{attempt}``: a repeated dispatch of one attempt attaches to the same invocation.

Times come from ``ctx.time()`` (journaled); nothing here reads a clock outside the journal. The
attempt's last sign of life is the journaled time of its last write, taken in the user's
deployment (``ctx.time()`` or a step's journaled end): the same machines' clocks as the checks'.
Silence needs both a stale record and a lease of quiet, so a skewed clock delays a takeover at
worst by one check; it never replaces an attempt that wrote since the previous check.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import restate
from restate.serde import BytesSerde

from outlive import ledger as L
from outlive.controller import Controller, default_credential
from outlive.errors import InvalidRecord, OutliveError, Rejected
from outlive.records import (
    Attempt,
    AttemptState,
    Candidate,
    Contract,
    InputVersion,
    Receipt,
    WorkState,
)
from outlive.supervisor import Assignment, Dispatcher, resolve
from outlive.worker import Worker

from . import _errors
from ._engine import HEADER_LEASE, HandlerBackend, attempt_headers
from ._ledger import EXECUTE, LEDGER, LOAD, STALLED

if TYPE_CHECKING:
    from ._backend import RestateBackend

__all__ = ["LEASE", "RestateDispatcher", "dispatch_key", "lease_object", "start_request"]

#: Name of the lease Virtual Object.
LEASE = "outlive_lease"

_B = BytesSerde()
#: ``settle``'s inactivity and abort timeouts: Restate's defaults, not the object's short ones
#: (:data:`._ledger.STALLED`). An assessor may ask a model for longer than a few seconds, and
#: its ``ctx.run`` sends nothing meanwhile: with the short ones Restate would abort and rerun it.
_JUDGING = (timedelta(minutes=1), timedelta(minutes=10))
#: An assessor's verdict: journaled once (JSON bytes), retried by Restate if the assessor raises.
_RUN: restate.RunOptions[bytes] = restate.RunOptions(serde=_B)

lease_object = restate.VirtualObject(
    LEASE, description="outlive: keeps each work's attempt alive or replaces it (Restate timers)",
    inactivity_timeout=STALLED, abort_timeout=STALLED)


def dispatch_key(work_id: str, number: int) -> str:
    """The idempotency key of attempt ``number``'s invocation: one invocation per attempt."""
    return f"outlive:{work_id}#{number}"


def start_request(*, service: str, handler: str, key: str | None = None, arg: Any = None,
                  lease: timedelta = timedelta(seconds=30), max_attempts: int = 10,
                  ledger: str = LEDGER, pin: str | None = None,
                  adopt: tuple[int, int] | None = None, renew: bool = True,
                  contract: Contract | None = None, assessor: str | None = None,
                  announce: Mapping[str, Any] | None = None) -> bytes:
    """The body of ``outlive_lease/{work}/start``: plain JSON any HTTP client can send.

    ``adopt=(attempt, token)`` dispatches an attempt already admitted (by a supervisor) instead
    of admitting one. ``renew=False`` dispatches attempts that do not renew the lease while a
    step runs (their writes are their only signs of life). ``contract`` makes the lease the
    work's judge: each finished attempt's candidate is judged under it, inside Restate, by
    ``assessor`` (``module:function``, importable in the deployment; None: the mechanical
    checks alone), and ``announce`` (``{"service", "handler", "key"}``: a Restate handler) gets
    the accepted result, keyed by operation. Without ``contract`` your controller judges.
    """
    ms = int(lease.total_seconds() * 1000)
    if ms <= 0 or max_attempts < 1:
        raise InvalidRecord("a lease is positive and max_attempts at least 1")
    if (assessor is not None or announce is not None) and contract is None:
        raise InvalidRecord("an assessor or an announcement needs the contract to judge under")
    if announce is not None and (not isinstance(announce.get("service"), str)
                                 or not isinstance(announce.get("handler"), str)):
        raise InvalidRecord("announce names a Restate handler: {'service', 'handler', 'key'}")
    judge = None if contract is None else {
        "contract": {"name": contract.name, "version": contract.version,
                     "assessor": contract.assessor},
        "assessor": assessor, "announce": dict(announce) if announce is not None else None}
    try:
        return json.dumps({"service": service, "handler": handler, "key": key, "arg": arg,
                           "lease_ms": ms, "max_attempts": max_attempts, "ledger": ledger,
                           "pin": pin, "adopt": list(adopt) if adopt else None,
                           "renew": bool(renew), "judge": judge},
                          separators=(",", ":"), allow_nan=False).encode()
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


async def _dispatch(ctx: restate.ObjectContext, target: dict[str, Any],
                    adopt: Attempt | None = None) -> dict[str, Any]:
    """Admit the next attempt, send its invocation to the user's handler, arm its first check."""
    if adopt is None:
        out = await _ledger(ctx, target, EXECUTE, _errors.dumps(
            L.Admit(at=await _now(ctx), pin=target.get("pin"), credential=default_credential())))
        att: Attempt = out.record
    else:
        att = adopt
    lease = int(target["lease_ms"])
    headers = attempt_headers(ctx.key(), att, str(target["ledger"]),
                              max(1, lease // 3) if target.get("renew", True) else None)
    if target.get("judge") is not None:
        headers[HEADER_LEASE] = LEASE    # the attempt says when it finished: judged at once
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


def _arm(ctx: restate.ObjectContext, target: dict[str, Any], number: int, seen: list[Any],
         delay_ms: int | None = None) -> None:
    """Check attempt ``number`` again after ``delay_ms`` (default: one lease), durably."""
    ms = max(20, int(target["lease_ms"]) if delay_ms is None else delay_ms)
    ctx.generic_send(LEASE, "check", json.dumps({"attempt": number, "seen": seen}).encode(),
                     key=ctx.key(), send_delay=timedelta(milliseconds=ms))


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
        adopt = None
        if target.get("adopt"):
            number, token = (int(x) for x in target["adopt"])
            state: WorkState | None = await _ledger(ctx, target, LOAD, b"")
            adopt = state.attempt(number) if state is not None else None
            if adopt is None or adopt.token != token or not L.is_live(adopt):
                raise InvalidRecord(f"attempt #{number} (token {token}) is not a live attempt "
                                    f"of {ctx.key()!r}: nothing to dispatch")
        ctx.set("target", target)
        return await _dispatch(ctx, target, adopt)
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
    if att.state is AttemptState.FINISHED:
        if target.get("judge") is None:
            return "attempt finished"      # your controller judges its candidate
        # judged by settle, whose timeouts let an assessor take its time (the attempt sent
        # one too when it finished: the second finds the work moved on)
        ctx.generic_send(LEASE, "settle", json.dumps({"attempt": number}).encode(),
                         key=ctx.key())
        return "attempt finished: judging"
    lease = int(target["lease_ms"])
    if L.is_live(att) and not L.is_leased(att):
        _arm(ctx, target, number, _sign(att), lease)
        return "waiting"
    if L.is_leased(att):
        quiet = await _now(ctx) - att.last_heartbeat
        if _sign(att) != r["seen"] or quiet < lease:
            # alive: check again when a lease has passed since its last sign of life. A check
            # that comes late (its sign of life already a lease old, but new since the last
            # check) looks again at once rather than a whole lease later: otherwise a takeover
            # took two leases whenever the claim landed just before the first check fell due.
            _arm(ctx, target, number, _sign(att),
                 lease - quiet if 0 < quiet < lease else 0 if quiet >= lease else lease)
            return "alive"
    # Silent for a whole lease, marked unknown by someone else, or stopped: Restate's cancel
    # ends the invocation, the ledger records silence as unknown, and a successor is sent.
    ctx.cancel_invocation(str(current["invocation"]))
    if L.is_leased(att):
        await _ledger(ctx, target, EXECUTE, _errors.dumps(
            L.MarkUnknown(attempt=number, at=await _now(ctx), credential=default_credential())))
    if len(state.attempts) >= int(target["max_attempts"]):
        ctx.set("gave_up", {"after": len(state.attempts), "at": await _now(ctx)})
        return "gave up"
    nxt = await _dispatch(ctx, target)
    return f"replaced by #{nxt['attempt']}"


@lease_object.handler(input_serde=_B, inactivity_timeout=_JUDGING[0],
                     abort_timeout=_JUDGING[1])
async def settle(ctx: restate.ObjectContext, req: bytes) -> str:
    """Attempt ``{"attempt": n}`` finished (its own one-way send, :func:`._engine.attempt`):
    judge its candidate now rather than at the next check."""
    number = int(json.loads(req)["attempt"])
    target: dict[str, Any] | None = await ctx.get("target", type_hint=dict)
    current: dict[str, Any] | None = await ctx.get("current", type_hint=dict)
    if target is None or current is None or current["attempt"] != number:
        return "stale"
    state: WorkState | None = await _ledger(ctx, target, LOAD, b"")
    att = state.attempt(number) if state is not None else None
    if state is None or att is None or att.state is not AttemptState.FINISHED:
        return "not finished"
    return await _finished_or_terminal(ctx, target, state)


async def _finished_or_terminal(ctx: restate.ObjectContext, target: dict[str, Any],
                                state: WorkState) -> str:
    """:func:`_finished`, a typed refusal ending the invocation for good (a receiver that
    refused the announcement, say: the intent stays open, and Restate does not retry a
    journaled refusal forever)."""
    try:
        return await _finished(ctx, target, state)
    except OutliveError as exc:
        raise _errors.to_terminal(exc) from None


async def _finished(ctx: restate.ObjectContext, target: dict[str, Any], state: WorkState) -> str:
    """The current attempt finished: judge, announce, or send a successor (the lease judges).

    Judgement happens here, in the work's lease object, not in a controller client: the
    mechanical checks (owner, version, part hashes) and the assessor, whose verdict is a
    journaled ``ctx.run`` (a replay gets the same verdict; an assessor that asks a model is
    asked once), then ``Accept`` written to the ledger. A refused candidate (a version
    published meanwhile, the assessor's no) is followed by a successor pinned to the current
    version, up to ``max_attempts``. An accepted one is announced, keyed by operation.
    """
    judge: dict[str, Any] | None = target.get("judge")
    if judge is None:
        return "attempt finished"      # your controller judges its candidate
    if await ctx.get("done", type_hint=dict) is not None:
        return "done"
    work = ctx.key()
    backend = HandlerBackend(ctx, ledger=str(target["ledger"]))
    ctl = Controller(backend, clock=backend.clock)
    contract = Contract(**judge["contract"])
    assess = _journaled(ctx, judge.get("assessor"))
    since = state.latest_acceptance.seq if state.latest_acceptance else 0
    refused: list[str] = []
    for cand in state.candidates:
        att = state.attempt(cand.attempt)
        if cand.seq <= since or att is None or att.state is AttemptState.STOPPED:
            continue
        try:
            await ctl.assess(work, cand.digest, contract, assess, state=state)
        except Rejected as exc:
            refused.append(f"{cand.digest[:8]}: {type(exc).__name__}")
    state = await backend.load(work) or state
    acc = state.latest_acceptance
    if acc is None or (state.policy.pins and acc.version != state.current_version):
        if len(state.attempts) >= int(target["max_attempts"]):
            ctx.set("gave_up", {"after": len(state.attempts), "at": await _now(ctx),
                                "refused": refused})
            return "gave up"
        nxt = await _dispatch(ctx, target)
        return f"refused ({', '.join(refused) or 'no candidate'}); replaced by #{nxt['attempt']}"
    announced = None
    if judge.get("announce") is not None:
        announced = await _announce(ctx, backend, ctl, state, judge["announce"])
    ctx.set("done", {"digest": acc.digest, "version": acc.version, "attempt": acc.attempt,
                     "announced": announced, "at": await _now(ctx)})
    return f"accepted {acc.digest[:8]} for {acc.version}"


def _journaled(ctx: restate.ObjectContext, ref: str | None) -> Any:
    """The assessor named ``ref`` (``module:function``), its verdict journaled by ``ctx.run``."""
    fn = resolve(ref) if ref else None

    async def assess(cand: Candidate, version: InputVersion | None) -> tuple[bool, str]:
        if fn is None:
            return True, "passed the mechanical checks (no assessor)"
        assessor = fn

        async def verdict() -> bytes:
            got = assessor(cand, version)
            if inspect.isawaitable(got):
                got = await got
            ok, reason = got
            return json.dumps([bool(ok), str(reason)]).encode()

        raw = await ctx.run_typed(f"assess:{cand.digest}", verdict, _RUN)
        ok, reason = json.loads(raw)
        return bool(ok), str(reason)

    return assess


async def _announce(ctx: restate.ObjectContext, backend: HandlerBackend, ctl: Controller,
                    state: WorkState, spec: dict[str, Any]) -> dict[str, Any]:
    """Announce the accepted result to ``spec``'s Restate handler, keyed by operation.

    The operation key names the operation (``announce:{work}:{digest}``), never an attempt, and
    travels as Restate's idempotency key. An attempt is admitted for it (an effect is fenced
    like any write); its intent is written before the call and the receipt after, all in this
    invocation, so a crash anywhere replays to the same single call. An intent left open by
    anyone before (a killed announcer) is settled by the same call with the same key.
    """
    acc = state.latest_acceptance
    assert acc is not None
    cand = state.candidate(acc.digest)
    assert cand is not None
    op = f"announce:{ctx.key()}:{acc.digest}"
    eff = state.effect(op)
    if eff is not None and L.is_settled(eff) and eff.receipt is not None:
        return {"op": op, "effect_id": eff.receipt.effect_id, "attempt": eff.attempt}
    att = await ctl.admit(ctx.key(), keyed=False)
    announcer = Worker(backend, att, None, clock=backend.clock)
    await announcer.start()
    payload = {"work": ctx.key(), "digest": acc.digest, "version": acc.version,
               "content": cand.content}

    async def send(key: str | None, body: Any) -> Receipt:
        raw = await ctx.generic_call(str(spec["service"]), str(spec["handler"]),
                                     json.dumps(body).encode(), key=spec.get("key"),
                                     idempotency_key=key)
        got = json.loads(raw) if raw else {}
        effect_id = got.get("effect_id") if isinstance(got, dict) else None
        return Receipt(effect_id=str(effect_id or key), duplicate=False, key=key,
                       note="a Restate call with the operation key as its idempotency key")

    receipt = await announcer.effect(op, payload, send)
    await announcer.finish()
    return {"op": op, "effect_id": receipt.effect_id, "attempt": att.number}


@lease_object.handler(input_serde=_B)
async def cancel(ctx: restate.ObjectContext, req: bytes) -> bool:
    """End attempt ``{"attempt": n}``'s invocation with Restate's cancel; whether one was known."""
    number = int(json.loads(req)["attempt"])
    history: list[dict[str, Any]] = await ctx.get("history", type_hint=list) or []
    found = [d for d in history if d["attempt"] == number]
    for d in found:
        ctx.cancel_invocation(str(d["invocation"]))
    return bool(found)


@lease_object.handler(kind="shared")
async def status(ctx: restate.ObjectSharedContext) -> dict[str, Any]:
    """What the lease holds: the target, the current attempt, every dispatch, a give-up."""
    return {"target": await ctx.get("target", type_hint=dict),
            "current": await ctx.get("current", type_hint=dict),
            "history": await ctx.get("history", type_hint=list) or [],
            "gave_up": await ctx.get("gave_up", type_hint=dict),
            "done": await ctx.get("done", type_hint=dict)}


class RestateDispatcher(Dispatcher):
    """The supervisor's dispatcher on Restate: attempts run in the user's handler, Restate's
    lease checks replace silent ones (``drives_takeover``), Restate's cancel stops them.

    ``service``/``handler`` name the user's handler; ``key`` its object key (``"{work}"`` is
    replaced by the work id; None for a Service); ``arg`` its JSON input. The lease is the work
    definition's (``heartbeat_interval * missed_beats``); ``renew`` as in ``start_work``. The
    backend is the client side (:class:`~outlive_restate.RestateBackend`), used only to hand the
    work over.
    """

    drives_takeover = True
    #: The attempt runs inside Restate from the ledger's record: the token's secret part is not
    #: carried there yet, so the supervisor admits these attempts by the epoch alone.
    carries_secret = False

    def __init__(self, backend: RestateBackend, *, service: str, handler: str,
                 key: str | None = None, arg: Any = None, max_attempts: int | None = None,
                 renew: bool = True) -> None:
        self.backend = backend
        self.service = service
        self.handler = handler
        self.key = key
        self.arg = arg
        self.max_attempts = max_attempts
        self.renew = renew

    async def dispatch(self, assignment: Assignment) -> None:
        d = assignment.definition
        await self.backend.start_work(
            assignment.work_id, service=self.service, handler=self.handler,
            key=self.key.replace("{work}", assignment.work_id) if self.key else None,
            arg=self.arg, lease=timedelta(milliseconds=d.lease.timeout),
            max_attempts=self.max_attempts or d.max_attempts, pin=assignment.pinned_version,
            adopt=(assignment.attempt, assignment.token), renew=self.renew)

    async def stop(self, assignment: Assignment) -> None:
        await self.backend.cancel_attempt(assignment.work_id, assignment.attempt)
