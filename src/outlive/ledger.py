"""The pure ledger: ``apply(state, command) -> (state, outcome)`` or a typed rejection.

No I/O, no clocks, no randomness: the same code runs inside a Temporal workflow, a Restate
virtual-object handler or a SQL transaction, and gives the same answer. Every protection the
article describes lives here exactly once: fencing by owner epoch, restore-vs-redo by input key,
the part-hash and version check before acceptance, and operation-keyed effect intents. A rejected
command raises and leaves ``state`` untouched, so an adapter that persists only returned states
can never half-write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from . import errors as E
from ._check import check_fields, check_id, checked_copy
from ._clone import clone, evolve, quick_init
from .hashing import (
    _KEYED,
    _SHA256,
    _canonical_size,
    _result_hash,
    _short,
    _text_of,
    canonical,
    content_hash,
    input_key,
)
from .records import (
    Acceptance,
    Attempt,
    AttemptError,
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
    Refusal,
    WorkState,
)

__all__ = [
    "COMMANDS",
    "CONTROLLER_COMMANDS",
    "LEASED_STATES",
    "LIVE_STATES",
    "MAX_PAYLOAD_BYTES",
    "ASSEMBLE_PARTS",
    "ASSEMBLY",
    "Accept",
    "Admit",
    "Checked",
    "Command",
    "ConfirmEffect",
    "Fail",
    "FailWork",
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
    "assembly_write",
    "candidate_digest",
    "changed",
    "check_acceptable",
    "checked",
    "check_command",
    "check_owner",
    "check_size",
    "check_work_id",
    "contract_failed",
    "is_command",
    "is_leased",
    "is_bound",
    "is_live",
    "is_settled",
    "possibly_duplicated",
    "key_hash",
    "reads",
    "result_id",
    "suspect_at",
    "suspicion",
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
    """Create the work's ledger (idempotent with the same policy and controller)."""

    policy: Policy = field(default_factory=Policy)
    #: The first token issued is ``epoch_floor + 1``: continue an epoch kept elsewhere.
    epoch_floor: int = 0
    #: The kind of work (a runtime's name for it): a restarted runtime finds its works by it.
    kind: str | None = None
    #: :func:`key_hash` of the controller's credential: from then on the controller's commands
    #: (:data:`CONTROLLER_COMMANDS`) must carry it. None opens a work whose controller commands
    #: anyone may issue (a work opened so keeps it; a keyed reopen does not change it).
    controller_key_hash: str | None = None


@dataclass(frozen=True, kw_only=True)
class PublishInput:
    """A new input version; it becomes current. Versions are immutable."""

    version: str
    parts: dict[str, str]
    at: int
    #: The controller's credential (see :class:`OpenWork`); never stored.
    credential: str | None = field(default=None, repr=False)


@dataclass(frozen=True, kw_only=True)
class Admit:
    """Write the attempt record and publish the new epoch, in one step, before dispatch."""

    at: int
    pin: str | None = None
    request_id: str | None = None
    #: Hash (:func:`key_hash`) of the secret part of the token, issued by whoever admits. An
    #: attempt admitted without one is fenced by its epoch alone.
    key_hash: str | None = None
    credential: str | None = field(default=None, repr=False)
    #: The runtime process that will run the attempt (see ``Attempt.runner``); None otherwise.
    runner: str | None = None
    #: The admitter runs the attempt itself and hands its token to no one: the admission is
    #: also the claim (the attempt is ``running``, its lease runs from now), saving a write.
    claimed: bool = False


@dataclass(frozen=True, kw_only=True)
class Heartbeat:
    """A sign of life. ``claim`` is the worker's first one: an attempt is claimed only once."""

    attempt: int
    token: int
    at: int
    secret: str | None = None
    claim: bool = False


@dataclass(frozen=True, kw_only=True)
class MarkUnknown:
    """Silence: the attempt missed its heartbeats. Its open effect intents become ambiguous.

    ``signs`` makes it a compare-and-set: it applies only if the attempt showed no sign of life
    since the observer read it (None: unconditionally, for an operator who knows it is gone).

    A ``waiting`` attempt is left alone (waiting is not silence) unless ``waiting`` is set: the
    observer knows the wait is over without a word, because the attempt's runner is dead or
    the wait passed the kind's limit (:func:`suspicion` says which).
    """

    attempt: int
    at: int
    signs: int | None = None
    waiting: bool = False
    credential: str | None = field(default=None, repr=False)


@dataclass(frozen=True, kw_only=True)
class Wait:
    """The owner waits on a person or an outside event: ``waiting``, which is not silence."""

    attempt: int
    token: int
    reason: str
    at: int
    secret: str | None = None


@dataclass(frozen=True, kw_only=True)
class Resume:
    """The wait is over: the attempt is ``running`` again (any fenced write also resumes it)."""

    attempt: int
    token: int
    at: int
    secret: str | None = None


@dataclass(frozen=True, kw_only=True)
class MarkStopped:
    """The controller ends an attempt (its candidate refused, or it is replaced)."""

    attempt: int
    at: int
    credential: str | None = field(default=None, repr=False)


@dataclass(frozen=True, kw_only=True)
class StepWrite:
    step: str
    sources: dict[str, str]
    input_key: str
    result: Any
    result_id: str
    #: Input names the caller declared external: not parts of the input version.
    external: tuple[str, ...] = ()
    #: Input names that are other steps' results: each one's source is that journal entry's
    #: result id (checked against the journal; its provenance becomes this step's).
    derived: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class RecordSteps:
    """Journal one step (per-step persistence) or several (an end-of-attempt flush)."""

    attempt: int
    token: int
    entries: tuple[StepWrite, ...]
    at: int
    secret: str | None = None


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
    secret: str | None = None


@dataclass(frozen=True, kw_only=True)
class Accept:
    """The controller's judgement: mechanical checks here, the assessor's ``verdict`` recorded.

    A ``verdict`` of no is recorded too, as a :class:`~outlive.records.Refusal` with its reason
    (outcome ``refused``): the judgement is a record whichever way it went.
    """

    digest: str
    contract: Contract
    verdict: bool
    at: int
    reason: str = ""
    credential: str | None = field(default=None, repr=False)


@dataclass(frozen=True, kw_only=True)
class RecordIntent:
    """The intent to send ``payload`` under ``op_key``, written before sending.

    ``payload`` is kept with the intent (its hash must be ``payload_digest``), so whoever
    settles the intent later resends exactly what was intended.
    """

    attempt: int
    token: int
    op_key: str
    payload_digest: str
    sent_key: str | None
    at: int
    secret: str | None = None
    payload: Any = None


@dataclass(frozen=True, kw_only=True)
class ConfirmEffect:
    attempt: int
    token: int
    op_key: str
    receipt: Receipt
    at: int
    secret: str | None = None


@dataclass(frozen=True, kw_only=True)
class Finish:
    attempt: int
    token: int
    at: int
    secret: str | None = None


@dataclass(frozen=True, kw_only=True)
class Fail:
    """The attempt's own code raised: an answer, not silence. Recorded with the attempt, which
    ends (``failed``); the controller's retry policy decides whether a successor follows."""

    attempt: int
    token: int
    at: int
    error: AttemptError
    secret: str | None = None


@dataclass(frozen=True, kw_only=True)
class FailWork:
    """The controller ends the work with an error (non-retryable, or its retries are spent):
    no attempt is admitted after it. Idempotent: the first failure stands."""

    error: AttemptError
    at: int
    credential: str | None = field(default=None, repr=False)


Command = Union[
    OpenWork, PublishInput, Admit, Heartbeat, MarkUnknown, MarkStopped, RecordSteps,
    SubmitCandidate, Accept, RecordIntent, ConfirmEffect, Finish, Wait, Resume, Fail, FailWork,
]


