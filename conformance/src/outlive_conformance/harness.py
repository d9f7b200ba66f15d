"""Drive any backend through a scenario on a logical clock, and judge the run.

The harness plays every party of the article's run — controller, workers, the feed that receives
the announcement and the newsletter that depends on the digest — through outlive's public API
(:class:`~outlive.Controller`, :class:`~outlive.Worker`) on whatever backend it is given; the
successor rule (suspect silence, admit and dispatch a successor) is the library's own
:class:`~outlive.Supervisor`, with a dispatcher that hands each admitted attempt to a scripted
worker. Model calls go through ``backend.run_step``, so an engine runs them as its own durable
steps; a paused worker's call is genuinely held (an awaited event) and later released, a crashed
one raises and never resumes.

Timing model (docs/conformance.md): one action per worker per tick (a model call, assembling a
candidate, sending an effect); restoring from the journal is free and happens on the admission
tick, which is otherwise the new attempt's start-up; live workers beat every tick and the
controller marks an attempt ``unknown`` once more than ``missed_beats`` ticks passed since its
last sign of life. Within a tick: input changes, then a paused worker wakes, then the dependant
looks, then the controller judges candidates submitted earlier, suspects and admits, then the
workers act in attempt order.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import outlive
from outlive import (
    KEEP,
    Backend,
    Contract,
    Controller,
    MemoryReceiver,
    Policy,
    Receipt,
    Worker,
    content_hash,
)
from outlive import ledger as L
from outlive.backend import StepCall
from outlive.errors import (
    ContractFailed,
    FencingError,
    Rejected,
    ScenarioError,
    StaleOwner,
    VersionMismatch,
)
from outlive.hashing import short
from outlive.records import Candidate, InputVersion, WorkState
from outlive.rules import (
    LatestAccepted,
    LatestFinished,
    PinnedVersion,
    Rule,
    StrictCurrent,
    dependable,
)
from outlive.supervisor import (
    Assignment,
    Dispatcher,
    Lease,
    Supervisor,
    WorkDefinition,
    work_complete,
)

from .judge import Observations, judge
from .scenario import Consumer, Scenario, Silence, Switches

__all__ = ["AcceptedDigest", "RunSummary", "TraceEvent", "run_scenario"]


class WorkerCrashed(Exception):
    """Raised inside a crashed worker's model call: its process is gone and never comes back."""


class PosterDied(BaseException):
    """The posting worker died after the feed applied the post, before it could record that.

    A death, not a transport failure: it must not be taken for the receiver's silence (which
    the worker reports as ``EffectAmbiguous``), so it is not an ``Exception``.
    """


class _CrashedInPost(PosterDied):
    """A silent attempt that crashes within its post: after the intent, or after the send."""

    def __init__(self, message: str, point: str) -> None:
        super().__init__(message)
        self.point = point


@dataclass(frozen=True, kw_only=True)
class TraceEvent:
    """One line of the run's story, plus the structure a drawing needs.

    ``lane`` says whose line it sits on (``input``, ``controller``, ``attempt:N``, ``receiver`` or
    ``consumer:NAME``), ``mark`` what happened (``admit``, ``step``, ``late-write``, ``effect``, …)
    and ``data`` the identifiers and verdicts behind the text, as plain JSON-able values.
    """

    tick: int
    kind: str
    text: str
    lane: str = ""
    mark: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class AcceptedDigest:
    digest: str
    claimed_version: str | None
    recorded_version: str | None
    tick: int
    attempt: int
    figure: str | None


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """Everything a run produced that must be equal on every backend."""

    scenario: str
    switches: dict[str, str]
    model_calls: int
    posts: int
    stale_writes_applied: int
    accepted: tuple[AcceptedDigest, ...]
    refused: tuple[tuple[int, int, str], ...]
    late_writes_rejected: tuple[tuple[int, int, str], ...]
    admissions: tuple[tuple[int, int, int, str | None], ...]
    restored: dict[str, tuple[str, ...]]
    redone: dict[str, tuple[str, ...]]
    first_acceptance_tick: int | None
    final_acceptance_tick: int | None
    announcement_confirmed_at: int | None
    newsletter_start: int | None
    newsletter_figure: str | None
    newsletter_digest: str | None
    required_figure: str | None
    invariants: dict[str, bool]
    ended_at: int
    finished: bool
    trace: tuple[TraceEvent, ...] = field(default=())
    #: The consumer's name and how its figure reads ("million"), so reports need no scenario text.
    consumer_name: str = ""
    figure_unit: str = ""
    #: Posts the receiver applied again because it no longer kept the key (its retention ended).
    applied_after_retention: int = 0
    #: Writes from replaced attempts the harness saw the store accept (judged, beside the
    #: ledger's own count in ``stale_writes_applied``).
    stale_writes_seen: int = 0
    #: Further consumers (``[[consumers]]``): name -> start tick, figure, digest, required figure.
    consumers: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return self.finished and all(self.invariants.values())

    @property
    def broken(self) -> tuple[str, ...]:
        out = tuple(k for k, ok in self.invariants.items() if not ok)
        return out if self.finished else (*out, "finished")

    def comparable(self) -> dict[str, Any]:
        """The whole summary as plain data: two backends agree iff these are equal."""
        return asdict(self)


def _expired(receipt: Receipt) -> bool:
    """Did the receiver apply this as new because its memory of the key had run out?"""
    return bool(getattr(receipt, "expired", False)) or "retention" in receipt.note


def _first_sentence(text: str) -> str:
    m = re.match(r"(.+?[.!?])(\s|$)", text)
    return m.group(1) if m else text


@dataclass
class _Actor:
    worker: Worker
    number: int
    token: int
    version: str | None
    phase: str = "starting"   # starting work held awaiting done stopped crashed dead
    task: asyncio.Task[Any] | None = None
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    silence: Silence | None = None     # the silence holding this attempt, while it holds
    resume: str = "work"               # the phase a woken attempt returns to
    held_post: str | None = None       # the op key of a post paused midway
    candidate: Candidate | None = None
    accepted: str | None = None
    inherited: str | None = None       # accepted for my version before I was admitted
    to_settle: list[str] = field(default_factory=list)   # open intents found at admission
    acted: int = -1
    restored: list[str] = field(default_factory=list)
    redone: list[str] = field(default_factory=list)


