"""The worker's side: steps restored by input key, candidates, and operation-keyed effects.

Every write carries the attempt's owner token, so a worker that was replaced while paused finds
out at its next write (``StaleOwner``) and must stop: alive, but without write authority.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
import types
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from . import _observe
from . import ledger as L
from ._check import argument, callable_argument, text_argument
from ._clone import clone, maker, quick_init
from ._failures import CALLED_WRONG
from .backend import Backend, StepCall
from .errors import (
    AttemptEnded,
    EffectAmbiguous,
    InvalidRecord,
    NotFound,
    OutliveError,
    StaleOwner,
    VersionMismatch,
)
from .hashing import content_hash, input_key
from .records import (
    Attempt,
    AttemptState,
    Candidate,
    Effect,
    EffectState,
    JournalEntry,
    JournalIndex,
    Part,
    Receipt,
    WorkState,
)

__all__ = ["KEEP", "PARTS", "External", "Persist", "ResultOf", "Sender", "StepRecord", "Worker"]

Persist = Literal["step", "end"]
#: ``send(key, payload) -> Receipt``: deliver ``payload`` under ``key`` and return the receiver's
#: answer. The contract: a :class:`~outlive.records.Receipt` means the receiver answered; an
#: outlive error (e.g. :class:`~outlive.errors.EffectConflict`) is the receiver's typed refusal
#: and propagates; anything else (any exception, or a return value that is not a Receipt) means
#: nobody knows whether the effect happened: :class:`~outlive.errors.EffectAmbiguous`, and the
#: intent stays open for a resend with the same key.
Sender = Callable[[str | None, Any], Awaitable[Receipt] | Receipt]


class _Keep:
    def __repr__(self) -> str:
        return "KEEP"


#: Send the operation key itself (the default and the only safe choice).
KEEP: Any = _Keep()


class _Parts:
    def __repr__(self) -> str:
        return "PARTS"


#: :meth:`Worker.candidate`'s content when left out: the named steps' journaled results by name.
PARTS: Any = _Parts()


@dataclass(frozen=True)
class External:
    """Wrap a step input that is not a part of the input version: ``style=External("terse")``.

    Under version pins every input is either a part of the pinned version (checked by hash) or
    declared external with this wrapper; the ledger refuses a silent third kind. The step body
    receives the wrapped value itself.
    """

    value: Any

    def __init__(self, value: Any) -> None:
        # what the generated ``__init__`` does through ``object.__setattr__`` (the class is
        # frozen), at half the cost: an adapter wraps a step's external inputs on every call
        self.__dict__["value"] = value


@dataclass(frozen=True)
class ResultOf:
    """Wrap a step input that is another step's result: ``summaries=ResultOf("s2")``.

    The body receives that step's result (as journaled); the ledger records the input as the
    result's id, checked against the journal, so the step's provenance chains back through it
    to the version's parts, and a change to the source (a new result id) redoes this step.
    """

    step: str


def _unwrap(inputs: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The inputs' values, and the names of the external ones, sorted: in one pass (a loop,
    not comprehensions: this runs on every step)."""
    values: dict[str, Any] = {}
    external: list[str] | None = None
    for k, v in inputs.items():
        if isinstance(v, External):
            values[k] = v.value
            if external is None:
                external = [k]
            else:
                external.append(k)
        else:
            values[k] = v
    if external is None:
        return values, ()
    if len(external) > 1:
        external.sort()
    return values, tuple(external)


@quick_init
@dataclass(frozen=True, kw_only=True)
class StepRecord:
    """How a step was satisfied in this attempt."""

    step: str
    input_key: str
    result_id: str
    restored: bool


