"""The worker's side: steps restored by input key, candidates, and operation-keyed effects.

Every write carries the attempt's owner token, so a worker that was replaced while paused finds
out at its next write (``StaleOwner``) and must stop: alive, but without write authority.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from . import ledger as L
from .backend import Backend, StepCall
from .errors import EffectAmbiguous, InvalidRecord, NotFound, VersionMismatch
from .hashing import content_hash, input_key
from .records import Attempt, Candidate, Effect, EffectState, Part, Receipt, WorkState

__all__ = ["KEEP", "Persist", "Sender", "StepRecord", "Worker"]

Persist = Literal["step", "end"]
Sender = Callable[[str | None, Any], Awaitable[Receipt] | Receipt]


class _Keep:
    def __repr__(self) -> str:
        return "KEEP"


#: Send the operation key itself (the default and the only safe choice).
KEEP: Any = _Keep()


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    """How a step was satisfied in this attempt."""

    step: str
    input_key: str
    result_id: str
    restored: bool


def _ms() -> int:
    return int(time.time() * 1000)


class Worker:
    """One attempt's session. ``persist="end"`` saves the journal only with the candidate."""

    def __init__(self, backend: Backend, attempt: Attempt,
                 snapshot: Mapping[str, Any] | None = None, *, persist: Persist = "step",
                 clock: Callable[[], int] = _ms) -> None:
        if persist not in ("step", "end"):
            raise InvalidRecord(f"persist must be 'step' or 'end', not {persist!r}")
        self.backend = backend
        self.attempt = attempt
        self.snapshot = dict(snapshot) if snapshot is not None else None
        self.persist = persist
        self.clock = clock
        self.steps: dict[str, StepRecord] = {}
        self._results: dict[str, Any] = {}
        self._parts: dict[str, Part] = {}
        self._pending: list[L.StepWrite] = []
        self._state: WorkState | None = None

    @property
    def work_id(self) -> str:
        return self.attempt.work_id

    @property
    def token(self) -> int:
        return self.attempt.token

    async def start(self) -> WorkState:
        """Read the journal once and check the snapshot is the version this attempt is pinned to."""
        st = await self.backend.load(self.work_id)
        if st is None:
            raise NotFound(f"work {self.work_id!r} is not open", work_id=self.work_id)
        self._state = st
        if self.snapshot is not None and self.attempt.pinned_version is not None:
            v = st.version(self.attempt.pinned_version)
            assert v is not None
            got = {k: content_hash(val) for k, val in self.snapshot.items()}
            if got != v.parts:
                raise VersionMismatch(
                    f"the snapshot given to attempt #{self.attempt.number} is not version {v.version}",
                    version=v.version,
                )
        return st

    def _st(self) -> WorkState:
        if self._state is None:
            raise InvalidRecord("call Worker.start() before working")
        return self._state

    async def _call(self, cmd: L.Command) -> L.Outcome:
        return await self.backend.execute(self.work_id, cmd)

    async def step(self, name: str, fn: Callable[..., Any], /, **inputs: Any) -> Any:
        """Restore ``name`` if the journal holds its input key, else run ``fn(**inputs)``.

        The declared ``inputs`` are the whole key: a step that reads anything else makes reuse
        unsound. Inputs named like a part of the pinned version are checked against it.
        """
        st = self._st()
        sources = {k: content_hash(v) for k, v in inputs.items()}
        key = input_key(name, sources)
        done = self.steps.get(name)
        if done is not None and done.input_key == key:
            return self._results[name]   # already run or restored in this attempt
        entry = st.lookup(name, key)
        if entry is not None:
            self._results[name] = entry.result
            self._parts[name] = Part(step=name, input_key=key, sources=sources,
                                     result_id=entry.result_id)
            self.steps[name] = StepRecord(step=name, input_key=key, result_id=entry.result_id,
                                          restored=True)
            return entry.result

        async def body() -> Any:
            out = fn(**inputs)
            if inspect.isawaitable(out):
                out = await out
            return out

        call = StepCall(work_id=self.work_id, attempt=self.attempt.number, token=self.token,
                        step=name, input_key=key, persist=self.persist)
        rid = L.result_id(self.work_id, name, key, self.attempt.number)

        def write_for(result: Any) -> L.StepWrite:
            return L.StepWrite(step=name, sources=sources, input_key=key, result=result,
                               result_id=rid)

        def record(result: Any) -> L.Command:
            return L.RecordSteps(attempt=self.attempt.number, token=self.token,
                                 entries=(write_for(result),), at=self.clock())

        if self.persist == "step":
            result, _ = await self.backend.run_and_record(call, body, record)
        else:
            result = await self.backend.run_step(call, body)
            L._size(result, f"result of step {name!r}")
            self._pending.append(write_for(result))
        self._results[name] = result
        self._parts[name] = Part(step=name, input_key=key, sources=sources, result_id=rid)
        self.steps[name] = StepRecord(step=name, input_key=key, result_id=rid, restored=False)
        return result

    async def run_steps(self, plan: Sequence[tuple[str, Callable[..., Any], Mapping[str, Any]]]) \
            -> list[Any]:
        """Run a known sequence of steps: restore what matches, run the rest as one batch.

        ``plan`` is ``[(name, fn, inputs), ...]``. Same semantics as calling :meth:`step` for
        each in order; an engine may run the batch without a client round trip per step
        (:meth:`~outlive.Backend.run_and_record_many`). Each step is journaled before the next
        starts.
        """
        if self.persist != "step":
            return [await self.step(name, fn, **dict(inputs)) for name, fn, inputs in plan]
        st = self._st()
        calls: list[StepCall] = []
        fns: list[Callable[[], Awaitable[Any]]] = []
        records: list[Callable[[Any], L.Command]] = []
        todo: list[tuple[str, str, dict[str, str], str]] = []
        for name, fn, inputs in plan:
            ins = dict(inputs)
            sources = {k: content_hash(v) for k, v in ins.items()}
            key = input_key(name, sources)
            if st.lookup(name, key) is not None or name in self.steps:
                continue
            rid = L.result_id(self.work_id, name, key, self.attempt.number)

            def body(fn: Callable[..., Any] = fn, ins: dict[str, Any] = ins) -> Awaitable[Any]:
                async def run() -> Any:
                    out = fn(**ins)
                    if inspect.isawaitable(out):
                        out = await out
                    return out
                return run()

            def record(result: Any, name: str = name, sources: dict[str, str] = sources,
                       key: str = key, rid: str = rid) -> L.Command:
                return L.RecordSteps(attempt=self.attempt.number, token=self.token, at=self.clock(),
                                     entries=(L.StepWrite(step=name, sources=sources, input_key=key,
                                                          result=result, result_id=rid),))

            calls.append(StepCall(work_id=self.work_id, attempt=self.attempt.number,
                                  token=self.token, step=name, input_key=key, persist="step"))
            fns.append(body)
            records.append(record)
            todo.append((name, key, sources, rid))
        if calls:
            try:
                results = await self.backend.run_and_record_many(calls, fns, records)
            except BaseException:
                # The steps before the failure are journaled: re-read, so a retry restores them
                # instead of calling the model again.
                fresh = await self.backend.load(self.work_id)
                if fresh is not None:
                    self._state = fresh
                raise
            for (name, key, sources, rid), result in zip(todo, results, strict=True):
                self._results[name] = result
                self._parts[name] = Part(step=name, input_key=key, sources=sources, result_id=rid)
                self.steps[name] = StepRecord(step=name, input_key=key, result_id=rid,
                                              restored=False)
        # restored steps (and any already run) go through step(): a lookup, no call
        out = [await self.step(name, fn, **dict(inputs)) for name, fn, inputs in plan]
        order = [n for n in self.steps if n not in {p[0] for p in plan}] + [p[0] for p in plan]
        self.steps = {n: self.steps[n] for n in order}       # plan order, as step() would give
        self._parts = {n: self._parts[n] for n in order}
        return out

    def result(self, name: str) -> Any:
        return self._results[name]

    async def heartbeat(self) -> bool:
        """Send a sign of life; False means this attempt was replaced (stop soon)."""
        out = await self._call(
            L.Heartbeat(attempt=self.attempt.number, token=self.token, at=self.clock()))
        return out.kind != "superseded"

    def can_restore(self, name: str, /, **inputs: Any) -> bool:
        """Whether ``step(name, ..., **inputs)`` would be restored from the journal."""
        sources = {k: content_hash(v) for k, v in inputs.items()}
        return self._st().lookup(name, input_key(name, sources)) is not None

    async def candidate(self, content: Any, steps: Sequence[str] | None = None) -> Candidate:
        """Submit the finished output built from ``steps`` (default: every step, in order)."""
        names = list(steps) if steps is not None else list(self._parts)
        missing = [n for n in names if n not in self._parts]
        if missing:
            raise InvalidRecord(f"candidate names steps this attempt did not run: {missing}")
        parts = tuple(self._parts[n] for n in names)
        st = self._st()
        version = self.attempt.pinned_version if st.policy.pins else None
        digest = L.candidate_digest(self.work_id, version, parts, content)
        out = await self._call(L.SubmitCandidate(
            attempt=self.attempt.number, token=self.token, digest=digest, parts=parts,
            content=content, at=self.clock(), flush=tuple(self._pending)))
        self._pending.clear()
        cand: Candidate = out.record
        return cand

    def open_effects(self) -> list[Effect]:
        """Intents left unconfirmed by earlier attempts: settle them by resending the same key."""
        return [e for e in self._st().effects
                if e.state in (EffectState.INTENDED, EffectState.AMBIGUOUS)]

    async def effect(self, op_key: str, payload: Any, send: Sender, *,
                     send_key: Any = KEEP) -> Receipt:
        """Record the intent, send with the operation key, record the receiver's answer.

        The guarantee is the receiver's: once, as far as it can tell, for as long as it keeps
        the key. ``send_key`` other than the default exists only to show what breaks.
        """
        key: str | None = op_key if send_key is KEEP else send_key
        L._size(payload, f"payload of {op_key!r}")
        out = await self._call(L.RecordIntent(
            attempt=self.attempt.number, token=self.token, op_key=op_key,
            payload_digest=content_hash(payload), sent_key=key, at=self.clock()))
        if out.kind == "confirmed":
            eff: Effect = out.record
            assert eff.receipt is not None
            return eff.receipt
        try:
            receipt = send(key, payload)
            if inspect.isawaitable(receipt):
                receipt = await receipt
        except (OSError, TimeoutError) as exc:
            raise EffectAmbiguous(
                f"{op_key}: the receiver did not answer ({exc}); the intent stays open — "
                f"resend with the same key", op_key=op_key) from exc
        await self._call(L.ConfirmEffect(attempt=self.attempt.number, token=self.token,
                                         op_key=op_key, receipt=receipt, at=self.clock()))
        return receipt

    async def finish(self) -> None:
        if self._pending:
            await self._call(L.RecordSteps(attempt=self.attempt.number, token=self.token,
                                           entries=tuple(self._pending), at=self.clock()))
            self._pending.clear()
        await self._call(L.Finish(attempt=self.attempt.number, token=self.token, at=self.clock()))
