"""The runtime: many works of many kinds on one backend, event-driven, recovered at start.

A :class:`Kind` describes a kind of work (the attempt function, its contract and assessor, its
lease, retry policy and concurrency); a work is ``(kind, work_id)``, started with its first input
version by :meth:`Runtime.start`, which returns a :class:`WorkHandle`. Starting an existing id
returns the same work (as a Temporal workflow id or a DBOS workflow id does).

One runtime supervises every open work of its kinds with one scheduler task, not a loop per work:

- **Events, not polls.** A work started or published here, a candidate submitted by an attempt
  run here, an attempt that finished, failed or whose task ended: each wakes the scheduler at
  once for that work. ``result()`` resolves the moment the work completes. Across processes,
  works started elsewhere are found by a short discovery read of the backend's list of works.
- **Timers on deadlines.** Lease expiries of attempts that run elsewhere (another runtime,
  another process, or a runtime that died), retry backoffs and wait limits sit in one heap; the
  scheduler sleeps until the earliest. An attempt this runtime runs needs no timer: its task
  ending is the event.
- **Recovery.** At start the runtime reads the works of its kinds left open and carries them on:
  an attempt whose runner died is silent, taken over after its lease, and its successor restores
  what still matches.
- **Errors are answers.** An exception from an attempt is recorded with it (type, message,
  traceback) and goes through the kind's :class:`RetryPolicy`: transient errors get a successor
  after a backoff, non-retryable ones (:class:`NonRetryable`, outlive's own programming errors)
  fail the work at once with that error. Only silence makes an attempt ``unknown``.
- **Queues.** ``Kind.concurrency`` caps the attempts of a kind running here; the rest wait in the
  order their works were started, and :meth:`Runtime.start` waits while the kind's queue is full.

Several runtimes may share one ``postgresql://`` (or ``sqlite://``) ledger: each watches every
open work of its kinds, and the ledger decides between them (an ``Admit`` while an attempt is
live is refused, a silence mark is a compare-and-set on the attempt's signs of life), so a
surviving runtime takes over the attempts of a dead one after their lease. A runtime judges the
candidates of the attempts it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import logging
import sys
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from . import _observe
from . import ledger as L
from ._failures import NonRetryable, RetryPolicy, error_of, last_error, why_open
from .backend import Backend, can_list, open_backend
from .controller import Assessor, Controller, wall_clock_ms
from .errors import (
    AttemptActive,
    AttemptEnded,
    AttemptSilent,
    AttemptStopped,
    ConfigError,
    GaveUp,
    InvalidRecord,
    NotFound,
    OutliveError,
    Rejected,
    StaleOwner,
    WorkFailed,
)
from .records import (
    Acceptance,
    Attempt,
    AttemptError,
    AttemptState,
    Candidate,
    Contract,
    InputVersion,
    Policy,
    WorkState,
)
from .rules import Dependable, Rule, dependable
from .supervisor import (
    AttemptContext,
    AttemptFunction,
    Completed,
    InputLoader,
    Lease,
    WorkDefinition,
    _maybe,
    accept_all,
    resolve,
    work_complete,
)
from .worker import Persist, Worker

__all__ = ["Kind", "NonRetryable", "RetryPolicy", "Runtime", "WorkHandle", "WorkStatus",
           "finished_work", "last_error", "status_of"]

log = logging.getLogger("outlive.runtime")


@dataclass(frozen=True, kw_only=True)
class Kind:
    """A kind of work: what to run for every work of it, by name, so any process can run it.

    ``attempt`` is ``async def attempt(ctx: AttemptContext)``; ``inputs`` loads a published
    version's content by name (``inputs(version) -> {part: content}``) when the runtime that runs
    an attempt did not publish it itself. ``concurrency`` caps the attempts of this kind running
    in one runtime (None: no cap); beyond ``max_queued`` waiting works, :meth:`Runtime.start`
    waits for room (backpressure).
    """

    name: str
    attempt: str | AttemptFunction
    contract: Contract
    assessor: str | Assessor | None = None
    inputs: str | InputLoader | None = None
    policy: Policy = field(default_factory=Policy)
    persist: Persist = "step"
    lease: Lease = field(default_factory=Lease)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    concurrency: int | None = None
    max_queued: int = 10_000
    #: Where a plain (non-async) step function runs: ``"thread"`` (a worker thread, so a long
    #: blocking call stops neither the lease's renewal nor the other works) or ``"loop"``
    #: (inline, for quick pure functions where a thread hop costs more than the call).
    sync_steps: Literal["thread", "loop"] = "thread"
    args: tuple[str, ...] = ()
    #: When a work of this kind is done; default (:func:`finished_work`): an attempt pinned to
    #: the current version ran to its end, its result is accepted, and no effect intent is open.
    complete: Callable[[WorkState], bool] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError("a kind needs a non-empty name", field="name")
        if not (callable(self.attempt) or isinstance(self.attempt, str)):
            raise ConfigError(f"Kind.attempt must be a function or 'module:function', got "
                              f"{type(self.attempt).__name__}", field="attempt")
        if not isinstance(self.contract, Contract):
            raise ConfigError("Kind.contract must be an outlive.Contract", field="contract")
        if self.concurrency is not None and self.concurrency < 1:
            raise ConfigError("concurrency must be >= 1 or None", field="concurrency")

    def is_complete(self, state: WorkState) -> bool:
        if self.complete is not None:
            return self.complete(state)
        return finished_work(state, self.contract)   # completion requires the kind's contract


@dataclass(frozen=True, kw_only=True)
class WorkStatus:
    """What a handle's ``state()`` answers: the ledger's state and the runtime's reading of it."""

    work_id: str
    kind: str | None
    #: ``running``, ``waiting``, ``queued``, ``backoff``, ``completed``, ``failed`` or ``open``.
    status: str
    state: WorkState
    last_error: AttemptError | None