#: Every command :func:`apply` understands. Adapters that decode commands check against this
#: (through :func:`is_command`) instead of keeping their own list.
COMMANDS: tuple[type, ...] = (
    OpenWork, PublishInput, Admit, Heartbeat, MarkUnknown, MarkStopped, RecordSteps,
    SubmitCandidate, Accept, RecordIntent, ConfirmEffect, Finish, Wait, Resume, Fail, FailWork,
)


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What a command did. ``record`` is the record written or found (None for pure updates)."""

    kind: str
    record: Any = None
    seq: int = 0


#: The controller's commands: on a work opened with a controller key they must carry the
#: controller's credential (:class:`~outlive.errors.NotController` otherwise). An attempt's token
#: cannot issue them.
CONTROLLER_COMMANDS: tuple[type, ...] = (PublishInput, Admit, MarkUnknown, MarkStopped, Accept,
                                          FailWork)


# Commands and outcomes are built once or twice per command: the quicker ``__init__`` (same
# signature) of the records.
for _cls in (*COMMANDS, StepWrite, Outcome):
    quick_init(_cls)
del _cls


# -- derived identifiers -----------------------------------------------------------------------
def result_id(work_id: str, step: str, key: str, attempt: int) -> str:
    """A result's id is derived from the attempt that computed it: a rerun is a new result.

    Ids are scoped to their work (the work id is not hashed), so the same run gives the same ids
    on every backend and under any namespace.
    """
    del work_id
    rid = _result_hash(step, key, attempt)
    if type(step) is str and type(key) is str and type(attempt) is int:
        if len(_RESULT_IDS) >= _RESULT_IDS_MAX:
            _RESULT_IDS.clear()
        _RESULT_IDS[rid] = (step, key, attempt)
    return rid


#: :func:`result_id`'s answers lately given, by id: the ledger checks each step write's id
#: against its step, input key and attempt, and the writer derived it just before (one look-up
#: instead of a second hash). Cleared when full.
_RESULT_IDS: dict[str, tuple[str, str, int]] = {}
#: As many as the input keys remembered (``hashing._KEYS_MAX``): ids derived for a batch of
#: writes before it is applied (an end-of-attempt flush, a plan of steps) are all still found.
#: At 1024, 2,000 writes derived ahead hashed every other id a second time (+14 K instructions
#: per ``RecordSteps`` in ``make bench-core-cpu``).
_RESULT_IDS_MAX = 4096


def _derived_id(rid: str, step: str, key: str, attempt: int) -> bool:
    """Whether ``rid`` is :func:`result_id` of this step, key and attempt."""
    known = _RESULT_IDS.get(rid)
    if known is not None and known[0] == step and known[1] == key and known[2] == attempt:
        return True
    return _result_hash(step, key, attempt) == rid


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


class Checked:
    """A command checked and copied once, by :func:`checked`; :func:`reads` and :func:`apply`
    take it as it is instead of checking and copying it again.

    Not a record (no codec tag): it never travels, it is made in the process that applies it.
    Only :func:`checked` makes one, and it refuses to wrap anything but a well-formed command, so
    a caller who hands a store a ``Checked`` gets ``InvalidRecord`` (it is not a command).
    """

    __slots__ = ("command", "plain")

    def __init__(self, command: Command, plain: bool = False) -> None:
        self.command = command
        #: Its values hold no float (the compiled check-and-copy vouched for it): the quick paths
        #: may size a value by the C encoder's text.
        self.plain = plain


def checked(cmd: Any) -> Checked:
    """``cmd`` checked (:func:`check_command`) and copied: for a store that asks :func:`reads`
    and then :func:`apply` about the same command, so it is checked and copied once."""
    command, plain = _copy_in(cmd)
    return Checked(command, plain)


def _copy_in(cmd: Any) -> tuple[Command, bool]:
    """``cmd`` checked (:func:`check_command`) and copied (``clone``): in one walk when the
    compiled check-and-copy vouches for it, else by the check (which names a bad field) and
    ``clone``. The flag: the compiled walk vouched (no value in it holds a float)."""
    copy = checked_copy(cmd) if isinstance(cmd, COMMANDS) else None
    plain = copy is not None
    if copy is None:
        check_command(cmd)
        copy = clone(cmd)
    result: Command = copy
    return result, plain


def reads(state: WorkState | None, cmd: Command | Checked) -> frozenset[str]:
    """The result ids of the journal entries :func:`apply` looks at for ``cmd``.

    A store that loads only part of the journal must give ``apply`` at least these entries (the
    rest of the state it reads is outside the journal). Entries absent from the journal are
    simply not found, exactly as with the whole journal.
    """
    del state  # no command reads journal entries that only the state could name
    if type(cmd) is Checked:
        cmd = cmd.command
    else:
        check_command(cmd)   # a malformed command is typed here too, before a store looks it up
    if isinstance(cmd, RecordSteps):
        entries = cmd.entries
        if len(entries) == 1 and not entries[0].derived:    # a step's write: no generator
            return frozenset((entries[0].result_id,))
        return frozenset([*(w.result_id for w in entries), *_sources_read(entries)])
    if isinstance(cmd, SubmitCandidate):
        return frozenset([*(w.result_id for w in cmd.flush), *_sources_read(cmd.flush),
                          *(p.result_id for p in cmd.parts)])
    return frozenset()


def _sources_read(writes: tuple[StepWrite, ...]) -> list[str]:
    """The result ids derived steps name as their sources (entries :func:`apply` reads)."""
    return [w.sources[n] for w in writes for n in w.derived if n in w.sources]


def check_command(cmd: Any) -> None:
    """Raise :class:`~outlive.errors.InvalidRecord` unless ``cmd`` is a well-formed command.

    Every field is checked against its type (see :func:`apply`); stores may call this before
    they look anything up for the command.
    """
    if not is_command(cmd):
        raise E.InvalidRecord(f"not a ledger command: {type(cmd).__name__}")
    check_fields(cmd)


def check_owner(state: WorkState, attempt: int, token: int) -> None:
    """Raise the fence's rejection if attempt ``attempt`` holding ``token`` may not write now.

    For a store that fences its own writes on behalf of an attempt (LangGraph's checkpoints):
    the token's epoch must be this attempt's (``UnknownToken``), not older than the work's
    (``StaleOwner``, with fencing on), and the attempt not stopped or finished
    (``AttemptEnded``). The token's secret is not asked here: the worker proved it to the
    ledger with its own writes, and a store's config should not carry it.
    """
    att = state.attempt(attempt)
    if att is None or att.token != token or token > state.epoch or token <= 0:
        raise E.UnknownToken(f"token {token} was never issued to attempt #{attempt} of "
                             f"{state.work_id}", token=token, attempt=attempt, epoch=state.epoch)
    if token < state.epoch and state.policy.fencing:
        raise E.StaleOwner(f"attempt #{attempt} holds token {token}, but the epoch is "
                           f"{state.epoch}", token=token, attempt=attempt, epoch=state.epoch)
    if att.state in _ENDED:
        raise E.AttemptEnded(f"attempt #{attempt} of {state.work_id} is {att.state.value}: it "
                             "holds no write authority", attempt=attempt, state=att.state.value)


def is_settled(effect: Effect | None) -> bool:
    """Whether the receiver answered for ``effect`` (confirmed, or possibly duplicated): never
    sent again. An intended or ambiguous effect is open: resend it with the same key."""
    return effect is not None and effect.state in _SETTLED


def possibly_duplicated(effect: Effect, receipt: Receipt) -> bool:
    """Whether confirming ``effect`` with ``receipt`` must say the effect may have happened twice.

    The receiver says so itself (it had forgotten the key: ``receipt.possibly_duplicated``), or
    the ledger sees it: the operation was intended (so perhaps sent) more than once and the
    receiver's last answer was "new". A receiver that keeps keys answers "already seen" to a
    true resend; "new" after an earlier send means either that send never arrived or the key
    was forgotten, and the ledger cannot tell which.
    """
    return receipt.possibly_duplicated or (effect.sends > 1 and not receipt.duplicate)


def is_live(attempt: Attempt | None) -> bool:
    """Whether ``attempt`` still holds the work (admitted, running or waiting)."""
    return attempt is not None and attempt.state in LIVE_STATES


def suspicion(attempt: Attempt | None, now: int, *, timeout: int, start_grace: int | None = None,
              wait_limit: int | None = None, runner_gone: bool = False) -> str | None:
    """Why ``attempt`` is to be marked ``unknown`` at ``now``, or None: the one rule for every
    watcher (the controller, the supervisor, the runtime).

    ``"runner gone"``: its runner is known dead (a process exited, a task ended) without
    finishing: whatever its state, waiting included, nothing of it can write any more.
    ``"silent"``: admitted or running, and no sign of life for ``timeout`` ms (``start_grace``
    instead, if longer, for an attempt not heard from yet). ``"wait limit"``: waiting for longer
    than the kind's ``wait_limit`` ms since the wait began (None: a wait is never suspected).
    ``now`` is the watcher's clock; the times it compares with were bounded by the store's.
    Mark with ``MarkUnknown(..., waiting=attempt.state is WAITING)``.
    """
    if attempt is None or attempt.state not in LIVE_STATES:
        return None
    if runner_gone:
        return "runner gone"
    if attempt.state is AttemptState.WAITING:
        since = attempt.waiting_since if attempt.waiting_since is not None else attempt.last_heartbeat
        if wait_limit is not None and now - since > wait_limit:
            return "wait limit"
        return None
    limit = timeout
    if attempt.state is AttemptState.ADMITTED and start_grace is not None:
        limit = max(timeout, start_grace)
    return "silent" if now - attempt.last_heartbeat > limit else None


def suspect_at(attempt: Attempt | None, *, timeout: int, start_grace: int | None = None,
               wait_limit: int | None = None) -> int | None:
    """The first time at which :func:`suspicion` says ``"silent"`` or ``"wait limit"`` for
    ``attempt`` if nothing changes meanwhile; None if never (ended, or waiting with no limit).
    For a watcher that sleeps until the next deadline instead of polling."""
    if attempt is None or attempt.state not in LIVE_STATES:
        return None
    if attempt.state is AttemptState.WAITING:
        if wait_limit is None:
            return None
        since = attempt.waiting_since if attempt.waiting_since is not None else attempt.last_heartbeat
        return since + wait_limit + 1
    limit = timeout
    if attempt.state is AttemptState.ADMITTED and start_grace is not None:
        limit = max(timeout, start_grace)
    return attempt.last_heartbeat + limit + 1


def is_leased(attempt: Attempt | None) -> bool:
    """Whether ``attempt``'s silence is suspicious (admitted or running; waiting is not)."""
    return attempt is not None and attempt.state in LEASED_STATES


def changed(before: WorkState | None, after: WorkState) -> bool:
    """Whether applying a command changed the state (so a store must write ``after``).

    ``apply`` returns the very state it was given when nothing changed (and every change moves
    ``seq``). A work that did not exist before always changed: it was just opened.
    """
    return before is None or after is not before


def check_work_id(work_id: Any) -> str:
    """A work id every backend can store: a non-empty, valid Unicode string (else InvalidRecord).

    Stores call this before they look anything up, so a bad id gets the same typed answer
    everywhere.
    """
    return check_id(work_id, "work_id")


def check_size(value: Any, what: str, name: str | None = None) -> int:
    """Raise :class:`~outlive.errors.PayloadTooLarge` if ``value`` is over the limit; its size.

    With ``name``, ``what`` is a template formatted with it only for the error (callers on a
    step's path size every result: the message is built for the one over the limit)."""
    n = len(canonical(value))
    if n > MAX_PAYLOAD_BYTES:
        raise _too_large(n, what.format(name) if name is not None else what)
    return n


def _too_large(n: int, what: str) -> E.PayloadTooLarge:
    return E.PayloadTooLarge(
        f"{what} is {n} bytes; the limit is {MAX_PAYLOAD_BYTES} bytes: store a reference",
        size=n, limit=MAX_PAYLOAD_BYTES,
    )


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


def contract_failed(refusal: Refusal) -> E.ContractFailed:
    """The error a judge's recorded refusal raises for whoever waits on the verdict."""
    c = refusal.contract
    return E.ContractFailed(
        f"{c.name}@{c.version} refused {refusal.digest[:8]}: {refusal.reason}",
        digest=refusal.digest, contract=c.name, reason=refusal.reason)


# -- helpers -----------------------------------------------------------------------------------
_ENDED = (AttemptState.FINISHED, AttemptState.STOPPED, AttemptState.FAILED)
#: Leaves room for 2**32 admissions before an epoch would pass what every store holds.
_EPOCH_FLOOR_MAX = 2 ** 62
#: Effect states after the receiver answered: never sent again.
_SETTLED = (EffectState.CONFIRMED, EffectState.POSSIBLY_DUPLICATED)


def key_hash(secret: str) -> str:
    """How the secret part of a token is stored: SHA-256 of its UTF-8 bytes, hex."""
    return _SHA256(secret.encode("utf-8")).hexdigest()


#: :func:`key_hash` of the secrets met lately, by the exact secret: an attempt's writes all carry
#: the same one, so each write's check is a dict look-up after the first. Cleared when full.
_KEY_HASHES: dict[str, str] = {}
_KEY_HASHES_MAX = 1024


def _secret_hash(secret: str) -> str:
    """:func:`key_hash` of a secret, remembered when it is an exact ``str`` (equal is the same
    text, so a wrong secret never finds a right one's hash)."""
    if type(secret) is not str:
        return key_hash(secret)
    digest = _KEY_HASHES.get(secret)
    if digest is None:
        digest = key_hash(secret)
        if len(_KEY_HASHES) >= _KEY_HASHES_MAX:
            _KEY_HASHES.clear()
        _KEY_HASHES[secret] = digest
    return digest


def _size(value: Any, what: str, name: str | None = None) -> None:
    """:func:`check_size` of a field of a checked command (its values are JSON already);
    ``what`` is formatted with ``name`` only for the error."""
    n = _canonical_size(value)
    if n > MAX_PAYLOAD_BYTES:
        raise _too_large(n, what.format(name))


def _owner(state: WorkState, attempt_no: int, token: int, secret: str | None) -> Attempt:
    """Authenticate a worker command: the attempt, its token and the token's secret part."""
    att = state.attempt(attempt_no)
    if att is None or att.token != token or token > state.epoch or token <= 0:
        raise E.UnknownToken(
            f"token {token} was never issued to attempt #{attempt_no} of {state.work_id}",
            token=token, attempt=attempt_no, epoch=state.epoch, work_id=state.work_id,
        )
    if att.key_hash is not None and (not isinstance(secret, str) or _secret_hash(secret) != att.key_hash):
        raise E.UnknownToken(
            f"token {token} of attempt #{attempt_no} of {state.work_id} does not carry the secret "
            "issued with it at admission",
            token=token, attempt=attempt_no, epoch=state.epoch, work_id=state.work_id,
        )
    return att


def _fence(state: WorkState, attempt_no: int, token: int,
           secret: str | None) -> tuple[Attempt, bool]:
    """Check a write's owner token. Returns the attempt and whether the write is stale."""
    att = _owner(state, attempt_no, token, secret)
    if token < state.epoch and state.policy.fencing:
        raise E.StaleOwner(
            f"attempt #{attempt_no} holds token {token}, but the epoch is {state.epoch}",
            token=token, attempt=attempt_no, epoch=state.epoch, work_id=state.work_id,
        )
    if att.state in _ENDED:
        raise E.AttemptEnded(
            f"attempt #{attempt_no} of {state.work_id} is {att.state.value}: it holds no write "
            "authority", attempt=attempt_no, state=att.state.value, work_id=state.work_id,
        )
    return att, token < state.epoch


_CONTROLLER = frozenset(CONTROLLER_COMMANDS)


def _check_controller(state: WorkState, cmd: PublishInput | Admit | MarkUnknown | MarkStopped
                      | Accept | FailWork) -> None:
    """A controller's command on a keyed work must carry the controller's credential."""
    cred = cmd.credential
    if not isinstance(cred, str) or _secret_hash(cred) != state.controller_key_hash:
        raise E.NotController(
            f"{type(cmd).__name__} on {state.work_id} is the controller's command and does not "
            "carry the controller's credential (an attempt's token cannot issue it)",
            work_id=state.work_id, command=type(cmd).__name__)


def _replace_attempt(state: WorkState, att: Attempt) -> tuple[Attempt, ...]:
    return tuple(att if a.number == att.number else a for a in state.attempts)


def _when(at: int, now: int | None) -> int:
    """A worker's time, never later than the store's clock (when the store gives one)."""
    return at if now is None else min(at, now)


def _alive(att: Attempt, at: int, *, resume: bool = True) -> Attempt:
    """A sign of life from the current owner: running again (even after ``unknown``).

    A write ends a wait (``resume``); a heartbeat while ``waiting`` keeps the attempt waiting.
    """
    keep = att.state is AttemptState.WAITING and not resume
    return evolve(att, state=AttemptState.WAITING if keep else AttemptState.RUNNING,
                   last_heartbeat=max(att.last_heartbeat, at), signs=att.signs + 1,
                   waiting_for=att.waiting_for if keep else None,
                   waiting_since=att.waiting_since if keep else None)


def _touch(state: WorkState, att: Attempt, at: int, stale: bool) -> tuple[Attempt, ...]:
    """A write is also a sign of life (a replaced owner's stale write is not)."""
    if stale:
        return state.attempts
    return _replace_attempt(state, _alive(att, at))


def _check_against(state: WorkState, v: InputVersion, step: str, sources: dict[str, str],
                   external: tuple[str, ...], what: str) -> None:
    """Every input of a step is a part of ``v`` or declared external; there is no third kind.

    A part is named by its name (then it must carry that part's hash: ``VersionMismatch``) or
    by its content (any name whose hash is one of ``v``'s parts: ``text=report["s2"]``). An
    input declared external (a setting, a label) is not checked. Anything else would let a step
    read data the version check never sees (``text=`` the old report's section), so it is
    refused as :class:`~outlive.errors.UndeclaredInput`, with how to fix it.
    """
    parts = v.parts
    for name, h in sources.items():
        if name in external:
            continue
        part = parts.get(name)
        if part is not None:
            if part != h:
                raise E.VersionMismatch(
                    f"{what} read part {name!r} at {h[:8]}, but version {v.version} has "
                    f"{part[:8]}", step=step, part=name, version=v.version,
                )
            continue
        if h in parts.values():
            continue
        elsewhere = next((f"; it is part {part!r} of version {other.version}"
                          for other in state.inputs if other.version != v.version
                          for part, ph in other.parts.items() if ph == h), "")
        names = sorted(v.parts)
        shown = ", ".join(repr(n) for n in names[:6]) + (", ..." if len(names) > 6 else "")
        raise E.UndeclaredInput(
            f"{what} reads input {name!r}, which is neither a part of version {v.version} (no "
            f"part has that name or that content{elsewhere}) nor declared external. Pass the "
            f"part itself (one of {shown}); if it is another step's result, name that step: "
            f"{name}=outlive.ResultOf(step) with Worker.step; if it is not input data (a "
            f"setting, a label), declare it external: {name}=outlive.External(value) "
            f"with Worker.step, external=[{name!r}] with the engine adapters' steps and tasks",
            step=step, input=name, version=v.version,
        )


def _roots(x: JournalEntry | Part) -> dict[str, str]:
    """What ``x``'s provenance chains back to: its part (and content-named) inputs, and for a
    derived step, those of its sources, recorded with it."""
    if x.roots is not None:
        return x.roots
    external = x.external
    return {k: h for k, h in x.sources.items() if k not in external} if external else x.sources


def _chain(state: WorkState, journal: list[JournalEntry] | tuple[JournalEntry, ...],
           w: StepWrite, parts: dict[str, str] | None = None) -> dict[str, str]:
    """A derived step's roots: its own part inputs and every source entry's roots, merged.

    Each derived input names a journal entry by its result id (else ``InvalidRecord``); two
    sources that chain back to one part name of the pinned version (``parts``) with different
    hashes mix versions (``VersionMismatch``). An input named otherwise is a part by its
    content (``text=report["s2"]``): two sources may read different parts under one such name
    (two sections' ``text``), so each is kept, under the name and its source step.
    """
    skip = (*w.external, *w.derived)
    roots = {k: h for k, h in w.sources.items() if k not in skip}
    for name in w.derived:
        if name not in w.sources or name in w.external:
            raise E.InvalidRecord(f"step {w.step!r} declares {name!r} another step's result but "
                                  "does not read it as one", field="derived", step=w.step)
        rid = w.sources[name]
        src = next((e for e in journal if e.result_id == rid), None)
        if src is None:
            raise E.InvalidRecord(
                f"step {w.step!r} reads {name!r} as the result {rid[:8]}, which is not journaled "
                "(a derived input names a journal entry by its result id)",
                field="sources", step=w.step, input=name)
        for k, h in _roots(src).items():
            if roots.setdefault(k, h) == h:
                continue
            if parts is None or k not in parts:
                if roots.setdefault(f"{k}@{src.step}", h) != h:
                    roots[f"{k}@{rid}"] = h     # a result id names one entry
                continue
            raise E.VersionMismatch(
                f"step {w.step!r}: its sources chain back to two values of {k!r} (they "
                "were computed from different versions)", step=w.step, part=k)
    return roots


def _check_sources(state: WorkState, att: Attempt, w: StepWrite,
                   journal: list[JournalEntry] | tuple[JournalEntry, ...] = ()) -> dict[str, str] | None:
    """Check one step write; for a derived step under pins, return its roots."""
    if not w.step or not isinstance(w.step, str):
        raise E.InvalidRecord("a step needs a non-empty name", field="step")
    if input_key(w.step, w.sources) != w.input_key:
        raise E.UndeclaredInput(
            f"step {w.step!r}: its input key is not the hash of its declared inputs",
            step=w.step,
        )
    for name in w.external:
        if name not in w.sources:
            raise E.InvalidRecord(f"step {w.step!r} declares {name!r} external but does not read it",
                                  field="external", step=w.step)
    _size(w.result, "result of step {!r}", w.step)
    roots = None
    if w.derived and state.policy.pins:
        pinned = state.version(att.pinned_version) if att.pinned_version is not None else None
        roots = _chain(state, journal, w, pinned.parts if pinned is not None else None)
    if state.policy.pins and att.pinned_version is not None:
        v = state.version(att.pinned_version)
        if v is None:
            raise E.NotFound(f"version {att.pinned_version!r} was never published",
                             version=att.pinned_version)
        for name in w.external:
            if name in v.parts:
                raise E.InvalidRecord(
                    f"step {w.step!r} declares {name!r} external, but it is a part of version "
                    f"{v.version}", field="external", step=w.step)
        if roots is None:
            _check_against(state, v, w.step, w.sources, w.external, f"step {w.step!r}")
        else:
            _check_against(state, v, w.step, roots, (), f"step {w.step!r}")
    if not _derived_id(w.result_id, w.step, w.input_key, att.number):
        raise E.InvalidRecord(
            f"step {w.step!r}: its result id is not the one the store derives from the work's "
            f"step, input key and attempt #{att.number} (ledger.result_id): ids are never the "
            "writer's to choose", field="result_id", step=w.step)
    return roots


def _journal(state: WorkState, att: Attempt, token: int, stale: bool,
             writes: tuple[StepWrite, ...]) -> tuple[tuple[JournalEntry, ...], int, int]:
    journal = list(state.journal)
    seq = state.seq
    added = 0
    for w in writes:
        roots = _check_sources(state, att, w, journal)
        same = next((e for e in journal if e.result_id == w.result_id), None)
        if same is not None:
            if same.step != w.step or same.attempt != att.number or (
                    state.policy.pins and same.input_key != w.input_key) \
                    or canonical(same.result) != canonical(w.result):
                raise E.ResultConflict(
                    f"step {w.step!r}: result id {w.result_id[:8]} is journaled already for "
                    f"step {same.step!r} of attempt #{same.attempt} with another value; an "
                    "entry is never merged or replaced", step=w.step, result_id=w.result_id,
                    journaled=same.step)
            continue  # a retried write: already journaled, the same
        seq += 1
        added += 1
        journal.append(
            JournalEntry(
                step=w.step,
                input_key=w.input_key if state.policy.pins else None,
                sources=w.sources if state.policy.pins else {},   # the command is a copy
                result=w.result, result_id=w.result_id, attempt=att.number, token=token,
                seq=seq, stale=stale,
                external=tuple(w.external) if state.policy.pins else (),
                derived=tuple(w.derived) if state.policy.pins else (), roots=roots,
            )
        )
    return tuple(journal), seq, added


# -- apply -------------------------------------------------------------------------------------
def apply(state: WorkState | None, cmd: Command | Checked, *, work_id: str | None = None,
          now: int | None = None) -> tuple[WorkState, Outcome]:
    """Apply ``cmd``; return the new state and outcome, or raise a :class:`~outlive.errors.Rejected`.

    ``state`` is None only for :class:`OpenWork` on a work that does not exist yet. ``now`` is
    the store's clock, if it has one: a worker's reported time is never taken as later than it,
    so a worker whose clock runs ahead cannot stretch its lease.

    A malformed command (a field of the wrong type, an integer beyond 64 bits, a string that is
    not valid Unicode, a value nested too deep) is :class:`~outlive.errors.InvalidRecord` before
    anything is looked at. The command is copied on the way in and the outcome on the way out:
    no object the caller holds can reach the state, and no object returned can change it. A
    :class:`Checked` command was checked and copied already.
    """
    if type(cmd) is Checked:
        command, plain = cmd.command, cmd.plain
    else:
        command, plain = _copy_in(cmd)
    if work_id is not None:
        check_work_id(work_id)
    if now is not None:
        if type(now) is not int:
            raise E.InvalidRecord("the store's clock must be an integer", field="now")
        if not isinstance(command, OpenWork) and command.at > now:
            command = _at_most(command, now)
    if state is not None and plain:
        if type(command) is RecordSteps:
            done = _record_usual(state, command, now)
            if done is not None:
                return done
        elif type(command) is Heartbeat:
            done = _beat_usual(state, command, now)
            if done is not None:
                return done
    new, outcome = _apply(state, command, work_id, now)
    return new, clone(outcome)


def _at_most(command: Command, now: int) -> Command:
    """``command`` dated at the store's clock: no time a caller supplies (an admission, a sign
    of life, a candidate, an effect) is recorded as later than the store's clock, so a caller
    whose clock runs ahead can neither stretch a lease nor date a record in the future. Clamped,
    not refused: a controller or worker with a fast clock still works, on the store's time."""
    fields = command.__dict__.copy()     # the command is the ledger's own copy; this one too
    fields["at"] = now
    out = _NEW(type(command))
    _SET(out, "__dict__", fields)
    result: Command = out
    return result


def _apply(state: WorkState | None, cmd: Command, work_id: str | None,
           now: int | None) -> tuple[WorkState, Outcome]:
    if isinstance(cmd, OpenWork):
        if state is None:
            if not work_id:
                raise E.InvalidRecord("open_work needs a work id", field="work_id")
            if not 0 <= cmd.epoch_floor <= _EPOCH_FLOOR_MAX:
                raise E.InvalidRecord(f"epoch_floor must be between 0 and {_EPOCH_FLOOR_MAX}",
                                      field="epoch_floor")
            new = WorkState(work_id=work_id, policy=cmd.policy, epoch=cmd.epoch_floor,
                            kind=cmd.kind, controller_key_hash=cmd.controller_key_hash)
            return new, Outcome(kind="opened", record=new.policy)
        if state.policy != cmd.policy:
            raise E.WorkExists(f"{state.work_id} is open with {state.policy}", work_id=state.work_id)
        if cmd.kind is not None and state.kind is not None and cmd.kind != state.kind:
            raise E.WorkExists(f"{state.work_id} is a work of kind {state.kind!r}, not {cmd.kind!r}",
                               work_id=state.work_id, kind=state.kind)
        if state.controller_key_hash is not None \
                and cmd.controller_key_hash != state.controller_key_hash:
            raise E.NotController(f"{state.work_id} was opened by another controller (its "
                                  "credential is not this one)", work_id=state.work_id,
                                  command="OpenWork")
        return state, Outcome(kind="exists", record=state.policy, seq=state.seq)
    if state is None:
        raise E.NotFound(f"work {work_id!r} is not open", work_id=work_id)
    if state.controller_key_hash is not None and type(cmd) in _CONTROLLER:
        _check_controller(state, cmd)   # type: ignore[arg-type]
    handler = _HANDLERS.get(type(cmd)) if is_command(cmd) else None
    if handler is None:
        raise E.InvalidRecord(f"unknown command {type(cmd).__name__}")
    new, outcome = handler(state, cmd, now)
    if new is not state and new.seq == state.seq:
        new = evolve(new, seq=state.seq + 1)  # every change moves seq: caches key on it
    return new, outcome


def _publish(state: WorkState, cmd: PublishInput, now: int | None) -> tuple[WorkState, Outcome]:
    if not cmd.version or not cmd.parts:
        raise E.InvalidRecord("an input version needs a name and at least one part", field="version")
    old = state.version(cmd.version)
    if old is not None:
        if old.parts != cmd.parts:
            raise E.InputConflict(f"version {cmd.version} was published with other content",
                                  version=cmd.version)
        if old.version != state.current_version:
            # Not a retry of the latest publish: an older version cannot become current again
            # (it would silently answer "exists" while the current version stays another).
            raise E.InputConflict(
                f"version {cmd.version} is older than the current version "
                f"{state.current_version}: an older version is never current again; publish "
                "its content under a new version name", version=cmd.version,
                current=state.current_version)
        return state, Outcome(kind="exists", record=old, seq=state.seq)
    seq = state.seq + 1
    v = InputVersion(version=cmd.version, parts=dict(cmd.parts), seq=seq, at=cmd.at)
    new = evolve(state, inputs=(*state.inputs, v), current_version=v.version, seq=seq)
    return new, Outcome(kind="published", record=v, seq=seq)


def _admit(state: WorkState, cmd: Admit, now: int | None) -> tuple[WorkState, Outcome]:
    cur = state.current_attempt
    if cur is not None and cmd.request_id is not None and cur.state in _LIVE \
            and cur.request_id == cmd.request_id:
        # A retried admission. The same key: the same answer. Another key (a restarted
        # controller) takes the attempt over only while no worker has claimed it: a token
        # reaches at most one live worker.
        if cur.key_hash == cmd.key_hash:
            return state, Outcome(kind="exists", record=cur, seq=state.seq)
        if cur.signs == 0:
            att = evolve(cur, key_hash=cmd.key_hash)
            seq = state.seq + 1
            new = evolve(state, attempts=_replace_attempt(state, att), seq=seq)
            return new, Outcome(kind="rekeyed", record=att, seq=seq)
        raise E.AttemptActive(
            f"attempt #{cur.number} for request {cmd.request_id!r} was already claimed by the "
            "worker it was handed to; wait until it finishes or goes silent",
            attempt=cur.number, request_id=cmd.request_id,
        )
    if state.failure is not None:
        raise E.WorkFailed(f"{state.work_id} failed ({state.failure.type}: "
                           f"{state.failure.message}); no attempt is admitted after it",
                           work_id=state.work_id, error=state.failure.type)
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
        request_id=cmd.request_id, key_hash=cmd.key_hash, runner=cmd.runner,
    )
    if cmd.claimed:
        att = _alive(att, _when(cmd.at, now))
    new = evolve(state, epoch=epoch, seq=seq, attempts=(*state.attempts, att))
    return new, Outcome(kind="admitted", record=att, seq=seq)


