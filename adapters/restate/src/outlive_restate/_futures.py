"""Awaiting a Restate SDK future in the caller's own task.

``await future`` on an SDK future (a ``ctx.run_typed`` entry, a ``ctx.get``) starts a task of
its own that fetches the value, and the caller waits for that task: two more turns of the event
loop per await. Once the value is known (a state read of an eagerly sent state, a step's entry
after :func:`restate.wait_completed` said it completed) those turns are all the await costs, and
a handler step or a ledger write awaits several such values.

:func:`awaited` runs the same fetch coroutine the SDK's task would run, in the caller's task: the
same value, the same errors, the same journal. It relies on how restate-sdk 1.x builds its
futures (a ``LazyFuture`` holding that coroutine's function); an SDK without it, or a future
already awaited, takes the plain ``await``. The adapter's tests (``test_restate_futures.py``)
check that the installed SDK takes the direct path, so an upgrade that changes it is seen, not
silently slower.

:func:`first` races a step's entry against the renewal timer, as ``restate.wait_completed``
does: the same poll of the same two handles. The SDK's poll converts the combinator it waits on
to the VM's own type at every turn of its loop (about four per step), which cost a held step,
which races on every step, ~0.01 of its ratio to a raw step; :func:`first` builds that value
once per step and hands it to the poll, which takes it as it is through :func:`passthrough`.
Where the SDK lacks any of this, :func:`first` is ``restate.wait_completed``; the same tests pin
that the installed SDK takes the direct path and answers as ``wait_completed`` does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import restate

__all__ = ["awaited", "direct", "first", "passthrough", "polls"]

T = TypeVar("T")


def direct(future: Awaitable[Any]) -> Any:
    """The coroutine function the SDK's own task would run for ``future``, or None."""
    lazy = getattr(future, "future", None)
    if lazy is None or getattr(lazy, "task", False) is not None:
        return None     # not an SDK future, or already being awaited: its task holds the value
    fetch = getattr(lazy, "async_def", None)
    return fetch if callable(fetch) else None


async def awaited(future: Awaitable[T]) -> T:
    """``await future``, without a task of its own when the SDK allows (see the module)."""
    fetch = direct(future)
    if fetch is None:
        return await future
    got: T = await fetch()
    return got


def passthrough() -> type | None:
    """Let the SDK's poll take a combinator already built in the VM's own type.

    ``restate.vm._unresolved_future_to_pyo3`` converts the SDK's combinator dataclasses to the
    VM's ``PyUnresolvedFuture`` and refuses anything else (TypeError); wrapped, it also returns
    a ``PyUnresolvedFuture`` as it is, and converts everything else as before. Installed once,
    on the first race; returns that type, or None when this SDK is not built that way (the
    race then takes ``restate.wait_completed``).
    """
    global _PY_FUTURE
    if _PY_FUTURE is not None:
        return _PY_FUTURE
    try:
        from restate import vm
    except ImportError:  # pragma: no cover - not the restate-sdk 1.x layout
        return None
    kind = getattr(vm, "PyUnresolvedFuture", None)
    convert: Callable[[Any], Any] | None = getattr(vm, "_unresolved_future_to_pyo3", None)
    if not isinstance(kind, type) or convert is None or not callable(getattr(kind, "single", None)) \
            or not callable(getattr(kind, "first_completed", None)):
        return None
    if not getattr(convert, "_outlive_passthrough", False):
        sdk_convert = convert

        def converted(future: Any) -> Any:
            return future if type(future) is kind else sdk_convert(future)

        converted._outlive_passthrough = True  # type: ignore[attr-defined]
        setattr(vm, "_unresolved_future_to_pyo3", converted)  # noqa: B010 (what the SDK calls)
    _PY_FUTURE = kind
    return kind


_PY_FUTURE: type | None = None


def polls(a: Any, b: Any) -> Any:
    """The SDK context whose poll can wait on ``a`` and ``b`` directly, or None."""
    ctx = getattr(a, "context", None)
    if ctx is None or getattr(b, "context", None) is not ctx:
        return None
    kinds = (type(a), type(b), type(ctx))
    if kinds not in _POLLED:     # the SDK's layout, checked once per kind of future
        if not (callable(getattr(ctx, "create_poll_or_cancel_coroutine", None))
                and callable(getattr(getattr(ctx, "vm", None), "is_completed", None))
                and type(getattr(a, "handle", None)) is int
                and type(getattr(b, "handle", None)) is int
                and callable(getattr(a, "is_completed", None))
                and callable(getattr(b, "is_completed", None))
                and passthrough() is not None):
            return None
        _POLLED.add(kinds)
    return ctx


#: The kinds of (future, future, context) :func:`polls` found the SDK's layout in.
_POLLED: set[tuple[type, type, type]] = set()


async def first(a: Any, b: Any) -> bool:
    """Wait until SDK future ``a`` or ``b`` completes; whether ``a`` did (both may have).

    ``done, _ = await restate.wait_completed(a, b); return a in done``, with the combinator
    built once (see the module).
    """
    ctx = polls(a, b)
    if ctx is None:
        done, _ = await restate.wait_completed(a, b)
        return a in done
    if a.is_completed():
        return True
    if b.is_completed():
        return False
    kind = _PY_FUTURE
    assert kind is not None
    either = kind.first_completed([kind.single(a.handle), kind.single(b.handle)])  # type: ignore[attr-defined]
    await ctx.create_poll_or_cancel_coroutine(either)
    return bool(ctx.vm.is_completed(a.handle))