class _Prepared:
    """One step, keyed and ready: its engine call, body, and the fenced write of its result.

    Built once per step and never handed out: a plain class with slots, cheaper to build than a
    frozen dataclass."""

    __slots__ = ("body", "call", "derived", "external", "key", "name", "rid", "sources", "worker")

    def __init__(self, worker: Worker, name: str, sources: dict[str, str], key: str, rid: str,
                 call: StepCall, body: Callable[[], Awaitable[Any]],
                 external: tuple[str, ...] = (), derived: tuple[str, ...] = ()) -> None:
        self.worker = worker
        self.name = name
        self.sources = sources
        self.key = key
        self.rid = rid
        self.call = call
        self.body = body
        self.external = external
        self.derived = derived

    def write(self, result: Any) -> L.StepWrite:
        if self.derived:
            return _STEP_WRITE(step=self.name, sources=self.sources, input_key=self.key,
                               result=result, result_id=self.rid, external=self.external,
                               derived=self.derived)
        return _STEP_WRITE(step=self.name, sources=self.sources, input_key=self.key,
                           result=result, result_id=self.rid, external=self.external)

    def record(self, result: Any) -> L.Command:
        w = self.worker
        att = w.attempt
        return _RECORD_STEPS(attempt=att.number, token=att.token, entries=(self.write(result),),
                             at=w.clock(), secret=att.secret)


#: The records built on every step, by functions rather than their classes (see ``maker``).
_STEP_WRITE = maker(L.StepWrite)
_RECORD_STEPS = maker(L.RecordSteps)
_STEP_RECORD = maker(StepRecord)
_STEP_CALL = maker(StepCall)


#: The type of what an ``async def`` function returns when called.
_COROUTINE = types.CoroutineType


def _mark_called_wrong(exc: TypeError, fn: Callable[..., Any], ins: Mapping[str, Any]) -> None:
    """Mark ``exc`` if it came from calling ``fn`` with inputs its signature does not take (the
    same on every attempt), not from inside it."""
    try:
        inspect.signature(fn).bind(**ins)
    except TypeError:
        setattr(exc, CALLED_WRONG, True)
    except ValueError:   # no signature to read (some builtins): say nothing
        pass


def _ms() -> int:
    return int(time.time() * 1000)