def _heartbeat(state: WorkState, cmd: Heartbeat, now: int | None) -> tuple[WorkState, Outcome]:
    """A liveness signal, not a protected write; its outcome tells the worker the truth.

    ``beat``: alive. ``revived``: it had been marked ``unknown`` but still holds the epoch (no
    successor was admitted), so it is running again. ``superseded``: a successor holds the
    epoch; stop. ``ended``: the attempt was stopped or finished; stop. Correctness never depends
    on a worker reading this: the fenced writes stop it anyway.
    """
    att = _owner(state, cmd.attempt, cmd.token, cmd.secret)   # forged tokens still raise
    if att.state in _ENDED:
        return state, Outcome(kind="ended", record=att, seq=state.seq)
    if cmd.token < state.epoch:
        return state, Outcome(kind="superseded", record=att, seq=state.seq)
    if cmd.claim and att.signs == 0 and att.state is AttemptState.UNKNOWN:
        raise E.AttemptSilent(
            f"attempt #{att.number} of {state.work_id} was marked unknown before any worker "
            "claimed it (its worker started later than the lease allowed); it is handed to a "
            "successor, so this worker must not start it", attempt=att.number,
            work_id=state.work_id,
        )
    if cmd.claim and (att.signs > 0 or att.state is not AttemptState.ADMITTED):
        raise E.AttemptClaimed(
            f"attempt #{att.number} of {state.work_id} was already claimed by a worker; one "
            "token, one worker", attempt=att.number, work_id=state.work_id,
        )
    if cmd.claim:
        # The claim is the worker's first sign of life: its lease runs from here, not from the
        # admission (``start_grace`` covered the start; a slow start must not be taken over the
        # moment it is heard from). It is not counted as a heartbeat.
        kind, att = "claimed", _alive(att, _when(cmd.at, now))
    else:
        kind = "revived" if att.state is AttemptState.UNKNOWN else "beat"
        att = evolve(_alive(att, _when(cmd.at, now), resume=False), heartbeats=att.heartbeats + 1)
    seq = state.seq + 1
    new = evolve(state, attempts=_replace_attempt(state, att), seq=seq)
    return new, Outcome(kind=kind, record=att, seq=seq)


