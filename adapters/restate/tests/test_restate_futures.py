"""``_futures``: an SDK future awaited in the caller's own task, and a step raced against the
renewal timer with the combinator built once; the same values, errors and answers as the SDK's.

The direct path depends on how restate-sdk builds its futures; these tests pin that the
installed SDK takes it (an upgrade that changes it fails here instead of going slower).
"""

from __future__ import annotations

import asyncio

import httpx

from outlive_restate import _futures
from outlive_restate.server import RestateServer


async def test_sdk_futures_are_awaited_directly_with_the_same_values_and_errors(
        server: RestateServer) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(f"{server.ingress}/reports/futures", json=None)
    assert r.status_code == 200, r.text
    assert r.json() == {"direct": True, "value": "v", "error": 422, "after_await": True,
                        "again": "v", "first": "v"}


async def test_anything_else_is_awaited_as_it_is() -> None:
    async def seven() -> int:
        return 7

    coro = seven()
    assert _futures.direct(coro) is None
    assert await coro == 7   # left as it was: still awaitable
    assert await _futures.awaited(seven()) == 7
    fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    fut.set_result("done")
    assert await _futures.awaited(fut) == "done"


async def test_a_step_races_the_renewal_timer_as_wait_completed_says(server: RestateServer) -> None:
    # the direct poll is taken on the installed SDK, and it answers as the SDK's combinator:
    # a quick step beats a long timer, a short timer beats a slow step, and once both are
    # completed the step counts as completed (no beat)
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(f"{server.ingress}/reports/races", json=None)
    assert r.status_code == 200, r.text
    assert r.json() == {"direct": True, "quick": [True, True, "q"],
                        "slow": [False, False, True, "s"], "both": [True, True]}


def test_the_sdk_converts_its_own_combinators_as_before_and_takes_a_built_one() -> None:
    from restate import vm

    kind = _futures.passthrough()
    assert kind is vm.PyUnresolvedFuture       # the installed SDK is built this way
    assert _futures.passthrough() is kind      # installed once
    built = kind.first_completed([kind.single(1), kind.single(2)])  # type: ignore[attr-defined]
    assert vm._unresolved_future_to_pyo3(built) is built
    mine = vm.FirstCompletedUnresolvedFuture([vm.SingleUnresolvedFuture(1),
                                               vm.SingleUnresolvedFuture(2)])
    assert type(vm._unresolved_future_to_pyo3(mine)) is kind
    try:
        vm._unresolved_future_to_pyo3(object())   # type: ignore[arg-type]
    except TypeError:
        pass
    else:
        raise AssertionError("anything else is still refused")


def test_only_futures_of_one_sdk_context_are_polled_directly() -> None:
    class Future:
        def __init__(self, context: object, handle: object) -> None:
            self.context, self.handle = context, handle

    assert _futures.polls(object(), object()) is None
    assert _futures.polls(Future(object(), 1), Future(object(), 2)) is None   # two contexts
