"""``_futures.awaited``: an SDK future awaited in the caller's own task, same value and errors.

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