def _unknown(state: WorkState, cmd: MarkUnknown, now: int | None) -> tuple[WorkState, Outcome]:
    att = state.attempt(cmd.attempt)
    if att is None:
        raise E.NotFound(f"attempt #{cmd.attempt} does not exist", attempt=cmd.attempt)
    if not is_leased(att) and not (cmd.waiting and att.state is AttemptState.WAITING):
        return state, Outcome(kind="unchanged", record=att, seq=state.seq)   # waiting is not silence
    if cmd.signs is not None and att.signs != cmd.signs:
        return state, Outcome(kind="alive", record=att, seq=state.seq)  # it beat meanwhile
    att = evolve(att, state=AttemptState.UNKNOWN, waiting_since=None)
    effects = tuple(
        evolve(e, state=EffectState.AMBIGUOUS)
        if e.attempt == att.number and e.state is EffectState.INTENDED else e
        for e in state.effects
    )
    seq = state.seq + 1
    new = evolve(state, attempts=_replace_attempt(state, att), effects=effects, seq=seq)
    return new, Outcome(kind="unknown", record=att, seq=seq)


def _stopped(state: WorkState, cmd: MarkStopped, now: int | None) -> tuple[WorkState, Outcome]:
    att = state.attempt(cmd.attempt)
    if att is None:
        raise E.NotFound(f"attempt #{cmd.attempt} does not exist", attempt=cmd.attempt)
    if att.state in _ENDED:
        return state, Outcome(kind="unchanged", record=att, seq=state.seq)
    att = evolve(att, state=AttemptState.STOPPED)
    seq = state.seq + 1
    return evolve(state, attempts=_replace_attempt(state, att), seq=seq), Outcome(
        kind="stopped", record=att, seq=seq)


