"""One error tree for every backend.

Adapters translate engine errors into these types, and the conformance suite asserts them, so a
caller can write one ``except`` clause whatever engine runs underneath::

    OutliveError
    ├── ConfigError                  bad URL, unknown scheme, missing extra
    │   ├── UnknownBackend
    │   └── MissingExtra             carries the install line
    ├── BackendUnavailable           server down or unreachable; nothing was written
    ├── InvalidRecord                malformed command or record; nothing was written
    │   ├── InvalidArgument          a public function called with an argument of the wrong
    │   │                            type (also a TypeError); the message names the argument
    │   ├── PayloadTooLarge          over MAX_PAYLOAD_BYTES
    │   ├── UndeclaredInput          an input neither declared in the key, nor a part of the
    │   │                            pinned version, nor declared external
    │   └── CorruptRecord            a stored record that does not decode to a valid record
    ├── ScenarioError                a scenario file is malformed (names file, field, problem)
    ├── GaveUp                       the supervisor reached its cap on attempts (carries them
    │                                and the last error)
    ├── EffectAmbiguous              the receiver did not answer, or the sender broke its
    │                                contract: the intent stays open; resend the same key
    └── Rejected                     the ledger refused a command; nothing was written
        ├── FencingError
        │   ├── StaleOwner           token older than the current epoch
        │   ├── UnknownToken         a token never issued to this attempt of this work (forged,
        │   │                        from the future, another work's, or without its secret)
        │   ├── AttemptEnded         the attempt was stopped or finished: no write authority
        │   ├── AttemptClaimed       a second worker tried to claim an attempt already claimed
        │   └── AttemptSilent        the attempt was marked unknown before any worker claimed it
        ├── NotController            a controller's command without the controller's
        │                            credential (an attempt's token cannot issue it)
        ├── ResultConflict           a journal write whose result id names another entry
        ├── VersionMismatch          built from, or for, another input version
        ├── ContractFailed           the assessor said no
        ├── AttemptActive            a successor while the owner is still live
        ├── AttemptStopped           the attempt was stopped (its candidate refused, or replaced)
        ├── WorkFailed               the work ended with an error (non-retryable, or retries
        │                            spent): carries its type, message and traceback
        ├── InputConflict            a published version's content cannot change
        ├── NotFound                 unknown work, version, candidate or attempt
        ├── WorkExists               open_work with another policy
        ├── EffectConflict           one operation key, two different payloads
        └── WrongReceipt             a confirmation whose receipt answers another key
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AttemptActive",
    "AttemptClaimed",
    "AttemptEnded",
    "AttemptSilent",
    "AttemptStopped",
    "BackendUnavailable",
    "ConfigError",
    "ContractFailed",
    "CorruptRecord",
    "EffectAmbiguous",
    "EffectConflict",
    "FencingError",
    "GaveUp",
    "InputConflict",
    "InvalidArgument",
    "InvalidRecord",
    "MissingExtra",
    "NotController",
    "NotFound",
    "OutliveError",
    "PayloadTooLarge",
    "Rejected",
    "ResultConflict",
    "ScenarioError",
    "StaleOwner",
    "UndeclaredInput",
    "UnknownBackend",
    "UnknownToken",
    "VersionMismatch",
    "WorkExists",
    "WorkFailed",
    "WrongReceipt",
    "error_from_dict",
]


class OutliveError(Exception):
    """Root of every error outlive raises; ``details`` survives a trip through an engine."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe form, so an adapter can carry the error across an engine boundary."""
        return {"type": type(self).__name__, "message": self.message, "details": self.details}


class ConfigError(OutliveError):
    """The backend URL or installation is wrong; fix the configuration, not the data."""


class UnknownBackend(ConfigError):
    """No backend is registered for this URL scheme."""


class MissingExtra(ConfigError):
    """The scheme is known but its distribution is not installed; ``install`` says how."""

    def __init__(self, message: str, *, install: str, **details: Any) -> None:
        super().__init__(message, install=install, **details)
        self.install = install


class BackendUnavailable(OutliveError):
    """The engine or database could not be reached; the command was not applied."""


class InvalidRecord(OutliveError):
    """A command or record is malformed; it was refused before anything was written."""


class InvalidArgument(InvalidRecord, TypeError):
    """A public function was called with an argument of the wrong type (``assess(digest=None)``,
    ``dependable(rule="strict")``): refused before anything is read or written. The message and
    ``details["argument"]`` name the argument; it is also a ``TypeError``, as Python's own are."""


class PayloadTooLarge(InvalidRecord):
    """A result, candidate or payload is larger than the stated limit; store a reference."""


