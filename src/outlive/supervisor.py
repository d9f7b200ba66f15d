"""The supervisor: turns silence into a successor, once, in the library.

Given a :class:`WorkDefinition` — the attempt function registered by name (``module:function``),
its contract and assessor, how its inputs are loaded — a :class:`Supervisor` opens the work if
needed, admits an attempt (the record is written before anything is dispatched), hands it to a
:class:`Dispatcher`, and follows the work to its end:

- a running attempt renews its lease (heartbeats) in the background; an attempt that misses
  ``missed_beats`` intervals becomes ``unknown`` — never failed, never finished — and the
  supervisor admits a successor with a larger token and asks the dispatcher to stop the old one;
- an attempt that records ``waiting`` (a person, an outside event) is not suspected;
- candidates are judged (owner, version and part hashes first, then the assessor), and a refused
  candidate stops its attempt;
- an input version published while an attempt runs does not interrupt it: its candidate is built
  for the version it was pinned to and is refused at judgement (``VersionMismatch``); the
  successor is pinned to the new version and restores every step whose input key still matches;
- the work is done when the current input version has an accepted result and no effect intent
  is open; a successor settles open intents by resending with the same operation key;
- successors are capped per input version, with exponential backoff from the predecessor's last
  sign of life; the cap ends in :class:`~outlive.errors.GaveUp`, never a silent loop.

The supervisor keeps nothing in memory that the ledger does not have: every decision is taken
from a fresh read of the ledger, so a killed supervisor started again carries on, and two
supervisors of one work never both admit (the ledger's ``Admit`` refuses the second).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import importlib
import inspect
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from . import _observe
from . import ledger as L
from ._check import argument
from ._failures import RetryPolicy, error_of, last_error, why_open
from .backend import Backend
from .controller import Assessor, Controller, wall_clock_ms
from .errors import (
    AttemptActive,
    AttemptStopped,
    ConfigError,
    GaveUp,
    NotFound,
    OutliveError,
    Rejected,
    StaleOwner,
    WorkFailed,
)
from .records import (
    Acceptance,
    Attempt,
    AttemptState,
    Candidate,
    Contract,
    InputVersion,
    Policy,
    WorkState,
)
from .worker import Persist, Worker

__all__ = [
    "Assignment",
    "AttemptContext",
    "AttemptFunction",
    "Completed",
    "Dispatcher",
    "Lease",
    "Status",
    "Supervisor",
    "TaskDispatcher",
    "WorkDefinition",
    "accept_all",
    "import_ref",
    "resolve",
    "run_attempt",
    "work_complete",
]

log = logging.getLogger("outlive.supervisor")

#: An attempt function: ``async def attempt(ctx: AttemptContext) -> None``. It runs the steps
#: through ``ctx.worker``, submits a candidate with ``ctx.submit``, and sends its effects with
#: ``ctx.worker.effect`` once the candidate is accepted. It must be importable by name.
AttemptFunction = Callable[["AttemptContext"], Awaitable[Any]]
#: ``inputs(version_name) -> {part name: content}``: the content of a published version (the
#: ledger keeps only hashes), so a fresh process can rebuild its snapshot.
InputLoader = Callable[[str], Mapping[str, Any] | Awaitable[Mapping[str, Any]]]


#: Which errors another attempt may fix, for runners given no policy of their own.
_DEFAULT_POLICY = RetryPolicy()


def resolve(ref: str | Callable[..., Any]) -> Callable[..., Any]:
    """Import ``module:function`` (a dotted attribute path after the colon is allowed)."""
    if callable(ref):
        return ref
    obj = import_ref(ref, "FUNCTION")
    if not callable(obj):
        raise ConfigError(f"{ref!r} is not callable", ref=ref)
    return obj  # type: ignore[no-any-return]


def import_ref(ref: str, what: str = "NAME") -> Any:
    """The object ``module:attr`` names (a dotted attribute path after the colon is allowed);
    ``what`` says in the error what the name should be (``MODULE:{what}``)."""
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise ConfigError(f"expected MODULE:{what}, got {ref!r}", ref=ref)
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module!r} for {ref!r}: {exc}", ref=ref) from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise ConfigError(f"{module!r} has no {attr!r}", ref=ref) from exc
    return obj


def accept_all(cand: Candidate, version: InputVersion | None) -> tuple[bool, str]:
    """The assessor of a definition that names none: the mechanical checks decide alone."""
    return True, "passed the mechanical checks (no assessor)"


def _name_of(ref: str | Callable[..., Any]) -> str:
    """The registered name of a function: what a process in another interpreter imports.

    A closure or bound method gets a name too (for logs); only dispatchers that cross a process
    boundary need it to import, and they say so when it does not.
    """
    if isinstance(ref, str):
        return ref
    return f"{getattr(ref, '__module__', '?')}:{getattr(ref, '__qualname__', repr(ref))}"


@dataclass(frozen=True, kw_only=True)
class Lease:
    """An attempt renews its lease every ``heartbeat_interval`` ms; ``missed_beats`` of silence
    make it ``unknown``. Takeover therefore starts about ``heartbeat_interval * missed_beats``
    after the last sign of life (``start_grace`` for an attempt not heard from yet)."""

    heartbeat_interval: int = 2_000
    missed_beats: int = 2
    #: How long an admitted attempt may stay unheard from (a process starting, an engine
    #: scheduling it) before it counts as silent. A runner that is seen to die is taken over
    #: at once regardless.
    start_grace: int = 30_000
    #: How long (ms) an attempt may wait on a person or an outside event before the wait is
    #: suspected like silence (``unknown``, and a successor). None: a wait is never suspected
    #: (a runner seen to die while waiting is, at once). The rule: :func:`outlive.ledger.suspicion`.
    wait_limit: int | None = None

    @property
    def timeout(self) -> int:
        return self.heartbeat_interval * self.missed_beats


@dataclass(frozen=True, kw_only=True)
class WorkDefinition:
    """What to run for one work, by name, so any process (or engine) can run it.

    ``attempt`` and ``inputs`` may be given as module-level callables; they are then registered
    under ``module:qualname``. ``assessor`` judges a candidate after the mechanical checks; None
    accepts every candidate that passes them. ``max_attempts`` caps the attempts pinned to one
    input version; the n-th successor waits ``backoff * 2**(n-2)`` ms (at most ``max_backoff``)
    after its predecessor's last sign of life.
    """

    work_id: str
    attempt: str | AttemptFunction
    contract: Contract
    assessor: str | Assessor | None = None
    inputs: str | InputLoader | None = None
    policy: Policy = field(default_factory=Policy)
    persist: Persist = "step"
    lease: Lease = field(default_factory=Lease)
    max_attempts: int = 5
    backoff: int = 0
    max_backoff: int = 60_000
    #: Extra arguments handed to the attempt function (``ctx.args``) and to ``outlive worker``.
    args: tuple[str, ...] = ()
    #: When the work is done; default :func:`work_complete` (current version accepted, no open
    #: effect intent). Give a stricter rule when an effect must exist, not merely be settled.
    complete: Callable[[WorkState], bool] | None = None

    def is_complete(self, state: WorkState) -> bool:
        if self.complete is not None:
            return self.complete(state)
        return work_complete(state, self.contract)

    @property
    def attempt_ref(self) -> str:
        """The attempt function's registered ``module:function`` name."""
        return _name_of(self.attempt)

    @property
    def inputs_ref(self) -> str | None:
        return None if self.inputs is None else _name_of(self.inputs)

    def backoff_for(self, attempt_no_for_version: int) -> int:
        """Delay before the ``attempt_no_for_version``-th attempt of a version (1 = the first)."""
        if attempt_no_for_version <= 1 or self.backoff <= 0:
            return 0
        return int(min(self.max_backoff, self.backoff * 2 ** (attempt_no_for_version - 2)))