def _record(state: WorkState, cmd: RecordSteps, now: int | None) -> tuple[WorkState, Outcome]:
    att, stale = _fence(state, cmd.attempt, cmd.token, cmd.secret)
    if not cmd.entries:
        raise E.InvalidRecord("record_steps needs at least one entry", field="entries")
    journal, seq, added = _journal(state, att, cmd.token, stale, cmd.entries)
    new = evolve(state, journal=journal, seq=seq,
                  attempts=_touch(state, att, _when(cmd.at, now), stale),
                  stale_writes_applied=state.stale_writes_applied + (added if stale else 0))
    return new, Outcome(kind="journaled", record=journal[-1], seq=seq)


_NEW = object.__new__
_SET = object.__setattr__
_RUNNING = AttemptState.RUNNING
#: Canonical text of at most this many characters is within the limit whatever its characters.
_MAX_CHARS = MAX_PAYLOAD_BYTES // 4


def _usual_owner(state: WorkState, cmd: RecordSteps | Heartbeat) -> Attempt | None:
    """The attempt ``cmd`` writes for when it comes from the current owner (its token is the
    epoch and the attempt's, it carries the token's secret, the attempt has not ended): the
    fence's conditions, shared by the quick paths; None sends the command to the general path."""
    token = cmd.token
    if token != state.epoch or token <= 0:
        return None
    number = cmd.attempt
    for att in state.attempts:          # WorkState.attempt
        if att.number == number:
            break
    else:
        return None
    if att.token != token or att.state in _ENDED:
        return None
    if att.key_hash is not None:
        secret = cmd.secret
        if type(secret) is not str or (_KEY_HASHES.get(secret) or _secret_hash(secret)) != att.key_hash:
            return None
    return att


