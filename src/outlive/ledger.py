"""The pure ledger: ``apply(state, command) -> (state, outcome)`` or a typed rejection.

No I/O, no clocks, no randomness: the same code runs inside a Temporal workflow, a Restate
virtual-object handler or a SQL transaction, and gives the same answer. Every protection the
article describes lives here exactly once: fencing by owner epoch, restore-vs-redo by input key,
the part-hash and version check before acceptance, and operation-keyed effect intents. A rejected
command raises and leaves ``state`` untouched, so an adapter that persists only returned states
can never half-write.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Union

from . import errors as E
from .hashing import canonical, content_hash, input_key
from .records import (
    Acceptance,
    Attempt,
    AttemptState,
    Candidate,
    Contract,
    Effect,
    EffectState,
    InputVersion,
    JournalEntry,
    Part,
    Policy,
    Receipt,
    WorkState,
)

__all__ = [
    "COMMANDS",
    "LEASED_STATES",
    "LIVE_STATES",
    "MAX_PAYLOAD_BYTES",
    "Accept",
    "Admit",
    "Command",
    "ConfirmEffect",
    "Finish",
    "Heartbeat",
    "MarkStopped",
    "MarkUnknown",
    "OpenWork",
    "Outcome",
    "PublishInput",
    "RecordIntent",
    "RecordSteps",
    "Resume",
    "StepWrite",
    "SubmitCandidate",
    "Wait",
    "accepted",
    "apply",
    "candidate_digest",
    "changed",
    "check_acceptable",
    "check_size",
    "is_command",
    "is_leased",
    "is_live",
    "reads",
    "result_id",
]

#: Largest result, candidate content or effect payload a record may carry (canonical bytes).
#: Engines cap payloads (Temporal: 2 MB per payload); bigger things go by reference.
MAX_PAYLOAD_BYTES = 256 * 1024

#: Attempt states that hold the work: a successor cannot be admitted while the current attempt
#: is in one of these.
LIVE_STATES: frozenset[AttemptState] = frozenset(
    {AttemptState.ADMITTED, AttemptState.RUNNING, AttemptState.WAITING})
#: Live states whose lease the controller watches: ``waiting`` holds the work but is not silence.
LEASED_STATES: frozenset[AttemptState] = frozenset({AttemptState.ADMITTED, AttemptState.RUNNING})
_LIVE = LIVE_STATES


# -- commands ----------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class OpenWork:
    """Create the work's ledger (idempotent with the same policy)."""

    policy: Policy = field(default_factory=Policy)
    #: The first token issued is ``epoch_floor + 1``: continue an epoch kept elsewhere.
    epoch_floor: int = 0


@dataclass(frozen=True, kw_only=True)
class PublishInput:
    """A new input version; it becomes current. Versions are immutable."""

    version: str
    parts: dict[str, str]
    at: int


@dataclass(frozen=True, kw_only=True)
class Admit:
    """Write the attempt record and publish the new epoch, in one step, before dispatch."""

    at: int
    pin: str | None = None
    request_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class Heartbeat:
    attempt: int
    token: int
    at: int


@dataclass(frozen=True, kw_only=True)
class MarkUnknown:
    """Silence: the attempt missed its heartbeats. Its open effect intents become ambiguous."""

    attempt: int
    at: int


@dataclass(frozen=True, kw_only=True)
class Wait:
    """The owner waits on a person or an outside event: ``waiting``, which is not silence."""

    attempt: int
    token: int
    reason: str
    at: int


@dataclass(frozen=True, kw_only=True)
class Resume:
    """The wait is over: the attempt is ``running`` again (any fenced write also resumes it)."""

    attempt: int
    token: int
    at: int


@dataclass(frozen=True, kw_only=True)
class MarkStopped:
    attempt: int
    at: int


@dataclass(frozen=True, kw_only=True)
class StepWrite:
    step: str
    sources: dict[str, str]
    input_key: str
    result: Any
    result_id: str


@dataclass(frozen=True, kw_only=True)
class RecordSteps:
    """Journal one step (per-step persistence) or several (an end-of-attempt flush)."""

    attempt: int
    token: int
    entries: tuple[StepWrite, ...]
    at: int


