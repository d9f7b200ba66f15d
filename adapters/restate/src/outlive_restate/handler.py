"""outlive *inside* a Restate handler: the worker is the handler, steps are its own journal.

The second shape of agent work on an engine (DESIGN, "Who the worker is"): the steps are the
engine's own durable steps, orchestrated by engine code. :class:`ContextBackend` adapts a
handler's ``restate.Context`` to outlive's :class:`~outlive.Backend`, so the unchanged core
``Worker`` runs inside the handler:

* ``run_step`` is ``ctx.run_typed`` (``max_attempts=1``): the body is journaled in *this*
  invocation, and a retried invocation replays it instead of calling the model again;
* ``execute`` / ``load`` are durable calls to the ``outlive_ledger`` object (``ctx.object_call``),
  journaled too, so a replay sees the same answers; a rejection comes back as the same typed
  outlive error. Let it escape only as :func:`terminal` (a plain exception makes Restate retry).

Give the Worker a deterministic clock (logical ticks, or values you journaled): a replayed
handler must issue the same commands.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import restate
from restate.serde import BytesSerde

from outlive import codec
from outlive import ledger as L
from outlive.backend import Backend, StepCall
from outlive.errors import InvalidRecord, OutliveError, error_from_dict
from outlive.records import WorkState

from .services import ERROR_PREFIX, _terminal
from .services import execute as _execute
from .services import load as _load

__all__ = ["ContextBackend", "terminal"]


def terminal(exc: OutliveError) -> restate.TerminalError:
    """The typed error as a TerminalError: no retry, and the ingress caller gets the same class."""
    return _terminal(exc)


def _typed(exc: restate.TerminalError) -> Exception:
    msg = exc.message or ""
    i = msg.find(ERROR_PREFIX)
    if i < 0:
        return exc
    try:
        return error_from_dict(json.loads(msg[i + len(ERROR_PREFIX):]))
    except ValueError:
        return exc


class ContextBackend(Backend):
    """A Backend over one handler invocation's context (not registered under a URL scheme)."""

    capabilities = frozenset({"atomic-commands", "durable", "engine-steps"})

    def __init__(self, ctx: restate.Context) -> None:
        super().__init__("restate+context://")
        self.ctx = ctx

    async def execute(self, work_id: str, command: L.Command) -> L.Outcome:
        try:
            raw = await self.ctx.object_call(_execute, key=work_id,
                                             arg=codec.dumps(command).encode())
        except restate.TerminalError as exc:
            raise _typed(exc) from None
        out = codec.loads(raw)
        if not isinstance(out, L.Outcome):
            raise InvalidRecord(f"the ledger answered with {type(out).__name__}")
        return out

    async def load(self, work_id: str) -> WorkState | None:
        raw = await self.ctx.object_call(_load, key=work_id, arg=b"")
        if not raw:
            return None
        st = codec.loads(raw)
        if not isinstance(st, WorkState):
            raise InvalidRecord(f"{work_id}: the ledger state is corrupt")
        return st

    async def run_step(self, call: StepCall, fn: Callable[[], Awaitable[Any]]) -> Any:
        async def action() -> bytes:
            return codec.dumps(await fn()).encode()

        raw: bytes = await self.ctx.run_typed(
            f"step:{call.step}#{call.attempt}", action,
            restate.RunOptions(max_attempts=1, serde=BytesSerde()))
        return codec.loads(raw)
