"""outlive inside the user's own Restate handler: the attempt's worker comes from ``ctx``.

As ``restate.ext.pydantic`` wraps a handler's context for an agent, :func:`attempt` (or
:func:`worker`) wraps it for outlive's :class:`~outlive.Worker`, inside the user's Service,
Virtual Object or Workflow handler, served by the user's deployment::

    @my_service.handler()
    async def summarise(ctx: restate.Context, report: dict) -> dict:
        async with outlive_restate.attempt(ctx, snapshot=report) as w:
            for name, text in report.items():
                await w.step(name, model, **{name: text})
            cand = await w.candidate(...)
        return {"digest": cand.digest}

* a step is one ``ctx.run_typed`` entry of *this* invocation (``max_attempts=1``): a retried or
  replayed invocation restores it from Restate's journal, and a successor attempt restores it by
  input key from the work's ledger;
* every ledger write is a durable call (or, for a step's journal write, a durable one-way send)
  to the work's ledger object, fenced by the attempt's token there;
* the clock is journaled: a step's time is the one journaled with its result, any other
  command's time is ``ctx.time()``; nothing is invented, so a replay issues the same commands;
* a step longer than the lease renews it: while the step's ``ctx.run_typed`` entry is pending,
  a durable timer (``ctx.sleep``) of a third of the lease races it, and each time the timer
  wins the attempt sends a heartbeat and arms the next one. The timer and the beats are
  journal entries of the invocation like any other, so a replay takes the same path; a process
  that is paused or gone sends nothing, and the lease replaces it.

Which attempt a handler runs comes from the invocation's headers, set by the dispatcher that
sent it (:mod:`._dispatch`); a handler can also be given them explicitly.

**The owner shape.** When the handler is an exclusive handler of the Virtual Object that keeps
the work's ledger (:func:`~outlive_restate.keep_ledger` on the user's own object, the key being
the work id), Restate's per-key lock already makes the attempt the ledger's only writer: the
commands are applied in this invocation with the core ledger (:class:`OwnedBackend`), and a step
costs one ``ctx.run_typed`` entry plus its share of a flush (one batch key and the core for all
the steps held back; no state key of its own).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import json.scanner
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import timedelta
from typing import Any, Literal

import restate
from restate.serde import BytesSerde
from restate.server_context import current_context

from outlive import codec
from outlive import ledger as L
from outlive._clone import clone, evolve
from outlive.backend import Backend, StepCall
from outlive.errors import InvalidRecord, NotFound, OutliveError, Rejected
from outlive.records import Attempt, AttemptState, JournalEntry, WorkState
from outlive.worker import Persist, Worker

from . import _errors
from ._futures import awaited, first
from ._ledger import EXECUTE, EXECUTE_LAZY, LEDGER, LOAD, _View, _write, read_all, sent

__all__ = [
    "HEADER_ATTEMPT",
    "HEADER_LEASE",
    "HEADER_LEDGER",
    "HEADER_RENEW",
    "HEADER_TOKEN",
    "HEADER_WORK",
    "HandlerBackend",
    "OwnedBackend",
    "Snapshot",
    "Write",
    "attempt",
    "attempt_headers",
    "worker",
]

#: Invocation headers naming the attempt a handler runs (set by the dispatcher).
HEADER_WORK = "x-outlive-work"
HEADER_ATTEMPT = "x-outlive-attempt"
HEADER_TOKEN = "x-outlive-token"
HEADER_LEDGER = "x-outlive-ledger"
#: Milliseconds between lease renewals while a step runs (the dispatcher sends a third of the
#: lease; absent: the attempt's writes are its only signs of life).
HEADER_RENEW = "x-outlive-renew"
#: The lease object that dispatched this attempt and judges its candidate: the attempt tells
#: it (one-way send to its ``settle``) when it finished, so judgement does not wait for a check.
HEADER_LEASE = "x-outlive-lease"

#: How a step's fenced journal write leaves the handler: "call" (the default: awaited, the step
#: returns once the ledger answered, a refusal raises at once) or "send" (a durable one-way send
#: to the ledger object, delivered in order before the attempt's next call to it; what needs the
#: ledger's state to refuse — a stale token, a version mismatch — surfaces at the attempt's next
#: awaited write, which the same fence refuses).
#: "held" (the default while the lease is renewed): steps' writes are held back in the
#: invocation and sent together, see :meth:`HandlerBackend._hold`.
Write = Literal["send", "call", "held"]

_B = BytesSerde()
#: At most this many step writes are held back (and the results of at most one payload limit):
#: one write of them stays a modest command and batch (~160 KB of small results), and costs
#: the ledger's invocation once per this many quick steps. Each invocation costs the deployment
#: and the server more than its entries do: side by side, 512 instead of 256 took ~17-21 ms
#: less of the deployment's CPU per 1,024 held steps, and 0.006 off their ratio to raw steps.
_HOLD_MAX = 512
#: From this many journal entries on, a work's commands go to the ledger's lazy writer
#: (:data:`._ledger.EXECUTE_LAZY`): Restate no longer ships the work's whole stored journal
#: (~80 KB per 256 small steps) to the deployment with each of them; below it, eager state (no
#: round trip for a read) is the cheaper.
_LAZY_FROM = 256
#: What a held step's write answers (a frozen record: one serves every step).
_HELD = L.Outcome(kind="held")
#: A step's run: its body runs once (a retry is a new attempt's business), its value is bytes.
_ONCE: restate.RunOptions[bytes] = restate.RunOptions(max_attempts=1, serde=_B)


def attempt_headers(work_id: str, attempt: Attempt, ledger: str = LEDGER,
                    renew_ms: int | None = None) -> dict[str, str]:
    """The headers that tell a handler which attempt it runs (what the dispatcher sends)."""
    headers = {HEADER_WORK: work_id, HEADER_ATTEMPT: str(attempt.number),
               HEADER_TOKEN: str(attempt.token), HEADER_LEDGER: ledger}
    if renew_ms is not None:
        headers[HEADER_RENEW] = str(int(renew_ms))
    return headers


class HandlerBackend(Backend):
    """A Backend over one handler invocation: ledger commands as durable calls, steps as runs."""

    capabilities = frozenset({"atomic-commands", "durable", "engine-steps"})

    def __init__(self, ctx: restate.Context, *, ledger: str = LEDGER, write: Write = "call",
                 stamp: bool = True, hold: int = 0) -> None:
        super().__init__(f"restate+handler://{ledger}")
        if write not in ("send", "call", "held"):
            raise InvalidRecord(f"write is 'send', 'call' or 'held', not {write!r}")
        if write == "held" and hold <= 0:
            raise InvalidRecord("write='held' needs hold=: how long a step's write may wait "
                                "(ms of journaled time; the lease's renewal period)")
        self.ctx = ctx
        self.ledger = ledger
        self.write = write
        #: With write="held": hold step writes back for up to this many ms of journaled time,
        #: see :meth:`_hold`.
        self.hold = hold if write == "held" else 0
        self._held: list[L.RecordSteps] = []
        self._held_work = ""
        self._held_since = 0
        self._held_bytes = 0
        #: The work whose ledger this invocation loaded, and how many journal entries it knows
        #: that ledger holds (loaded, plus the steps written since): a function of journaled
        #: values only, so a replay picks the same writer for each command.
        self._known = ("", 0)
        #: Time each command through the journal (False: keep the ``at`` the caller gave, as a
        #: logical clock does; it travels inside the journaled call).
        self.stamp = stamp
        #: The last journaled time (ms): the Worker's clock inside a handler.
        self.now = 0
        self._first_load: WorkState | None = None
        #: Renew the lease every this many ms while a step runs (None: never), with ``beat``.
        self.renew_ms: int | None = None
        self.beat: Callable[[], Awaitable[bool]] | None = None
        self._timer: Any = None

    def clock(self) -> int:
        return self.now

    async def tick(self) -> int:
        """Read the time through the journal (as ``ctx.time()``): a replay reads the same value.

        The same entry as ``ctx.time()``, with an async closure: a sync one goes through a
        thread pool on every call.
        """
        wall = await awaited(self.ctx.run_typed("timestamp", _wall))
        self.now = max(self.now, int(wall * 1000))
        return self.now

    async def _stamp(self, command: L.Command) -> L.Command:
        """A command timed now, through the journal (a step's write keeps its step's time)."""
        if not self.stamp or isinstance(command, L.RecordSteps) or not hasattr(command, "at"):
            return command
        return replace(command, at=await self.tick())  # type: ignore[arg-type]

    async def _call(self, handler: str, work_id: str, body: bytes,
                    headers: dict[str, str] | None = None) -> bytes:
        try:
            raw: bytes = await awaited(self.ctx.generic_call(self.ledger, handler, body,
                                                             key=work_id, headers=headers))
        except restate.TerminalError as exc:
            raise _errors.from_terminal(exc) from None
        return raw

    async def _execute(self, work_id: str, command: L.Command,
                       steps: L.RecordSteps | None = None) -> L.Outcome:
        """``command`` as a durable call to the work's ledger object, and its outcome.

        ``steps``: held step writes carried by the same call, applied just before ``command``
        in the same invocation of the ledger (see :func:`._ledger.keep_ledger`).
        """
        if steps is None:
            body = _errors.dumps(command)
        else:
            body = sent(_errors.dumps((steps, command)), (steps, command))
        writer = self._writer(work_id, command if steps is None else steps)
        out = _errors.loads(await self._call(writer, work_id, body))
        if not isinstance(out, L.Outcome):
            raise InvalidRecord(f"the ledger answered with {type(out).__name__}")
        return out

    def _writer(self, work_id: str, cmd: L.Command) -> str:
        """The ledger's writer for ``cmd``, about to leave for ``work_id``; a ``RecordSteps``
        also counts its entries into what this invocation knows the ledger holds."""
        work, n = self._known
        if work != work_id:
            return EXECUTE
        if isinstance(cmd, L.RecordSteps):
            self._known = (work, n + len(cmd.entries))
        return EXECUTE_LAZY if n >= _LAZY_FROM else EXECUTE

    async def execute(self, work_id: str, command: L.Command) -> L.Outcome:
        # held step writes go first: every other command follows them. Those of this work
        # travel with the command, one invocation of its ledger instead of a send and a call
        # queued behind it (the attempt's last ones, a renewal's beat)
        held = self._held_command()
        if held is not None and held[0] != work_id:
            self._send(*held)
            held = None
        return await self._execute(work_id, await self._stamp(command),
                                   held[1] if held is not None else None)

    async def load(self, work_id: str) -> WorkState | None:
        if self._first_load is not None and self._first_load.work_id == work_id:
            st, self._first_load = self._first_load, None   # the worker's start reuses it
            return st
        await self.write_held()
        raw = await self._call(LOAD, work_id, b"")
        if not raw:
            return None
        st = _errors.loads(raw)
        if not isinstance(st, WorkState):
            raise InvalidRecord(f"{work_id}: the ledger state is corrupt", work_id=work_id)
        self._known = (work_id, len(st.journal))
        return st

    async def run_step(self, call: StepCall, fn: Callable[[], Awaitable[Any]]) -> Any:
        """The body as one ``ctx.run_typed`` entry; its journaled value carries the time."""
        result, at = _envelope(await self._run(call, fn))
        self.now = max(self.now, at)
        return result

    async def _run(self, call: StepCall, fn: Callable[[], Awaitable[Any]],
                   proposed: Callable[[bytes], None] | None = None) -> bytes:
        """The step's ``ctx.run_typed`` entry: the journaled value (``{"v": result, "t": ms}``).

        ``proposed`` is called with the value the body produced once the SDK has sent it to the
        server, while the server journals it (only when the body runs: not on a replay).
        """
        async def action() -> bytes:
            result = await fn()
            raw = b'{"v":%s,"t":%d}' % (codec.dumps(result).encode(), int(time.time() * 1000))
            if proposed is not None:
                _after_send(proposed, raw)
            return raw

        run = self.ctx.run_typed(f"step:{call.step}#{call.attempt}", action, _ONCE)
        if self.renew_ms is not None and self.beat is not None:
            await self._renewing(run)
        raw: bytes = await awaited(run)
        return raw

    async def _renewing(self, run: Any) -> None:
        """Wait for the step's entry; each time the renewal timer fires first, beat and re-arm.

        One timer serves the whole invocation: a quick step ends before it fires and costs
        nothing more; it fires at most once per ``renew_ms``. The order in which the timer and
        the step completed is in the journal, so a replay beats exactly where the first run did.
        """
        while self.renew_ms is not None and self.beat is not None:
            if self._timer is None:
                self._timer = self.ctx.sleep(timedelta(milliseconds=self.renew_ms))
            if await first(run, self._timer):
                return
            self._timer = None
            await self.tick()
            if not await self.beat():
                self.renew_ms = None   # replaced or ended: its next fenced write says so

    async def run_and_record(self, call: StepCall, fn: Callable[[], Awaitable[Any]],
                             record: Callable[[Any], L.Command]) -> tuple[Any, L.Outcome]:
        if len(self._held) >= _HOLD_MAX:
            self.send_held()   # a full batch leaves before the next step runs (see _hold)
        result = await self.run_step(call, fn)
        held = self.write == "held" and self._held_work in ("", call.work_id)
        # a held write leaves later, so it keeps a copy: the caller may change the value returned
        cmd = record(clone(result) if held else result)
        if held and isinstance(cmd, L.RecordSteps):
            return result, self._hold(call.work_id, cmd)
        self.send_held()
        if self.write == "call":
            return result, await self._execute(call.work_id, cmd)
        # What the ledger would refuse from the command alone is refused here, before the send:
        # a result that cannot be hashed or is too large (check_size reads its canonical form).
        # A stale token or a version mismatch needs the ledger's state: it refuses the sent
        # write, and the attempt learns it at its next awaited write (which the same fence
        # refuses).
        L.check_size(result, "result of step {!r}", call.step)
        self.ctx.generic_send(self.ledger, self._writer(call.work_id, cmd), _errors.dumps(cmd),
                              key=call.work_id)
        return result, L.Outcome(kind="sent")

    def _hold(self, work_id: str, cmd: L.RecordSteps) -> L.Outcome:
        """Keep a step's write back, to leave with the others (``write="held"``).

        The step's value is already in this invocation's Restate journal (its ``ctx.run_typed``
        entry), so a retried or replayed invocation holds the same writes and sends them at the
        same points: once the oldest held one is ``hold`` ms old (journaled time) at a step, or
        a payload limit's worth of results; once :data:`_HOLD_MAX` are held, before the next
        step runs (so an attempt's last full batch leaves with its finish); with any other
        command of this invocation (a renewal's heartbeat, a candidate, an effect, the finish),
        carried by its call and applied just before it; awaited before a read. The renewal
        timer fires at least once per ``hold`` while a step runs, so a live attempt's steps
        reach the ledger within about one renewal period, as its heartbeats do. What the ledger
        refuses from the command alone (a result that cannot be hashed, one too large) is
        refused here, at the step; what needs the ledger's state (a stale token) refuses the
        steps and the command that carries or follows them.
        """
        size = 0
        for e in cmd.entries:
            size += L.check_size(e.result, "result of step {!r}", e.step)
        if not self._held:
            self._held_work, self._held_since, self._held_bytes = work_id, cmd.at, 0
        self._held.append(cmd)
        self._held_bytes += size
        if cmd.at - self._held_since >= self.hold or self._held_bytes >= L.MAX_PAYLOAD_BYTES:
            self.send_held()
        return _HELD

    def _held_command(self) -> tuple[str, L.RecordSteps] | None:
        if not self._held:
            return None
        held, work = self._held, self._held_work
        self._held, self._held_work = [], ""
        first, last = held[0], held[-1]
        return work, L.RecordSteps(attempt=first.attempt, token=first.token, at=last.at,
                                   entries=tuple(e for c in held for e in c.entries),
                                   secret=first.secret)

    def send_held(self) -> None:
        """Send the held step writes, as one ``RecordSteps``, one-way (a durable send).

        The ledger object takes its invocations for a key in the order sent, so this
        invocation's next call to it (a heartbeat, the candidate, the finish) is applied after
        them and refused with them: a stale token refuses both, and the attempt learns it at
        that call. The handler does not wait for the ledger to store a batch.
        """
        held = self._held_command()
        if held is not None:
            self._send(*held)

    def _send(self, work_id: str, steps: L.RecordSteps) -> None:
        self.ctx.generic_send(self.ledger, self._writer(work_id, steps),
                              sent(_errors.dumps(steps), steps), key=work_id)

    async def write_held(self) -> L.Outcome | None:
        """Write the held step writes now, as one ``RecordSteps``, and wait for the answer."""
        held = self._held_command()
        return None if held is None else await self._execute(*held)


class OwnedBackend(HandlerBackend):
    """The owner shape: this invocation holds the lock of the object that keeps the ledger.

    Commands for ``ctx.key()`` are applied here, to the state read once at the invocation's
    start (the lock guarantees no one else wrote it since), with the core's ``ledger.apply``
    (fence, pins, limits, idempotence: nothing is skipped) and the invocation's journaled time
    as the store's clock; only what changed is written with ``ctx.set``. Commands for any other
    work go to that work's ledger as durable calls.

    With ``defer`` (what :func:`attempt` sets), a step's write is applied at once in memory
    (same checks, same outcome) but stored later: what changed is written in one go, the core
    last, before any other command's, once the oldest held step is ``defer`` ms old
    (journaled time), when the attempt ends, and when the invocation is cancelled or fails for
    good. Until then the step's result is in this invocation's Restate journal (its
    ``ctx.run_typed`` entry): a retried or replayed invocation rebuilds the same buffer, and no
    one else can read or write the ledger in between except through this object, whose lock
    this invocation holds, so only the lease's read of the attempt's signs of life sees them
    later (by at most ``defer`` ms).
    """

    def __init__(self, ctx: restate.ObjectContext, *, ledger: str, defer: int = 0) -> None:
        super().__init__(ctx, ledger=ledger, write="call")
        self.octx = ctx
        #: The object's key (the work id): read once, the SDK builds it anew at every ``key()``.
        self._key = ctx.key()
        self._read = False
        #: The ledger's state as applied so far, its journal a tail of the whole one (at least
        #: the last entry, see :meth:`_compute`); the whole journal is ``_journal``.
        self._state: WorkState | None = None
        self._journal: list[JournalEntry] = []
        self._index: dict[str, int] = {}
        self.defer = defer
        #: What the object's state holds (as last written); ``_state`` is ahead of it while
        #: step writes are held back.
        self._stored: _View | None = None
        self._dirty = False
        self._since: int | None = None
        #: Moves with every command taken in (and every flush): what was worked out ahead of a
        #: step's journaling is taken only if it has not moved since.
        self._gen = 0

    def flush(self) -> None:
        """Write what changed since the last write, in one go, the core last (sync, as
        ``ctx.set`` is, so it also runs on the way out of a cancelled invocation).

        The held entries are encoded here, in one loop, not one by one as their steps are
        applied: in a loop the encoder runs warm, between steps it runs after the SDK's and
        the HTTP/2 stack's own work, at several times the CPU."""
        if self._dirty and self._state is not None:
            old = self._stored
            k = old.n if old is not None else 0
            last = (self._journal[k - 1],) if k else ()
            base = _View(k, replace(old.state, journal=last), old.stamps, old.x, (),
                         old.runs) if old else None
            self._stored = _write(   # no index keys: see _ledger's layout
                self.octx, base, replace(self._state, journal=last + tuple(self._journal[k:])),
                index=False)
            self._state = self._stored.state
            self._dirty = False
        self._since = None
        self._gen += 1

    async def _own(self) -> None:
        if not self._read:
            # One read of everything, at the start of every execution of the invocation: the
            # same reads on a replay, whatever this process has cached.
            self._stored = await read_all(self.octx)
            self._read = True
            if self._stored is not None:
                self._state = self._stored.state
                self._journal = list(self._state.journal)
                self._index = {e.result_id: i for i, e in enumerate(self._journal)}

    async def load(self, work_id: str) -> WorkState | None:
        if work_id != self._key:
            return await super().load(work_id)
        await self._own()
        if self._state is None:
            return None
        return replace(self._state, journal=tuple(self._journal))

    async def execute(self, work_id: str, command: L.Command) -> L.Outcome:
        if work_id != self._key:
            return await super().execute(work_id, command)
        return await self._apply(await self._stamp(command))

    async def _apply(self, command: L.Command) -> L.Outcome:
        await self._own()
        state, new, outcome = self._compute(command)
        self._commit(command, state, new)
        return outcome

    def _compute(self, command: L.Command) -> tuple[WorkState | None, WorkState, L.Outcome]:
        """``command`` applied to the state in memory, nothing changed yet (pure: no ``ctx``):
        the state it was applied to, the new state and the outcome."""
        state = self._state
        cmd = L.checked(command)   # checked and copied once, for reads() and apply()
        if state is not None:
            # the ledger sees the entries the command names and the last one, as the ledger's
            # handler does: a step costs the same at entry 10 and at entry 10,000. A step's
            # write names no entry journaled; it is applied to the state the last command
            # left, whose journal is the few entries before it (any entries of the journal, in
            # order, ending with the last, are as good: ``apply`` looks only at those it reads
            # and the last), cut back to the last one once they are more than a few
            index = self._index
            named = [index[r] for r in L.reads(state, cmd) if r in index]
            if named or len(state.journal) > _TAIL:
                journal = self._journal
                picked = sorted({*named, len(journal) - 1})
                state = evolve(state, journal=tuple(journal[i] for i in picked))
        # the store's clock is the invocation's journaled time (a step's end, or ctx.time()):
        # a replay applies with the same one
        new, outcome = L.apply(state, cmd, work_id=self._key,
                               now=self.now or None)   # a rejection writes nothing
        return state, new, outcome

    def _commit(self, command: L.Command, state: WorkState | None, new: WorkState) -> None:
        """Take the state ``_compute`` gave as the ledger's; write it now or hold it back."""
        self._gen += 1
        if L.changed(state, new):
            journal, index = self._journal, self._index
            for e in new.journal[len(state.journal) if state is not None else 0:]:
                index[e.result_id] = len(journal)
                journal.append(e)
            self._state = new   # in memory only; flush() writes the difference from what is stored
            self._dirty = True
        if not self.defer or not isinstance(command, L.RecordSteps):
            self.flush()
        elif self._since is None:
            self._since = self.now
        elif self.now - self._since >= self.defer:
            self.flush()

    async def run_and_record(self, call: StepCall, fn: Callable[[], Awaitable[Any]],
                             record: Callable[[Any], L.Command]) -> tuple[Any, L.Outcome]:
        """The step's entry, and its write applied in memory.

        While the server journals the step's value (a round trip in which this process waits),
        the write is worked out ahead from the value proposed (:class:`_Ahead`); once the entry
        is journaled, that work is taken as it is if the journaled value is the one proposed
        and nothing else was applied meanwhile, else it is done again from the journaled value.
        Either way the same state and outcome, so a replay (which proposes nothing) agrees.
        """
        if call.work_id != self._key:
            return await super().run_and_record(call, fn, record)
        if not self._read:
            await self._own()
        ahead = _Ahead(self, record)
        raw = await self._run(call, fn, ahead)
        ahead.late = True
        if ahead.raw == raw and ahead.gen == self._gen and ahead.now == self.now:
            global ahead_taken
            ahead_taken += 1
            self.now = ahead.at
            self._commit(ahead.cmd, ahead.state, ahead.new)
            return ahead.result, ahead.outcome
        result, at = _envelope(raw)
        self.now = max(self.now, at)
        return result, await self._apply(record(result))


#: How many owner steps took the write worked out ahead, in this process (tests, benchmarks).
ahead_taken = 0
#: A step's write is applied to the state the last one left while its journal (a tail of the
#: whole one) holds at most this many entries; past that, it is cut back to the last entry.
_TAIL = 8


class _Ahead:
    """An owner step's write worked out while the server journals the step (see
    :meth:`OwnedBackend.run_and_record`): called with the proposed value, it keeps the result,
    the clock, the command and ``_compute``'s answer, changing nothing of the backend's."""

    __slots__ = ("at", "backend", "cmd", "gen", "late", "new", "now", "outcome", "raw",
                 "record", "result", "state")

    def __init__(self, backend: OwnedBackend, record: Callable[[Any], L.Command]) -> None:
        self.backend, self.record = backend, record
        self.gen, self.now = backend._gen, backend.now
        self.late = False
        #: The value proposed, once the work is done (None: not done; taken only if it is the
        #: value journaled).
        self.raw: bytes | None = None

    def __call__(self, raw: bytes) -> None:
        b = self.backend
        if self.late or self.gen != b._gen or self.now != b.now:
            return      # the step already went on, or the state moved: done after the entry
        try:
            result, at = _envelope(raw)
            now = max(b.now, at)
            b.now = now             # the clock the command is recorded and applied with
            try:
                cmd = self.record(result)
                state, new, outcome = b._compute(cmd)
            finally:
                b.now = self.now
        except Exception:   # a refusal: raised by the same work, done again after the entry
            return
        self.result, self.at, self.cmd = result, now, cmd
        self.state, self.new, self.outcome = state, new, outcome
        self.raw = raw


def _after_send(fn: Callable[[bytes], None], raw: bytes) -> None:
    """Call ``fn(raw)`` once the SDK has sent ``raw`` to the server, not before.

    The run's action returns ``raw`` in a task of its own (the SDK runs each action in one):
    the SDK proposes the value, wakes the handler's task and that task ends. In the next turn
    of the event loop, the handler's task hands the value to the HTTP/2 stream, whose sender
    is woken for the turn after; the task's end callback, queued behind the handler's wake-up,
    queues ``fn`` behind the sender, so ``fn`` runs right after the sender wrote the value, in
    the same turn (three ``call_soon`` hops from the action got there too, in a turn of their
    own: one more pass of the loop, ~7 us of CPU a step). Running ``fn`` earlier would only
    delay the proposal (``fn`` changes nothing Restate sees); where the action does not run in
    a task of its own, ``fn`` runs when that task ends, which can only be later.
    """
    task = asyncio.current_task()
    if task is None:    # pragma: no cover - an action always runs in a task
        return
    soon = asyncio.get_running_loop().call_soon
    task.add_done_callback(lambda _done: soon(fn, raw, context=_BARE), context=_BARE)


#: The context the calls of :func:`_after_send` run in (``fn`` reads no context variable):
#: one given, so that the task's callback and ``call_soon`` do not copy the handler's.
_BARE = contextvars.Context()


#: json's own scanner (its C one where there is one), called directly: ``json.loads`` reaches
#: it through three Python frames and two regular-expression matches for whitespace; inside a
#: handler, right after a round trip to the server, with the caches cold, that path cost ~6 us a
#: step more (measured in the benchmark's deployment; warm, in a loop, the gap is ~1 us).
_SCAN: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(
    json.JSONDecoder())  # type: ignore[arg-type]  # the stub wants a scanner; it takes a decoder


def _envelope(raw: bytes) -> tuple[Any, int]:
    """A step's journaled value, ``{"v": result, "t": ms}``: the result and the time.

    Anything else (a journal written by something other than this code) is refused, typed."""
    try:
        text = raw.decode("utf-8")
        entry, end = _SCAN(text, 0)
        if end == len(text) and type(entry) is dict:
            t = entry["t"]
            if type(t) is int:
                return codec.decode(entry["v"]), t
    except (StopIteration, ValueError, KeyError) as exc:
        raise InvalidRecord(f"a step's journaled value is not outlive's ({exc!r})") from None
    raise InvalidRecord(f"a step's journaled value is not outlive's: {raw[:80]!r}")


def _finished(w: Worker) -> None:
    """Tell the lease that dispatched this attempt (if it judges) that the attempt finished:
    one journaled one-way send, so a replay sends it once."""
    backend = w.backend
    if not isinstance(backend, HandlerBackend):
        return
    lease = _header(backend.ctx.request().headers, HEADER_LEASE)
    if lease:
        backend.ctx.generic_send(lease, "settle",
                                 json.dumps({"attempt": w.attempt.number}).encode(),
                                 key=w.work_id)


async def _wall() -> float:
    return time.time()


def _service_of(ctx: restate.Context) -> str | None:
    handler = getattr(ctx, "handler", None)
    tag = getattr(handler, "service_tag", None)
    return getattr(tag, "name", None)


def _header(headers: dict[str, str], name: str) -> str | None:
    for k, v in headers.items():
        if k.lower() == name:
            return v
    return None


Snapshot = Mapping[str, Any] | Callable[[str | None], Mapping[str, Any]] | None


async def worker(ctx: restate.Context | None = None, *, snapshot: Snapshot = None,
                 persist: Persist = "step", write: Write | None = None,
                 work_id: str | None = None,
                 number: int | None = None, token: int | None = None,
                 ledger: str | None = None, renew_ms: int | None = None,
                 defer: int | None = 0) -> Worker:
    """The started Worker of the attempt this handler invocation runs.

    ``ctx`` defaults to the running handler's. The attempt comes from the invocation's headers
    (:func:`attempt_headers`) unless given. ``snapshot`` is the input the attempt works from, or
    a function of the attempt's pinned version that returns it (a successor may be pinned to a
    newer version than the one the work was started with). Raises :class:`~outlive.errors.StaleOwner` if the
    attempt was replaced before it started (a late or repeated dispatch) and fencing is on.
    ``renew_ms`` (default: the ``x-outlive-renew`` header the dispatcher sets to a third of the
    lease) renews the lease that often while a step runs; without it the attempt's writes are
    its only signs of life. ``write`` (handler shape): "held" by default while the lease is
    renewed (:meth:`HandlerBackend._hold`), else "call". ``defer`` (ms; None: the renewal
    period) is how long a held write may wait; in the owner shape (else a second without
    renewals) it holds writes as :class:`OwnedBackend` says: only for a caller that flushes on
    every way out, as :func:`attempt` does.
    """
    ctx = ctx if ctx is not None else current_context()
    if ctx is None:
        raise InvalidRecord("outlive_restate.worker() runs inside a Restate handler")
    headers = ctx.request().headers
    try:
        work = work_id if work_id is not None else _header(headers, HEADER_WORK)
        num = number if number is not None else int(_header(headers, HEADER_ATTEMPT) or "")
        tok = token if token is not None else int(_header(headers, HEADER_TOKEN) or "")
        every = renew_ms if renew_ms is not None else int(_header(headers, HEADER_RENEW) or 0)
    except ValueError as exc:
        raise InvalidRecord(f"this invocation names no outlive attempt ({exc})") from exc
    if not work:
        raise InvalidRecord("this invocation names no outlive work (no x-outlive-work header)")
    home = ledger or _header(headers, HEADER_LEDGER) or LEDGER
    backend: HandlerBackend
    if (home == _service_of(ctx) and isinstance(ctx, restate.ObjectContext)
            and ctx.key() == work):
        backend = OwnedBackend(ctx, ledger=home,
                               defer=(every or 1000) if defer is None else defer)
    else:
        # held step writes need the renewal timer: it bounds how long one waits, and without
        # renewals the attempt's writes are its only signs of life
        if write == "held" and every <= 0:
            raise InvalidRecord("write='held' needs the lease renewed (renew_ms, or the "
                                "dispatcher's x-outlive-renew header)")
        how: Write = write or ("held" if every > 0 else "call")
        backend = HandlerBackend(ctx, ledger=home, write=how,
                                 hold=(defer or every) if how == "held" else 0)
    await backend.tick()
    state = await backend.load(work)
    if state is None:
        raise NotFound(f"work {work!r} is not open", work_id=work)
    backend._first_load = state if not isinstance(backend, OwnedBackend) else None
    att = state.attempt(num)
    if att is None:
        raise NotFound(f"attempt #{num} of {work!r} does not exist", attempt=num)
    if att.state in (AttemptState.FINISHED, AttemptState.STOPPED):
        raise Rejected(f"attempt #{num} of {work!r} is {att.state.value}: nothing to run",
                       attempt=num)
    # The headers' token, not the ledger's: a forged one must meet the fence, not be fixed up.
    snap = snapshot(att.pinned_version) if callable(snapshot) else snapshot
    w = Worker(backend, replace(att, token=tok), snap, persist=persist, clock=backend.clock)
    # the claim is the attempt's first sign of life, and it raises StaleOwner when a successor
    # holds the epoch (fencing on): no second beat (it would be one more ledger write)
    await w.start()
    if every > 0:
        backend.renew_ms, backend.beat = every, w.heartbeat
    return w


@asynccontextmanager
async def attempt(ctx: restate.Context | None = None, **options: Any) -> AsyncIterator[Worker]:
    """``async with attempt(ctx) as w``: the attempt's worker, finished when the block ends.

    An outlive rejection (a stale token, a version mismatch, ...) ends the invocation with the
    same typed error as a TerminalError: Restate does not retry what the ledger refused. Any
    other exception propagates unchanged (Restate retries it; journaled steps are restored).
    In the owner shape, step writes are held back (``defer``, :class:`OwnedBackend`) and written
    on every way out that ends the invocation: the block's end, a rejection, Restate's cancel
    or any other terminal error.
    """
    options.setdefault("defer", None)
    try:
        w = await worker(ctx, **options)
        try:
            yield w
            await w.finish()
            _finished(w)
        except (restate.TerminalError, OutliveError) as exc:
            if isinstance(w.backend, OwnedBackend):
                w.backend.flush()   # the invocation ends here: what it journaled is written
            elif isinstance(w.backend, HandlerBackend) and not (
                    isinstance(exc, restate.TerminalError) and exc.status_code == 409):
                # the invocation fails for good (the handler's own terminal error, or a
                # refusal: one step's result too large ends it): the steps it held are good
                # for a successor (a stale token's are refused again). Not on Restate's cancel
                # (409): the lease cancels an attempt it is replacing, and a write landing
                # between its mark and the successor's admission would revive that attempt
                w.backend.send_held()
            raise
    except OutliveError as exc:
        raise _errors.to_terminal(exc) from None