@dataclass(frozen=True, kw_only=True)
class Assignment:
    """An admitted attempt, ready to dispatch: everything a runner in any process needs.

    Built only from the ledger's attempt record and the work definition, so a supervisor that
    restarts can rebuild the assignment of any attempt (to stop it) without having kept it.
    """

    backend_url: str
    work_id: str
    attempt: int
    token: int
    pinned_version: str | None
    #: The attempt function's registered ``module:function``.
    function: str
    definition: WorkDefinition
    #: The secret part of the token, as the controller issued it (the ledger keeps its hash):
    #: the runner needs it to write. None for an attempt admitted by the epoch alone.
    secret: str | None = field(default=None, repr=False)

    @classmethod
    def of(cls, backend: Backend, definition: WorkDefinition, attempt: Attempt) -> Assignment:
        return cls(backend_url=backend.url, work_id=attempt.work_id, attempt=attempt.number,
                   token=attempt.token, pinned_version=attempt.pinned_version,
                   function=definition.attempt_ref, definition=definition,
                   secret=attempt.secret)


class Dispatcher(abc.ABC):
    """Runs admitted attempts somewhere: an asyncio task, an OS process, an engine execution.

    What a dispatcher must do (and what it must not):

    - :meth:`dispatch` starts the attempt named by the :class:`Assignment` and returns once it is
      started, not when it ends. The attempt record and its token are already in the ledger:
      the runner must use exactly that attempt number and token for every write (the ledger
      refuses anything else) and must never admit on its own. Dispatch happens at most once per
      token; a supervisor never re-dispatches an admitted attempt (after a crash between admit
      and dispatch the attempt simply goes silent and is taken over), so a token never reaches
      two live runners. An engine with idempotent starts should still key the start by
      ``(work_id, attempt)``.
    - Liveness and waiting are reported **through the ledger**, never to the dispatcher: the
      runner (or the engine's heartbeat, mapped onto it) sends ``Heartbeat`` every
      ``definition.lease.heartbeat_interval`` ms while the attempt works, ``Wait`` when it waits
      on a person or an outside event, ``Resume`` when the wait ends, ``Finish`` at the end.
      :func:`run_attempt` does all of this for runners that call Python directly.
    - :meth:`stop` is asked to stop a predecessor that was marked ``unknown`` or stopped: SIGTERM a
      process, cancel a task, cancel an engine execution. It is best effort and may be called for
      an attempt this dispatcher never started (after a supervisor restart); correctness never
      depends on it, because the predecessor's next write is refused by its token.
    - Set :attr:`drives_takeover` when the engine's own timers detect silence and the engine itself
      marks ``unknown``, admits the successor and starts it (Temporal heartbeat timeouts, Restate
      delayed calls). The supervisor then does not poll leases or admit successors: it opens the
      work, admits and dispatches the first attempt, judges candidates and waits for completion.
    - :meth:`wait` is how the supervisor sleeps between passes; a dispatcher that learns of a
      change sooner (a process exited, an engine callback) may return early.
    """

    #: True when the engine detects silence and admits/dispatches successors itself.
    drives_takeover: ClassVar[bool] = False
    #: False for a dispatcher that cannot hand the token's secret part to its runner (it
    #: rebuilds the attempt from the ledger elsewhere): the supervisor then admits by the epoch
    #: alone, and says so.
    carries_secret: ClassVar[bool] = True

    @abc.abstractmethod
    async def dispatch(self, assignment: Assignment) -> None:
        """Start the admitted attempt; return once it is started."""

    async def stop(self, assignment: Assignment) -> None:
        """Ask a replaced or stopped attempt to stop (best effort; fencing is the guarantee)."""

    def gone(self, assignment: Assignment) -> bool:
        """True when this dispatcher knows the attempt's runner is gone without finishing (its
        process exited, its task ended). The supervisor then suspects it at once instead of
        waiting out the lease. False when unsure: the lease covers it."""
        return False

    async def wait(self, timeout: float) -> None:
        """Sleep up to ``timeout`` seconds; return earlier if something may have changed."""
        await asyncio.sleep(timeout)

    async def close(self) -> None:
        """Stop whatever this dispatcher still runs and release its resources."""


