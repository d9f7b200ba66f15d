"""The five durable records, as frozen values.

Every record is immutable: a change is a new ledger state, never an edit in place. Acceptances in
particular are append-only: a later acceptance supersedes an earlier one, none is ever withdrawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ._clone import quick_init

__all__ = [
    "Acceptance",
    "Attempt",
    "AttemptError",
    "AttemptState",
    "Candidate",
    "Contract",
    "Effect",
    "EffectState",
    "InputVersion",
    "JournalEntry",
    "JournalIndex",
    "Part",
    "Policy",
    "Receipt",
    "Refusal",
    "WorkState",
]

JSON = Any


class AttemptState(StrEnum):
    """``unknown`` is its own state: silence is never ``finished`` and never failed.

    ``waiting`` is not silence either: the attempt waits on a person or an outside event (an
    interrupt, an awakeable, a signal) and says what for; nobody suspects it while it waits.
    """

    ADMITTED = "admitted"
    RUNNING = "running"
    WAITING = "waiting"
    UNKNOWN = "unknown"
    FINISHED = "finished"
    STOPPED = "stopped"
    #: The attempt's own code raised and said so (an answer, not silence): the error is kept
    #: with the attempt, and the kind's retry policy decides what comes next.
    FAILED = "failed"


class EffectState(StrEnum):
    """``possibly_duplicated``: confirmed, but the receiver had forgotten the key (its retention
    window had passed), so the effect may have been applied twice."""

    INTENDED = "intended"
    CONFIRMED = "confirmed"
    AMBIGUOUS = "ambiguous"
    POSSIBLY_DUPLICATED = "possibly_duplicated"


@dataclass(frozen=True, kw_only=True)
class Policy:
    """Which protections a work runs with.

    Both default on. Turning one off exists to *show* what breaks (the conformance sweep does);
    production code should never do it.
    """

    fencing: bool = True
    pins: bool = True
    #: Steps every candidate must name as parts (the kind's required parts): a candidate that
    #: lacks one is refused mechanically, before any assessor.
    required: tuple[str, ...] = ()
    #: The kind's declared assembly: the name of the step whose journaled result a candidate's
    #: content must be, or ``"*"`` for ``{part step: journaled result}`` of the named parts.
    #: None still binds the content to the journal: it must be one of those two for some part
    #: (content of the worker's own making is refused on every work).
    assembly: str | None = None


@dataclass(frozen=True, kw_only=True)
class InputVersion:
    """An immutable snapshot of the work's input: part name -> content hash."""

    version: str
    parts: dict[str, str]
    seq: int
    at: int


@dataclass(frozen=True, kw_only=True)
class AttemptError:
    """An exception an attempt reported: kept with the attempt, shown by ``outlive works``.

    ``retryable`` is the runner's classification under the kind's retry policy; the controller
    decides from it whether a successor is due or the work fails now.
    """

    type: str
    message: str
    traceback: str = ""
    at: int = 0
    retryable: bool = True


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """One try at the work, written before dispatch; ``token`` is the owner epoch it holds.

    The token is the epoch (ordered, public) plus a secret issued at admission: the ledger keeps
    only ``key_hash``; ``secret`` is set only on the copy the controller hands out, so a write
    needs the token actually given to this attempt of this work. ``signs`` counts the signs of
    life (heartbeats and writes): a suspicion is a compare-and-set on it.
    ``last_heartbeat`` is the time of the latest sign of life, as the worker reported it but
    never later than the store's clock when it was applied.
    """

    work_id: str
    number: int
    token: int
    pinned_version: str | None
    state: AttemptState
    admitted_at: int
    last_heartbeat: int
    heartbeats: int = 0
    request_id: str | None = None
    #: What a ``waiting`` attempt waits for (a person, an event); None otherwise.
    waiting_for: str | None = None
    #: When the current wait began (store-bounded), for a kind's wait limit; None unless waiting.
    waiting_since: int | None = None
    key_hash: str | None = None
    signs: int = 0
    secret: str | None = field(default=None, repr=False, compare=False)
    #: The error a ``failed`` attempt reported.
    error: AttemptError | None = None
    #: The runtime process that admitted and runs it, when one did (``Admit.runner``): a backend
    #: that can tell that process's death from its silence lets a successor in without waiting
    #: out the lease (:meth:`outlive.backend.Backend.runner_gone`).
    runner: str | None = None


@dataclass(frozen=True, kw_only=True)
class JournalEntry:
    """A finished step, stored under the hash of what it was computed from.

    ``input_key`` is ``None`` only when the work runs without version pins (reuse by name).
    ``result_id`` is derived from the attempt that computed it: a recomputation is a new result.
    """

    step: str
    input_key: str | None
    sources: dict[str, str]
    result: JSON
    result_id: str
    attempt: int
    token: int
    seq: int
    stale: bool = False
    #: Input names declared external (not parts of the input version) by the step's caller.
    external: tuple[str, ...] = ()
    #: Input names that are other steps' results: their source is that entry's result id.
    derived: tuple[str, ...] = ()
    #: For a derived step: the version parts its provenance chains back to (input name -> part
    #: hash, through every source), checked against a version in place of the sources. None for
    #: a step that reads only parts and external inputs (its roots are its sources).
    roots: dict[str, str] | None = None