@dataclass(frozen=True, kw_only=True)
class SubmitCandidate:
    """A finished candidate; ``flush`` carries unsaved journal entries in the same atomic write."""

    attempt: int
    token: int
    digest: str
    parts: tuple[Part, ...]
    content: Any
    at: int
    flush: tuple[StepWrite, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Accept:
    """The controller's judgement: mechanical checks here, the assessor's ``verdict`` recorded."""

    digest: str
    contract: Contract
    verdict: bool
    at: int
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class RecordIntent:
    attempt: int
    token: int
    op_key: str
    payload_digest: str
    sent_key: str | None
    at: int


@dataclass(frozen=True, kw_only=True)
class ConfirmEffect:
    attempt: int
    token: int
    op_key: str
    receipt: Receipt
    at: int


@dataclass(frozen=True, kw_only=True)
class Finish:
    attempt: int
    token: int
    at: int


Command = Union[
    OpenWork, PublishInput, Admit, Heartbeat, MarkUnknown, MarkStopped, RecordSteps,
    SubmitCandidate, Accept, RecordIntent, ConfirmEffect, Finish, Wait, Resume,
]


#: Every command :func:`apply` understands. Adapters that decode commands check against this
#: (through :func:`is_command`) instead of keeping their own list.
COMMANDS: tuple[type, ...] = (
    OpenWork, PublishInput, Admit, Heartbeat, MarkUnknown, MarkStopped, RecordSteps,
    SubmitCandidate, Accept, RecordIntent, ConfirmEffect, Finish, Wait, Resume,
)


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What a command did. ``record`` is the record written or found (None for pure updates)."""

    kind: str
    record: Any = None
    seq: int = 0


# -- derived identifiers -----------------------------------------------------------------------
def result_id(work_id: str, step: str, key: str, attempt: int) -> str:
    """A result's id is derived from the attempt that computed it: a rerun is a new result.

    Ids are scoped to their work (the work id is not hashed), so the same run gives the same ids
    on every backend and under any namespace.
    """
    del work_id
    return content_hash({"step": step, "key": key, "attempt": attempt})


def candidate_digest(work_id: str, version: str | None, parts: tuple[Part, ...], content: Any) -> str:
    del work_id
    return content_hash(
        {
            "version": version,
            "parts": [[p.step, p.result_id] for p in parts],
            "content": content,
        }
    )


# -- published answers ---------------------------------------------------------------------------
# Controller, worker, stores and adapters ask these instead of re-deriving the rules: a copy of a
# rule is a second rule waiting to disagree.
def is_command(value: object) -> bool:
    """Whether ``value`` is a ledger command (an instance of one of :data:`COMMANDS`)."""
    return isinstance(value, COMMANDS)


def reads(state: WorkState | None, cmd: Command) -> frozenset[str]:
    """The result ids of the journal entries :func:`apply` looks at for ``cmd``.

    A store that loads only part of the journal must give ``apply`` at least these entries (the
    rest of the state it reads is outside the journal). Entries absent from the journal are
    simply not found, exactly as with the whole journal.
    """
    del state  # no command reads journal entries that only the state could name
    if isinstance(cmd, RecordSteps):
        return frozenset(w.result_id for w in cmd.entries)
    if isinstance(cmd, SubmitCandidate):
        return frozenset([*(w.result_id for w in cmd.flush), *(p.result_id for p in cmd.parts)])
    return frozenset()


def is_live(attempt: Attempt | None) -> bool:
    """Whether ``attempt`` still holds the work (admitted, running or waiting)."""
    return attempt is not None and attempt.state in LIVE_STATES


def is_leased(attempt: Attempt | None) -> bool:
    """Whether ``attempt``'s silence is suspicious (admitted or running; waiting is not)."""
    return attempt is not None and attempt.state in LEASED_STATES


def changed(before: WorkState | None, after: WorkState) -> bool:
    """Whether applying a command changed the state (so a store must write ``after``).

    ``apply`` returns the very state it was given when nothing changed (and every change moves
    ``seq``). A work that did not exist before always changed: it was just opened.
    """
    return before is None or after is not before


def check_size(value: Any, what: str) -> int:
    """Raise :class:`~outlive.errors.PayloadTooLarge` if ``value`` is over the limit; its size."""
    n = len(canonical(value))
    if n > MAX_PAYLOAD_BYTES:
        raise E.PayloadTooLarge(
            f"{what} is {n} bytes; the limit is {MAX_PAYLOAD_BYTES} bytes: store a reference",
            size=n, limit=MAX_PAYLOAD_BYTES,
        )
    return n


def accepted(state: WorkState, digest: str, contract: Contract) -> Acceptance | None:
    """The acceptance already recorded for ``digest`` under ``contract``, if any.

    Judging the same digest again under the same contract is idempotent: whoever asks (a
    controller retrying after a crash, a successor's controller) gets the recorded acceptance.
    """
    cand = state.candidate(digest)
    if cand is None:
        return None
    for a in state.acceptances:
        if a.digest == cand.digest and a.contract == contract and a.version == cand.version:
            return a
    return None


# -- helpers -----------------------------------------------------------------------------------
def _size(value: Any, what: str) -> None:
    check_size(value, what)


def _fence(state: WorkState, attempt_no: int, token: int) -> tuple[Attempt, bool]:
    """Check the write's owner token. Returns the attempt and whether the write is stale."""
    att = state.attempt(attempt_no)
    if att is None or att.token != token or token > state.epoch or token <= 0:
        raise E.UnknownToken(
            f"token {token} was never issued to attempt #{attempt_no} of {state.work_id}",
            token=token, attempt=attempt_no, epoch=state.epoch,
        )
    if token < state.epoch:
        if state.policy.fencing:
            raise E.StaleOwner(
                f"attempt #{attempt_no} holds token {token}, but the epoch is {state.epoch}",
                token=token, attempt=attempt_no, epoch=state.epoch,
            )
        return att, True
    return att, False


def _replace_attempt(state: WorkState, att: Attempt) -> tuple[Attempt, ...]:
    return tuple(att if a.number == att.number else a for a in state.attempts)


def _touch(state: WorkState, att: Attempt, at: int) -> tuple[Attempt, ...]:
    """A write is also a sign of life."""
    if att.state in _LIVE:
        att = replace(att, state=AttemptState.RUNNING, last_heartbeat=max(att.last_heartbeat, at),
                      waiting_for=None)
        return _replace_attempt(state, att)
    return state.attempts


def _check_sources(state: WorkState, att: Attempt, w: StepWrite) -> None:
    if not w.step or not isinstance(w.step, str):
        raise E.InvalidRecord("a step needs a non-empty name", field="step")
    if input_key(w.step, w.sources) != w.input_key:
        raise E.UndeclaredInput(
            f"step {w.step!r}: its input key is not the hash of its declared inputs",
            step=w.step,
        )
    _size(w.result, f"result of step {w.step!r}")
    if state.policy.pins and att.pinned_version is not None:
        v = state.version(att.pinned_version)
        assert v is not None
        for name, h in w.sources.items():
            if name in v.parts and v.parts[name] != h:
                raise E.VersionMismatch(
                    f"step {w.step!r} read part {name!r} at {h[:8]}, "
                    f"but version {v.version} has {v.parts[name][:8]}",
                    step=w.step, part=name, version=v.version,
                )


def _journal(state: WorkState, att: Attempt, token: int, stale: bool,
             writes: tuple[StepWrite, ...]) -> tuple[tuple[JournalEntry, ...], int, int]:
    journal = list(state.journal)
    seq = state.seq
    added = 0
    for w in writes:
        _check_sources(state, att, w)
        if any(e.result_id == w.result_id for e in journal):
            continue  # a retried write: already journaled
        seq += 1
        added += 1
        journal.append(
            JournalEntry(
                step=w.step,
                input_key=w.input_key if state.policy.pins else None,
                sources=dict(w.sources) if state.policy.pins else {},
                result=w.result, result_id=w.result_id, attempt=att.number, token=token,
                seq=seq, stale=stale,
            )
        )
    return tuple(journal), seq, added


# -- apply -------------------------------------------------------------------------------------
def apply(state: WorkState | None, cmd: Command, *, work_id: str | None = None) -> tuple[WorkState, Outcome]:
    """Apply ``cmd``; return the new state and outcome, or raise a :class:`~outlive.errors.Rejected`.

    ``state`` is None only for :class:`OpenWork` on a work that does not exist yet.
    """
    if isinstance(cmd, OpenWork):
        if state is None:
            if not work_id:
                raise E.InvalidRecord("open_work needs a work id", field="work_id")
            if cmd.epoch_floor < 0:
                raise E.InvalidRecord("epoch_floor cannot be negative", field="epoch_floor")
            new = WorkState(work_id=work_id, policy=cmd.policy, epoch=cmd.epoch_floor)
            return new, Outcome(kind="opened", record=new.policy)
        if state.policy != cmd.policy:
            raise E.WorkExists(f"{state.work_id} is open with {state.policy}", work_id=state.work_id)
        return state, Outcome(kind="exists", record=state.policy, seq=state.seq)
    if state is None:
        raise E.NotFound(f"work {work_id!r} is not open", work_id=work_id)
    handler = _HANDLERS.get(type(cmd)) if is_command(cmd) else None
    if handler is None:
        raise E.InvalidRecord(f"unknown command {type(cmd).__name__}")
    new, outcome = handler(state, cmd)
    if new is not state and new.seq == state.seq:
        new = replace(new, seq=state.seq + 1)  # every change moves seq: caches key on it
    return new, outcome


def _publish(state: WorkState, cmd: PublishInput) -> tuple[WorkState, Outcome]:
    if not cmd.version or not cmd.parts:
        raise E.InvalidRecord("an input version needs a name and at least one part", field="version")
    old = state.version(cmd.version)
    if old is not None:
        if old.parts != cmd.parts:
            raise E.InputConflict(f"version {cmd.version} was published with other content",
                                  version=cmd.version)
        return state, Outcome(kind="exists", record=old, seq=state.seq)
    seq = state.seq + 1
    v = InputVersion(version=cmd.version, parts=dict(cmd.parts), seq=seq, at=cmd.at)
    new = replace(state, inputs=(*state.inputs, v), current_version=v.version, seq=seq)
    return new, Outcome(kind="published", record=v, seq=seq)


def _admit(state: WorkState, cmd: Admit) -> tuple[WorkState, Outcome]:
    cur = state.current_attempt
    if cur is not None and cmd.request_id is not None and cur.state in _LIVE:
        if cur.request_id == cmd.request_id:
            return state, Outcome(kind="exists", record=cur, seq=state.seq)
    if cur is not None and cur.state in _LIVE:
        raise E.AttemptActive(
            f"attempt #{cur.number} is {cur.state.value}; mark it unknown or finished first",
            attempt=cur.number,
        )
    pin = cmd.pin if cmd.pin is not None else state.current_version
    if pin is None:
        raise E.NotFound("no input version is published yet", work_id=state.work_id)
    if state.version(pin) is None:
        raise E.NotFound(f"version {pin!r} was never published", version=pin)
    epoch = state.epoch + 1
    seq = state.seq + 1
    att = Attempt(
        work_id=state.work_id, number=len(state.attempts) + 1, token=epoch, pinned_version=pin,
        state=AttemptState.ADMITTED, admitted_at=cmd.at, last_heartbeat=cmd.at,
        request_id=cmd.request_id,
    )
    new = replace(state, epoch=epoch, seq=seq, attempts=(*state.attempts, att))
    return new, Outcome(kind="admitted", record=att, seq=seq)


def _heartbeat(state: WorkState, cmd: Heartbeat) -> tuple[WorkState, Outcome]:
    """A liveness signal, not a protected write: a replaced owner's beat is dropped, not refused.

    Correctness never depends on a worker learning early that it was replaced; the fenced
    writes stop it. The outcome ``superseded`` lets a worker that reads replies stop sooner.
    """
    known = state.attempt(cmd.attempt)
    if known is not None and known.token == cmd.token and 0 < cmd.token < state.epoch:
        return state, Outcome(kind="superseded", record=known, seq=state.seq)
    att, _stale = _fence(state, cmd.attempt, cmd.token)   # forged tokens still raise
    if att.state not in _LIVE:
        return state, Outcome(kind="ignored", record=att, seq=state.seq)
    # A beat while waiting keeps the attempt waiting: only a write or Resume ends the wait.
    state_after = AttemptState.WAITING if att.state is AttemptState.WAITING else AttemptState.RUNNING
    att = replace(att, state=state_after, last_heartbeat=max(att.last_heartbeat, cmd.at),
                  heartbeats=att.heartbeats + 1)
    seq = state.seq + 1
    new = replace(state, attempts=_replace_attempt(state, att), seq=seq)
    return new, Outcome(kind="beat", record=att, seq=seq)


def _unknown(state: WorkState, cmd: MarkUnknown) -> tuple[WorkState, Outcome]:
    att = state.attempt(cmd.attempt)
    if att is None:
        raise E.NotFound(f"attempt #{cmd.attempt} does not exist", attempt=cmd.attempt)
    if not is_leased(att):
        return state, Outcome(kind="unchanged", record=att, seq=state.seq)   # waiting is not silence
    att = replace(att, state=AttemptState.UNKNOWN)
    effects = tuple(
        replace(e, state=EffectState.AMBIGUOUS)
        if e.attempt == att.number and e.state is EffectState.INTENDED else e
        for e in state.effects
    )
    seq = state.seq + 1
    new = replace(state, attempts=_replace_attempt(state, att), effects=effects, seq=seq)
    return new, Outcome(kind="unknown", record=att, seq=seq)


def _stopped(state: WorkState, cmd: MarkStopped) -> tuple[WorkState, Outcome]:
    att = state.attempt(cmd.attempt)
    if att is None:
        raise E.NotFound(f"attempt #{cmd.attempt} does not exist", attempt=cmd.attempt)
    if att.state is AttemptState.FINISHED:
        return state, Outcome(kind="unchanged", record=att, seq=state.seq)
    att = replace(att, state=AttemptState.STOPPED)
    seq = state.seq + 1
    return replace(state, attempts=_replace_attempt(state, att), seq=seq), Outcome(
        kind="stopped", record=att, seq=seq)


def _record(state: WorkState, cmd: RecordSteps) -> tuple[WorkState, Outcome]:
    att, stale = _fence(state, cmd.attempt, cmd.token)
    if not cmd.entries:
        raise E.InvalidRecord("record_steps needs at least one entry", field="entries")
    journal, seq, added = _journal(state, att, cmd.token, stale, cmd.entries)
    new = replace(state, journal=journal, seq=seq, attempts=_touch(state, att, cmd.at),
                  stale_writes_applied=state.stale_writes_applied + (added if stale else 0))
    return new, Outcome(kind="journaled", record=journal[-1], seq=seq)


def _submit(state: WorkState, cmd: SubmitCandidate) -> tuple[WorkState, Outcome]:
    att, stale = _fence(state, cmd.attempt, cmd.token)
    _size(cmd.content, "candidate content")
    if not cmd.parts:
        raise E.InvalidRecord("a candidate needs at least one part", field="parts")
    version = att.pinned_version if state.policy.pins else None
    expect = candidate_digest(state.work_id, version, cmd.parts, cmd.content)
    if expect != cmd.digest:
        raise E.InvalidRecord("the candidate's digest is not the hash of its parts and content",
                              field="digest")
    journal, seq, added = _journal(state, att, cmd.token, stale, cmd.flush)
    known = {e.result_id for e in journal}
    for p in cmd.parts:
        if p.result_id not in known:
            raise E.InvalidRecord(f"part {p.step!r} names a result that is not journaled",
                                  field="parts", step=p.step)
    existing = state.candidate(cmd.digest)
    if existing is not None and (existing.attempt == att.number or stale
                                 or any(a.digest == cmd.digest for a in state.acceptances)):
        return state, Outcome(kind="exists", record=existing, seq=state.seq)
    # A successor that rebuilt the same digest (every part restored) submits it as its own: the
    # predecessor's record carries a replaced token and could never be accepted.
    seq += 1
    parts = cmd.parts if state.policy.pins else tuple(
        replace(p, input_key=None, sources={}) for p in cmd.parts)
    cand = Candidate(
        digest=cmd.digest, work_id=state.work_id, version=version, parts=parts,
        content=cmd.content, attempt=att.number, token=cmd.token, seq=seq, at=cmd.at, stale=stale,
    )
    new = replace(
        state, journal=journal, candidates=(*state.candidates, cand), seq=seq,
        attempts=_touch(state, att, cmd.at),
        stale_writes_applied=state.stale_writes_applied + ((added + 1) if stale else 0),
    )
    return new, Outcome(kind="candidate", record=cand, seq=seq)


def check_acceptable(state: WorkState, digest: str) -> Candidate:
    """The mechanical checks before any assessor runs: owner, version, part hashes."""
    cand = state.candidate(digest)
    if cand is None:
        raise E.NotFound(f"no candidate {digest[:8]}", digest=digest)
    if state.policy.fencing and cand.token != state.epoch:
        raise E.StaleOwner(
            f"candidate {cand.digest[:8]} came from attempt #{cand.attempt} (token {cand.token}); "
            f"the epoch is {state.epoch}",
            token=cand.token, epoch=state.epoch, digest=cand.digest,
        )
    if state.policy.pins:
        if cand.version != state.current_version:
            raise E.VersionMismatch(
                f"candidate {cand.digest[:8]} was built for {cand.version}; "
                f"the current version is {state.current_version}",
                digest=cand.digest, version=cand.version, current=state.current_version,
            )
        v = state.version(cand.version) if cand.version else None
        if v is None:
            raise E.VersionMismatch(f"candidate {cand.digest[:8]} names no published version",
                                    digest=cand.digest)
        for p in cand.parts:
            for name, h in p.sources.items():
                if name in v.parts and v.parts[name] != h:
                    raise E.VersionMismatch(
                        f"part {p.step!r} of {cand.digest[:8]} was computed from {name}@{h[:8]}, "
                        f"not from version {v.version}",
                        digest=cand.digest, part=name, version=v.version,
                    )
    return cand


def _accept(state: WorkState, cmd: Accept) -> tuple[WorkState, Outcome]:
    cand = state.candidate(cmd.digest)
    if cand is None:
        raise E.NotFound(f"no candidate {cmd.digest[:8]}", digest=cmd.digest)
    done = accepted(state, cmd.digest, cmd.contract)
    if done is not None:
        return state, Outcome(kind="exists", record=done, seq=state.seq)
    check_acceptable(state, cmd.digest)
    if not cmd.verdict:
        raise E.ContractFailed(
            f"{cmd.contract.name}@{cmd.contract.version} refused {cand.digest[:8]}: {cmd.reason}",
            digest=cand.digest, contract=cmd.contract.name, reason=cmd.reason,
        )
    seq = state.seq + 1
    acc = Acceptance(digest=cand.digest, version=cand.version, contract=cmd.contract, seq=seq,
                     at=cmd.at, attempt=cand.attempt, note=cmd.reason)
    new = replace(state, acceptances=(*state.acceptances, acc), seq=seq)
    return new, Outcome(kind="accepted", record=acc, seq=seq)


def _intent(state: WorkState, cmd: RecordIntent) -> tuple[WorkState, Outcome]:
    att, stale = _fence(state, cmd.attempt, cmd.token)
    if not cmd.op_key:
        raise E.InvalidRecord("an effect needs an operation key", field="op_key")
    old = state.effect(cmd.op_key)
    if old is not None:
        if old.payload_digest != cmd.payload_digest:
            raise E.InvalidRecord(
                f"operation {cmd.op_key!r} was intended with another payload",
                field="payload", op_key=cmd.op_key,
            )
        if old.state is EffectState.CONFIRMED:
            return state, Outcome(kind="confirmed", record=old, seq=state.seq)
        upd = replace(old, attempt=att.number, sent_key=cmd.sent_key, sends=old.sends + 1,
                      state=EffectState.INTENDED)
        seq = state.seq + 1
        effects = tuple(upd if e.op_key == cmd.op_key else e for e in state.effects)
        new = replace(state, effects=effects, seq=seq, attempts=_touch(state, att, cmd.at),
                      stale_writes_applied=state.stale_writes_applied + (1 if stale else 0))
        return new, Outcome(kind="settle", record=upd, seq=seq)
    seq = state.seq + 1
    eff = Effect(op_key=cmd.op_key, payload_digest=cmd.payload_digest, state=EffectState.INTENDED,
                 attempt=att.number, sent_key=cmd.sent_key, intended_at=cmd.at)
    new = replace(state, effects=(*state.effects, eff), seq=seq,
                  attempts=_touch(state, att, cmd.at),
                  stale_writes_applied=state.stale_writes_applied + (1 if stale else 0))
    return new, Outcome(kind="intended", record=eff, seq=seq)


def _confirm(state: WorkState, cmd: ConfirmEffect) -> tuple[WorkState, Outcome]:
    att, stale = _fence(state, cmd.attempt, cmd.token)
    old = state.effect(cmd.op_key)
    if old is None:
        raise E.NotFound(f"no intent for {cmd.op_key!r}: record the intent before sending",
                         op_key=cmd.op_key)
    if old.state is EffectState.CONFIRMED:
        return state, Outcome(kind="confirmed", record=old, seq=state.seq)
    upd = replace(old, state=EffectState.CONFIRMED, receipt=cmd.receipt, confirmed_at=cmd.at,
                  attempt=att.number)
    seq = state.seq + 1
    effects = tuple(upd if e.op_key == cmd.op_key else e for e in state.effects)
    new = replace(state, effects=effects, seq=seq, attempts=_touch(state, att, cmd.at),
                  stale_writes_applied=state.stale_writes_applied + (1 if stale else 0))
    return new, Outcome(kind="confirmed", record=upd, seq=seq)


def _finish(state: WorkState, cmd: Finish) -> tuple[WorkState, Outcome]:
    att, _stale = _fence(state, cmd.attempt, cmd.token)
    if att.state is AttemptState.FINISHED:
        return state, Outcome(kind="unchanged", record=att, seq=state.seq)
    att = replace(att, state=AttemptState.FINISHED, last_heartbeat=max(att.last_heartbeat, cmd.at))
    seq = state.seq + 1
    return replace(state, attempts=_replace_attempt(state, att), seq=seq), Outcome(
        kind="finished", record=att, seq=seq)


def _wait(state: WorkState, cmd: Wait) -> tuple[WorkState, Outcome]:
    att, _stale = _fence(state, cmd.attempt, cmd.token)
    if not cmd.reason:
        raise E.InvalidRecord("a wait says what it waits for", field="reason")
    if att.state not in _LIVE:
        return state, Outcome(kind="ignored", record=att, seq=state.seq)
    att = replace(att, state=AttemptState.WAITING, waiting_for=cmd.reason,
                  last_heartbeat=max(att.last_heartbeat, cmd.at))
    seq = state.seq + 1
    return replace(state, attempts=_replace_attempt(state, att), seq=seq), Outcome(
        kind="waiting", record=att, seq=seq)


def _resume(state: WorkState, cmd: Resume) -> tuple[WorkState, Outcome]:
    att, _stale = _fence(state, cmd.attempt, cmd.token)
    if att.state is not AttemptState.WAITING:
        return state, Outcome(kind="unchanged", record=att, seq=state.seq)
    att = replace(att, state=AttemptState.RUNNING, waiting_for=None,
                  last_heartbeat=max(att.last_heartbeat, cmd.at))
    seq = state.seq + 1
    return replace(state, attempts=_replace_attempt(state, att), seq=seq), Outcome(
        kind="resumed", record=att, seq=seq)


_HANDLERS: dict[type, Any] = {
    PublishInput: _publish,
    Admit: _admit,
    Heartbeat: _heartbeat,
    MarkUnknown: _unknown,
    MarkStopped: _stopped,
    RecordSteps: _record,
    SubmitCandidate: _submit,
    Accept: _accept,
    RecordIntent: _intent,
    ConfirmEffect: _confirm,
    Finish: _finish,
    Wait: _wait,
    Resume: _resume,
}