# -- the attempt's side --------------------------------------------------------------------------
class AttemptContext:
    """What an attempt function receives: its started worker, its pinned inputs, its arguments.

    The lease is renewed in the background while the function runs (:meth:`Worker.renew`).
    """

    def __init__(self, worker: Worker, definition: WorkDefinition,
                 inputs: Mapping[str, Any] | None, args: tuple[str, ...]) -> None:
        self.worker = worker
        self.definition = definition
        self.inputs: dict[str, Any] = dict(inputs) if inputs is not None else {}
        self.args = args

    @property
    def attempt(self) -> Attempt:
        return self.worker.attempt

    @property
    def version(self) -> str | None:
        """The input version this attempt is pinned to."""
        return self.worker.attempt.pinned_version

    async def submit(self, content: Any, steps: list[str] | None = None, *,
                     poll: float | None = None) -> Acceptance:
        """Submit the candidate and wait for the supervisor's judgement.

        Returns the acceptance. Raises :class:`~outlive.errors.AttemptStopped` if the candidate
        was refused (the supervisor stops the attempt) and :class:`~outlive.errors.StaleOwner` if
        this attempt was replaced meanwhile. The lease keeps being renewed while it waits.
        """
        cand = await self.worker.candidate(content, steps)
        return await self.judged(cand, poll=poll)

    async def judged(self, cand: Candidate, *, poll: float | None = None) -> Acceptance:
        """Wait until ``cand`` is accepted (see :meth:`submit`)."""
        # a read per poll; a tenth of a beat keeps the judgement's round trip short
        interval = poll if poll is not None else self.definition.lease.heartbeat_interval / 10_000
        return await self._verdict(cand, interval)

    async def _verdict(self, cand: Candidate, interval: float,
                       answer: asyncio.Future[Acceptance] | None = None) -> Acceptance:
        """``cand``'s acceptance: from ``answer`` when a judge in this process answers it (then
        the ledger is read only if no answer came within ``interval``: another process judged,
        or this one is closing), else from a read of the ledger every ``interval`` seconds."""
        backend = self.worker.backend
        while True:
            if answer is not None:
                try:
                    return await asyncio.wait_for(asyncio.shield(answer), interval)
                except TimeoutError:
                    pass
            st = await backend.load(self.worker.work_id)
            assert st is not None
            for acc in st.acceptances:
                if acc.digest == cand.digest:
                    return acc
            me = st.attempt(self.attempt.number)
            refusal = st.refusal(cand.digest)
            if refusal is not None:
                raise AttemptStopped(
                    f"candidate {cand.digest[:8]} of attempt #{self.attempt.number} was refused: "
                    f"{refusal.reason}", attempt=self.attempt.number, digest=cand.digest)
            if st.epoch != self.attempt.token and st.policy.fencing:
                raise StaleOwner(
                    f"attempt #{self.attempt.number} was replaced while its candidate waited",
                    token=self.attempt.token, epoch=st.epoch, attempt=self.attempt.number)
            if me is not None and not L.is_live(me):
                raise AttemptStopped(
                    f"candidate {cand.digest[:8]} of attempt #{me.number} was not accepted; "
                    f"the attempt is {me.state.value}", attempt=me.number, digest=cand.digest)
            if answer is None:
                await asyncio.sleep(interval)