@dataclass(frozen=True, kw_only=True)
class Part:
    """One journal result a candidate is assembled from."""

    step: str
    input_key: str | None
    sources: dict[str, str]
    result_id: str
    #: Input names declared external by the step (not parts of the input version).
    external: tuple[str, ...] = ()
    #: As :attr:`JournalEntry.derived` and :attr:`JournalEntry.roots`, copied from the journal.
    derived: tuple[str, ...] = ()
    roots: dict[str, str] | None = None


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A finished output nobody has judged yet."""

    digest: str
    work_id: str
    version: str | None
    parts: tuple[Part, ...]
    content: JSON
    attempt: int
    token: int
    seq: int
    at: int
    stale: bool = False


@dataclass(frozen=True, kw_only=True)
class Contract:
    """The standard a candidate is judged under; ``assessor`` names who judges."""

    name: str
    version: str
    assessor: str


@dataclass(frozen=True, kw_only=True)
class Acceptance:
    """A recorded judgement: this digest met this contract, for this input version."""

    digest: str
    version: str | None
    contract: Contract
    seq: int
    at: int
    attempt: int
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class Refusal:
    """A recorded judgement that said no: this digest did not meet this contract, and why.

    Append-only like acceptances: a refused digest is never accepted afterwards under the same
    contract, and the refusal stays to say so (the attempt that built it is stopped).
    """

    digest: str
    version: str | None
    contract: Contract
    reason: str
    seq: int
    at: int
    attempt: int


@dataclass(frozen=True, kw_only=True)
class Receipt:
    """What the receiver answered: its id for the effect and whether it had seen the key.

    ``possibly_duplicated``: the receiver no longer remembered the key (past its retention) and
    applied the effect as new, so it may have happened twice.
    """

    effect_id: str
    duplicate: bool
    key: str | None
    note: str = ""
    possibly_duplicated: bool = False


@dataclass(frozen=True, kw_only=True)
class Effect:
    """An external effect keyed by operation: intent before sending, confirmation after.

    ``payload`` is what was intended, kept with the intent: a successor resends it as it was,
    never a regenerated copy.
    """

    op_key: str
    payload_digest: str
    state: EffectState
    attempt: int
    sent_key: str | None
    intended_at: int
    confirmed_at: int | None = None
    receipt: Receipt | None = None
    sends: int = 1
    payload: JSON = None


@dataclass(frozen=True, kw_only=True)
class WorkState:
    """Everything the ledger knows about one work. Pure data: engines store it as they like."""

    work_id: str
    policy: Policy = field(default_factory=Policy)
    epoch: int = 0
    seq: int = 0
    current_version: str | None = None
    inputs: tuple[InputVersion, ...] = ()
    attempts: tuple[Attempt, ...] = ()
    journal: tuple[JournalEntry, ...] = ()
    candidates: tuple[Candidate, ...] = ()
    acceptances: tuple[Acceptance, ...] = ()
    effects: tuple[Effect, ...] = ()
    stale_writes_applied: int = 0
    #: The kind of work (a runtime's registered name), so a restarted runtime finds its works.
    kind: str | None = None
    #: Set when the controller ended the work with an error (non-retryable, or retries spent):
    #: no attempt is admitted after it.
    failure: AttemptError | None = None
    #: Hash of the controller's credential, recorded when the work was opened: the controller's
    #: commands must carry the credential. None: a work opened without one (every caller may
    #: issue them, as before roles existed).
    controller_key_hash: str | None = None
    #: Judgements that said no (append-only).
    refusals: tuple[Refusal, ...] = ()

    # -- read helpers (pure) -------------------------------------------------------------------
    def version(self, name: str) -> InputVersion | None:
        for v in self.inputs:
            if v.version == name:
                return v
        return None

    def attempt(self, number: int) -> Attempt | None:
        for a in self.attempts:
            if a.number == number:
                return a
        return None

    @property
    def current_attempt(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    def lookup(self, step: str, key: str | None) -> JournalEntry | None:
        """The latest entry to restore for ``step`` with ``key`` (by name alone without pins)."""
        for e in reversed(self.journal):
            if e.step != step:
                continue
            if not self.policy.pins or e.input_key == key:
                return e
        return None

    def candidate(self, digest: str) -> Candidate | None:
        for c in reversed(self.candidates):
            if c.digest == digest:
                return c
        return None

    def effect(self, op_key: str) -> Effect | None:
        for e in self.effects:
            if e.op_key == op_key:
                return e
        return None

    def refusal(self, digest: str, contract: Contract | None = None) -> Refusal | None:
        """The refusal of ``digest`` (under ``contract``, if given), if it was refused."""
        for r in reversed(self.refusals):
            if r.digest == digest and (contract is None or r.contract == contract):
                return r
        return None

    @property
    def latest_acceptance(self) -> Acceptance | None:
        return self.acceptances[-1] if self.acceptances else None


# Records are built several times per command: each gets the quicker ``__init__`` (same signature).
for _cls in (Policy, InputVersion, AttemptError, Attempt, JournalEntry, Part, Candidate, Contract,
             Acceptance, Refusal, Receipt, Effect, WorkState):
    quick_init(_cls)
del _cls


class JournalIndex:
    """:meth:`WorkState.lookup` as a dict look-up instead of a scan of the journal, for code that
    restores many steps from one journal (a worker, a Temporal run after continue-as-new).

    Fed as the journal grows (it only grows, so the entry fed last for a key is the latest).
    """

    __slots__ = ("_by_key", "_by_name", "fed")

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, str | None], JournalEntry] = {}
        self._by_name: dict[str, JournalEntry] = {}
        #: How many entries of the journal are indexed.
        self.fed = 0

    def feed(self, journal: Sequence[JournalEntry]) -> None:
        """Index the entries of ``journal`` past the ``fed`` ones."""
        for e in journal[self.fed:]:
            self._by_key[e.step, e.input_key] = e
            self._by_name[e.step] = e
        self.fed = len(journal)

    def lookup(self, step: str, key: str | None, pins: bool) -> JournalEntry | None:
        """The latest entry for ``step`` with ``key``, by name alone without ``pins``."""
        return self._by_key.get((step, key)) if pins else self._by_name.get(step)