def finished_work(state: WorkState, contract: Contract | None = None) -> bool:
    """Done: the current version's result is accepted, no effect intent is open, and an attempt
    pinned to that version ran to its end. With ``contract`` (the kind's), only an acceptance
    under it counts.

    The last clause is what an acceptance alone cannot say: an attempt that died between its
    acceptance and its announcement left no intent yet, so only its finish shows that every
    effect it owed was sent; without it a successor runs, restores every step, finds its
    candidate already accepted and sends what is missing.
    """
    if not work_complete(state, contract):
        return False
    return any(a.state is AttemptState.FINISHED
               and (a.pinned_version == state.current_version or not state.policy.pins)
               for a in state.attempts)


def status_of(state: WorkState, kind: Kind | None) -> str:
    """One word for a work, from its ledger state alone."""
    if state.failure is not None:
        return "failed"
    complete = kind.is_complete(state) if kind is not None else finished_work(state)
    cur = state.current_attempt
    if complete and (cur is None or not L.is_live(cur)):
        return "completed"
    if cur is not None and cur.state is AttemptState.WAITING:
        return "waiting"
    if cur is not None and L.is_live(cur):
        return "running"
    return "open"


class _Context(AttemptContext):
    """An attempt's context in a runtime: its candidate is judged on an event, not a poll."""

    def __init__(self, runtime: Runtime, worker: Worker, kind: Kind,
                 inputs: Mapping[str, Any] | None) -> None:
        super().__init__(worker, _definition(kind, worker.work_id), inputs, kind.args)
        self.runtime = runtime
        self.kind = kind

    async def judged(self, cand: Candidate, *, poll: float | None = None) -> Acceptance:
        acc = await self.runtime._judge_here(self, cand)
        if acc is not None:
            return acc
        fut = self.runtime._verdict(self.worker.work_id, cand.digest)
        self.runtime._wake(self.worker.work_id, urgent=True)
        # The runtime answers at once; the ledger is read again only if no answer comes within
        # a lease (another runtime judged, or this one is shutting down).
        interval = poll if poll is not None else self.kind.lease.timeout / 1000
        return await self._verdict(cand, interval, fut)


def _assessor(kind: Kind) -> Assessor:
    """The kind's assessor (the mechanical checks alone when it names none)."""
    return resolve(kind.assessor) if kind.assessor is not None else accept_all


#: How many works the scheduler passes over side by side (and recovery reads at once).
_PASSES = 32


def _definition(kind: Kind, work_id: str) -> WorkDefinition:
    """The one-work definition an :class:`AttemptContext` carries (``ctx.definition``)."""
    return WorkDefinition(work_id=work_id, attempt=kind.attempt, contract=kind.contract,
                          assessor=kind.assessor, inputs=kind.inputs, policy=kind.policy,
                          persist=kind.persist, lease=kind.lease,
                          max_attempts=kind.retry.maximum_attempts or 1_000_000,
                          args=kind.args, complete=kind.complete)


@dataclass
class _Work:
    """What the runtime keeps of a work it supervises: only what events need; decisions come
    from a fresh read of the ledger."""

    work_id: str
    kind: Kind
    #: The attempt this runtime runs for the work, and its task.
    task: asyncio.Task[None] | None = None
    running: int | None = None
    queued: bool = False
    results: list[asyncio.Future[Completed]] = field(default_factory=list)
    verdicts: dict[str, asyncio.Future[Acceptance]] = field(default_factory=dict)
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    order: int = 0
    #: Its end was settled: supervision stops once no attempt of it runs here.
    ended: bool = False
    #: Said once: no content is known here for the current version.
    parts_missing: bool = False
    #: A pass over it is under way; ``again``: something happened meanwhile, pass once more.
    passing: bool = False
    again: bool = False
    #: The read recovery made of it, for its first pass (a thousand works recovered are read
    #: once each, not twice); every decision made from it is checked by the ledger anyway.
    read: WorkState | None = None


class WorkHandle:
    """One work, wherever it runs: await its result, publish a new version, ask what it holds."""

    def __init__(self, runtime: Runtime, work_id: str) -> None:
        self.runtime = runtime
        self.work_id = work_id

    def __repr__(self) -> str:
        return f"WorkHandle({self.work_id!r})"

    async def result(self, *, timeout: float | None = None) -> Completed:
        """Wait until the work completes; raise :class:`~outlive.errors.WorkFailed` or
        :class:`~outlive.errors.GaveUp` (naming the last error) if it ends otherwise."""
        return await asyncio.wait_for(self.runtime._result(self.work_id), timeout)

    async def publish(self, version: str, parts: Mapping[str, Any]) -> InputVersion:
        """Publish a new input version: a live attempt's candidate for the old one is refused
        at judgement, and the successor restores every step whose input key still matches."""
        return await self.runtime._publish(self.work_id, version, parts)

    async def dependable(self, rule: Rule) -> Dependable | None:
        """May a consumer rely on this work's result now, under ``rule``?"""
        return dependable(await self.runtime._load(self.work_id), rule)

    async def state(self) -> WorkStatus:
        st = await self.runtime._load(self.work_id)
        kind = self.runtime.kinds.get(st.kind or "")
        w = self.runtime._works.get(self.work_id)
        status = status_of(st, kind)
        if status == "open" and w is not None and w.queued:
            status = "queued"
        return WorkStatus(work_id=self.work_id, kind=st.kind, status=status, state=st,
                          last_error=last_error(st))