async def _maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def run_attempt(backend: Backend, assignment: Assignment, *,
                      clock: Callable[[], int] | None = None,
                      policy: RetryPolicy = _DEFAULT_POLICY) -> None:
    """Run one admitted attempt here: the body every Python runner shares.

    Builds the worker for the assignment's attempt and token, loads the pinned inputs, renews
    the lease in the background, calls the attempt function and records ``Finish``. A replaced
    attempt (``StaleOwner``) or a refused one (``AttemptStopped``) ends quietly: alive, without
    write authority. Any other exception is an answer, not silence: it is recorded with the
    attempt (``Fail``: type, message, traceback; retryable or not by ``policy``) and propagates.
    The supervisor then admits a successor at once, or fails the work on a non-retryable error.
    """
    d = assignment.definition
    st = await backend.load(assignment.work_id)
    if st is None:
        raise NotFound(f"work {assignment.work_id!r} is not open", work_id=assignment.work_id)
    att = st.attempt(assignment.attempt)
    if att is None or att.token != assignment.token:
        raise NotFound(f"attempt #{assignment.attempt} with token {assignment.token} is not in "
                       f"the ledger of {assignment.work_id}", attempt=assignment.attempt)
    inputs: Mapping[str, Any] | None = None
    if d.inputs is not None and att.pinned_version is not None:
        inputs = await _maybe(resolve(d.inputs)(att.pinned_version))
    # In process the definition may hold the function itself; elsewhere it is imported by name.
    fn = d.attempt if callable(d.attempt) else resolve(assignment.function)
    kw: dict[str, Any] = {"persist": d.persist}
    if clock is not None:
        kw["clock"] = clock
    worker = Worker(backend, replace(att, secret=assignment.secret), inputs, **kw)
    await worker.start()
    ctx = AttemptContext(worker, d, inputs, d.args)
    try:
        async with worker.renewing(d.lease.heartbeat_interval):
            await _maybe(fn(ctx))
            if not await worker.parked():   # waiting on a person: whoever answers carries it on
                await worker.finish()
    except (StaleOwner, AttemptStopped) as exc:
        log.warning("attempt #%s of %s (token %s): refused (%s: %s); it stops, alive but without "
                    "write authority", att.number, att.work_id, att.token, type(exc).__name__, exc)
    except Exception as exc:
        error = error_of(exc, (clock or wall_clock_ms)(), policy.retryable(exc))
        try:
            await worker._call(L.Fail(attempt=att.number, token=att.token, at=error.at,
                                      error=error, secret=assignment.secret))
        except OutliveError:   # replaced or ended meanwhile: nothing to record
            pass
        raise