#: Journals of at most this many entries are scanned for a result id (a store's view holds a
#: few); longer ones are looked up in :func:`_journal_ids`' index.
_SCAN = 32
#: The key, in a state's ``__dict__``, of the index of its journal's result ids: no field, so
#: no equality, copy, encoding or stored row sees it (see :func:`_journal_ids`).
_IDS = "_journal_ids"
_Runs = tuple[frozenset[str], ...]


def _journal_ids(state: WorkState) -> _Runs:
    """The result ids of ``state.journal`` as runs of sets, their union exactly those ids.

    Kept in the state's ``__dict__`` (a cache, no field) as ``(journal, runs)``, and believed
    only for the very journal tuple it was made for (``is``: a tuple never changes, and the
    index holds it, so its id cannot be reused). So a state rolled back, rebuilt with another
    journal (``evolve``, ``replace``) or decoded from storage has no index, or one that is not
    believed, and gets one built here once (a scan: what every step paid before). The quick
    path hands the state it returns the runs grown by the entries it appended
    (:func:`_grown`): along a chain of step writes, a step costs no scan of the journal.
    """
    journal = state.journal
    kept = state.__dict__.get(_IDS)
    if kept is not None and kept[0] is journal:
        runs: _Runs = kept[1]
        return runs
    runs = (frozenset([e.result_id for e in journal]),)
    state.__dict__[_IDS] = (journal, runs)   # immutable both: a later apply on state reuses it
    return runs


def _grown(runs: _Runs, ids: list[str]) -> _Runs:
    """``runs`` with ``ids`` added as a new run, merged with the newest runs no larger than it
    (a binary counter's carries): O(log n) runs, each id copied O(log n) times over its life."""
    new = frozenset(ids)
    if not runs or len(runs[-1]) > len(new):
        return (*runs, new)
    out = list(runs)
    while out and len(out[-1]) <= len(new):
        new = out.pop() | new
    out.append(new)
    return tuple(out)


def _record_usual(state: WorkState, cmd: RecordSteps,
                  now: int | None) -> tuple[WorkState, Outcome] | None:
    """What ``apply`` answers for ``cmd`` in the usual case, built directly; None otherwise.

    The usual case: the attempt's current owner writes new entries that pass every check (its
    token is the epoch, it carries the token's secret, the attempt has not ended, each entry's
    name, input key, external names, size and version parts are right, none is journaled
    already). These are the checks of :func:`_fence`, :func:`_check_sources` and
    :func:`_journal`, each one a condition here: when any of them fails (a stale or foreign
    token, a retried entry, a bad key) this returns None and the general path decides, so every
    refusal and every unusual answer comes from the general path. Equality with it is tested
    command by command (tests/test_ledger_fast.py).
    """
    att = _usual_owner(state, cmd)
    if att is None:
        return None
    token, number = att.token, att.number
    entries = cmd.entries
    if not entries:
        return None
    pins = state.policy.pins
    parts: dict[str, str] | None = None
    if pins and att.pinned_version is not None:
        for version in state.inputs:    # WorkState.version
            if version.version == att.pinned_version:
                parts = version.parts
                break
        else:
            return None
    journal = state.journal
    runs = _journal_ids(state) if len(journal) > _SCAN else None
    seq = state.seq
    added: list[JournalEntry] = []
    # a batch's own result ids, when it has more than a few (a flush of many steps): one set
    # lookup per entry instead of a scan of the entries added before it
    ids: set[str] | None = set() if len(entries) > 8 else None
    for w in entries:
        step, sources, external, result, rid = w.step, w.sources, w.external, w.result, w.result_id
        if not step or w.derived:
            return None
        known = _KEYED.get(w.input_key)    # computed from exactly these (exact str) inputs?
        if (known is None or known[0] != step or known[1] != tuple(sources.items())) \
                and input_key(step, sources) != w.input_key:
            return None
        for name in external:
            if name not in sources:
                return None
        known_id = _RESULT_IDS.get(rid)     # _derived_id
        if (known_id is None or known_id[0] != step or known_id[1] != w.input_key
                or known_id[2] != number) and _result_hash(step, w.input_key, number) != rid:
            return None
        if not _short(result, _MAX_CHARS):
            text = _text_of(result)     # _size: a character is at most four bytes
            if len(text) > _MAX_CHARS and (len(text) if text.isascii()
                                            else len(text.encode("utf-8"))) > MAX_PAYLOAD_BYTES:
                return None
        if parts is not None:           # _check_against
            for name, digest in sources.items():
                if name in external:
                    if name in parts:
                        return None
                    continue
                part = parts.get(name)
                if part is None:
                    if digest not in parts.values():
                        return None
                elif part != digest:
                    return None
        if runs is None:
            for e in journal:
                if e.result_id == rid:
                    return None
        else:
            for run in runs:
                if rid in run:
                    return None
        if ids is None:
            for e in added:
                if e.result_id == rid:
                    return None
        elif rid in ids:
            return None
        else:
            ids.add(rid)
        seq += 1
        fields = {"step": step, "input_key": w.input_key if pins else None,
                  "sources": sources if pins else {},     # the command is a copy
                  "result": result, "result_id": rid, "attempt": att.number, "token": token,
                  "seq": seq, "stale": False, "external": tuple(external) if pins else (),
                  "derived": (), "roots": None}
        entry = _NEW(JournalEntry)
        _SET(entry, "__dict__", fields)
        added.append(entry)
    at = cmd.at if now is None or cmd.at <= now else now
    fields = att.__dict__.copy()        # _alive
    fields["state"] = _RUNNING
    fields["last_heartbeat"] = max(att.last_heartbeat, at)
    fields["signs"] = att.signs + 1
    fields["waiting_for"] = None
    fields["waiting_since"] = None
    alive = _NEW(Attempt)
    _SET(alive, "__dict__", fields)
    attempts = state.attempts
    fields = state.__dict__.copy()
    grown = journal + tuple(added)      # a tuple's concatenation: no list built between
    fields["journal"] = grown
    if runs is not None:
        fields[_IDS] = (grown, _grown(runs, [e.result_id for e in added]))
    fields["seq"] = seq
    fields["attempts"] = ((alive,) if len(attempts) == 1 else
                          tuple([alive if a.number == number else a for a in attempts]))
    new = _NEW(WorkState)
    _SET(new, "__dict__", fields)
    # The outcome's record is a copy of the last entry (clone's copy, built directly).
    fields = added[-1].__dict__.copy()
    fields["sources"] = fields["sources"].copy()
    fields["result"] = clone(fields["result"])
    record = _NEW(JournalEntry)
    _SET(record, "__dict__", fields)
    outcome = _NEW(Outcome)
    _SET(outcome, "__dict__", {"kind": "journaled", "record": record, "seq": seq})
    return new, outcome


_WAITING = AttemptState.WAITING
_UNKNOWN_STATE = AttemptState.UNKNOWN


def _beat_usual(state: WorkState, cmd: Heartbeat,
                now: int | None) -> tuple[WorkState, Outcome] | None:
    """What ``apply`` answers for ``cmd`` in the usual case, built directly; None otherwise.

    The usual case: a beat (not the claim) from the attempt's current owner (its token is the
    epoch, it carries the token's secret, the attempt has not ended): ``beat``, or ``revived``
    after ``unknown``. These are the conditions under which :func:`_heartbeat` reaches its last
    branch; any other case (the claim, a replaced or ended attempt, a forged token) returns None
    and the general path decides. Tested against it (tests/test_ledger_fast.py).
    """
    if cmd.claim:
        return None
    att = _usual_owner(state, cmd)
    if att is None:
        return None
    number = att.number
    at = cmd.at if now is None or cmd.at <= now else now
    waiting = att.state is _WAITING     # _alive(resume=False): a beat keeps a wait
    fields = att.__dict__.copy()
    fields["state"] = _WAITING if waiting else _RUNNING
    fields["last_heartbeat"] = max(att.last_heartbeat, at)
    fields["signs"] = att.signs + 1
    fields["waiting_for"] = att.waiting_for if waiting else None
    fields["waiting_since"] = att.waiting_since if waiting else None
    fields["heartbeats"] = att.heartbeats + 1
    alive = _NEW(Attempt)
    _SET(alive, "__dict__", fields)
    attempts = state.attempts
    seq = state.seq + 1
    fields = state.__dict__.copy()
    fields["attempts"] = ((alive,) if len(attempts) == 1 else
                          tuple([alive if a.number == number else a for a in attempts]))
    fields["seq"] = seq
    new = _NEW(WorkState)
    _SET(new, "__dict__", fields)
    # An attempt holds nothing that can change: clone shares it, so the outcome does too.
    outcome = _NEW(Outcome)
    _SET(outcome, "__dict__", {"kind": "revived" if att.state is _UNKNOWN_STATE else "beat",
                               "record": alive, "seq": seq})
    return new, outcome


