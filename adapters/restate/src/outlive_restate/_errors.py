"""One envelope for what crosses Restate: results as outlive's tagged JSON, errors as one prefix.

A result (an outcome, a state, a step's value) travels as :func:`outlive.codec.dumps` bytes. A
typed outlive error travels as a :class:`restate.TerminalError` (no retry) whose message is
``outlive-error:`` followed by the error's :meth:`~outlive.errors.OutliveError.to_dict` JSON; the
ingress answers it as ``{"message": ...}`` and a durable call raises it as a TerminalError, and
both come back to the same class through :func:`from_message`. Nothing else parses the prefix.
"""

from __future__ import annotations

import json
from typing import Any

import restate

from outlive import codec
from outlive.errors import InvalidRecord, OutliveError, Rejected, error_from_dict

__all__ = ["PREFIX", "dumps", "from_message", "from_terminal", "loads", "to_terminal"]

#: A TerminalError message that carries a typed outlive error starts with this.
PREFIX = "outlive-error:"


def dumps(value: Any) -> bytes:
    """A result, outcome or state as the bytes Restate journals and answers."""
    return codec.dumps(value).encode()


def loads(raw: bytes) -> Any:
    """The inverse of :func:`dumps` (raises :class:`InvalidRecord` on bytes it did not make)."""
    return codec.loads(raw)


def to_terminal(exc: OutliveError) -> restate.TerminalError:
    """The typed error as a TerminalError: Restate does not retry, the caller gets the class."""
    code = 409 if isinstance(exc, Rejected) else 400 if isinstance(exc, InvalidRecord) else 500
    return restate.TerminalError(PREFIX + json.dumps(exc.to_dict(), default=str), status_code=code)


def from_message(message: str) -> OutliveError | None:
    """The outlive error a TerminalError message (or an ingress error body) carries, if any."""
    i = message.find(PREFIX)
    if i < 0:
        return None
    try:
        data = json.loads(message[i + len(PREFIX):])
    except ValueError:
        return None
    return error_from_dict(data) if isinstance(data, dict) else None


def from_terminal(exc: restate.TerminalError) -> Exception:
    """The outlive error inside ``exc``, or ``exc`` itself when it carries none."""
    return from_message(exc.message or "") or exc
