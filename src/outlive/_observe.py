"""Seeing what happened: one log record per ledger write or rejection, and OpenTelemetry spans.

Every command the controller and a worker send goes through :func:`execute` (and a step written
by an engine inside its own invocation is reported through :func:`recorded`), so this module is
the one place that logs records: logger ``outlive.ledger``, INFO for a write, WARNING for a
rejection, the fields on the log record as ``record.outlive`` (a dict: ``work_id``, ``command``,
``outcome`` or ``rejected``, ``attempt``, ``token``, ``step``, ``digest``, ``op_key``,
``version``).

Spans (``pip install 'outlive[otel]'``; without it they cost nothing): ``outlive.admit``,
``outlive.step`` (``outlive.restored`` says whether the journal satisfied it), ``outlive.steps``
(a batch), ``outlive.candidate``, ``outlive.acceptance`` and ``outlive.effect``, each with the
work id and the attempt, and one span event per record written or refused inside it. The
application configures the tracer provider and exporter, as OpenTelemetry libraries do.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import OutliveError

if TYPE_CHECKING:
    from .backend import Backend, StepCall
    from .ledger import Command, Outcome

__all__ = ["command_fields", "execute", "listening", "log", "recorded", "rejected",
           "run_and_record_many", "span", "step_recorded", "step_rejected",
           "traced", "tracing"]

log = logging.getLogger("outlive.ledger")

try:  # the optional extra
    from opentelemetry import trace as _otel
except ImportError:  # pragma: no cover - exercised in a venv without the extra
    _otel = None  # type: ignore[assignment]

_FIELDS = ("attempt", "token", "step", "digest", "op_key", "version", "pin", "reason")
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def command_fields(work_id: str, command: Command) -> dict[str, Any]:
    """The fields a person filters on, taken from the command (never its payload)."""
    fields: dict[str, Any] = {"work_id": work_id, "command": type(command).__name__}
    for name in _FIELDS:
        value = getattr(command, name, None)
        if value is not None:
            fields[name] = value
    entries = getattr(command, "entries", None)
    if entries:
        fields["steps"] = [e.step for e in entries]
    return fields


def _text(fields: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in fields.items())


def tracing() -> bool:
    """Whether spans can record: an SDK's tracer provider is installed. Until then the API's
    provider is a proxy whose spans record nothing, and outlive skips them (a step opens two).

    Asked on every step: while the API holds no provider and the environment names none,
    ``get_tracer_provider()`` answers its proxy, and that is known without asking it (it looks
    the name up in ``os.environ`` through Python code each time); otherwise it is asked.
    """
    if _otel is None:
        return False
    if (getattr(_otel, "_TRACER_PROVIDER", _UNKNOWN) is None and _PROVIDER_ENV_KEY is not None
            and os.environ is _ENVIRON and _PROVIDER_ENV_KEY not in _ENVIRON_DATA):
        return False
    return not isinstance(_otel.get_tracer_provider(),
                          (_otel.ProxyTracerProvider, _otel.NoOpTracerProvider))



_UNKNOWN = object()
#: ``os.environ``'s own table and the encoded name of OpenTelemetry's provider variable, for
#: a look-up without ``os.environ``'s Python methods (None: ask ``get_tracer_provider``).
_ENVIRON = os.environ
_ENVIRON_DATA: Any = getattr(os.environ, "_data", None)
_PROVIDER_ENV_KEY: Any = None
if _ENVIRON_DATA is not None and hasattr(os.environ, "encodekey"):
    _PROVIDER_ENV_KEY = os.environ.encodekey("OTEL_PYTHON_TRACER_PROVIDER")


def _event(name: str, fields: Mapping[str, Any]) -> None:
    if _otel is None:
        return
    current = _otel.get_current_span()
    if current.is_recording():
        current.add_event(name, {f"outlive.{k}": v if isinstance(v, (str, int, bool, float))
                                 else str(v) for k, v in fields.items()})


def recorded(work_id: str, command: Command, outcome: Outcome) -> None:
    """Log one record write (the outcome's kind says what the ledger did)."""
    if not (tracing() or log.isEnabledFor(logging.INFO)):
        return
    fields = {**command_fields(work_id, command), "outcome": outcome.kind}
    record = outcome.record
    for attr, name in (("number", "attempt"), ("token", "token"), ("digest", "digest"),
                       ("version", "version"), ("op_key", "op_key")):
        value = getattr(record, attr, None)
        if name not in fields and isinstance(value, (str, int)) and not isinstance(value, bool):
            fields[name] = value
    _info(fields)


def _info(fields: dict[str, Any]) -> None:
    """Log a write and add it to the current span: both skipped when nobody listens, since
    this runs once per record, on every step's path."""
    if log.isEnabledFor(logging.INFO):
        log.info("record %s", _text(fields), extra={"outlive": fields})
    _event("outlive.record", fields)


def listening() -> bool:
    """Whether a write's fields are wanted (INFO is logged, or a span records): a step's are
    built only then, since this runs on every step's path."""
    return log.isEnabledFor(logging.INFO) or (
        tracing() and _otel.get_current_span().is_recording())



def _step_fields(call: StepCall) -> dict[str, Any]:
    return {"work_id": call.work_id, "command": "RecordSteps", "attempt": call.attempt,
            "token": call.token, "step": call.step}


def rejected(work_id: str, command: Command | str, error: OutliveError,
             **extra: Any) -> None:
    """Log one rejection: which command (or check), by whom, and the error type and message."""
    base = ({"work_id": work_id, "command": command} if isinstance(command, str)
            else command_fields(work_id, command))
    fields = {**base, **extra, "rejected": type(error).__name__, "error": error.message}
    log.warning("rejected %s", _text(fields), extra={"outlive": fields})
    _event("outlive.rejected", fields)


async def execute(backend: Backend, work_id: str, command: Command) -> Outcome:
    """The one door the controller and workers send commands through: write, then log."""
    try:
        outcome = await backend.execute(work_id, command)
    except OutliveError as exc:
        rejected(work_id, command, exc)
        raise
    recorded(work_id, command, outcome)
    return outcome


def step_rejected(call: StepCall, error: OutliveError) -> None:
    """Log the refusal of a step's journal write (``Worker.step`` calls the backend's
    ``run_and_record`` itself, one coroutine fewer on every step's path)."""
    rejected(call.work_id, "RecordSteps", error, attempt=call.attempt, token=call.token,
             step=call.step)


def step_recorded(call: StepCall, outcome: Outcome) -> None:
    """Log a step's journal write, once :func:`listening` said it is wanted."""
    _info({**_step_fields(call), "outcome": outcome.kind})


async def run_and_record_many(backend: Backend, calls: list[StepCall],
                              fns: list[Callable[[], Awaitable[Any]]],
                              records: list[Callable[[Any], Command]]) -> list[Any]:
    """A batch of steps driven by the backend; each journaled step is logged."""
    try:
        results = await backend.run_and_record_many(calls, fns, records)
    except OutliveError as exc:
        rejected(calls[0].work_id, "RecordSteps", exc,
                 steps=[c.step for c in calls], attempt=calls[0].attempt, token=calls[0].token)
        raise
    if listening():
        for call in calls:
            _info({**_step_fields(call), "outcome": "journaled"})
    return results


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[Any]:
    """An OpenTelemetry span (or nothing without the extra); errors are recorded on it."""
    if not tracing():
        yield None
        return
    with _recording_span(name, attributes) as current:
        yield current


@contextlib.contextmanager
def _recording_span(name: str, attributes: Mapping[str, Any]) -> Iterator[Any]:
    """:func:`span` once it is known that spans record."""
    attrs = {f"outlive.{k}": v for k, v in attributes.items() if v is not None}
    with _otel.get_tracer("outlive").start_as_current_span(name, attributes=attrs) as current:
        yield current


def _attributes(pick: Callable[..., Mapping[str, Any]], *args: Any, **kwargs: Any) -> Mapping[str, Any]:
    """Span attributes are best effort: a value of an unexpected shape never fails the call."""
    try:
        return pick(*args, **kwargs)
    except Exception:
        return {}


def traced(name: str, before: Callable[..., Mapping[str, Any]],
           after: Callable[..., Mapping[str, Any]] | None = None) -> Callable[[F], F]:
    """Run an async method inside span ``name``; ``before(self, *args, **kwargs)`` and
    ``after(self, result, *args, **kwargs)`` give its attributes."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        async def inner(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not tracing():
                return await method(self, *args, **kwargs)
            with _recording_span(name, _attributes(before, self, *args, **kwargs)) as current:
                result = await method(self, *args, **kwargs)
                if after is not None:
                    for key, value in _attributes(after, self, result, *args, **kwargs).items():
                        if value is not None:
                            current.set_attribute(f"outlive.{key}", value)
                return result

        return inner  # type: ignore[return-value]

    return wrap
