"""The worker as the work's owner: a handler *of the ledger object* runs the core Worker.

The third shape of agent work on Restate, and the one that fits Restate's own model best: an
attempt is one exclusive invocation of ``outlive_ledger/{work id}/{your handler}``. While it
runs, Restate's per-key lock makes it the ledger's only writer, so :class:`OwnedBackend` applies
every command of the attempt to the state it read once, with the core's own ``ledger.apply``
(fence, version pins, payload limits, idempotence: nothing is skipped), and writes only what
changed with ``ctx.set``. A step is one ``ctx.run_typed`` entry plus two or three state writes in
the same invocation: no second invocation, no round trip for the fenced write.

What protects what here:

* While the invocation lives, Restate's lock is the fence: nothing else can write the work.
  A deployment crash makes Restate retry the invocation; the replay restores every journaled
  step from Restate's journal (the body is not called again) and re-issues the same writes.
* State writes are applied as Restate journals them, not at the end of the invocation, so what
  an attempt journaled survives its invocation being killed (checked in the tests).
* Replacing an owner is outlive's decision: :meth:`RestateBackend.revoke_owner` kills the
  attempt's invocation (Restate then refuses anything it still tries: a held body's result
  never lands), and the controller marks it unknown and admits a successor with a larger token
  as usual. An owner invocation that starts with a token older than the epoch (a start that
  raced a successor, a forged or replayed request) is refused by the core fence before any step.

Costs of this shape (see ``docs/engines/restate.md``): one attempt holds the work's lock, so its
steps are sequential and other commands on the work (a heartbeat from elsewhere, ``suspect``
timers, the controller's admit) queue behind it until it ends or is revoked; the owner code must
be served by the deployment that serves ``outlive_ledger``; the Worker's clock inside an owner is
logical (the journaled start time plus one millisecond per reading) so a replay issues the same
commands.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any, TypeVar

import restate
from restate.serde import BytesSerde

from outlive import codec
from outlive import ledger as L
from outlive.errors import ConfigError, InvalidRecord, NotFound, OutliveError, Rejected, StaleOwner
from outlive.records import AttemptState, JournalEntry, WorkState
from outlive.worker import Worker

from .handler import ContextBackend
from .services import _read_all, _rids, _terminal, _View, _write, ledger_object

__all__ = ["OwnedBackend", "OwnerFn", "owner", "owner_key", "owner_request"]

_B = BytesSerde()
_RESERVED = frozenset({"execute", "load", "suspect"})

#: An owner: ``async def fn(worker, arg) -> result``, with a started Worker of the attempt.
OwnerFn = Callable[[Worker, Any], Awaitable[Any]]
F = TypeVar("F", bound=OwnerFn)


class OwnedBackend(ContextBackend):
    """A Backend over an exclusive invocation of the work's own ledger object.

    Commands for ``ctx.key()`` are applied here, in this invocation, to the state read once at
    its start (the lock guarantees no one else wrote it since); commands for any other work go
    to that work's ledger as durable calls, as :class:`ContextBackend` does.
    """

    capabilities = frozenset({"atomic-commands", "durable", "engine-steps"})

    def __init__(self, ctx: restate.ObjectContext) -> None:
        super().__init__(ctx)
        self.octx = ctx
        self._read = False
        #: What is stored: the view the last write returned (its journal: a subset) ...
        self._view: _View | None = None
        #: ... the whole journal, and where each result id sits in it.
        self._journal: list[JournalEntry] = []
        self._index: dict[str, int] = {}

    async def _own(self) -> _View | None:
        if not self._read:
            # One read of everything, at the start of every execution of the invocation: the
            # same reads on a replay, whatever this process has cached.
            self._view = await _read_all(self.octx)
            self._read = True
            if self._view is not None:
                self._journal = list(self._view.state.journal)
                self._index = {e.result_id: i for i, e in enumerate(self._journal)}
        return self._view

    async def load(self, work_id: str) -> WorkState | None:
        if work_id != self.octx.key():
            return await super().load(work_id)
        view = await self._own()
        if view is None:
            return None
        return replace(view.state, journal=tuple(self._journal))

    async def execute(self, work_id: str, command: L.Command) -> L.Outcome:
        if work_id != self.octx.key():
            return await super().execute(work_id, command)
        view = await self._own()
        if view is not None:
            # the ledger sees the entries the command names and the last one, as the ``execute``
            # handler does: a step costs the same at entry 10 and at entry 10,000
            n = len(self._journal)
            picked = sorted({self._index[r] for r in _rids(command) if r in self._index}
                            | ({n - 1} if n else set()))
            view = _View(n, replace(view.state, journal=tuple(self._journal[i] for i in picked)),
                         view.stamps)
        state = view.state if view is not None else None
        # The core's checks, unchanged; a rejection raises before any write.
        new, outcome = L.apply(state, command, work_id=work_id)
        if new is not state:
            self._view = _write(self.octx, view, new)
            for e in new.journal[len(state.journal) if state is not None else 0:]:
                self._index[e.result_id] = len(self._journal)
                self._journal.append(e)
        return outcome


def owner_key(work_id: str, attempt: int) -> str:
    """The idempotency key of an attempt's owner invocation: one invocation per attempt."""
    return f"outlive-owner:{work_id}#{attempt}"