class Runtime:
    """Hosts any number of kinds on one backend: ``async with Runtime(url, kinds=[...]) as rt``.

    ``backend`` is a URL (opened and closed by the runtime) or a started :class:`Backend`.
    ``credential`` is the controller's secret (see :class:`~outlive.Controller`): every runtime
    and client of one ledger uses the same one, and no attempt ever sees it.
    ``supervise=False`` makes a client (as Temporal's client is to its worker): it starts works,
    publishes versions and follows results, and leaves running them to the runtimes that serve
    the kinds (``outlive serve``); it may then name a kind by its name alone.
    ``discover`` is how often (seconds) the runtime looks for works started by other processes;
    works started through this runtime are seen at once. ``report_errors`` prints each attempt
    error to stderr when the application configured no logging, so a first run shows its mistake.
    """

    def __init__(self, backend: str | Backend, kinds: Iterable[Kind], *,
                 clock: Callable[[], int] = wall_clock_ms, discover: float | None = 1.0,
                 report_errors: bool = True, name: str | None = None,
                 supervise: bool = True, credential: str | None = None) -> None:
        if not isinstance(backend, (str, Backend)):
            raise ConfigError(f"Runtime(backend=...) takes a URL or a Backend, got "
                              f"{type(backend).__name__}", argument="backend")
        self._url = backend if isinstance(backend, str) else None
        self.backend: Backend | None = backend if isinstance(backend, Backend) else None
        self.kinds: dict[str, Kind] = {}
        for kind in kinds:
            if not isinstance(kind, Kind):
                raise ConfigError(f"Runtime(kinds=...) takes outlive.Kind values, got "
                                  f"{type(kind).__name__}", argument="kinds")
            if kind.name in self.kinds:
                raise ConfigError(f"two kinds named {kind.name!r}", argument="kinds")
            self.kinds[kind.name] = kind
        self.clock = clock
        #: The controller's secret (default: ``OUTLIVE_CONTROLLER_KEY``, else the per-user key
        #: file): it stays in this runtime and is never handed to an attempt.
        self._credential = credential
        self.supervise = supervise
        self.discover = discover
        self.name = name or f"runtime-{uuid.uuid4().hex[:8]}"
        #: This runtime's id on the backend while it is open, stamped on the attempts it admits
        #: (``Attempt.runner``) when the backend can hold it: another runtime that finds it gone
        #: (this process ended, however) takes those attempts over without waiting out a lease.
        self.runner = uuid.uuid4().hex
        self._holds_runner = False
        #: Runners found gone (for good), and the checks under way (shared by the passes).
        self._gone: set[str] = set()
        self._checks: dict[str, asyncio.Future[bool]] = {}
        #: Works whose attempt runs under another live runner, by runner (each watched once).
        self._watched: dict[str, set[str]] = {}
        self._unwatchable: set[str] = set()
        self._works: dict[str, _Work] = {}
        #: Works to pass over: urgent ones (a verdict awaited) in arrival order, then the rest
        #: by the order they were first seen (a heap; ``_todo_ids`` says which are still due).
        self._urgent: list[str] = []
        self._todo: list[tuple[int, str]] = []
        self._todo_ids: set[str] = set()
        self._deadlines: list[tuple[int, str]] = []
        self._event = asyncio.Event()
        self._running: dict[str, int] = {}
        self._queues: dict[str, deque[str]] = {}
        self._room = asyncio.Condition()
        #: Passes (one decision for one work each) under way at once.
        self._pass_slots = asyncio.Semaphore(_PASSES)
        self._scheduler: asyncio.Task[None] | None = None
        self._discoverer: asyncio.Task[None] | None = None
        self._listener: asyncio.Task[None] | None = None
        self._recoverer: asyncio.Task[None] | None = None
        self._ends: dict[str, asyncio.Event] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._known: set[str] = set()
        self._order = 0
        self._closing = False
        self._handler: logging.Handler | None = None
        if report_errors:
            self._report_to_stderr()
        self.controllers: dict[str, Controller] = {}

    # -- lifecycle --------------------------------------------------------------------------
    async def __aenter__(self) -> Runtime:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Connect, recover the open works of this runtime's kinds, start supervising."""
        if self.backend is None:
            assert self._url is not None
            self.backend = await open_backend(self._url)
        elif not self.backend.started:
            await self.backend.start()
            self.backend.started = True
        if self.backend.listens:
            self._listener = asyncio.create_task(self._listen_loop(),
                                                 name=f"outlive:{self.name}:listen")
        if not self.supervise:
            return
        self._holds_runner = await self.backend.hold_runner(self.runner)
        self._scheduler = asyncio.create_task(self._schedule(), name=f"outlive:{self.name}")
        # Recovery reads every work the backend holds: in the background, so a runtime serves
        # new works at once and one unreadable work holds up nothing.
        self._recoverer = asyncio.create_task(self._recover(), name=f"outlive:{self.name}:recover")
        if self.discover and can_list(self.backend):
            self._discoverer = asyncio.create_task(self._discover_loop(),
                                                   name=f"outlive:{self.name}:discover")

    async def close(self) -> None:
        """Stop supervising; attempts still running are cancelled (the ledger keeps everything:
        a runtime started again carries them on after their lease)."""
        self._closing = True
        for task in (self._scheduler, self._discoverer, self._listener, self._recoverer,
                     *self._background):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        tasks = [w.task for w in self._works.values() if w.task is not None and not w.task.done()]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t
        for w in self._works.values():
            waiters: list[asyncio.Future[Any]] = [*w.results, *w.verdicts.values()]
            for fut in waiters:
                if not fut.done():
                    fut.cancel()
        if self._handler is not None:
            logging.getLogger("outlive.runtime").removeHandler(self._handler)
        if self._holds_runner and self.backend is not None:
            self._holds_runner = False
            with contextlib.suppress(Exception):   # closing: the backend's close drops it anyway
                await self.backend.release_runner(self.runner)
        if self._url is not None and self.backend is not None:
            await self.backend.close()

    async def drain(self) -> None:
        """Admit nothing more and wait for the attempts running here to end."""
        self._closing = True
        tasks = [w.task for w in self._works.values() if w.task is not None and not w.task.done()]
        await asyncio.gather(*tasks, return_exceptions=True)

    def _report_to_stderr(self) -> None:
        """Attempt errors reach stderr unless the application configured logging itself."""
        logger = logging.getLogger("outlive.runtime")
        configured = logging.getLogger().handlers or any(
            not isinstance(h, logging.NullHandler) for h in logging.getLogger("outlive").handlers)
        if configured or logger.handlers:
            return
        handler = logging.StreamHandler(sys.stderr)
        handler.setLevel(logging.WARNING)
        handler.setFormatter(logging.Formatter("outlive: %(message)s"))
        logger.addHandler(handler)
        self._handler = handler

    @property
    def _backend(self) -> Backend:
        if self.backend is None:
            raise ConfigError("the runtime is not open: use 'async with Runtime(...)'")
        return self.backend

    def _controller(self, kind: Kind | None) -> Controller:
        key = kind.name if kind is not None else ""
        ctl = self.controllers.get(key)
        if ctl is None:
            lease = kind.lease if kind is not None else Lease()
            ctl = Controller(self._backend, clock=self.clock,
                             heartbeat_interval=lease.heartbeat_interval,
                             missed_beats=lease.missed_beats, start_grace=lease.start_grace,
                             credential=self._credential)
            self.controllers[key] = ctl
        return ctl

    # -- the public API ---------------------------------------------------------------------
    async def start(self, kind: Kind | str, work_id: str, version: str,
                    parts: Mapping[str, Any]) -> WorkHandle:
        """Start a work of ``kind`` with its first input version; return its handle.

        Idempotent: starting an id that exists returns the same work (the same version and
        parts again is a no-op; other parts for that version are an
        :class:`~outlive.errors.InputConflict`; a work of another kind is
        :class:`~outlive.errors.WorkExists`). Waits while the kind's queue is full.
        """
        k = self._kind(kind) if self.supervise or isinstance(kind, Kind) else None
        name = k.name if k is not None else kind
        if not isinstance(name, str) or not name:
            raise ConfigError("start(kind=...) takes an outlive.Kind or a kind's name",
                              argument="kind")
        L.check_work_id(work_id)
        if not isinstance(version, str) or not version:
            raise InvalidRecord("start(version=...) takes a non-empty version name",
                                argument="version")
        if not isinstance(parts, Mapping) or not parts:
            raise InvalidRecord("start(parts=...) takes a non-empty mapping of part name -> "
                                "content", argument="parts")
        if k is not None:
            await self._backpressure(k)
        ctl = self._controller(k)
        policy = k.policy if k is not None else Policy()
        await _observe.execute(self._backend, work_id, L.OpenWork(
            policy=policy, kind=name, controller_key_hash=ctl.key_hash))
        # A version already published: the same parts are a no-op, others an InputConflict.
        await ctl.publish(work_id, version, parts)
        if k is not None and self.supervise:
            w = self._watch(work_id, k)
            w.inputs[version] = dict(parts)
            w.read = None   # written since any read recovery made
            self._wake(work_id)
        if self._backend.listens:
            await self._backend.notify(f"started {work_id}")
        return WorkHandle(self, work_id)

    def handle(self, work_id: str) -> WorkHandle:
        """The handle of a work started anywhere (by this runtime, another, or another process)."""
        L.check_work_id(work_id)
        return WorkHandle(self, work_id)

    async def works(self, *, state: str | None = None, kind: str | None = None) -> list[WorkStatus]:
        """Every work the backend holds (of any kind), with its status and last error."""
        if not can_list(self._backend):
            raise ConfigError(f"{type(self._backend).__name__} cannot list its works",
                              url=self._backend.url)
        out = []
        for wid in await self._backend.works():
            st = await self._backend.load(wid)
            if st is None or (kind is not None and st.kind != kind):
                continue
            k = self.kinds.get(st.kind or "")
            status = status_of(st, k)
            if state is not None and status != state:
                continue
            out.append(WorkStatus(work_id=wid, kind=st.kind, status=status, state=st,
                                  last_error=last_error(st)))
        return out

    # -- internals used by handles ---------------------------------------------------------
    def _kind(self, kind: Kind | str) -> Kind:
        name = kind.name if isinstance(kind, Kind) else kind
        if not isinstance(name, str) or name not in self.kinds:
            raise ConfigError(f"this runtime hosts no kind {name!r}; it hosts "
                              f"{sorted(self.kinds)}", argument="kind")
        return self.kinds[name]

    async def _load(self, work_id: str) -> WorkState:
        st = await self._backend.load(work_id)
        if st is None:
            raise NotFound(f"work {work_id!r} was never started", work_id=work_id)
        return st

    async def _publish(self, work_id: str, version: str, parts: Mapping[str, Any]) -> InputVersion:
        st = await self._load(work_id)
        kind = self.kinds.get(st.kind or "")
        rec = await self._controller(kind).publish(work_id, version, parts)
        if kind is not None and self.supervise:
            w = self._watch(work_id, kind)   # a completed work is carried on for the new version
            w.ended = False
            w.inputs[version] = dict(parts)
            w.read = None   # written since any read recovery made
            self._wake(work_id)
        if self._backend.listens:
            await self._backend.notify(f"published {work_id}")
        return rec

    async def _result(self, work_id: str) -> Completed:
        w = self._works.get(work_id)
        if w is None:
            st = await self._load(work_id)
            kind = self.kinds.get(st.kind or "")
            done = self._ended(st, kind)   # ended already (or failed: raised): no pass needed
            if done is not None:
                return done
            if kind is not None and self.supervise and not self._closing:
                w = self._watch(work_id, kind)
                self._wake(work_id)
        if w is not None:
            fut: asyncio.Future[Completed] = asyncio.get_running_loop().create_future()
            w.results.append(fut)
            # A pass settles it. One is due already, or the attempt running here wakes one when
            # it ends; otherwise (an attempt elsewhere, a work ended meanwhile) one is needed.
            running = w.task is not None and not w.task.done()
            if not running and work_id not in self._todo_ids and work_id not in self._urgent:
                self._wake(work_id)
            return await fut
        # A work this runtime does not supervise (a runtime serving its kind runs it): its end
        # is announced where the backend listens (PostgreSQL), else a short poll follows it.
        ended = self._ends.setdefault(work_id, asyncio.Event())
        while True:
            st = await self._load(work_id)
            done = self._ended(st, self.kinds.get(st.kind or ""))
            if done is not None:
                return done
            if self._backend.listens:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ended.wait(), 1.0)
                ended.clear()
            else:
                await asyncio.sleep(0.05)

    def _verdict(self, work_id: str, digest: str) -> asyncio.Future[Acceptance]:
        w = self._works[work_id]
        fut = w.verdicts.get(digest)
        if fut is None or (fut.done() and fut.cancelled()):
            fut = asyncio.get_running_loop().create_future()
            w.verdicts[digest] = fut
        return fut

    # -- supervision ------------------------------------------------------------------------
    def _watch(self, work_id: str, kind: Kind) -> _Work:
        w = self._works.get(work_id)
        if w is None:
            self._order += 1
            w = _Work(work_id=work_id, kind=kind, order=self._order)
            self._works[work_id] = w
            self._known.add(work_id)
        return w

    def _wake(self, work_id: str, *, urgent: bool = False) -> None:
        if urgent:
            if work_id not in self._urgent:
                self._urgent.append(work_id)
        else:
            self._queue(work_id)
        self._event.set()

    def _at(self, when: int, work_id: str) -> None:
        heapq.heappush(self._deadlines, (when, work_id))
        self._event.set()

    async def _recover(self) -> None:
        """Find the works of this runtime's kinds left open and carry them on."""
        if not can_list(self._backend):
            log.warning("%s cannot list its works: works left open by an earlier runtime are "
                        "carried on only when started or published again",
                        type(self._backend).__name__)
            return
        try:
            ids = await self._backend.works()
        except Exception as exc:   # a backend down now: works are found when started again
            log.warning("could not list the works to recover (%s: %s)", type(exc).__name__, exc)
            return
        self._known.update(ids)

        async def recover(wid: str) -> None:
            try:
                st = await self._backend.load(wid)
            except asyncio.CancelledError:
                raise
            except Exception as exc:   # one unreadable work does not hold up the others
                log.warning("could not read %s to recover it (%s: %s)", wid, type(exc).__name__,
                            exc)
                self._known.discard(wid)   # discovery tries it again
                return
            if st is None or st.kind not in self.kinds:
                return
            kind = self.kinds[st.kind]
            if status_of(st, kind) in ("completed", "failed"):
                return
            w = self._watch(wid, kind)
            if not w.passing and w.task is None:
                w.read = st
            self._wake(wid)
        for i in range(0, len(ids), _PASSES):   # reads side by side, in the order listed
            await asyncio.gather(*(recover(wid) for wid in ids[i:i + _PASSES]))

    async def _listen_loop(self) -> None:
        """Events from other processes: a work started or published, a work ended."""
        while True:
            try:
                async for message in self._backend.listen():
                    verb, _, work_id = message.partition(" ")
                    if verb == "ended":
                        ev = self._ends.get(work_id)
                        if ev is not None:
                            ev.set()
                    elif verb in ("started", "published") and self.supervise:
                        await self._found(work_id)
            except asyncio.CancelledError:
                raise
            except Exception as exc:   # a lost connection: listen again; discovery covers the gap
                log.warning("listening for events failed (%s); listening again", exc)
                await asyncio.sleep(1.0)

    async def _found(self, work_id: str) -> None:
        """A work some process started: supervise it if it is of a kind hosted here."""
        self._known.add(work_id)
        w = self._works.get(work_id)
        if w is not None:
            w.ended = False
            self._wake(work_id)
            return
        st = await self._backend.load(work_id)
        if st is not None and st.kind in self.kinds \
                and status_of(st, self.kinds[st.kind]) not in ("completed", "failed"):
            self._watch(work_id, self.kinds[st.kind])
            self._wake(work_id)

    def _announce_end(self, work_id: str) -> None:
        if self._backend.listens:
            task = asyncio.get_running_loop().create_task(self._backend.notify(f"ended {work_id}"))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _discover_loop(self) -> None:
        assert self.discover
        # Where events cross processes, discovery is only the safety net for a lost connection.
        interval = self.discover * (10 if self._backend.listens else 1)
        while True:
            await asyncio.sleep(interval)
            try:
                ids = await self._backend.works()
            except OutliveError as exc:
                log.warning("could not list works (%s); retrying", exc)
                continue
            for wid in ids:
                if wid not in self._known:
                    await self._found(wid)

    async def _schedule(self) -> None:
        """Dispatch passes: works woken urgently first (a verdict awaited: finishing a work frees
        what starting another takes), the rest in the order they were first seen; each work has
        one pass at a time, and up to ``_PASSES`` works pass side by side."""
        while True:
            await self._pass_slots.acquire()   # a slot first: then the most urgent work takes it
            try:
                wid = await self._next()
            except BaseException:
                self._pass_slots.release()
                raise
            w = self._works.get(wid)
            if w is None:
                self._pass_slots.release()
                continue
            if w.passing:   # its pass is under way: one more after it, from a fresh read
                w.again = True
                self._pass_slots.release()
                continue
            w.passing = True
            task = asyncio.create_task(self._passes(w), name=f"outlive:pass:{wid}")
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _next(self) -> str:
        """The next work to pass over (waits for a wake or the earliest deadline)."""
        while True:
            now = self.clock()
            while self._deadlines and self._deadlines[0][0] <= now:
                self._queue(heapq.heappop(self._deadlines)[1])
            if self._urgent:
                wid = self._urgent.pop(0)
                self._todo_ids.discard(wid)
                return wid
            while self._todo:
                _, wid = heapq.heappop(self._todo)
                if wid in self._todo_ids:
                    self._todo_ids.discard(wid)
                    return wid
            self._event.clear()
            timeout = None
            if self._deadlines:
                timeout = max(0.0, (self._deadlines[0][0] - now) / 1000)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), timeout)

    def _queue(self, work_id: str) -> None:
        if work_id in self._todo_ids:
            return
        self._todo_ids.add(work_id)
        w = self._works.get(work_id)
        heapq.heappush(self._todo, (w.order if w is not None else 0, work_id))

    async def _passes(self, w: _Work) -> None:
        """The passes of one work, one at a time; works pass side by side (their reads and
        writes then share the backend's round trips: on SQLite, one commit for many)."""
        try:
            while True:
                w.again = False
                try:
                    await self._pass(w)
                except asyncio.CancelledError:
                    raise
                except OutliveError as exc:
                    log.warning("supervising %s: %s: %s; trying again", w.work_id,
                                type(exc).__name__, exc)
                    self._at(self.clock() + 200, w.work_id)
                except Exception:
                    log.exception("supervising %s failed; trying again", w.work_id)
                    self._at(self.clock() + 1_000, w.work_id)
                if not w.again:
                    return
        finally:
            w.passing = False
            self._pass_slots.release()

    def _ended(self, st: WorkState, kind: Kind | None) -> Completed | None:
        """The typed end of a work, if it has one: Completed, or raises WorkFailed / GaveUp."""
        if st.failure is not None:
            f = st.failure
            details = {"work_id": st.work_id, "type": f.type, "error": f.message,
                       "traceback": f.traceback}
            if f.type == "GaveUp" or f.retryable:
                raise GaveUp(f"gave up on {st.work_id}: {f.message}", **details)
            raise WorkFailed(f"{st.work_id} failed: {f.type}: {f.message}", **details)
        complete = kind.is_complete(st) if kind is not None else finished_work(st)
        cur = st.current_attempt
        if complete and (cur is None or not L.is_live(cur)):
            acc = st.latest_acceptance
            assert acc is not None
            return Completed(work_id=st.work_id, acceptance=acc, attempts=st.attempts)
        return None

    def _settle(self, w: _Work, st: WorkState) -> bool:
        """Resolve the work's waiters if it ended; True when it did (supervision stops)."""
        try:
            done = self._ended(st, w.kind)
        except OutliveError as exc:
            for fut in w.results:
                if not fut.done():
                    fut.set_exception(exc)
            self._drop(w)
            return True
        if done is None:
            return False
        for fut in w.results:
            if not fut.done():
                fut.set_result(done)
        self._drop(w)
        return True

    def _drop(self, w: _Work) -> None:
        w.ended = True
        for works in self._watched.values():   # (a few runners): nothing to wake it for now
            works.discard(w.work_id)
        self._announce_end(w.work_id)
        for fut in w.verdicts.values():
            if not fut.done():
                fut.cancel()
        if w.task is None or w.task.done():
            self._works.pop(w.work_id, None)
        else:   # an attempt still running here reports its end first
            w.results = []
        if w.queued:
            queue = self._queues.get(w.kind.name)
            if queue is not None and w.work_id in queue:
                queue.remove(w.work_id)
            w.queued = False

    async def _pass(self, w: _Work) -> None:
        """One decision for one work, from one read of its ledger (and one after each write)."""
        st, w.read = w.read, None
        if st is None:
            st = await self._load(w.work_id)
        kind = w.kind
        if self._settle(w, st):
            return
        ctl = self._controller(kind)
        # 1. Judge the candidates of the attempt this runtime runs.
        if w.verdicts and st.candidates:
            if await self._judge(w, st, ctl):
                cur = st.current_attempt
                if (cur is not None and w.running == cur.number and w.task is not None
                        and not w.task.done()):
                    return   # judged for an attempt still running here: its end is an event
                st = await self._load(w.work_id)
                if self._settle(w, st):
                    return
        cur = st.current_attempt
        # 2. An attempt that failed: the retry policy decides.
        if cur is not None and cur.state is AttemptState.FAILED and cur.error is not None \
                and not cur.error.retryable:
            await _observe.execute(self._backend, w.work_id,
                                   ctl.stamp(L.FailWork(error=cur.error, at=self.clock())))
            self._settle(w, await self._load(w.work_id))
            return
        # 3. Silence (ledger.suspicion, the one rule): a runner here that ended without a word
        #    (waiting or not), a leased attempt whose lease ran out, a wait past the kind's limit.
        if cur is not None and L.is_live(cur):
            here = w.running == cur.number
            alive_here = here and w.task is not None and not w.task.done()
            if alive_here and cur.state is not AttemptState.WAITING:
                return   # running here: its end is an event, its lease needs no timer
            lease = kind.lease
            # the runtime that runs it elsewhere, when the attempt names one
            other = cur.runner if not here and cur.runner not in (None, self.runner) else None
            gone = (here and not alive_here) or (
                other is not None and await self._runner_gone(other))
            why = L.suspicion(cur, self.clock(), timeout=lease.timeout,
                              start_grace=lease.start_grace, wait_limit=lease.wait_limit,
                              runner_gone=gone)
            if why is None:
                if other is not None:
                    self._watch_runner(other, w.work_id)
                due = L.suspect_at(cur, timeout=lease.timeout, start_grace=lease.start_grace,
                                   wait_limit=lease.wait_limit)
                if due is not None:
                    self._at(due, w.work_id)
                return   # not yet (a wait without a limit: never; it is not silence)
            marked = await self._mark_unknown(w, cur, cas=why != "wait limit")  # a beat ends no wait
            if alive_here and w.task is not None:
                w.task.cancel()   # suspected here (past its wait limit): stop it, as a dispatcher would
            if marked.kind != "unknown":   # it showed life meanwhile (or it was not ours to mark)
                st = await self._load(w.work_id)
                cur = st.current_attempt
            else:   # marked: the successor's admission needs no second read (Admit checks)
                cur = marked.record
        if cur is not None and L.is_live(cur):
            return
        if self._settle(w, st) or self._closing or st.current_version is None:
            return
        # 4. A successor is due: the retry policy's cap and backoff, then the kind's queue.
        tried = [a for a in st.attempts if a.pinned_version == st.current_version]
        cap = kind.retry.maximum_attempts
        if cap and len(tried) >= cap:
            last = last_error(st)
            error = AttemptError(
                type="GaveUp", retryable=True, at=self.clock(),
                message=(f"{len(tried)} attempts for version {st.current_version}: "
                         + why_open(st) + (f"; the last error: {last.type}: {last.message}"
                                            if last is not None else "")),
                traceback=last.traceback if last is not None else "")
            await _observe.execute(self._backend, w.work_id, ctl.stamp(L.FailWork(
                error=error, at=self.clock())))
            self._settle(w, await self._load(w.work_id))
            return
        failures = 0
        for a in reversed(tried):
            if a.state is not AttemptState.FAILED:
                break
            failures += 1
        if failures:
            due = tried[-1].last_heartbeat + kind.retry.delay_ms(failures)
            if due > self.clock():
                self._at(due, w.work_id)
                return
        if kind.inputs is None and st.current_version not in w.inputs:
            # Nothing here holds the version's content (the ledger keeps only its hashes): wait
            # for a start or publish of it in this process, or give the kind an inputs loader.
            if not w.parts_missing:
                w.parts_missing = True
                log.warning("%s: the content of version %s is not known here; start the work "
                            "again with its parts, or give kind %r an inputs loader",
                            w.work_id, st.current_version, kind.name)
            return
        if not self._take_slot(w):
            return
        try:
            # The admission is the claim: this runtime runs the attempt and hands its token to
            # no one else. Nothing else written since the read: the worker starts from it.
            att, seq = await ctl._admit(w.work_id, pin=None, request_id=uuid.uuid4().hex,
                                        keyed=True, claimed=True,
                                        runner=self.runner if self._holds_runner else None)
        except AttemptActive:
            self._free_slot(w)
            st = await self._load(w.work_id)
            cur = st.current_attempt
            if cur is not None and L.is_leased(cur):
                # another runtime admitted it first: its lease, or that runtime's end if sooner
                if cur.runner is not None and cur.runner != self.runner:
                    self._watch_runner(cur.runner, w.work_id)
                self._at(cur.last_heartbeat + kind.lease.timeout + 1, w.work_id)
            return
        except BaseException:
            self._free_slot(w)
            raise
        w.running = att.number
        w.task = asyncio.create_task(self._run(w, att, st if seq == st.seq + 1 else None),
                                     name=f"outlive:{w.work_id}#{att.number}")

    async def _runner_gone(self, runner: str) -> bool:
        """Whether the runtime that runs an attempt is known to have ended (one check at a time
        per runner, shared by the passes that ask; a runner found gone stays gone)."""
        if runner in self._gone:
            return True
        check = self._checks.get(runner)
        if check is None:
            check = self._checks[runner] = asyncio.ensure_future(
                self._backend.runner_gone(runner))
            check.add_done_callback(lambda _: self._checks.pop(runner, None))
        try:
            gone = await asyncio.shield(check)
        except Exception:   # cannot tell: the lease decides
            return False
        if gone:
            self._gone.add(runner)
        return gone

    def _watch_runner(self, runner: str, work_id: str) -> None:
        """Pass over ``work_id`` again the moment ``runner`` ends (where the backend can tell)."""
        if runner in self._unwatchable:
            return
        if runner in self._gone:   # ended already: one pass more, no new watch
            self._wake(work_id)
            return
        works = self._watched.get(runner)
        if works is not None:
            works.add(work_id)
            return
        self._watched[runner] = {work_id}

        async def watch() -> None:
            try:
                gone = await self._backend.watch_runner(runner)
            except Exception as exc:   # cannot tell: the leases decide
                log.debug("cannot watch runner %s (%s: %s)", runner, type(exc).__name__, exc)
                gone = False
            works = self._watched.pop(runner, set())
            if not gone:
                self._unwatchable.add(runner)
            else:
                self._gone.add(runner)
                for wid in works:
                    self._wake(wid)
        task = asyncio.create_task(watch(), name=f"outlive:{self.name}:runner:{runner[:8]}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _mark_unknown(self, w: _Work, att: Attempt, *, cas: bool = True) -> L.Outcome:
        return await _observe.execute(self._backend, w.work_id,
                               self._controller(w.kind).stamp(L.MarkUnknown(
                                   attempt=att.number, at=self.clock(),
                                   signs=att.signs if cas else None,
                                   waiting=att.state is AttemptState.WAITING)))

    async def _judge_here(self, ctx: _Context, cand: Candidate) -> Acceptance | None:
        """Judge a candidate the attempt running here just submitted, in the attempt's own task:
        no pass, no read (the ledger's checks on ``Accept`` decide). Its acceptance, or None
        for anything else (a refusal, a stale attempt, a runtime closing): a pass then reads the
        work and answers as it always did (a refusal recorded here is not judged again)."""
        w = self._works.get(ctx.worker.work_id)
        if w is None or w.running != ctx.attempt.number or self._closing:
            return None
        kind = w.kind
        seen = ctx.worker.last_read
        if (seen.refusal(cand.digest, kind.contract) is not None
                or L.accepted(seen, cand.digest, kind.contract) is not None):
            return None   # judged before this attempt: the pass answers without judging again
        try:
            return await self._controller(kind).judge(
                w.work_id, cand, seen.version(cand.version) if cand.version else None,
                kind.contract, _assessor(kind))
        except OutliveError:
            return None

    async def _judge(self, w: _Work, st: WorkState, ctl: Controller) -> bool:
        """Judge the candidates this runtime's attempt waits on; True if anything was written."""
        wrote = False
        assessor = _assessor(w.kind)
        for digest, fut in list(w.verdicts.items()):
            if fut.done():
                w.verdicts.pop(digest, None)
                continue
            cand = st.candidate(digest)
            if cand is None:
                continue
            try:
                acc = await ctl.assess(w.work_id, digest, w.kind.contract, assessor, state=st)
            except Rejected as exc:
                att = st.attempt(cand.attempt)
                if att is not None and L.is_live(att):
                    await ctl.stop(w.work_id, att.number)
                fut.set_exception(AttemptStopped(
                    f"candidate {digest[:8]} of attempt #{cand.attempt} was refused: "
                    f"{type(exc).__name__}: {exc}", attempt=cand.attempt, digest=digest,
                    reason=type(exc).__name__))
                w.verdicts.pop(digest, None)
                wrote = True
                continue
            fut.set_result(acc)
            w.verdicts.pop(digest, None)
            wrote = True
        return wrote

    # -- the kind's queue -------------------------------------------------------------------
    def _take_slot(self, w: _Work) -> bool:
        limit = w.kind.concurrency
        name = w.kind.name
        if limit is None:
            return True
        queue = self._queues.setdefault(name, deque())
        if self._running.get(name, 0) >= limit or (queue and queue[0] != w.work_id):
            if not w.queued:
                w.queued = True
                queue.append(w.work_id)
            return False
        if queue and queue[0] == w.work_id:
            queue.popleft()
            w.queued = False
            self._notify_room()
        self._running[name] = self._running.get(name, 0) + 1
        if queue and self._running[name] < limit:
            self._wake(queue[0])   # room for the next one too (slots freed together)
        return True

    def _free_slot(self, w: _Work) -> None:
        name = w.kind.name
        if w.kind.concurrency is None:
            return
        self._running[name] = max(0, self._running.get(name, 0) - 1)
        queue = self._queues.get(name)
        if queue:
            self._wake(queue[0])

    def _notify_room(self) -> None:
        async def notify() -> None:
            async with self._room:
                self._room.notify_all()
        asyncio.get_running_loop().create_task(notify())

    async def _backpressure(self, kind: Kind) -> None:
        if kind.concurrency is None:
            return
        queue = self._queues.setdefault(kind.name, deque())
        if len(queue) < kind.max_queued:
            return
        async with self._room:
            await self._room.wait_for(lambda: len(queue) < kind.max_queued)

    # -- running an attempt here ------------------------------------------------------------
    async def _inputs(self, w: _Work, version: str | None) -> Mapping[str, Any] | None:
        if version is None:
            return None
        if version in w.inputs:
            return w.inputs[version]
        if w.kind.inputs is None:
            raise ConfigError(f"the runtime running {w.work_id} did not publish version "
                              f"{version!r} and kind {w.kind.name!r} has no inputs loader",
                              work_id=w.work_id, kind=w.kind.name)
        loaded = await _maybe(resolve(w.kind.inputs)(version))
        return dict(loaded)

    async def _inputs_renewing(self, w: _Work, att: Attempt) -> Mapping[str, Any] | None:
        """The attempt's inputs. It is claimed (and leased) from its admission, so a kind's
        inputs loader slower than a heartbeat interval renews the lease meanwhile."""
        load = asyncio.ensure_future(self._inputs(w, att.pinned_version))
        try:
            while not (await asyncio.wait({load}, timeout=w.kind.lease.heartbeat_interval
                                          / 1000))[0]:
                with contextlib.suppress(OutliveError):   # a missed beat is what leases are for
                    await _observe.execute(self._backend, w.work_id, L.Heartbeat(
                        attempt=att.number, token=att.token, at=self.clock(), secret=att.secret))
        finally:
            if not load.done():
                load.cancel()
        return load.result()

    async def _run(self, w: _Work, att: Attempt, read: WorkState | None = None) -> None:
        """Run one attempt admitted (and claimed) here; its end is an event for the scheduler.
        ``read``: the work as read just before the admission, nothing else written since."""
        worker: Worker | None = None
        try:
            inputs = await self._inputs_renewing(w, att)
            fn = resolve(w.kind.attempt)
            worker = Worker(self._backend, att, inputs, persist=w.kind.persist, clock=self.clock)
            worker.sync_in_thread = w.kind.sync_steps == "thread"
            worker.on_wait = functools.partial(self._wake, w.work_id)   # times a wait limit
            await worker.start(claim=False, state=read)
            worker.last_sign = att.last_heartbeat
            ctx = _Context(self, worker, w.kind, inputs)
            # the admission claimed the attempt just now: that is its sign of life
            async with worker.renewing(w.kind.lease.heartbeat_interval, at_once=False):
                await _maybe(fn(ctx))
                if await worker.parked():   # waits on a person: whoever answers carries it on
                    w.running = None
                else:
                    await worker.finish()
        except asyncio.CancelledError:
            raise
        except (StaleOwner, AttemptStopped, AttemptEnded, AttemptSilent) as exc:
            log.info("attempt #%s of %s stops: %s", att.number, w.work_id, exc)
        except Exception as exc:
            await self._failed(w, att, worker, exc)
        finally:
            if w.running == att.number:
                w.task = None
            self._free_slot(w)
            if not self._closing:   # its end settles the work: before starting others
                self._wake(w.work_id, urgent=True)
            if w.ended:
                self._works.pop(w.work_id, None)

    async def _failed(self, w: _Work, att: Attempt, worker: Worker | None,
                      exc: BaseException) -> None:
        retryable = w.kind.retry.retryable(exc)
        error = error_of(exc, self.clock(), retryable)
        log.warning("attempt #%s of %s (kind %s) raised %s: %s%s\n%s", att.number, w.work_id,
                    w.kind.name, error.type, error.message,
                    "" if retryable else " (not retryable: the work fails)", error.traceback)
        try:
            await _observe.execute(self._backend, w.work_id, L.Fail(
                attempt=att.number, token=att.token, at=self.clock(), error=error,
                secret=att.secret))
        except OutliveError as rec_exc:   # replaced meanwhile: its successor carries on
            log.info("attempt #%s of %s: its error was not recorded (%s)", att.number,
                     w.work_id, rec_exc)