async def scripted_attempt(ctx: Any) -> None:
    """The harness's attempts are scripted tick by tick (:class:`_Run`), not run by a function."""
    raise NotImplementedError("the conformance harness drives its attempts itself")


class _HarnessDispatcher(Dispatcher):
    """Hands each attempt the library's supervisor admitted to the harness's scripted worker.

    Stopping is a no-op on purpose: a paused worker stays paused until the scenario wakes it,
    so the story can show its late write being refused.
    """

    def __init__(self, run: _Run) -> None:
        self.run = run

    async def dispatch(self, assignment: Assignment) -> None:
        await self.run.admitted(assignment)


class _Unread:
    """Nothing was read (``None`` is a read: the work does not exist)."""


_UNREAD = _Unread()


class _ReadOnce(Backend):
    """The run's backend, read once between two writes.

    The harness plays every party of the run in this process, so every write to the run's work
    goes through here: a read while no write is in flight and none happened since the last read
    returns that read's state. What every party decides is what it would decide reading the
    ledger each time; an engine reached over the network just answers a fraction of the reads.
    Any call that can write (a command, a step, a step and its record) drops what was read when
    it starts and when it ends, and while it runs nothing read is kept, except while one of its
    step bodies runs: an engine writes a step's record after its body, never during it (a body
    held for several ticks, a paused worker's, would otherwise turn every read back on).

    A backend whose writes answer with the state they left (``answered(work_id)``, Restate's
    in-handler driver) hands that state over: when nothing else moved while a write was
    writing, it is what the next read would return, and it is kept as read. With such a backend
    a call that left the ledger as it was also keeps what was read before it, when nothing else
    moved during the whole call: a command the ledger refused (``Rejected``: a refusal writes
    nothing), and a step without its record when the backend says its steps write nothing to
    the ledger (``steps_write_ledger = False``).
    """

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner.url)
        self.inner = inner
        self.started = inner.started
        self._read: dict[str, WorkState | None] = {}
        self._writing = 0
        self._writes = 0

    @property
    def capabilities(self) -> frozenset[str]:  # type: ignore[override]
        return self.inner.capabilities

    def _moved(self, by: int) -> None:
        self._writing += by
        self._writes += 1
        self._read.clear()

    async def load(self, work_id: str) -> WorkState | None:
        if not self._writing and work_id in self._read:
            return self._read[work_id]
        seen = self._writes
        st = await self.inner.load(work_id)
        if not self._writing and seen == self._writes:
            self._read[work_id] = st
        return st

    def _begin(self, work_id: str) -> tuple[WorkState | _Unread | None, int]:
        """A call that may write starts: what was read of ``work_id`` before it, and ``_writes``."""
        before = self._read.get(work_id, _UNREAD)
        self._moved(1)
        return before, self._writes

    def _ended(self, work_id: str, mark: int, ok: bool, *, start: int | None = None,
               bodies: int = 0, before: WorkState | _Unread | None = None,
               left_alone: bool = False) -> None:
        """A call that may write ends (``ok``: it returned). ``mark`` is ``_writes`` when it
        began writing (after its body); ``start`` when it started, ``bodies`` how many of its
        step bodies ran since, ``before`` what was read then, and ``left_alone`` whether it left
        the ledger as it was."""
        writing_alone = self._writing == 1
        alone = ok and self._writes == mark and writing_alone
        untouched = (left_alone and writing_alone and start is not None
                     and self._writes == start + 2 * bodies and not isinstance(before, _Unread))
        self._moved(-1)
        answered = getattr(self.inner, "answered", None)
        if answered is not None:
            state = answered(work_id)   # taken either way: it belongs to this write
            if alone and state is not None:
                self._read[work_id] = state
            elif untouched:
                self._read[work_id] = before   # type: ignore[assignment]

    async def execute(self, work_id: str, command: L.Command) -> L.Outcome:
        before, mark = self._begin(work_id)
        ok = refused = False
        try:
            out = await self.inner.execute(work_id, command)
            ok = True
            return out
        except Rejected:
            refused = True
            raise
        finally:
            self._ended(work_id, mark, ok, start=mark, before=before, left_alone=refused)

    def _body(self, fn: Callable[[], Awaitable[Any]],
              marks: list[int] | None = None) -> Callable[[], Awaitable[Any]]:
        """``fn`` as the engine runs it: while it runs, its call is not writing."""
        async def body() -> Any:
            self._moved(-1)
            try:
                return await fn()
            finally:
                self._moved(1)
                if marks is not None:
                    marks.append(self._writes)
        return body

    async def run_step(self, call: StepCall, fn: Callable[[], Awaitable[Any]]) -> Any:
        before, start = self._begin(call.work_id)
        marks: list[int] = []
        try:
            return await self.inner.run_step(call, self._body(fn, marks))
        finally:
            self._ended(call.work_id, -1, False, start=start, bodies=len(marks), before=before,
                        left_alone=getattr(self.inner, "steps_write_ledger", True) is False)

    async def run_and_record(self, call: StepCall, fn: Callable[[], Awaitable[Any]],
                             record: Callable[[Any], L.Command]) -> tuple[Any, L.Outcome]:
        before, start = self._begin(call.work_id)
        marks: list[int] = []   # the body's end (a restored step has no body: then the start)
        ok = refused = False
        try:
            got = await self.inner.run_and_record(call, self._body(fn, marks), record)
            ok = True
            return got
        except Rejected:
            refused = True
            raise
        finally:
            self._ended(call.work_id, marks[-1] if marks else start, ok, start=start,
                        bodies=len(marks), before=before, left_alone=refused)

    async def run_and_record_many(
            self, calls: list[StepCall], fns: list[Callable[[], Awaitable[Any]]],
            records: list[Callable[[Any], L.Command]]) -> list[Any]:
        self._moved(1)
        try:
            return await self.inner.run_and_record_many(calls, [self._body(f) for f in fns],
                                                        records)
        finally:
            self._moved(-1)

    async def works(self) -> list[str]:
        return await self.inner.works()