def owner_request(attempt: int, token: int, arg: Any = None, *,
                  snapshot: Mapping[str, Any] | None = None, at: int | None = None,
                  persist: str = "step") -> bytes:
    """The body of an owner invocation (what :meth:`RestateBackend.run_owner` sends).

    Plain JSON, so any HTTP client can start an attempt: ``{"attempt": 2, "token": 2,
    "snapshot": {...}, "arg": ..., "at": null, "persist": "step"}``; ``arg`` and the snapshot's
    values are JSON values. The answer is the owner's result in outlive's tagged JSON
    (:mod:`outlive.codec`; a string or number is itself).
    """
    try:
        return json.dumps({"attempt": attempt, "token": token, "arg": arg,
                           "snapshot": dict(snapshot) if snapshot is not None else None,
                           "at": at, "persist": persist}, separators=(",", ":"),
                          ensure_ascii=False, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidRecord(f"an owner request carries JSON values only: {exc}") from exc


def owner(name: str | None = None, *, inactivity_timeout: timedelta = timedelta(hours=1),
          idempotency_retention: timedelta = timedelta(hours=24)) -> Callable[[F], F]:
    """Serve ``fn(worker, arg)`` as ``outlive_ledger/{work id}/{name}``, an exclusive handler.

    Import the module that uses this before the ledger is served (``python -m
    outlive_restate.deployment --import your.module``). The invocation's answer is ``fn``'s
    result; an outlive rejection ends it with the same typed error for the caller, and any other
    exception makes Restate retry it (the journaled steps are restored, not re-run).
    ``inactivity_timeout`` is long by default: a step body may think for minutes, and Restate
    must not abort and retry it meanwhile (it would call the model twice).
    """

    def deco(fn: F) -> F:
        hname = name or getattr(fn, "__name__", "")
        if not hname or hname in _RESERVED or hname.startswith("_"):
            raise ConfigError(f"{hname!r} cannot name an owner handler of the ledger object")
        if hname in ledger_object.handlers:
            raise ConfigError(f"the ledger object already has a handler {hname!r} (an owner "
                              f"module imported twice?)")

        async def handler(ctx: restate.ObjectContext, req: bytes) -> bytes:
            try:
                worker, arg = await _start(ctx, req)
                result = await fn(worker, arg)
                return codec.dumps(result).encode()
            except OutliveError as exc:
                raise _terminal(exc) from None

        handler.__name__ = hname
        handler.__doc__ = fn.__doc__
        ledger_object.handler(name=hname, kind="exclusive", input_serde=_B, output_serde=_B,
                              inactivity_timeout=inactivity_timeout,
                              abort_timeout=inactivity_timeout,
                              idempotency_retention=idempotency_retention)(handler)
        return fn

    return deco


async def _start(ctx: restate.ObjectContext, req: bytes) -> tuple[Worker, Any]:
    """Check the request against the ledger; the attempt's started Worker and the argument."""
    key = ctx.key()
    try:
        r = json.loads(req)
        if not isinstance(r, dict):
            raise TypeError("not a JSON object")
        number, token = int(r["attempt"]), int(r["token"])
        persist = str(r.get("persist") or "step")
        snapshot = r.get("snapshot")
        at = r.get("at")
        if snapshot is not None and not isinstance(snapshot, dict):
            raise TypeError("snapshot is not an object")
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidRecord(f"an owner request needs attempt and token: {exc!r}") from exc
    backend = OwnedBackend(ctx)
    state = await backend.load(key)
    if state is None:
        raise NotFound(f"work {key!r} is not open", work_id=key)
    att = state.attempt(number)
    if att is None:
        raise NotFound(f"attempt #{number} of {key!r} does not exist", attempt=number)
    if att.state in (AttemptState.FINISHED, AttemptState.STOPPED):
        raise Rejected(f"attempt #{number} of {key!r} is {att.state.value}: nothing to run",
                       attempt=number)
    if at is None:
        at = int(await ctx.time() * 1000)  # journaled: a replay gets the same start time
    ticks = itertools.count(int(at))
    # The request's token, not the ledger's: a forged one must meet the fence, not be fixed up.
    worker = Worker(backend, replace(att, token=token),
                    snapshot,
                    persist="end" if persist == "end" else "step", clock=lambda: next(ticks))
    await worker.start()
    if not await worker.heartbeat() and state.policy.fencing:
        raise StaleOwner(f"attempt #{number} of {key!r} was replaced before its owner "
                         f"invocation started (token {token}, epoch {state.epoch})",
                         token=token, attempt=number, epoch=state.epoch)
    return worker, r.get("arg")
