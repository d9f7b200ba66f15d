"""The failure model every runner shares: errors are answers, recorded with their attempt.

An exception from an attempt is an :class:`~outlive.records.AttemptError` (type, message,
traceback, time) kept with the attempt; a :class:`RetryPolicy` says whether another attempt may
fix it. Both the runtime and the lower-level supervisor use these, so the answer to "why did
this work end?" is the same whichever runs it.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass

from . import ledger as L
from .errors import ConfigError, EffectAmbiguous, InvalidRecord, UndeclaredInput
from .records import AttemptError, WorkState

__all__ = ["NonRetryable", "RetryPolicy", "error_of", "last_error", "why_open"]


class NonRetryable(Exception):
    """Raise (or subclass) from an attempt or a step to fail the work now, without retrying.

    A deterministic mistake gains nothing from another attempt and would pay for every model
    call again.
    """


#: outlive's own programming errors: the same code fails the same way on every attempt.
_PROGRAMMING_ERRORS: tuple[type[BaseException], ...] = (UndeclaredInput, InvalidRecord,
                                                        NonRetryable)

#: Set on a ``TypeError`` raised by *calling* a step function with inputs its signature does not
#: take (the worker checks the binding): that one is a programming error; a ``TypeError`` from
#: inside the step (a model's answer of an unexpected shape, say) is retried like any other.
CALLED_WRONG = "_outlive_called_wrong"


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How a kind answers an attempt's exception, as Temporal's ``RetryPolicy`` does.

    ``maximum_attempts`` caps the attempts pinned to one input version, whether they failed or
    fell silent (0 = unlimited). The n-th retry after an error waits ``initial_interval *
    backoff_coefficient**(n-1)`` seconds, at most ``maximum_interval``. ``non_retryable`` names
    exception types (classes or their names) that fail the work at once, besides
    :class:`NonRetryable` and outlive's programming errors (``UndeclaredInput``,
    ``InvalidRecord``, a ``TypeError`` calling a step, a sender that returns no ``Receipt``).
    """

    maximum_attempts: int = 5
    initial_interval: float = 1.0
    backoff_coefficient: float = 2.0
    maximum_interval: float = 60.0
    non_retryable: tuple[type[BaseException] | str, ...] = ()

    def __post_init__(self) -> None:
        if self.maximum_attempts < 0:
            raise ConfigError("maximum_attempts must be >= 0 (0 = unlimited)",
                              field="maximum_attempts")
        if self.initial_interval < 0 or self.maximum_interval < 0 or self.backoff_coefficient < 1:
            raise ConfigError("intervals must be >= 0 and backoff_coefficient >= 1",
                              field="initial_interval")

    def retryable(self, exc: BaseException) -> bool:
        """Whether another attempt may fix ``exc``."""
        if isinstance(exc, _PROGRAMMING_ERRORS) or getattr(exc, CALLED_WRONG, False):
            return False
        if isinstance(exc, EffectAmbiguous) and exc.details.get("broken_contract"):
            return False
        names = {c if isinstance(c, str) else c.__name__ for c in self.non_retryable}
        return not any(cls.__name__ in names or cls.__qualname__ in names
                       for cls in type(exc).__mro__)

    def delay_ms(self, failures: int) -> int:
        """Wait before the attempt after the ``failures``-th consecutive error (1 = the first)."""
        if failures <= 0:
            return 0
        delay = self.initial_interval * self.backoff_coefficient ** (failures - 1)
        return int(min(delay, self.maximum_interval) * 1000)


def error_of(exc: BaseException, at: int, retryable: bool) -> AttemptError:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return AttemptError(type=type(exc).__qualname__, message=str(exc), traceback=tb[-8_000:],
                        at=at, retryable=retryable)


def last_error(state: WorkState) -> AttemptError | None:
    """The work's failure, or else the error of its latest failed attempt."""
    if state.failure is not None:
        return state.failure
    for att in reversed(state.attempts):
        if att.error is not None:
            return att.error
    return None


def why_open(state: WorkState) -> str:
    """Why a work is not complete, in one phrase, for the final error."""
    acc = state.latest_acceptance
    if acc is None or (state.policy.pins and acc.version != state.current_version):
        refused = [r for r in state.refusals
                   if not state.policy.pins or r.version == state.current_version]
        if refused:   # the assessor's own words: the likeliest thing to fix
            last = refused[-1]
            return (f"no result accepted for it; {len(refused)} candidate(s) refused, the last "
                    f"({last.digest[:8]}) under contract {last.contract.name} "
                    f"v{last.contract.version}: {last.reason}")
        return "no result accepted for it"
    open_effects = [e.op_key for e in state.effects if not L.is_settled(e)]
    if open_effects:
        return (f"a result was accepted ({acc.digest[:8]}), but effect {open_effects[0]!r} was "
                "never confirmed")
    return f"a result was accepted ({acc.digest[:8]}), but the kind's completion rule is not met"