class _Run:
    def __init__(self, backend: Backend, sc: Scenario, sw: Switches, work_id: str,
                 trace: bool) -> None:
        self.b = backend = _ReadOnce(backend)
        self.sc = sc
        self.sw = sw
        self.work = work_id
        self.tick = 0
        self.record_trace = trace
        self.trace: list[TraceEvent] = []
        self.ctl = Controller(backend, clock=lambda: self.tick,
                              heartbeat_interval=sc.heartbeat_every, missed_beats=sc.missed_beats)
        # The successor rule is the library's: the supervisor suspects silence and admits;
        # the harness only plays the workers it dispatches to, on the logical clock.
        self.supervisor = Supervisor(backend, WorkDefinition(
            work_id=work_id, attempt=scripted_attempt, contract=Contract(**sc.contract),
            policy=Policy(fencing=sw.fencing == "on", pins=sw.pins == "on"),
            lease=Lease(heartbeat_interval=sc.heartbeat_every, missed_beats=sc.missed_beats,
                        start_grace=0),
            max_attempts=sc.max_ticks + 1, complete=self.complete,
        ), _HarnessDispatcher(self), clock=lambda: self.tick)
        self.feed = MemoryReceiver(retention=sc.retention, clock=lambda: self.tick)
        self.actors: list[_Actor] = []
        self.calls = 0
        self.truth: dict[str, str] = {}           # result id -> hash of the text really read
        self.pins: dict[int, str | None] = {}      # attempt -> version it was pinned to
        self.op_payload: dict[str, Any] = {}
        self.op_applied: dict[str, int] = {}
        self.post_attempts = 0
        self.after_retention = 0
        self.pending_cands: list[tuple[str, _Actor]] = []
        self.accepted: list[AcceptedDigest] = []
        self.refused: list[tuple[int, int, str]] = []
        self.late_rejected: list[tuple[int, int, str]] = []
        self.admissions: list[tuple[int, int, int, str | None]] = []
        self.news_start: int | None = None
        self.news_figure: str | None = None
        self.news_digest: str | None = None
        self.news_required: str | None = None
        self.confirmed_at: int | None = None
        self.contract = Contract(**sc.contract)
        self.change_at = sc.change_at.get(sw.change) if sw.change != "never" else None
        #: tick -> version published then: the switch's change, then the scenario's further ones
        self.schedule: dict[int, str] = {}
        if self.change_at is not None:
            at = self.change_at
            self.schedule[at] = sc.new_version
            for change in sc.then:
                at += change.after
                self.schedule[at] = change.version
        self.extra: dict[str, dict[str, Any]] = {}
        self.fired: set[Silence] = set()           # silences that have fallen
        self.stale_landed = 0       # writes from replaced attempts that the store accepted (seen)
        rules: dict[str, Rule] = {
            "strict": StrictCurrent(fail_open=sc.consumer.fail_open),
            "accepted": LatestAccepted(),
            "finished": LatestFinished(),
        }
        self.rule: Rule = rules[sw.rule]

    # -- helpers ---------------------------------------------------------------------------------
    def log(self, kind: str, text: str, *, lane: str = "", mark: str = "", **data: Any) -> None:
        if self.record_trace:
            self.trace.append(TraceEvent(tick=self.tick, kind=kind, text=text, lane=lane,
                                         mark=mark, data=data))

    def vhash(self, version: str | None) -> str:
        if version is None:
            return "-"
        return short(content_hash(self.sc.versions[version]))

    def op_key(self, digest: str) -> str:
        return self.sc.announce.format(work_id=self.sc.work_id, digest=short(digest))

    def figure_of(self, content: Any, consumer: Consumer | None = None) -> str | None:
        c = consumer or self.sc.consumer
        try:
            text = content[c.quotes]["summary"]     # the digest is its parts' results by step
        except (KeyError, TypeError):
            return None
        m = re.search(c.pattern, str(text))
        return m.group(1) if m else None

    async def state(self) -> WorkState:
        st = await self.b.load(self.work)
        assert st is not None
        return st

    def complete(self, st: WorkState) -> bool:
        """The supervisor's rule (the current version accepted, every intent settled: a dead
        poster's open intent still needs a successor, as in the article's t13) and the accepted
        digest announced."""
        acc = st.latest_acceptance
        return work_complete(st, self.contract) and acc is not None \
            and self.announced(st, acc.digest)

    def assessor(self, cand: Candidate, version: InputVersion | None) -> tuple[bool, str]:
        """Completeness and form only; it does not re-derive figures (as the article says)."""
        secs = cand.content if isinstance(cand.content, dict) else None
        if not isinstance(secs, dict) or sorted(secs) != sorted(self.sc.steps):
            return False, "digest does not cover every section"
        for name, result in secs.items():
            text = result.get("summary") if isinstance(result, dict) else None
            if not isinstance(text, str) or not text or len(text) > self.sc.max_summary_chars:
                return False, f"summary of {name} is empty or too long"
        return True, "complete, well-formed"

    # -- the model call ----------------------------------------------------------------------------
    def body(self, actor: _Actor, step: str) -> Any:
        async def summarise(**inputs: str) -> dict[str, str]:
            (text,) = inputs.values()
            sil = self.silent_here(actor, step)
            if sil is not None and sil.point == "after-record":
                sil = None                      # that silence comes once the record is written
            before = sil is not None and sil.point == "before-call"
            if not before:
                self.calls += 1
            if sil is not None:
                await self.fall_silent_inside(
                    actor, sil, WorkerCrashed(f"attempt #{actor.number} crashed during {step}"))
            if before:
                self.calls += 1
            return {"summary": _first_sentence(text)}

        return summarise

    def silent_here(self, actor: _Actor, step: str | None,
                    points: tuple[str, ...] = ("after-candidate",)) -> Silence | None:
        """The silence, not yet fallen, for this attempt at this step (None: at one of ``points``,
        the places after its steps)."""
        for sil in self.sc.silences:
            if sil.attempt == actor.number and sil.step == step and sil not in self.fired \
                    and (step is not None or sil.point in points):
                return sil
        return None

    def hold(self, actor: _Actor, sil: Silence, resume: str) -> None:
        """Fall silent between two actions: nothing in flight, the attempt just stops answering."""
        self.fired.add(sil)
        actor.silence = sil
        if self.sw.silent == "crashed":
            actor.phase = "crashed"
            return
        actor.phase, actor.resume = "held", resume
        actor.release.clear()
        actor.task = asyncio.ensure_future(actor.release.wait())

    # -- phases --------------------------------------------------------------------------------
    async def wake(self) -> None:
        for a in self.actors:
            sil = a.silence
            if a.phase != "held" or self.sw.silent != "paused" or sil is None \
                    or self.tick != sil.wake_at:
                continue
            a.release.set()
            a.acted = self.tick
            assert a.task is not None
            if a.held_post is not None:
                await self.wake_in_post(a)
                continue
            step = sil.step or "its candidate"
            if sil.point in ("after-record", "after-candidate"):
                await a.task
                a.phase = a.resume
                if a.phase == "stopped":
                    self.log("attempt", f"#{a.number} wakes; its candidate was refused meanwhile: "
                             "it stops", lane=f"attempt:{a.number}", mark="wake", step=sil.step)
                    continue
                self.log("attempt", f"#{a.number} wakes after {'recording ' if sil.step else ''}"
                         f"{step} and carries on as if nothing happened", lane=f"attempt:{a.number}",
                         mark="wake", step=sil.step)
                await self.beat_if_current(a)
                continue
            try:
                await a.task
            except FencingError as exc:
                a.phase = "stopped"
                self.late_rejected.append((self.tick, a.number, type(exc).__name__))
                st = await self.state()
                self.log("attempt", f"#{a.number} wakes and tries to record {step}; the journal "
                         f"rejects it: token {a.token} is older than {st.epoch}. #{a.number} stops "
                         f"— alive, without write authority", lane=f"attempt:{a.number}",
                         mark="late-write", step=step, refused=True, token=a.token, epoch=st.epoch,
                         reason=type(exc).__name__)
                continue
            a.phase = "work"
            rid = a.worker.steps[step].result_id
            if self.sw.progress == "step":
                if a.token < (await self.state()).epoch:
                    self.stale_landed += 1
                self.log("fencing", f"#{a.number} wakes and records {step} -> {short(rid)} with "
                         f"stale token {a.token}: applied (fencing off)", lane=f"attempt:{a.number}",
                         mark="late-write", step=step, refused=False, token=a.token,
                         result=short(rid))
            else:
                self.log("attempt", f"#{a.number} wakes and finishes {step} -> {short(rid)} "
                         "(kept in memory until the end of its attempt)", lane=f"attempt:{a.number}",
                         mark="wake", step=step, result=short(rid))
                await self.beat_if_current(a)
            self.truth[rid] = content_hash(self.sc.versions[a.version or self.sc.first_version][step])

    async def wake_in_post(self, a: _Actor) -> None:
        """A post paused after its intent (or its send) carries on: it sends (or not), then
        records the receiver's answer — a fenced write, refused if it was replaced meanwhile."""
        assert a.held_post is not None and a.task is not None
        op_key, a.held_post = a.held_post, None
        a.phase = a.resume
        st = await self.state()
        # a post settled meanwhile by a successor is not written again: nothing stale lands
        stale = a.token < st.epoch and not L.is_settled(st.effect(op_key))
        self.log("attempt", f"#{a.number} wakes inside its post and carries on",
                 lane=f"attempt:{a.number}", mark="wake")
        try:
            if await self.posted(a, op_key, a.task, intent_stale=False, confirm_stale=stale,
                                 resumed=True):
                await self.beat_if_current(a)
        except FencingError as exc:
            a.phase = "stopped"
            self.late_rejected.append((self.tick, a.number, type(exc).__name__))
            st = await self.state()
            self.log("attempt", f"#{a.number} tries to record the feed's answer; the ledger "
                     f"rejects it: token {a.token} is older than {st.epoch}. #{a.number} stops",
                     lane=f"attempt:{a.number}", mark="late-write", refused=True, token=a.token,
                     epoch=st.epoch, reason=type(exc).__name__)

    async def beat_if_current(self, a: _Actor) -> None:
        """A woken worker that wrote nothing still shows it is alive: waking is its tick's action,
        and a live worker beats every tick. One already replaced has nothing to renew."""
        if a.token == (await self.state()).epoch:
            await a.worker.heartbeat()

    def rule_for(self, c: Consumer) -> Rule:
        if c.needs == "current":
            return StrictCurrent()
        if c.needs == "latest-accepted":
            return LatestAccepted()
        if c.needs == "latest-finished":
            return LatestFinished()
        return PinnedVersion(version=c.needs.removeprefix("version:"))

    async def consumers(self, st: WorkState) -> None:
        await self.consumer(st)
        for c in self.sc.consumers:
            got = self.extra.setdefault(c.name, {"start": None, "figure": None, "digest": None,
                                                 "required": None, "needs": c.needs})
            if got["start"] is not None or self.tick < c.ready_at:
                continue
            d = dependable(st, self.rule_for(c))
            if d is None:
                if self.tick == c.ready_at:
                    self.log("dependant", f"{c.name} is ready; nothing is dependable yet for what it "
                             f"needs ({c.needs}): it waits", lane=f"consumer:{c.name}",
                             mark="consumer-wait", rule=c.needs, version=st.current_version)
                continue
            want = (st.current_version if c.needs == "current"
                    else c.needs.removeprefix("version:") if c.needs.startswith("version:") else None)
            figure = self.figure_of(d.content, c)
            required = self.sc.figure(want, c) if want is not None else None
            got.update(start=self.tick, figure=figure, digest=short(d.digest), required=required)
            self.log("dependant", f"{c.name} ({c.needs}) admitted on {short(d.digest)}; it quotes "
                     f"{c.says(figure)}" + (f" (it needs {c.says(required)}, from {want})"
                                            if want is not None else ""),
                     lane=f"consumer:{c.name}", mark="consumer-start", digest=short(d.digest),
                     figure=figure, required=required, version=want, rule=c.needs)

    async def consumer(self, st: WorkState) -> None:
        c = self.sc.consumer
        if self.news_start is not None or self.tick < c.ready_at:
            return
        d = dependable(st, self.rule)
        if d is None:
            if self.tick == c.ready_at:
                self.log("dependant", f"{c.name} is ready; no digest is dependable under the "
                         f"{self.sw.rule} rule for input {st.current_version}: it waits",
                         lane=f"consumer:{c.name}", mark="consumer-wait", rule=self.sw.rule,
                         version=st.current_version)
            return
        self.news_start = self.tick
        self.news_digest = short(d.digest)
        self.news_figure = self.figure_of(d.content)
        assert st.current_version is not None
        self.news_required = self.sc.figure(st.current_version)
        self.log("dependant", f"{c.name} admitted on {short(d.digest)}; it quotes "
                 f"{c.says(self.news_figure)} (input {st.current_version} says "
                 f"{c.says(self.news_required)})", lane=f"consumer:{c.name}", mark="consumer-start",
                 digest=short(d.digest), figure=self.news_figure, required=self.news_required,
                 version=st.current_version, rule=self.sw.rule)

    async def controller(self) -> None:
        pending, self.pending_cands = self.pending_cands, []
        for digest, actor in pending:
            try:
                acc = await self.ctl.assess(self.work, digest, self.contract, self.assessor)
            except (VersionMismatch, StaleOwner, ContractFailed) as exc:
                self.refused.append((self.tick, actor.number, type(exc).__name__))
                self.log("artifact", f"controller refuses {short(digest)} from #{actor.number}: "
                         f"{exc.message}", lane="controller", mark="refuse", digest=short(digest),
                         attempt=actor.number, reason=type(exc).__name__)
                if actor.phase == "awaiting":
                    actor.phase = "stopped"
                elif actor.phase == "held" and actor.resume == "awaiting":
                    actor.resume = "stopped"         # it learns the verdict when it wakes
                st = await self.state()
                if st.current_attempt and st.current_attempt.number == actor.number:
                    await self.ctl.stop(self.work, actor.number)
                continue
            actor.accepted = digest
            st = await self.state()
            cand = st.candidate(digest)
            assert cand is not None
            self.accepted.append(AcceptedDigest(
                digest=short(digest), claimed_version=self.pins.get(cand.attempt),
                recorded_version=acc.version, tick=self.tick, attempt=cand.attempt,
                figure=self.figure_of(cand.content)))
            ver = f"for {acc.version}" if acc.version else "with no version recorded"
            self.log("artifact", f"controller accepts {short(digest)} {ver} under "
                     f"{self.contract.name}@{self.contract.version}", lane="controller",
                     mark="accept", digest=short(digest), attempt=cand.attempt, version=acc.version,
                     contract=f"{self.contract.name}@{self.contract.version}",
                     figure=self.figure_of(cand.content))
        for att in await self.supervisor.suspect():
            self.log("attempt", f"#{att.number} has missed {self.sc.missed_beats} heartbeats: "
                     "unknown — not failed and not finished", lane="controller", mark="unknown",
                     attempt=att.number)
        await self.supervisor.succeed()   # admits and dispatches to `admitted` when one is due

    async def admitted(self, assignment: Assignment) -> None:
        """Start the scripted worker of an attempt the supervisor just admitted."""
        st = await self.state()
        att = st.attempt(assignment.attempt)
        assert att is not None and att.token == assignment.token
        snapshot = self.sc.versions[att.pinned_version or self.sc.first_version]
        w = Worker(self.b, replace(att, secret=assignment.secret), snapshot,
                   persist="step" if self.sw.progress == "step" else "end",
                   clock=lambda: self.tick)
        await w.start()
        actor = _Actor(worker=w, number=att.number, token=att.token, version=att.pinned_version)
        self.actors.append(actor)
        self.pins[att.number] = att.pinned_version
        self.admissions.append((self.tick, att.number, att.token, att.pinned_version))
        self.log("attempt", f"controller admits #{att.number} with owner token {att.token}, "
                 f"pinned to input {att.pinned_version} {self.vhash(att.pinned_version)} — "
                 "written down before any work is dispatched", lane="controller", mark="admit",
                 attempt=att.number, token=att.token, version=att.pinned_version,
                 vhash=self.vhash(att.pinned_version))
        actor.to_settle = [e.op_key for e in w.open_effects()]
        for acc in reversed(st.acceptances):
            if not st.policy.pins or acc.version == actor.version:
                actor.inherited = acc.digest
                self.op_payload.setdefault(self.op_key(acc.digest), {
                    "announce": self.sc.title, "digest": short(acc.digest)})
                break
        for step in self.sc.steps:
            if w.can_restore(step, **{step: snapshot[step]}):
                await w.step(step, self.body(actor, step), **{step: snapshot[step]})
                actor.restored.append(step)
        if actor.restored:
            rest = [s for s in self.sc.steps if s not in actor.restored]
            self.log("journal", f"#{att.number} restores {', '.join(actor.restored)} from the "
                     f"journal" + (f"; must redo {', '.join(rest)}" if rest else ""),
                     lane=f"attempt:{att.number}", mark="restore", steps=list(actor.restored),
                     redo=rest)

    def sent_key_label(self, actor: _Actor, op_key: str) -> str | None:
        """The key the feed saw, as text (the operation key, a per-attempt key, or none)."""
        key = self.send_key(actor, op_key)
        return op_key if key is KEEP else key

    def send_key(self, actor: _Actor, op_key: str) -> Any:
        if self.sw.key == "operation":
            return KEEP
        if self.sw.key == "attempt":
            return f"{op_key}#attempt-{actor.number}"
        return None

    async def post(self, actor: _Actor, op_key: str) -> bool:
        """Send (or resend) the announcement; False if the poster died or fell silent."""
        payload = self.op_payload[op_key]
        sil = self.silent_here(actor, None, ("after-intent", "after-send"))

        async def send(key: str | None, body: Any) -> Receipt:
            if sil is not None and sil.point == "after-intent":
                await self.fall_silent_inside(
                    actor, sil, _CrashedInPost(f"#{actor.number} crashed {sil.point}", sil.point))
            self.post_attempts += 1
            dies = self.sw.dies == "yes" and self.post_attempts in self.sc.poster_dies_at

            def apply(p: Any) -> str:
                self.op_applied[op_key] = self.op_applied.get(op_key, 0) + 1
                return f"P{len(self.feed.applied) + 1}"

            receipt = self.feed.receive(key, body, apply)
            if _expired(receipt):
                # the feed had forgotten the key (its retention ended): it says so, and the
                # promise was only ever "once for as long as it keeps the key"
                self.op_applied[op_key] -= 1
                self.after_retention += 1
            if dies:
                raise PosterDied(f"#{actor.number} died after the feed applied {receipt.effect_id}")
            if sil is not None and sil.point == "after-send":
                await self.fall_silent_inside(
                    actor, sil, _CrashedInPost(f"#{actor.number} crashed {sil.point}", sil.point))
            return receipt

        st = await self.state()
        already = L.is_settled(st.effect(op_key))    # settled meanwhile: nothing sent or written
        replaced = actor.token < st.epoch and not already
        effect = actor.worker.effect(op_key, payload, send, send_key=self.send_key(actor, op_key))
        if sil is not None:
            if not await self.until_silent(actor, effect):
                # paused inside its post: the rest (send, record) happens when it wakes
                if replaced:
                    self.stale_landed += 1       # its intent landed with a stale token
                actor.phase, actor.resume = "held", actor.phase
                actor.held_post = op_key
                sent = "" if sil.point == "after-intent" else \
                    f"; the feed applies post P{len(self.feed.applied)}"
                self.log("effect", f"#{actor.number} records its intent to post{sent}; then "
                         f"#{actor.number} goes silent", lane=f"attempt:{actor.number}",
                         mark="silent", op_key=op_key, point=sil.point)
                return False
            assert actor.task is not None
            return await self.posted(actor, op_key, actor.task, intent_stale=replaced,
                                     confirm_stale=replaced, already=already)
        return await self.posted(actor, op_key, effect, intent_stale=replaced, confirm_stale=replaced,
                                 already=already)

    async def until_silent(self, actor: _Actor, work: Awaitable[Any]) -> bool:
        """Run ``work`` as the actor's task until it ends (True) or falls silent inside (False:
        the task stays held until the actor wakes)."""
        actor.entered.clear()
        actor.release.clear()
        actor.task = asyncio.ensure_future(work)
        entered = asyncio.ensure_future(actor.entered.wait())
        await asyncio.wait({actor.task, entered}, return_when=asyncio.FIRST_COMPLETED)
        if actor.task.done():
            entered.cancel()
            return True
        return False

    async def fall_silent_inside(self, actor: _Actor, sil: Silence, crash: BaseException) -> None:
        """Fall silent inside an action (a model call, a post): crashed, ``crash`` ends the attempt
        there; paused, it holds until the attempt wakes."""
        self.fired.add(sil)
        actor.silence = sil
        if self.sw.silent == "crashed":
            raise crash
        actor.entered.set()
        await actor.release.wait()

    async def posted(self, actor: _Actor, op_key: str, effect: Awaitable[Receipt], *,
                     intent_stale: bool, confirm_stale: bool, resumed: bool = False,
                     already: bool = False) -> bool:
        """Narrate a post's outcome: died, confirmed as new, or answered "already seen"."""
        try:
            receipt = await effect
        except PosterDied as exc:
            self.stale_landed += intent_stale    # its intent landed; it died before confirming
            actor.phase = "crashed" if isinstance(exc, _CrashedInPost) else "dead"
            sent = not (isinstance(exc, _CrashedInPost) and exc.point == "after-intent")
            self.log("effect", (f"#{actor.number} sends its post; " if resumed else
                                f"#{actor.number} records its intent to post; ")
                     + (f"the feed applies post P{len(self.feed.applied)}; " if sent else "")
                     + f"#{actor.number} dies before recording it",
                     lane=f"attempt:{actor.number}", mark="effect", op_key=op_key,
                     sent_key=self.sent_key_label(actor, op_key),
                     effect_id=f"P{len(self.feed.applied)}" if sent else None,
                     duplicate=False, confirmed=False, died=True)
            return False
        self.stale_landed += intent_stale + confirm_stale
        if already:
            self.log("effect", f"#{actor.number} goes to settle {op_key}; the ledger already holds "
                     f"its answer ({receipt.effect_id}, recorded by another attempt): nothing is "
                     "sent", lane=f"attempt:{actor.number}", mark="effect", op_key=op_key,
                     sent_key=None, effect_id=receipt.effect_id, duplicate=False, confirmed=True,
                     died=False, already=True)
        elif receipt.duplicate:
            self.log("effect", f"#{actor.number} resends with the same operation key; the feed "
                     f"answers \"already seen\" and returns {receipt.effect_id}; nothing new is "
                     f"posted; {receipt.effect_id} is recorded as confirmed",
                     lane=f"attempt:{actor.number}", mark="effect", op_key=op_key,
                     sent_key=self.sent_key_label(actor, op_key), effect_id=receipt.effect_id,
                     duplicate=True, confirmed=True, died=False)
        elif _expired(receipt):
            self.log("effect", f"#{actor.number} resends with the same operation key, but the feed "
                     f"no longer keeps it (retention {self.sc.retention} ticks): it applies "
                     f"{receipt.effect_id} as new and says so", lane=f"attempt:{actor.number}",
                     mark="effect", op_key=op_key, sent_key=self.sent_key_label(actor, op_key),
                     effect_id=receipt.effect_id, duplicate=False, confirmed=True, died=False,
                     expired=True)
        else:
            self.log("effect", f"#{actor.number} posts the announcement ({op_key}); the feed "
                     f"applies {receipt.effect_id}; confirmed", lane=f"attempt:{actor.number}",
                     mark="effect", op_key=op_key, sent_key=self.sent_key_label(actor, op_key),
                     effect_id=receipt.effect_id, duplicate=False, confirmed=True, died=False)
        self.confirmed_at = self.tick
        return True

    async def act(self, actor: _Actor, st: WorkState) -> None:
        """One action for one worker in this tick."""
        if actor.acted == self.tick:
            return
        if actor.phase == "starting":
            actor.phase = "work"
            return
        if actor.phase not in ("work", "awaiting"):
            return
        w = actor.worker
        wrote = False
        try:
            mine = self.latest_for(actor, st)
            if actor.to_settle:
                if not await self.post(actor, actor.to_settle.pop(0)):
                    return
                wrote = True
            elif mine is not None and not self.announced(st, mine):
                if not await self.post(actor, self.op_key(mine)):
                    return
                wrote = True
            elif mine is not None:
                pass
            elif actor.phase == "work":
                snapshot = self.sc.versions[actor.version or self.sc.first_version]
                todo = [s for s in self.sc.steps if s not in w.steps]
                if todo:
                    step = todo[0]
                    wrote = await self.compute(actor, step, snapshot[step])
                    if actor.phase != "work":
                        return
                elif actor.candidate is None:
                    replaced = actor.token < (await self.state()).epoch
                    # the digest is the sections' journaled summaries by step: the ledger
                    # checks the content against the journal (no assembly step, no extra write)
                    cand = await w.candidate(steps=self.sc.steps)
                    wrote = True
                    if replaced:
                        # the candidate, and with progress saved at the end the entries it carries
                        carried = [s for s in w.steps if s not in actor.restored]
                        self.stale_landed += 1 + (len(carried) if self.sw.progress == "end" else 0)
                    actor.candidate = cand
                    actor.phase = "awaiting"
                    self.pending_cands.append((cand.digest, actor))
                    self.op_payload[self.op_key(cand.digest)] = {
                        "announce": self.sc.title, "digest": short(cand.digest)}
                    stale = " with a stale token (fencing off): applied" if cand.stale else ""
                    self.log("artifact", f"#{actor.number} assembles candidate digest "
                             f"{short(cand.digest)} (for {cand.version or 'no recorded version'}, "
                             f"quoting {self.sc.consumer.says(self.figure_of(cand.content))}){stale}. "
                             "Finished; not yet accepted", lane=f"attempt:{actor.number}",
                             mark="candidate", digest=short(cand.digest), version=cand.version,
                             figure=self.figure_of(cand.content), stale=cand.stale)
                    sil = self.silent_here(actor, None)
                    if sil is not None:
                        self.hold(actor, sil, "awaiting")
                        how = "crashes" if actor.phase == "crashed" else "goes silent"
                        self.log("attempt", f"#{actor.number} {how} after submitting its candidate",
                                 lane=f"attempt:{actor.number}",
                                 mark="crash" if actor.phase == "crashed" else "silent")
                        return
            # only an attempt with a digest to announce can be done: only it reads the ledger again
            if self.latest_for(actor, st) is not None \
                    and self.complete_for(actor, await self.state()):
                await w.finish()
                actor.phase = "done"
                self.log("attempt", f"#{actor.number} finishes: its digest is accepted and "
                         "announced", lane=f"attempt:{actor.number}", mark="finish")
                return
            if not wrote:
                await w.heartbeat()
        except FencingError as exc:
            actor.phase = "stopped"
            self.late_rejected.append((self.tick, actor.number, type(exc).__name__))
            self.log("fencing", f"#{actor.number}'s write is rejected: {exc.message}; it stops",
                     lane=f"attempt:{actor.number}", mark="late-write", refused=True,
                     reason=type(exc).__name__)

    def latest_for(self, actor: _Actor, st: WorkState) -> str | None:
        """The accepted digest this attempt is responsible for announcing, if any."""
        return actor.accepted if actor.accepted is not None else actor.inherited

    def announced(self, st: WorkState, digest: str) -> bool:
        eff = st.effect(self.op_key(digest))
        return L.is_settled(eff)

    def complete_for(self, actor: _Actor, st: WorkState) -> bool:
        digest = self.latest_for(actor, st)
        return digest is not None and self.announced(st, digest) and not actor.to_settle

    async def compute(self, actor: _Actor, step: str, text: str) -> bool:
        """Run one model call; True if it wrote to the ledger."""
        w = actor.worker
        coro = w.step(step, self.body(actor, step), **{step: text})
        sil = self.silent_here(actor, step)
        if sil is not None and sil.point == "after-record":
            await coro
            rec = w.steps[step]
            self.truth[rec.result_id] = content_hash(text)
            actor.redone.append(step)
            self.hold(actor, sil, "work")
            how = "crashes" if actor.phase == "crashed" else "goes silent"
            self.log("attempt", f"#{actor.number} records {step} -> {short(rec.result_id)}, then {how}",
                     lane=f"attempt:{actor.number}",
                     mark="crash" if actor.phase == "crashed" else "silent", step=step)
            return self.sw.progress == "step"
        if sil is not None:
            if await self.until_silent(actor, coro):
                assert actor.task is not None
                exc = actor.task.exception()
                actor.phase = "crashed"
                made = "the model call is made" if sil.point == "after-call" else "before the model call"
                self.log("attempt", f"#{actor.number} starts {step} ({made}), "
                         f"then crashes: nothing is recorded ({type(exc).__name__})",
                         lane=f"attempt:{actor.number}", mark="crash", step=step)
                return False
            actor.phase = "held"
            made = "the model call is made" if sil.point == "after-call" else "before the model call"
            self.log("attempt", f"#{actor.number} starts {step} ({made}), then "
                     "goes silent. Nothing is recorded", lane=f"attempt:{actor.number}",
                     mark="silent", step=step)
            return False
        await coro
        rec = w.steps[step]
        self.truth[rec.result_id] = content_hash(text)
        actor.redone.append(step)
        how = "recorded" if self.sw.progress == "step" else "kept until the end of the attempt"
        st = await self.state() if self.sw.fencing == "off" else None
        stale = st is not None and actor.token < st.epoch
        if stale and self.sw.progress == "step":
            self.stale_landed += 1
        self.log("journal" if not stale else "fencing",
                 f"#{actor.number} summarises {step} from {actor.version} -> "
                 f"{short(rec.result_id)}, {how}" + (" with a stale token (fencing off)"
                                                      if stale and self.sw.progress == "step"
                                                      else ""),
                 lane=f"attempt:{actor.number}", mark="step", step=step, version=actor.version,
                 result=short(rec.result_id), saved=self.sw.progress == "step",
                 stale=stale and self.sw.progress == "step")
        return self.sw.progress == "step"

    # -- the run ----------------------------------------------------------------------------------
    async def run(self) -> RunSummary:
        sc, sw = self.sc, self.sw
        policy = Policy(fencing=sw.fencing == "on", pins=sw.pins == "on")
        await self.ctl.open_work(self.work, policy, epoch_floor=sc.epoch_floor)
        await self.ctl.publish(self.work, sc.first_version, sc.versions[sc.first_version])
        finished = False
        try:
            for tick in range(sc.max_ticks + 1):
                self.tick = tick
                if tick in self.schedule:
                    await self.publish(self.schedule[tick])
                await self.wake()
                await self.consumers(await self.state())
                await self.controller()
                for actor in list(self.actors):
                    await self.act(actor, await self.state())
                if await self.done():
                    finished = True
                    break
        finally:
            for a in self.actors:
                if a.task is not None and not a.task.done():
                    a.release.set()
                    a.task.cancel()
                    try:
                        await a.task
                    except BaseException:
                        pass
        return await self.summary(finished)

    async def publish(self, version: str) -> None:
        sc = self.sc
        previous = (await self.state()).current_version or sc.first_version
        await self.ctl.publish(self.work, version, sc.versions[version])
        old, new = sc.versions[previous], sc.versions[version]
        changed = [p for p in sc.steps if old.get(p) != new.get(p)]
        self.log("input", f"input {version} {self.vhash(version)} "
                 f"arrives: {', '.join(changed) or 'no part'} changed; "
                 f"{sc.consumer.name}'s figure {sc.consumer.says(sc.figure(previous))}"
                 f" -> {sc.consumer.says(sc.figure(version))}",
                 lane="input", mark="input", version=version,
                 vhash=self.vhash(version), figure=sc.figure(version), previous=previous)

    async def done(self) -> bool:
        live = any(a.phase in ("starting", "work", "awaiting") for a in self.actors)
        held = self.sw.silent == "paused" and any(
            a.phase == "held" and a.silence is not None and self.tick < a.silence.wake_at
            for a in self.actors)
        future = any(t > self.tick for t in self.schedule) or held or \
            self.tick < max([self.sc.consumer.ready_at, *(c.ready_at for c in self.sc.consumers)])
        if live or future or self.news_start is None or self.pending_cands:
            return False          # decided by what this process knows: the ledger is not read
        return self.complete(await self.state())

    async def summary(self, finished: bool) -> RunSummary:
        st = await self.b.inner.load(self.work)    # judged on what the engine holds now, unread
        assert st is not None
        sc = self.sc
        assert st.current_version is not None
        invariants = judge(st, Observations(
            truth=dict(self.truth), pins=dict(self.pins), stale_landed=self.stale_landed,
            op_applied=dict(self.op_applied), consumer_started=self.news_start is not None,
            consumer_figure=self.news_figure, consumer_required=self.news_required,
            consumers={k: dict(v) for k, v in self.extra.items()},
        ), sc, announced=self.announced)
        return RunSummary(
            scenario=sc.name, switches=self.sw.as_dict(), model_calls=self.calls,
            posts=len(self.feed.applied), stale_writes_applied=st.stale_writes_applied,
            accepted=tuple(self.accepted), refused=tuple(self.refused),
            late_writes_rejected=tuple(self.late_rejected), admissions=tuple(self.admissions),
            restored={str(a.number): tuple(a.restored) for a in self.actors},
            redone={str(a.number): tuple(a.redone) for a in self.actors},
            first_acceptance_tick=self.accepted[0].tick if self.accepted else None,
            final_acceptance_tick=self.accepted[-1].tick if self.accepted else None,
            announcement_confirmed_at=self.confirmed_at, newsletter_start=self.news_start,
            newsletter_figure=self.news_figure, newsletter_digest=self.news_digest,
            required_figure=self.news_required, invariants=invariants, ended_at=self.tick,
            finished=finished, trace=tuple(self.trace), consumer_name=sc.consumer.name,
            figure_unit=sc.consumer.unit, consumers={k: dict(v) for k, v in self.extra.items()},
            applied_after_retention=self.after_retention, stale_writes_seen=self.stale_landed,
        )


async def run_scenario(backend: Backend, scenario: Scenario, switches: Switches | None = None, *,
                       work_id: str | None = None, trace: bool = True) -> RunSummary:
    """Run ``scenario`` under ``switches`` (default: the file's main run) on ``backend``.

    ``work_id`` defaults to the scenario's; give distinct ids to share one backend across runs.
    """
    sw = switches or scenario.defaults
    wid = work_id or scenario.work_id
    # A run judges a story from its first tick: carrying on an existing work would mix two
    # stories' records and report misleading outcomes, so it is refused before anything is written.
    if await backend.load(wid) is not None:
        raise ScenarioError(
            f"{scenario.source}: work {wid!r} already exists on {backend.url}; a scenario run needs "
            "a fresh work (give another work id, or a fresh backend)",
            file=scenario.source, field="work_id", value=wid,
        )
    return await _Run(backend, scenario, sw, wid, trace).run()


_ = outlive  # re-exported names above come from the public package
