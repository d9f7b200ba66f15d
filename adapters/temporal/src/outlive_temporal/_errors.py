"""One result envelope for refusals and one mapper back to ``outlive.errors``.

A refusal crosses Temporal as an ``ApplicationError`` whose type is the outlive error's class name
and whose first detail is ``OutliveError.to_dict()``: an update validator's rejection, a work that
failed with a typed error, a step's refusal inside the client-driven ledger workflow. Whoever
receives it (a client, an activity) rebuilds the same typed error with :func:`typed_error`.
"""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from outlive.errors import InvalidRecord, OutliveError, error_from_dict

__all__ = ["rejection", "typed_error"]


def rejection(exc: BaseException) -> ApplicationError:
    """An outlive error as an ApplicationError whose details rebuild the same typed error."""
    if not isinstance(exc, OutliveError):
        exc = InvalidRecord(f"malformed command: {type(exc).__name__}: {exc}")
    return ApplicationError(exc.message, exc.to_dict(), type=type(exc).__name__,
                            non_retryable=True)


def typed_error(cause: BaseException | None) -> OutliveError | None:
    """The outlive error an ApplicationError (or its causes) carries, else None."""
    while cause is not None:
        if isinstance(cause, ApplicationError) and cause.details:
            data = cause.details[0]
            if isinstance(data, dict) and "type" in data:
                return error_from_dict(data)
        cause = cause.__cause__
    return None