def _checked_parts(state: WorkState, journal: tuple[JournalEntry, ...], parts: tuple[Part, ...],
                   version: str | None) -> tuple[Part, ...]:
    """The candidate's parts as the journal recorded them, checked against ``version``.

    A part's claims (step, input key, sources) must be those of the journal entry that produced
    its result: the candidate's own labels are never trusted. Without pins, parts are names only.
    """
    entries = {e.result_id: e for e in journal}
    out = []
    for p in parts:
        e = entries.get(p.result_id)
        if e is None:
            raise E.InvalidRecord(f"part {p.step!r} names a result that is not journaled",
                                  field="parts", step=p.step)
        if not state.policy.pins:
            out.append(evolve(p, input_key=None, sources={}, external=(), derived=(), roots=None))
            continue
        if (e.step, e.input_key, e.sources) != (p.step, p.input_key, p.sources):
            raise E.VersionMismatch(
                f"part {p.step!r} claims inputs that the journal entry of its result "
                f"{p.result_id[:8]} (step {e.step!r}) was not computed from",
                step=p.step, result_id=p.result_id,
            )
        v = state.version(version) if version is not None else None
        if v is None:
            raise E.VersionMismatch(f"the candidate names no published version ({version!r})",
                                    version=version)
        _check_against(state, v, e.step, _roots(e), (), f"part {p.step!r}")
        out.append(Part(step=e.step, input_key=e.input_key, sources=dict(e.sources),
                        result_id=e.result_id, external=e.external, derived=e.derived,
                        roots=dict(e.roots) if e.roots is not None else None))
    return tuple(out)


#: ``Policy.assembly`` for content that is ``{part step: journaled result}`` of the named parts.
ASSEMBLE_PARTS = "*"


#: The step name under which an engine-side wrapper journals a final answer it was handed
#: (:func:`assembly_write`).
ASSEMBLY = "assembly"


def is_bound(results: Any, parts: tuple[Part, ...], content: Any,
             assembly: str | None = None) -> bool:
    """Whether ``content`` is what the journal holds for ``parts``: the journaled result of one
    of them (the assembly step), or ``{part step: journaled result}``; with a declared
    ``assembly`` (``Policy.assembly``), exactly that form. ``results`` maps result id to the
    journaled result and holds every part's. The rule :func:`apply` enforces on a candidate."""
    text = canonical(content)
    if assembly is not None and assembly != ASSEMBLE_PARTS:
        part = next((p for p in parts if p.step == assembly), None)
        return part is not None and canonical(results[part.result_id]) == text
    if assembly is None:
        for p in reversed(parts):   # the assembly is usually the last part named: look there first
            if canonical(results[p.result_id]) == text:
                return True
        if not isinstance(content, dict) or len(content) != len(parts):
            return False
    return text == canonical({p.step: results[p.result_id] for p in parts})


def assembly_write(work_id: str, attempt: int, parts: tuple[Part, ...], content: Any,
                   name: str = ASSEMBLY) -> tuple[StepWrite, Part]:
    """``content`` journaled as the assembly step ``name`` of ``parts``: a derived step whose
    inputs are the parts' result ids (its provenance chains back through them to the version's
    parts), and the part that names it. For engine-side code handed a final answer built from
    the steps (a workflow's assembled digest, an agent's final message): the write goes with
    the candidate, in the same command (``SubmitCandidate.flush``)."""
    sources = {p.step: p.result_id for p in parts}
    key = input_key(name, sources)
    rid = result_id(work_id, name, key, attempt)
    derived = tuple(sorted(sources))
    write = StepWrite(step=name, sources=sources, input_key=key, result=content, result_id=rid,
                      derived=derived)
    return write, Part(step=name, input_key=key, sources=dict(sources), result_id=rid,
                       derived=derived)


def _check_content(assembly: str | None, journal: tuple[JournalEntry, ...],
                   parts: tuple[Part, ...], content: Any) -> None:
    """The candidate's content is what the journal says it is, on every work (:func:`is_bound`).
    Anything else could quote anything (another version's figure, a value changed after it
    was journaled) under honest parts: refused, with the fix."""
    results = {e.result_id: e.result for e in journal}
    if assembly is not None and assembly != ASSEMBLE_PARTS \
            and not any(p.step == assembly for p in parts):
        raise E.InvalidRecord(f"the candidate does not name its assembly step {assembly!r}",
                              field="parts", step=assembly)
    if is_bound(results, parts, content, assembly):
        return
    if assembly == ASSEMBLE_PARTS:
        raise E.InvalidRecord("the candidate's content is not the mapping of its parts' journaled "
                              "results: content is bound to the journal", field="content")
    if assembly is not None:
        raise E.InvalidRecord(f"the candidate's content is not the journaled result of step "
                              f"{assembly!r}: content is bound to the journal", field="content")
    names = ", ".join(f"{p.step}=outlive.ResultOf({p.step!r})" for p in parts[:3]) \
        + (", ..." if len(parts) > 3 else "")
    raise E.InvalidRecord(
        "the candidate's content is neither the journaled result of one of its parts nor the "
        "mapping {part step: journaled result}: content is bound to the journal. Journal the "
        "assembly as a step that reads the parts' results and submit its result: content = "
        f"await worker.step('assemble', build, {names}); await worker.candidate(content)",
        field="content")


def _submit(state: WorkState, cmd: SubmitCandidate, now: int | None) -> tuple[WorkState, Outcome]:
    att, stale = _fence(state, cmd.attempt, cmd.token, cmd.secret)
    _size(cmd.content, "candidate content")
    if not cmd.parts:
        raise E.InvalidRecord("a candidate needs at least one part", field="parts")
    version = att.pinned_version if state.policy.pins else None
    expect = candidate_digest(state.work_id, version, cmd.parts, cmd.content)
    if expect != cmd.digest:
        raise E.InvalidRecord("the candidate's digest is not the hash of its parts and content",
                              field="digest")
    names = [p.step for p in cmd.parts]
    if len(set(names)) != len(names) or len({p.result_id for p in cmd.parts}) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1}) or names
        raise E.InvalidRecord(f"the candidate names a part twice ({', '.join(twice)})",
                              field="parts")
    missing = [r for r in state.policy.required if r not in names]
    if missing:
        raise E.InvalidRecord(f"the candidate lacks the required parts {missing}",
                              field="parts", missing=missing)
    journal, seq, added = _journal(state, att, cmd.token, stale, cmd.flush)
    parts = _checked_parts(state, journal, cmd.parts, version)
    _check_content(state.policy.assembly, journal, parts, cmd.content)
    existing = state.candidate(cmd.digest)
    if existing is not None and (existing.attempt == att.number or stale
                                 or any(a.digest == cmd.digest for a in state.acceptances)):
        return state, Outcome(kind="exists", record=existing, seq=state.seq)
    # A successor that rebuilt the same digest (every part restored) submits it as its own: the
    # predecessor's record carries a replaced token and could never be accepted.
    seq += 1
    cand = Candidate(
        digest=cmd.digest, work_id=state.work_id, version=version, parts=parts,
        content=cmd.content, attempt=att.number, token=cmd.token, seq=seq, at=cmd.at, stale=stale,
    )
    new = evolve(
        state, journal=journal, candidates=(*state.candidates, cand), seq=seq,
        attempts=_touch(state, att, _when(cmd.at, now), stale),
        stale_writes_applied=state.stale_writes_applied + ((added + 1) if stale else 0),
    )
    return new, Outcome(kind="candidate", record=cand, seq=seq)


def check_acceptable(state: WorkState, digest: str, contract: Contract | None = None) -> Candidate:
    """The mechanical checks before any assessor runs: owner, version, part hashes, and that
    the candidate's attempt was not stopped nor the digest refused (under ``contract``)."""
    cand = state.candidate(digest)
    if cand is None:
        raise E.NotFound(f"no candidate {digest[:8]}", digest=digest)
    if contract is not None:
        refused = state.refusal(cand.digest, contract)
        if refused is not None:
            raise contract_failed(refused)
    att = state.attempt(cand.attempt)
    if att is not None and att.state is AttemptState.STOPPED:
        raise E.AttemptStopped(
            f"candidate {cand.digest[:8]} came from attempt #{cand.attempt}, which was stopped",
            attempt=cand.attempt, digest=cand.digest)
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
            _check_against(state, v, p.step, _roots(p), (),
                           f"part {p.step!r} of {cand.digest[:8]}")
    return cand