class TaskDispatcher(Dispatcher):
    """Runs each attempt as an asyncio task in this process, on the supervisor's backend."""

    def __init__(self, backend: Backend, *, clock: Callable[[], int] | None = None) -> None:
        self.backend = backend
        self.clock = clock
        self.tasks: dict[tuple[str, int], asyncio.Task[None]] = {}
        #: Set when an attempt's task ends: the supervisor's next pass need not wait for a poll.
        self._ended = asyncio.Event()

    async def dispatch(self, assignment: Assignment) -> None:
        key = (assignment.work_id, assignment.attempt)
        if key in self.tasks:
            return
        task = asyncio.create_task(
            self._run(assignment), name=f"outlive:{assignment.work_id}#{assignment.attempt}")
        task.add_done_callback(lambda _t: self._ended.set())
        self.tasks[key] = task

    async def _run(self, assignment: Assignment) -> None:
        try:
            await run_attempt(self.backend, assignment, clock=self.clock)
        except asyncio.CancelledError:
            raise
        except Exception:   # recorded with the attempt (run_attempt); the supervisor decides
            log.exception("attempt #%s of %s raised", assignment.attempt, assignment.work_id)

    async def wait(self, timeout: float) -> None:
        """Sleep until the next pass is due, or until an attempt's task ends."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ended.wait(), timeout)
        self._ended.clear()

    def gone(self, assignment: Assignment) -> bool:
        task = self.tasks.get((assignment.work_id, assignment.attempt))
        return task is not None and task.done()

    async def stop(self, assignment: Assignment) -> None:
        task = self.tasks.get((assignment.work_id, assignment.attempt))
        if task is not None and not task.done():
            task.cancel()

    async def close(self) -> None:
        tasks = [t for t in self.tasks.values() if not t.done()]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t


# -- the supervisor ------------------------------------------------------------------------------
def work_complete(state: WorkState, contract: Contract | None = None) -> bool:
    """Done: the current version has an accepted result (under ``contract``, when given: the
    kind's contract) and no effect intent is open."""
    acc = state.latest_acceptance
    if contract is not None:
        acc = next((a for a in reversed(state.acceptances) if a.contract == contract), None)
    if acc is None:
        return False
    if state.policy.pins and acc.version != state.current_version:
        return False
    return all(L.is_settled(e) for e in state.effects)


@dataclass(frozen=True, kw_only=True)
class Status:
    """One pass of the supervisor: what it saw and what it did (for a live display)."""

    state: WorkState
    complete: bool
    #: What the supervisor did in this pass, in order ("marked #1 unknown", "admitted #2", ...).
    actions: tuple[str, ...] = ()
    #: Milliseconds until the next successor may be admitted (backoff), if one is due.
    backoff_left: int = 0


@dataclass(frozen=True, kw_only=True)
class Completed:
    """The typed end of a supervised work: accepted for the current version, effects confirmed."""

    work_id: str
    acceptance: Acceptance
    attempts: tuple[Attempt, ...]


def _attempt_summary(att: Attempt) -> dict[str, Any]:
    return {"number": att.number, "token": att.token, "state": att.state.value,
            "pinned_version": att.pinned_version, "last_heartbeat": att.last_heartbeat}


class Supervisor:
    """Follows one work to its end with a dispatcher; every decision is read from the ledger.

    ``await supervisor.run()`` returns :class:`Completed` or raises
    :class:`~outlive.errors.GaveUp`. :meth:`tick` is one decision pass, for callers that drive
    time themselves (a test on a logical clock, a live status display).
    """

    def __init__(self, backend: Backend, definition: WorkDefinition,
                 dispatcher: Dispatcher | None = None, *,
                 clock: Callable[[], int] = wall_clock_ms, poll: float | None = None,
                 credential: str | None = None) -> None:
        argument(backend, Backend, "backend", "Supervisor", "a started Backend (open_backend(url))")
        argument(definition, WorkDefinition, "definition", "Supervisor")
        argument(dispatcher, (Dispatcher, type(None)), "dispatcher", "Supervisor")
        self.backend = backend
        self.definition = definition
        self.dispatcher = dispatcher if dispatcher is not None else TaskDispatcher(backend)
        self.clock = clock
        #: Seconds between passes: a quarter of a heartbeat interval unless given.
        self.poll = poll if poll is not None else definition.lease.heartbeat_interval / 4000
        self.controller = Controller(backend, clock=clock,
                                     heartbeat_interval=definition.lease.heartbeat_interval,
                                     missed_beats=definition.lease.missed_beats,
                                     start_grace=definition.lease.start_grace,
                                     wait_limit=definition.lease.wait_limit,
                                     credential=credential)
        self._assessor: Assessor | None = (
            None if definition.assessor is None else resolve(definition.assessor))

    @property
    def work_id(self) -> str:
        return self.definition.work_id

    async def __aenter__(self) -> Supervisor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the dispatcher (the ledger keeps everything: a new supervisor carries on)."""
        await self.dispatcher.close()

    async def publish(self, version: str, parts: Mapping[str, Any]) -> InputVersion:
        """Open the work if needed and publish an input version (part name -> content).

        A live attempt pinned to an older version keeps running; its candidate is refused at
        judgement and the successor, pinned to this version, restores what still matches.
        """
        await self._state()
        return await self.controller.publish(self.work_id, version, parts)

    async def _state(self) -> WorkState:
        st = await self.backend.load(self.work_id)
        if st is None:
            await self.controller.open_work(self.work_id, self.definition.policy)
            st = await self.backend.load(self.work_id)
            assert st is not None
        return st


    async def judge(self, state: WorkState) -> list[str]:
        """Judge every candidate submitted after the latest acceptance whose attempt still stands.

        A refused candidate stops its attempt (the attempt's ``submit`` then raises
        :class:`~outlive.errors.AttemptStopped`); the assessor's refusal is a record, so a
        refused candidate is not judged again.
        """
        actions: list[str] = []
        since = state.latest_acceptance.seq if state.latest_acceptance else 0
        for cand in state.candidates:
            if cand.seq <= since:
                continue
            att = state.attempt(cand.attempt)
            if att is None or att.state is AttemptState.STOPPED \
                    or state.refusal(cand.digest, self.definition.contract) is not None:
                continue
            try:
                acc = await self.controller.assess(self.work_id, cand.digest,
                                                   self.definition.contract,
                                                   self._assessor or accept_all)
            except Rejected as exc:
                actions.append(f"refused {cand.digest[:8]} of #{cand.attempt}: "
                               f"{type(exc).__name__}")
                if att.state is not AttemptState.FINISHED:
                    await self.controller.stop(self.work_id, att.number)
                    await self.dispatcher.stop(Assignment.of(self.backend, self.definition, att))
                continue
            actions.append(f"accepted {cand.digest[:8]} of #{cand.attempt} for {acc.version}")
        return actions

    def needs_successor(self, state: WorkState) -> bool:
        """The successor rule: no live attempt owns the work and the work is not done."""
        if self.definition.is_complete(state) or state.current_version is None:
            return False
        cur = state.current_attempt
        return cur is None or cur.state in (AttemptState.UNKNOWN, AttemptState.FINISHED,
                                            AttemptState.STOPPED, AttemptState.FAILED)

    def attempts_for_version(self, state: WorkState) -> list[Attempt]:
        return [a for a in state.attempts if a.pinned_version == state.current_version]

    async def suspect(self, state: WorkState | None = None) -> list[Attempt]:
        """Mark silent attempts ``unknown`` and ask the dispatcher to stop them; return them.

        Silence is a lease gone by on the supervisor's clock, or a wait longer than the lease's
        ``wait_limit`` (a wait within it is never silence), or a runner the dispatcher knows is
        gone (a process that exited without finishing), waiting or not: a dead runner cannot
        write, so there is nothing to wait for. The rule is :func:`outlive.ledger.suspicion`.
        Nothing is done when the dispatcher's engine drives takeover itself.
        """
        if self.dispatcher.drives_takeover:
            return []
        st = state if state is not None else await self._state()
        marked = await self.controller.observe(self.work_id, st)
        seen = {a.number for a in marked}
        for att in st.attempts:
            if att.number in seen or not L.is_live(att):
                continue
            gone = self.dispatcher.gone(Assignment.of(self.backend, self.definition, att))
            if L.suspicion(att, self.clock(), timeout=self.definition.lease.timeout,
                           runner_gone=gone) == "runner gone":
                rec = await self.controller.mark_unknown(
                    self.work_id, att.number, waiting=att.state is AttemptState.WAITING)
                if rec.state is AttemptState.UNKNOWN:
                    marked.append(rec)
        for att in marked:
            await self.dispatcher.stop(Assignment.of(self.backend, self.definition, att))
        return marked

    async def succeed(self, state: WorkState | None = None) -> Status:
        """The successor rule: admit and dispatch a successor when one is due.

        Due when the work is not complete and no live attempt holds it (none yet, or the last
        one is unknown, finished or stopped). Capped per input version, after a backoff from the
        predecessor's last sign of life; the cap raises :class:`~outlive.errors.GaveUp`. The
        ledger's ``Admit`` decides between competing supervisors: only one gets the attempt.
        """
        st = state if state is not None else await self._state()
        if not self.needs_successor(st):
            return Status(state=st, complete=self.definition.is_complete(st))
        if self.dispatcher.drives_takeover and st.current_attempt is not None:
            # The engine admits and starts successors; the supervisor only starts the first.
            return Status(state=st, complete=False)
        cur = st.current_attempt
        if st.failure is None and cur is not None and cur.state is AttemptState.FAILED \
                and cur.error is not None and not cur.error.retryable:
            await _observe.execute(self.backend, self.work_id,
                                   self.controller.stamp(L.FailWork(error=cur.error,
                                                                    at=self.clock())))
            st = await self._state()
        if st.failure is not None:
            f = st.failure
            raise WorkFailed(f"{self.work_id} failed: {f.type}: {f.message}",
                             work_id=self.work_id, type=f.type, error=f.message,
                             traceback=f.traceback)
        tried = self.attempts_for_version(st)
        if len(tried) >= self.definition.max_attempts:
            last = last_error(st)
            raise GaveUp(
                f"gave up on {self.work_id} after {len(tried)} attempts for version "
                f"{st.current_version}: {why_open(st)}"
                + (f"; the last error: {last.type}: {last.message}" if last is not None else ""),
                work_id=self.work_id, version=st.current_version,
                attempts=[_attempt_summary(a) for a in tried],
                type=last.type if last is not None else None,
                error=last.message if last is not None else None,
                traceback=last.traceback if last is not None else "")
        if tried:
            due = tried[-1].last_heartbeat + self.definition.backoff_for(len(tried) + 1)
            left = due - self.clock()
            if left > 0:
                return Status(state=st, complete=False, backoff_left=left)
        try:
            att = await self.controller.admit(self.work_id, request_id=uuid.uuid4().hex,
                                              keyed=self.dispatcher.carries_secret)
        except AttemptActive:
            return Status(state=await self._state(), complete=False,
                          actions=("another supervisor admitted first",))
        actions = [f"admitted #{att.number} with token {att.token}, pinned to "
                   f"{att.pinned_version}"]
        await self.dispatcher.dispatch(Assignment.of(self.backend, self.definition, att))
        actions.append(f"dispatched #{att.number}")
        return Status(state=await self._state(), complete=False, actions=tuple(actions))

    async def tick(self) -> Status:
        """One pass: judge candidates, suspect silence, admit and dispatch a successor if due.

        The ledger is read once for a pass that changes nothing, and again only after a pass's
        own write (an acceptance, a mark): every decision still reads what the ledger holds.
        """
        actions: list[str] = []
        st = await self._state()
        if st.candidates:
            judged = await self.judge(st)
            if judged:
                actions += judged
                st = await self._state()
        marked = await self.suspect(st)
        for att in marked:
            actions.append(f"marked #{att.number} unknown (silent)")
        status = await self.succeed(await self._state() if marked else st)
        return replace(status, actions=(*actions, *status.actions))

    def next_pass(self, status: Status) -> float:
        """Seconds until the next pass: the poll interval, or sooner when a lease runs out or a
        backoff ends before it — silence is acted on when it becomes silence, not up to a poll
        interval later."""
        wait = self.poll
        if status.backoff_left > 0:
            wait = min(wait, status.backoff_left / 1000)
        if not self.dispatcher.drives_takeover:
            lease = self.definition.lease
            now = self.clock()
            for att in status.state.attempts:
                due = L.suspect_at(att, timeout=lease.timeout, start_grace=lease.start_grace,
                                   wait_limit=lease.wait_limit)
                if due is not None:
                    wait = min(wait, (due - now) / 1000)
        return max(wait, min(self.poll, 0.005))

    async def run(self, *, on_status: Callable[[Status], Any] | None = None) -> Completed:
        """Supervise until done; returns :class:`Completed` or raises ``GaveUp``."""
        while True:
            status = await self.tick()
            if on_status is not None:
                await _maybe(on_status(status))
            cur = status.state.current_attempt
            # Done, and the last attempt has finished (or fell silent): nothing still writes.
            if status.complete and (cur is None or cur.state not in (AttemptState.ADMITTED,
                                                                     AttemptState.RUNNING)):
                acc = status.state.latest_acceptance
                assert acc is not None
                return Completed(work_id=self.work_id, acceptance=acc,
                                 attempts=status.state.attempts)
            await self.dispatcher.wait(self.next_pass(status))