class UndeclaredInput(InvalidRecord):
    """A step's inputs are not what it declared: its input key is not the hash of its declared
    inputs, or (under version pins) an input is neither a part of the pinned version, by name
    or by content, nor declared external. The message says how to declare it."""


class CorruptRecord(InvalidRecord):
    """A stored record does not decode to a valid record (``work_id`` names the work, if known)."""


class ScenarioError(OutliveError):
    """A scenario file is malformed; the message names the file, the field and the problem."""


class Rejected(OutliveError):
    """The ledger refused the command and wrote nothing."""


class FencingError(Rejected):
    """The write's owner token is not the current epoch."""


class StaleOwner(FencingError):
    """The writer was replaced: its token is older than the current epoch. Stop working."""


class UnknownToken(FencingError):
    """The token was never issued to this attempt (forged, or larger than the epoch)."""


class AttemptEnded(FencingError):
    """The attempt was stopped or finished: it holds no write authority any more."""


class AttemptClaimed(FencingError):
    """The attempt was already claimed by a worker: one token reaches at most one live worker."""


class AttemptSilent(FencingError):
    """The attempt went silent (marked ``unknown``) before any worker claimed it.

    Its worker started later than the lease allowed; the work is being handed to a successor,
    so this worker must not start it (no worker ever held it: nothing of it is running).
    """


class NotController(Rejected):
    """A controller's command (publish, admit, mark unknown or stopped, judge) without the
    controller's credential: the work was opened by a controller holding one, and only it
    decides. An attempt's token and secret cannot issue these."""


class ResultConflict(Rejected):
    """A journal write names a result id the journal already holds for another step, input key,
    attempt or value: ids come from the store, and an entry is never merged or replaced."""


class VersionMismatch(Rejected):
    """The record was built from, or for, another input version than the one required."""


class ContractFailed(Rejected):
    """The assessor judged the candidate and refused it under the named contract."""


class AttemptActive(Rejected):
    """A successor cannot be admitted while the current attempt is admitted or running."""


class AttemptStopped(Rejected):
    """The attempt no longer owns the work: its candidate was refused, or it was replaced."""


class GaveUp(OutliveError):
    """The supervisor admitted as many attempts as its cap allows without an accepted result.

    ``details["attempts"]`` lists the attempts (number, token, state, pinned version): a typed
    end, never a silent loop. Raise the cap or fix the cause, then supervise again.
    """


class WorkFailed(Rejected):
    """The work ended with an error: non-retryable, or its retries spent; nothing more is admitted.

    ``details`` carry the error's ``type``, ``message`` and ``traceback`` (as the failing attempt
    recorded them) and ``work_id``. Raised by a work handle's ``result()`` and by the ledger when
    asked to admit an attempt to a failed work.
    """


class InputConflict(Rejected):
    """A published input version is immutable: same version name, different content."""


class NotFound(Rejected):
    """The work, version, candidate, attempt or effect named does not exist."""


class WorkExists(Rejected):
    """The work is already open with another policy."""


class EffectConflict(Rejected):
    """One operation key was used with two different payloads (by the ledger or a receiver)."""


class WrongReceipt(Rejected):
    """A confirmation's receipt names another key than the one its intent was sent under: the
    receiver never answered for this operation, so it is not confirmed."""


class EffectAmbiguous(OutliveError):
    """The receiver did not answer: the effect may or may not have happened; resend the key."""


_TYPES: dict[str, type[OutliveError]] = {
    cls.__name__: cls
    for cls in (
        OutliveError, ConfigError, UnknownBackend, BackendUnavailable, InvalidRecord,
        InvalidArgument,
        PayloadTooLarge, UndeclaredInput, CorruptRecord, ScenarioError, Rejected, FencingError,
        StaleOwner, UnknownToken, AttemptEnded, AttemptClaimed, AttemptSilent, VersionMismatch,
        ContractFailed,
        AttemptActive, InputConflict, NotFound, WorkExists, EffectAmbiguous, EffectConflict,
        AttemptStopped, GaveUp, WorkFailed, WrongReceipt, NotController, ResultConflict,
    )
}


def error_from_dict(data: dict[str, Any]) -> OutliveError:
    """Rebuild an error carried across an engine boundary by :meth:`OutliveError.to_dict`."""
    name = str(data.get("type", "OutliveError"))
    details = dict(data.get("details") or {})
    message = str(data.get("message", name))
    if name == "MissingExtra":
        install = str(details.pop("install", ""))
        return MissingExtra(message, install=install, **details)
    cls = _TYPES.get(name, OutliveError)
    return cls(message, **details)