def _accept(state: WorkState, cmd: Accept, now: int | None) -> tuple[WorkState, Outcome]:
    cand = state.candidate(cmd.digest)
    if cand is None:
        raise E.NotFound(f"no candidate {cmd.digest[:8]}", digest=cmd.digest)
    done = accepted(state, cmd.digest, cmd.contract)
    if done is not None:
        return state, Outcome(kind="exists", record=done, seq=state.seq)
    refused = state.refusal(cand.digest, cmd.contract)
    if refused is not None and not cmd.verdict:
        return state, Outcome(kind="refused", record=refused, seq=state.seq)
    check_acceptable(state, cmd.digest, cmd.contract)
    if not cmd.verdict:
        seq = state.seq + 1
        ref = Refusal(digest=cand.digest, version=cand.version, contract=cmd.contract,
                      reason=cmd.reason, seq=seq, at=cmd.at, attempt=cand.attempt)
        new = evolve(state, refusals=(*state.refusals, ref), seq=seq)
        return new, Outcome(kind="refused", record=ref, seq=seq)
    seq = state.seq + 1
    acc = Acceptance(digest=cand.digest, version=cand.version, contract=cmd.contract, seq=seq,
                     at=cmd.at, attempt=cand.attempt, note=cmd.reason)
    new = evolve(state, acceptances=(*state.acceptances, acc), seq=seq)
    return new, Outcome(kind="accepted", record=acc, seq=seq)


def _intent(state: WorkState, cmd: RecordIntent, now: int | None) -> tuple[WorkState, Outcome]:
    att, stale = _fence(state, cmd.attempt, cmd.token, cmd.secret)
    if not cmd.op_key:
        raise E.InvalidRecord("an effect needs an operation key", field="op_key")
    _size(cmd.payload, "payload of {!r}", cmd.op_key)
    if content_hash(cmd.payload) != cmd.payload_digest:
        # The intent carries what it intends: whoever settles it later (a successor, another
        # process) resends exactly that, so an intent without its payload could never be settled.
        if cmd.payload is None:
            raise E.InvalidRecord(
                f"the intent for {cmd.op_key!r} carries no payload: pass payload= (the value "
                "whose content_hash is payload_digest), so that any successor can resend it",
                field="payload", op_key=cmd.op_key)
        raise E.InvalidRecord(f"the payload of {cmd.op_key!r} does not hash to its digest",
                              field="payload", op_key=cmd.op_key)
    old = state.effect(cmd.op_key)
    if old is not None:
        if old.payload_digest != cmd.payload_digest:
            raise E.EffectConflict(
                f"operation {cmd.op_key!r} was intended with another payload",
                field="payload", op_key=cmd.op_key,
            )
        if old.state in _SETTLED:
            return state, Outcome(kind="confirmed", record=old, seq=state.seq)
        upd = evolve(old, attempt=att.number, sent_key=cmd.sent_key, sends=old.sends + 1,
                      state=EffectState.INTENDED,
                      payload=old.payload if old.payload is not None else cmd.payload)
        seq = state.seq + 1
        effects = tuple(upd if e.op_key == cmd.op_key else e for e in state.effects)
        new = evolve(state, effects=effects, seq=seq, attempts=_touch(state, att, _when(cmd.at, now), stale),
                      stale_writes_applied=state.stale_writes_applied + (1 if stale else 0))
        return new, Outcome(kind="settle", record=upd, seq=seq)
    seq = state.seq + 1
    eff = Effect(op_key=cmd.op_key, payload_digest=cmd.payload_digest, state=EffectState.INTENDED,
                 attempt=att.number, sent_key=cmd.sent_key, intended_at=cmd.at,
                 payload=cmd.payload)
    new = evolve(state, effects=(*state.effects, eff), seq=seq,
                  attempts=_touch(state, att, _when(cmd.at, now), stale),
                  stale_writes_applied=state.stale_writes_applied + (1 if stale else 0))
    return new, Outcome(kind="intended", record=eff, seq=seq)


def _confirm(state: WorkState, cmd: ConfirmEffect, now: int | None) -> tuple[WorkState, Outcome]:
    att, stale = _fence(state, cmd.attempt, cmd.token, cmd.secret)
    old = state.effect(cmd.op_key)
    if old is None:
        raise E.NotFound(f"no intent for {cmd.op_key!r}: record the intent before sending",
                         op_key=cmd.op_key)
    if not isinstance(cmd.receipt, Receipt):
        raise E.InvalidRecord(f"confirming {cmd.op_key!r} needs the receiver's Receipt",
                              field="receipt", op_key=cmd.op_key)
    if cmd.receipt.key != old.sent_key:
        # The receipt is the receiver's answer for the key it was sent: an answer for another
        # key confirms an operation the receiver never saw.
        raise E.WrongReceipt(
            f"the receipt names key {cmd.receipt.key!r}, but the intent for {cmd.op_key!r} was "
            f"sent as {old.sent_key!r}: a receipt confirms only the key it answers",
            field="receipt", op_key=cmd.op_key, key=cmd.receipt.key, sent_key=old.sent_key)
    if old.state in _SETTLED:
        return state, Outcome(kind="confirmed", record=old, seq=state.seq)
    settled = (EffectState.POSSIBLY_DUPLICATED if possibly_duplicated(old, cmd.receipt)
               else EffectState.CONFIRMED)
    upd = evolve(old, state=settled, receipt=cmd.receipt, confirmed_at=cmd.at,
                  attempt=att.number)
    seq = state.seq + 1
    effects = tuple(upd if e.op_key == cmd.op_key else e for e in state.effects)
    new = evolve(state, effects=effects, seq=seq, attempts=_touch(state, att, _when(cmd.at, now), stale),
                  stale_writes_applied=state.stale_writes_applied + (1 if stale else 0))
    return new, Outcome(kind="confirmed", record=upd, seq=seq)


def _finish(state: WorkState, cmd: Finish, now: int | None) -> tuple[WorkState, Outcome]:
    if _owner(state, cmd.attempt, cmd.token, cmd.secret).state is AttemptState.FINISHED:
        att = state.attempt(cmd.attempt)
        return state, Outcome(kind="unchanged", record=att, seq=state.seq)
    att, _stale = _fence(state, cmd.attempt, cmd.token, cmd.secret)   # a stopped one: refused
    att = evolve(att, state=AttemptState.FINISHED,
                  last_heartbeat=max(att.last_heartbeat, _when(cmd.at, now)))
    seq = state.seq + 1
    return evolve(state, attempts=_replace_attempt(state, att), seq=seq), Outcome(
        kind="finished", record=att, seq=seq)


def _wait(state: WorkState, cmd: Wait, now: int | None) -> tuple[WorkState, Outcome]:
    att, stale = _fence(state, cmd.attempt, cmd.token, cmd.secret)
    if not cmd.reason:
        raise E.InvalidRecord("a wait says what it waits for", field="reason")
    if stale:
        return state, Outcome(kind="ignored", record=att, seq=state.seq)
    at = _when(cmd.at, now)
    since = att.waiting_since if att.state is AttemptState.WAITING and att.waiting_since is not None \
        else at      # a second Wait while waiting keeps the wait's start: the limit is not reset
    att = evolve(att, state=AttemptState.WAITING, waiting_for=cmd.reason, waiting_since=since,
                  last_heartbeat=max(att.last_heartbeat, at), signs=att.signs + 1)
    seq = state.seq + 1
    return evolve(state, attempts=_replace_attempt(state, att), seq=seq), Outcome(
        kind="waiting", record=att, seq=seq)


def _resume(state: WorkState, cmd: Resume, now: int | None) -> tuple[WorkState, Outcome]:
    att, _stale = _fence(state, cmd.attempt, cmd.token, cmd.secret)
    if att.state is not AttemptState.WAITING:
        return state, Outcome(kind="unchanged", record=att, seq=state.seq)
    att = evolve(att, state=AttemptState.RUNNING, waiting_for=None, waiting_since=None,
                  last_heartbeat=max(att.last_heartbeat, _when(cmd.at, now)), signs=att.signs + 1)
    seq = state.seq + 1
    return evolve(state, attempts=_replace_attempt(state, att), seq=seq), Outcome(
        kind="resumed", record=att, seq=seq)


def _fail(state: WorkState, cmd: Fail, now: int | None) -> tuple[WorkState, Outcome]:
    if not isinstance(cmd.error, AttemptError):
        raise E.InvalidRecord("a failure carries an AttemptError", field="error")
    att, stale = _fence(state, cmd.attempt, cmd.token, cmd.secret)
    if stale:
        return state, Outcome(kind="ignored", record=att, seq=state.seq)
    at = _when(cmd.at, now)
    att = evolve(att, state=AttemptState.FAILED, error=evolve(cmd.error, at=at), waiting_for=None,
                 waiting_since=None,
                 last_heartbeat=max(att.last_heartbeat, at), signs=att.signs + 1)
    seq = state.seq + 1
    return evolve(state, attempts=_replace_attempt(state, att), seq=seq), Outcome(
        kind="failed", record=att, seq=seq)


def _fail_work(state: WorkState, cmd: FailWork, now: int | None) -> tuple[WorkState, Outcome]:
    if not isinstance(cmd.error, AttemptError):
        raise E.InvalidRecord("a failure carries an AttemptError", field="error")
    if state.failure is not None:
        return state, Outcome(kind="unchanged", record=state.failure, seq=state.seq)
    failure = evolve(cmd.error, at=_when(cmd.at, now))
    seq = state.seq + 1
    return evolve(state, failure=failure, seq=seq), Outcome(kind="work_failed", record=failure,
                                                            seq=seq)


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
    Fail: _fail,
    FailWork: _fail_work,
}
