"""One error tree for every backend.

Adapters translate engine errors into these types, and the conformance suite asserts them, so a
caller can write one ``except`` clause whatever engine runs underneath::

    OutliveError
    ├── ConfigError                  bad URL, unknown scheme, missing extra
    │   ├── UnknownBackend
    │   └── MissingExtra             carries the install line
    ├── BackendUnavailable           server down or unreachable; nothing was written
    ├── InvalidRecord                malformed command or record; nothing was written
    │   ├── PayloadTooLarge          over MAX_PAYLOAD_BYTES
    │   └── UndeclaredInput          a step result whose key is not its declared inputs' key
    ├── ScenarioError                a scenario file is malformed (names file, field, problem)
    ├── GaveUp                       the supervisor reached its cap on attempts (carries them)
    └── Rejected                     the ledger refused a command; nothing was written
        ├── FencingError
        │   ├── StaleOwner           token older than the current epoch
        │   └── UnknownToken         a token that was never issued (forged, or from the future)
        ├── VersionMismatch          built from, or for, another input version
        ├── ContractFailed           the assessor said no
        ├── AttemptActive            a successor while the owner is still live
        ├── AttemptStopped           the attempt was stopped (its candidate refused, or replaced)
        ├── InputConflict            a published version's content cannot change
        ├── NotFound                 unknown work, version, candidate or attempt
        ├── WorkExists               open_work with another policy
        └── EffectAmbiguous          the receiver did not answer; the intent stays open
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AttemptActive",
    "AttemptStopped",
    "BackendUnavailable",
    "ConfigError",
    "ContractFailed",
    "EffectAmbiguous",
    "FencingError",
    "GaveUp",
    "InputConflict",
    "InvalidRecord",
    "MissingExtra",
    "NotFound",
    "OutliveError",
    "PayloadTooLarge",
    "Rejected",
    "ScenarioError",
    "StaleOwner",
    "UndeclaredInput",
    "UnknownBackend",
    "UnknownToken",
    "VersionMismatch",
    "WorkExists",
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


class PayloadTooLarge(InvalidRecord):
    """A result, candidate or payload is larger than the stated limit; store a reference."""


class UndeclaredInput(InvalidRecord):
    """A step result's input key is not the key of its declared inputs."""


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


class InputConflict(Rejected):
    """A published input version is immutable: same version name, different content."""


class NotFound(Rejected):
    """The work, version, candidate, attempt or effect named does not exist."""


class WorkExists(Rejected):
    """The work is already open with another policy."""


class EffectAmbiguous(OutliveError):
    """The receiver did not answer: the effect may or may not have happened; resend the key."""


_TYPES: dict[str, type[OutliveError]] = {
    cls.__name__: cls
    for cls in (
        OutliveError, ConfigError, UnknownBackend, BackendUnavailable, InvalidRecord,
        PayloadTooLarge, UndeclaredInput, ScenarioError, Rejected, FencingError, StaleOwner,
        UnknownToken, VersionMismatch, ContractFailed, AttemptActive, InputConflict, NotFound,
        WorkExists, EffectAmbiguous, AttemptStopped, GaveUp,
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