class Worker:
    """One attempt's session. ``persist="end"`` saves the journal only with the candidate."""

    def __init__(self, backend: Backend, attempt: Attempt,
                 snapshot: Mapping[str, Any] | None = None, *, persist: Persist = "step",
                 clock: Callable[[], int] = _ms) -> None:
        argument(backend, Backend, "backend", "Worker", "a started Backend (open_backend(url))")
        argument(attempt, Attempt, "attempt", "Worker",
                 "the Attempt its controller admitted (Controller.admit)")
        argument(snapshot, (Mapping, type(None)), "snapshot", "Worker",
                 "a mapping of part name to content, or None")
        callable_argument(clock, "clock", "Worker")
        if persist not in ("step", "end"):
            raise InvalidRecord(f"persist must be 'step' or 'end', not {persist!r}")
        self.backend = backend
        self.attempt = attempt
        self.snapshot = dict(snapshot) if snapshot is not None else None
        self.persist = persist
        self.clock = clock
        #: Run a plain (non-async) step function in a worker thread, so a long synchronous call
        #: (a blocking HTTP client, a CPU-bound parse) does not stop the event loop that renews
        #: this attempt's lease and runs every other work of the process.
        self.sync_in_thread = False
        self.steps: dict[str, StepRecord] = {}
        self._results: dict[str, Any] = {}
        #: Each step's part as (input key, sources, result id, external): a Part is built only
        #: for a candidate.
        self._parts: dict[str, tuple[str, dict[str, str], str, tuple[str, ...]]] = {}
        self._pending: list[L.StepWrite] = []
        self._state: WorkState | None = None
        #: The loaded journal indexed as ``WorkState.lookup`` searches it (built on first use).
        self._found: JournalIndex | None = None
        self._found_of: WorkState | None = None
        #: Set when a heartbeat learned that this attempt was replaced.
        self.replaced = False
        #: What this worker last said the attempt waits for (:meth:`wait`), until :meth:`resume`.
        self.waits: str | None = None
        #: Called once a wait is recorded: a watcher in this process (a runtime) learns that the
        #: attempt waits, to time the kind's wait limit without polling.
        self.on_wait: Callable[[], None] | None = None
        #: When (this worker's clock) a write of its own last landed: a sign of life already
        #: given, so the background renewal need not send one as well.
        self.last_sign: int | None = None
        #: Set when a wait ends: the lease's renewal sleeps on it while the attempt waits.
        self._wait_over: asyncio.Event | None = None
        #: Awaited before anything that depends on this attempt's steps (an assembly, the
        #: candidate, an effect, a wait, the end): an engine that lets a step's journal write
        #: be in flight while the next step runs (LangGraph's ``durability="async"``) lands
        #: them there, and raises a failed one's error.
        self.landed: Callable[[], Awaitable[None]] | None = None

    @property
    def work_id(self) -> str:
        return self.attempt.work_id

    @property
    def token(self) -> int:
        return self.attempt.token

    async def start(self, *, claim: bool = True, state: WorkState | None = None) -> WorkState:
        """Read the journal, check the snapshot is the pinned version, then claim the attempt.

        The claim is the attempt's first sign of life; a second worker given the same attempt
        is refused (:class:`~outlive.errors.AttemptClaimed`), so a token reaches at most one
        live worker. Raises :class:`~outlive.errors.StaleOwner` if a successor already holds
        the epoch (with fencing on) and :class:`~outlive.errors.AttemptEnded` if the attempt
        was stopped or finished. ``claim=False`` is for the worker that already claimed the
        attempt and reconnects (a new connection after a lost one), or for one admitted already
        claimed (``Admit.claimed``): it reads and checks only. ``state``, with ``claim=False``,
        spares the read: the work as read just before the attempt's admission, when nothing but
        the admission was written since (its journal, inputs and effects are the current ones).
        """
        st = state if state is not None and not claim else await self.backend.load(self.work_id)
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
        if not claim:
            return st
        out = await self._call(L.Heartbeat(attempt=self.attempt.number, token=self.token,
                                           at=self.clock(), secret=self.attempt.secret, claim=True))
        if out.kind == "ended":
            raise AttemptEnded(f"attempt #{self.attempt.number} of {self.work_id} is "
                               f"{out.record.state.value}: nothing to run",
                               attempt=self.attempt.number, work_id=self.work_id)
        if out.kind == "superseded" and st.policy.fencing:
            raise StaleOwner(f"attempt #{self.attempt.number} of {self.work_id} was replaced "
                             f"before its worker started (token {self.token})",
                             token=self.token, attempt=self.attempt.number, work_id=self.work_id)
        return st

    async def rejoin(self) -> WorkState:
        """Carry on this attempt in another process than the one that claimed it (a person
        answered its wait there): read the journal without claiming again, and count the steps
        this attempt journaled as this worker's own, so that its candidate names every one of
        them, not only those run in this process. The caller proves the attempt is free (it
        waits, and only one rejoiner ends that wait: a compare-and-set in the ledger)."""
        st = await self.start(claim=False)
        for e in st.journal:
            if e.attempt == self.attempt.number and not e.stale:
                key = e.input_key if e.input_key is not None else input_key(e.step, e.sources)
                self._results[e.step] = e.result
                self._parts[e.step] = (key, dict(e.sources), e.result_id, e.external)
                self.steps[e.step] = _STEP_RECORD(step=e.step, input_key=key,
                                                  result_id=e.result_id, restored=False)
        return st

    @property
    def last_read(self) -> WorkState:
        """The work as this worker last read it (at its start): its versions, and the verdicts
        given before this attempt, are still true."""
        return self._st()

    def _st(self) -> WorkState:
        if self._state is None:
            raise InvalidRecord("call Worker.start() before working")
        return self._state

    def _lookup(self, step: str, key: str | None) -> JournalEntry | None:
        """``WorkState.lookup`` on the loaded state, by an index built once per state, so a step
        costs the same whatever the journal's length (the search walks the whole journal)."""
        st = self._st()
        if self._found is None or self._found_of is not st:
            self._found, self._found_of = JournalIndex(), st
            self._found.feed(st.journal)
        return self._found.lookup(step, key, st.policy.pins)

    async def _call(self, cmd: L.Command) -> L.Outcome:
        out = await _observe.execute(self.backend, self.work_id, cmd)
        self.last_sign = self.clock()
        return out

    def _prepare(self, name: str, fn: Callable[..., Any], inputs: Mapping[str, Any]) -> _Prepared:
        ins, external = _unwrap(inputs)
        sources = {}
        derived: list[str] = []
        for k, v in ins.items():
            if type(v) is ResultOf:
                done = self.steps.get(v.step)
                if done is None:
                    raise InvalidRecord(f"step {name!r}: {k}=ResultOf({v.step!r}) names a step "
                                        "this attempt has not run or restored", field=k)
                sources[k] = done.result_id
                ins[k] = clone(self._results[v.step])
                derived.append(k)
                continue
            sources[k] = content_hash(v)
        key = input_key(name, sources)
        att = self.attempt
        rid = L.result_id(att.work_id, name, key, att.number)

        async def body() -> Any:
            try:
                out = fn(**ins)
            except TypeError as exc:
                _mark_called_wrong(exc, fn, ins)
                raise
            if type(out) is _COROUTINE or inspect.isawaitable(out):   # the first: an async fn
                out = await out
            return out

        if self.sync_in_thread and not inspect.iscoroutinefunction(fn):
            async def body() -> Any:   # the context is copied into the thread, as asyncio does
                try:
                    out = await asyncio.to_thread(fn, **ins)
                except TypeError as exc:
                    _mark_called_wrong(exc, fn, ins)
                    raise
                if inspect.isawaitable(out):
                    out = await out
                return out

        call = _STEP_CALL(work_id=att.work_id, attempt=att.number, token=att.token,
                          step=name, input_key=key, persist=self.persist)
        return _Prepared(self, name, sources, key, rid, call, body, external, tuple(derived))

    def _remember(self, p: _Prepared, result: Any, result_id: str, restored: bool,
                  journaled: bool = False) -> None:
        # a copy of a result just run: the caller holds the one returned and may change it; what
        # this attempt submits or hands to a derived step is what was journaled
        self._results[p.name] = result if restored or journaled else clone(result)
        self._parts[p.name] = (p.key, p.sources, result_id, p.external)
        self.steps[p.name] = _STEP_RECORD(step=p.name, input_key=p.key, result_id=result_id,
                                          restored=restored)

    def _restore(self, p: _Prepared) -> bool:
        """Satisfy ``p`` from this attempt or the journal, if its key is there."""
        done = self.steps.get(p.name)
        if done is not None and done.input_key == p.key:
            return True   # already run or restored in this attempt
        entry = self._lookup(p.name, p.key)
        if entry is None:
            return False
        self._remember(p, entry.result, entry.result_id, restored=True)
        return True

    async def step(self, name: str, fn: Callable[..., Any], /, **inputs: Any) -> Any:
        """Restore ``name`` if the journal holds its input key, else run ``fn(**inputs)``.

        The declared ``inputs`` are the whole key: a step that reads anything else makes reuse
        unsound. Inputs named like a part of the pinned version are checked against it.
        """
        # (not ``_observe.traced``: its wrapper repacks the arguments on every step)
        if _observe.tracing():
            return await self._step_in_span(name, fn, inputs)
        return await self._step(name, fn, inputs)

    @_observe.traced("outlive.step",
                    lambda self, name, *a, **kw: {"work_id": self.work_id, "step": name,
                                                  "attempt": self.attempt.number},
                    lambda self, result, name, *a, **kw: {"restored": self.steps[name].restored})
    async def _step_in_span(self, name: str, fn: Callable[..., Any], inputs: dict[str, Any]) -> Any:
        """:meth:`step` inside its span ``outlive.step``."""
        return await self._step(name, fn, inputs)

    async def _step(self, name: str, fn: Callable[..., Any], inputs: dict[str, Any]) -> Any:
        if type(name) is not str or not name:
            text_argument(name, "name", "Worker.step")
        if not callable(fn):
            callable_argument(fn, "fn", "Worker.step")
        p = self._prepare(name, fn, inputs)
        if self._restore(p):
            return clone(self._results[name])
        if self.persist == "step":
            # logged here, around the backend's own call: one coroutine fewer a step
            try:
                result, out = await self.backend.run_and_record(p.call, p.body, p.record)
            except OutliveError as exc:
                _observe.step_rejected(p.call, exc)
                raise
            if _observe.listening():
                _observe.step_recorded(p.call, out)
            self.last_sign = self.clock()   # the journal write was a sign of life
            entry = out.record
            if type(entry) is JournalEntry and entry.result_id == p.rid \
                    and entry.result is not result:
                # the journaled result as the outcome carries it (changed by no one): kept as is
                self._remember(p, entry.result, p.rid, restored=False, journaled=True)
                return result
        else:
            result = await self.backend.run_step(p.call, p.body)
            L.check_size(result, "result of step {!r}", name)
            # a copy: the caller may change the returned value before the write leaves
            self._pending.append(p.write(clone(result)))
        self._remember(p, result, p.rid, restored=False)
        return result

    async def assemble(self, content: Any, name: str = L.ASSEMBLY,
                       steps: Sequence[str] | None = None) -> Any:
        """Journal ``content`` as the assembly step ``name``, whose inputs are the results of
        ``steps`` (default: every step so far), and return it as journaled.

        For a wrapper that a framework hands a final answer built from the steps this attempt
        journaled (an agent's final message, a graph's output): the answer becomes a journaled
        result whose provenance chains back through those steps to the version's parts, and the
        candidate's content is bound to it (``candidate(await worker.assemble(answer))``). The
        entry goes with the candidate, in the same write. Code that builds its content itself
        makes the building a step instead (``step("assemble", build, s1=ResultOf("s1"), ...)``):
        its body then reads the journaled results, never a copy the caller may have changed.
        """
        text_argument(name, "name", "Worker.assemble")
        if self.landed is not None:
            await self.landed()
        names = list(steps) if steps is not None else [n for n in self._parts if n != name]
        missing = [n for n in names if n not in self._parts]
        if missing:
            raise InvalidRecord(f"assemble names steps this attempt did not run: {missing}")
        parts = tuple(Part(step=n, input_key=key, sources=sources, result_id=rid)
                      for n, (key, sources, rid, _external) in ((n, self._parts[n]) for n in names))
        if parts and L.is_bound({self._parts[n][2]: self._results[n] for n in names}, parts,
                                content):
            return clone(content)   # a step's journaled result already (or theirs by step)
        sources = {n: self.steps[n].result_id for n in names}
        key = input_key(name, sources)
        att = self.attempt
        call = StepCall(work_id=att.work_id, attempt=att.number, token=att.token, step=name,
                        input_key=key, persist=self.persist)

        async def nothing_to_run() -> Any:
            return content

        p = _Prepared(self, name, sources, key, L.result_id(att.work_id, name, key, att.number),
                      call, nothing_to_run, (), tuple(names))
        if not self._restore(p):
            L.check_size(content, "result of step {!r}", name)
            value = clone(content)
            self._pending.append(p.write(value))
            self._remember(p, value, p.rid, restored=False)
        return clone(self._results[name])

    @_observe.traced("outlive.steps",
                    lambda self, plan: {"work_id": self.work_id, "attempt": self.attempt.number,
                                        "steps": [name for name, *_ in plan]},
                    lambda self, result, plan: {
                        "restored": [n for n, *_ in plan if self.steps[n].restored],
                        "run": [n for n, *_ in plan if not self.steps[n].restored]})
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
        todo = [p for p in (self._prepare(name, fn, inputs) for name, fn, inputs in plan)
                if not self._restore(p)]
        if todo:
            try:
                results = await _observe.run_and_record_many(
                    self.backend, [p.call for p in todo], [p.body for p in todo], [p.record for p in todo])
                self.last_sign = self.clock()
            except BaseException:
                # The steps before the failure are journaled: re-read, so a retry restores them
                # instead of calling the model again.
                fresh = await self.backend.load(self.work_id)
                if fresh is not None:
                    self._state = fresh
                raise
            for p, result in zip(todo, results, strict=True):
                self._remember(p, result, p.rid, restored=False)
        names = [name for name, _fn, _inputs in plan]
        order = [n for n in self.steps if n not in set(names)] + names
        self.steps = {n: self.steps[n] for n in order}       # plan order, as step() would give
        self._parts = {n: self._parts[n] for n in order}
        return [clone(self._results[n]) for n in names]

    def result(self, name: str) -> Any:
        """The result of step ``name`` as journaled (a copy: changing it changes nothing)."""
        return clone(self._results[name])

    async def heartbeat(self) -> bool:
        """Send a sign of life; True only if this attempt still holds the work.

        False means stop soon: a successor holds the epoch, or the attempt was stopped or
        finished. An attempt marked ``unknown`` that beats while no successor was admitted is
        running again (True): silence was never failure.
        """
        out = await self._call(L.Heartbeat(attempt=self.attempt.number, token=self.token,
                                           at=self.clock(), secret=self.attempt.secret))
        if out.kind in ("superseded", "ended"):
            self.replaced = True
        return out.kind in ("beat", "revived")

    @contextlib.asynccontextmanager
    async def renewing(self, interval_ms: int, *, at_once: bool = True) -> AsyncIterator[None]:
        """Renew the lease every ``interval_ms`` in the background while the block runs.

        ``at_once=False`` waits one interval before the first beat, for a caller whose claim
        (:meth:`start`) was the sign of life a moment ago: a beat then would be a write for nothing.

        A long model call is then not silence. Renewal stops when the block ends or when a beat
        answers that the attempt was replaced (its next fenced write is refused anyway). A beat
        that fails (backend briefly unavailable) is skipped, not fatal: a lease is a suspicion,
        the token is the guarantee.
        """
        async def beat() -> None:
            # A beat is due one interval after the attempt's latest sign of life (its own writes
            # count), so an attempt that writes at least once an interval never beats; a beat
            # that failed waits an interval too (a missed beat is what leases are for).
            tried = self.clock() - (interval_ms if at_once else 0)
            while True:
                if self.waits is not None:   # waiting is not silence: asleep until it ends
                    over = self._wait_over = asyncio.Event()
                    if self.waits is not None:
                        await over.wait()
                    tried = self.clock()
                    continue
                now = self.clock()
                due = max(tried, self.last_sign or tried) + interval_ms
                if due > now:
                    await asyncio.sleep((due - now) / 1000)
                    continue
                tried = now
                try:
                    if not await self.heartbeat():
                        return
                except asyncio.CancelledError:
                    raise
                except Exception:
                    pass

        task = asyncio.create_task(beat(), name=f"outlive-lease:{self.work_id}#{self.attempt.number}")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def wait(self, reason: str) -> None:
        """Record ``waiting`` (on a person, an outside event): not silence; suspected only past
        the kind's wait limit, or when its runner is known dead (:func:`outlive.ledger.suspicion`)."""
        if self.landed is not None:
            await self.landed()
        await self._call(L.Wait(attempt=self.attempt.number, token=self.token, reason=reason,
                                at=self.clock(), secret=self.attempt.secret))
        self.waits = reason
        if self.on_wait is not None:
            self.on_wait()

    async def resume(self) -> None:
        """The wait is over: ``running`` again (any fenced write also ends a wait)."""
        await self._call(L.Resume(attempt=self.attempt.number, token=self.token, at=self.clock(),
                                  secret=self.attempt.secret))
        self.waits = None
        if self._wait_over is not None:
            self._wait_over.set()

    async def parked(self) -> bool:
        """Whether the attempt still waits on what this worker said it waits for (nobody answered
        here): its runner then returns without finishing it, and whoever answers carries it on
        (``outlive_langgraph.rejoin`` in any process). One read, only after a wait."""
        if self.waits is None:
            return False
        st = await self.backend.load(self.work_id)
        me = st.attempt(self.attempt.number) if st is not None else None
        return me is not None and me.state is AttemptState.WAITING

    @contextlib.asynccontextmanager
    async def waiting(self, reason: str) -> AsyncIterator[None]:
        """``async with worker.waiting("approval"):`` — waiting inside, running after.

        Left by an exception, the attempt is ``running`` again too (the exception goes on): an
        attempt whose code stopped waiting is not waiting, and whoever handles the exception
        (a retry, a recorded failure, silence) sees a running attempt. If the resume itself is
        refused (the attempt was replaced or ended meanwhile), the block's own exception is the
        one raised.
        """
        await self.wait(reason)
        try:
            yield
        except BaseException:
            with contextlib.suppress(OutliveError):
                await self.resume()
            raise
        await self.resume()

    def can_restore(self, name: str, /, **inputs: Any) -> bool:
        """Whether ``step(name, ..., **inputs)`` would be restored from the journal."""
        values, _external = _unwrap(inputs)
        sources = {}
        for k, v in values.items():
            if type(v) is ResultOf:
                done = self.steps.get(v.step)
                if done is None:
                    return False        # its source has not run: nothing to restore yet
                sources[k] = done.result_id
            else:
                sources[k] = content_hash(v)
        return self._lookup(name, input_key(name, sources)) is not None

    @_observe.traced("outlive.candidate",
                    lambda self, *a, **kw: {"work_id": self.work_id,
                                            "attempt": self.attempt.number},
                    lambda self, cand, *a, **kw: {"digest": cand.digest, "version": cand.version})
    async def candidate(self, content: Any = PARTS, steps: Sequence[str] | None = None) -> Candidate:
        """Submit the finished output built from ``steps`` (default: every step, in order).

        The content is bound to the journal: it is the journaled result of one of those steps
        (the assembly, a step that reads the others with :class:`ResultOf`), or, left out, the
        steps' journaled results by name (``{step: result}``). Anything else is refused
        (:class:`~outlive.errors.InvalidRecord`): a digest quotes only what was journaled.
        """
        if isinstance(steps, str):
            argument(steps, (list, tuple, type(None)), "steps", "Worker.candidate",
                     "a list of step names (a single name goes as [name])")
        if self.landed is not None:
            await self.landed()
        names = list(steps) if steps is not None else list(self._parts)
        missing = [n for n in names if n not in self._parts]
        if missing:
            raise InvalidRecord(f"candidate names steps this attempt did not run: {missing}")
        if content is PARTS:
            content = {n: self._results[n] for n in names}
        parts = tuple(Part(step=n, input_key=key, sources=sources, result_id=rid, external=external)
                      for n, (key, sources, rid, external) in ((n, self._parts[n]) for n in names))
        st = self._st()
        version = self.attempt.pinned_version if st.policy.pins else None
        digest = L.candidate_digest(self.work_id, version, parts, content)
        out = await self._call(L.SubmitCandidate(
            attempt=self.attempt.number, token=self.token, digest=digest, parts=parts,
            content=content, at=self.clock(), flush=tuple(self._pending),
            secret=self.attempt.secret))
        self._pending.clear()
        cand: Candidate = out.record
        return cand

    def open_effects(self) -> list[Effect]:
        """Intents left unconfirmed by earlier attempts: settle them by resending the same key."""
        return [e for e in self._st().effects
                if e.state in (EffectState.INTENDED, EffectState.AMBIGUOUS)]

    @_observe.traced("outlive.effect",
                    lambda self, op_key, *a, **kw: {"work_id": self.work_id, "op_key": op_key,
                                                    "attempt": self.attempt.number},
                    lambda self, receipt, *a, **kw: {
                        "effect_id": getattr(receipt, "effect_id", None),
                        "duplicate": getattr(receipt, "duplicate", None)})
    async def effect(self, op_key: str, payload: Any, send: Sender, *,
                     send_key: Any = KEEP) -> Receipt:
        """Record the intent, send with the operation key, record the receiver's answer.

        The guarantee is the receiver's: once, as far as it can tell, for as long as it keeps
        the key. ``send_key`` other than the default exists only to show what breaks.
        """
        text_argument(op_key, "op_key", "Worker.effect")
        callable_argument(send, "send", "Worker.effect")
        if self.landed is not None:
            await self.landed()
        key: str | None = op_key if send_key is KEEP else send_key
        L.check_size(payload, f"payload of {op_key!r}")
        out = await self._call(L.RecordIntent(
            attempt=self.attempt.number, token=self.token, op_key=op_key,
            payload_digest=content_hash(payload), sent_key=key, at=self.clock(),
            secret=self.attempt.secret, payload=payload))
        if out.kind == "confirmed":
            eff: Effect = out.record
            if eff.receipt is None:   # only a corrupt record could say so
                raise InvalidRecord(f"{op_key} is settled without a receipt", op_key=op_key)
            return eff.receipt
        try:
            receipt = send(key, payload)
            if inspect.isawaitable(receipt):
                receipt = await receipt
        except OutliveError:
            raise                         # the receiver's typed answer (EffectConflict, ...)
        except Exception as exc:
            raise EffectAmbiguous(
                f"{op_key}: the receiver did not answer ({type(exc).__name__}: {exc}); the intent "
                f"stays open — resend with the same key", op_key=op_key) from exc
        if not isinstance(receipt, Receipt):
            raise EffectAmbiguous(
                f"{op_key}: the sender returned {type(receipt).__name__}, not the receiver's "
                f"Receipt; the intent stays open — resend with the same key", op_key=op_key,
                broken_contract=True)   # a programming error: the runtime does not retry it
        await self._call(L.ConfirmEffect(attempt=self.attempt.number, token=self.token,
                                         op_key=op_key, receipt=receipt, at=self.clock(),
                                         secret=self.attempt.secret))
        return receipt

    async def resend(self, op_key: str, send: Sender, *, send_key: Any = KEEP) -> Receipt:
        """Settle an intent left open by an earlier attempt with the payload it intended.

        The payload is the one kept with the intent, never a regenerated copy.
        """
        text_argument(op_key, "op_key", "Worker.resend")
        callable_argument(send, "send", "Worker.resend")
        eff = self._st().effect(op_key)
        if eff is None:
            # recorded since this worker read the journal (by this attempt: an intent left
            # open by EffectAmbiguous): the ledger has it
            fresh = await self.backend.load(self.work_id)
            eff = fresh.effect(op_key) if fresh is not None else None
        if eff is None:
            raise NotFound(f"no intent for {op_key!r}", op_key=op_key)
        if content_hash(eff.payload) != eff.payload_digest:
            raise InvalidRecord(f"the intent for {op_key!r} kept no payload; resend it with "
                                "effect()", op_key=op_key)
        return await self.effect(op_key, eff.payload, send, send_key=send_key)

    async def finish(self) -> None:
        if self.landed is not None:
            await self.landed()
        if self._pending:
            await self._call(L.RecordSteps(attempt=self.attempt.number, token=self.token,
                                           entries=tuple(self._pending), at=self.clock(),
                                           secret=self.attempt.secret))
            self._pending.clear()
        await self._call(L.Finish(attempt=self.attempt.number, token=self.token, at=self.clock(),
                                  secret=self.attempt.secret))
