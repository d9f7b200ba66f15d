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
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar

__all__ = ["awaited", "direct"]

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

