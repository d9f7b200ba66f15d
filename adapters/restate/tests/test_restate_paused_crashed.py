"""Paused vs crashed on a real Restate server: which late writes Restate refuses on its own, and
which only outlive's owner token refuses.

* A paused worker's step invocation is still alive: when its body returns, Restate journals the
  ``ctx.run_typed`` result like any other (it knows nothing of owners). The late journal write to
  the ledger object is an ordinary exclusive invocation, which Restate also runs: only the
  ledger's fence (token 1 < epoch 2) refuses it. With fencing off, the same write lands.
* If the controller revokes the attempt's steps (``revoke_steps`` kills their invocations),
  Restate itself refuses the late completion: nothing is journaled, even with fencing off.
* A crashed worker (its task cancelled) never resumes: its invocation ends, nothing is written.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

import outlive
from outlive import Controller, Policy, Worker
from outlive import ledger as L
from outlive_restate import RestateBackend

pytestmark = pytest.mark.asyncio(loop_scope="session")

V1 = {"s1": "Intro: a steady quarter.", "s2": "Revenue was 4.1 million."}


@pytest.fixture(scope="module")
async def backend(restate_url: str) -> AsyncIterator[RestateBackend]:
    b = await outlive.open_backend(restate_url)
    assert isinstance(b, RestateBackend)
    try:
        yield b
    finally:
        await b.close()


class Held:
    """A model call the test can hold (pause) and release; counts calls and completions."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()
        self.calls = 0
        self.finished = 0

    async def __call__(self, **kw: str) -> dict[str, Any]:
        self.calls += 1
        self.entered.set()
        await self.gate.wait()
        self.finished += 1
        return {"summary": next(iter(kw.values()))[:10]}


async def _silent_then_replaced(b: RestateBackend, policy: Policy) -> tuple[
        str, Worker, Held, asyncio.Task[Any]]:
    w = f"paused/{uuid.uuid4().hex[:10]}"
    ctl = Controller(b, clock=lambda: 0)
    await ctl.open_work(w, policy)
    await ctl.publish(w, "v1", V1)
    a1 = await ctl.admit(w)
    w1 = Worker(b, a1, V1, clock=lambda: 3)
    await w1.start()
    model = Held()
    task = asyncio.ensure_future(w1.step("s1", model, s1=V1["s1"]))
    await asyncio.wait_for(model.entered.wait(), 10)
    # silence: #1 is unknown, #2 admitted with the next token
    await b.execute(w, L.MarkUnknown(attempt=a1.number, at=5))
    a2 = await ctl.admit(w)
    assert a2.token == a1.token + 1
    return w, w1, model, task


async def _step_invocations(b: RestateBackend) -> list[dict[str, Any]]:
    q = (f"SELECT status, completion_result FROM sys_invocation WHERE target_service_name = "
         f"'{b.step_service}' AND target_handler_name IN ('run', 'step') ORDER BY created_at")
    async with httpx.AsyncClient() as http:
        r = await http.post(f"{b.admin}/query", json={"query": q},
                            headers={"accept": "application/json"})
    rows: list[dict[str, Any]] = r.json()["rows"]
    return rows


async def _last_step_result(b: RestateBackend) -> str | None:
    for _ in range(200):
        rows = await _step_invocations(b)
        if rows and rows[-1]["status"] == "completed":
            return str(rows[-1]["completion_result"])
        await asyncio.sleep(0.05)
    return None


@pytest.mark.parametrize("fencing", [True, False], ids=["fencing-on", "fencing-off"])
async def test_paused_worker_restate_journals_the_step_only_the_token_refuses(
        backend: RestateBackend, fencing: bool) -> None:
    w, w1, model, task = await _silent_then_replaced(backend, Policy(fencing=fencing))
    before = await backend.load(w)
    assert before is not None
    model.gate.set()  # the paused worker wakes and finishes its model call
    if fencing:
        with pytest.raises(outlive.StaleOwner):
            await task
        assert await backend.load(w) == before, "the refused late write changed the ledger"
        with pytest.raises(outlive.StaleOwner):  # a direct ledger write: same story
            await backend.execute(w, L.Finish(attempt=1, token=w1.token, at=9))
        out = await backend.execute(w, L.Heartbeat(attempt=1, token=w1.token, at=9))
        assert out.kind == "superseded"  # a beat is dropped, not refused; nothing written
        assert await backend.load(w) == before
    else:
        await task
        after = await backend.load(w)
        assert after is not None and after.stale_writes_applied == 1
    # Restate itself accepted the late step: its ctx.run_typed entry completed successfully.
    assert model.finished == 1
    assert await _last_step_result(backend) == "success"


@pytest.mark.parametrize("fencing", [True, False], ids=["fencing-on", "fencing-off"])
async def test_revoked_steps_restate_refuses_the_late_completion(
        backend: RestateBackend, fencing: bool) -> None:
    w, _w1, model, task = await _silent_then_replaced(backend, Policy(fencing=fencing))
    before = await backend.load(w)
    assert await backend.revoke_steps(w, 1) == 1
    with pytest.raises(outlive.StaleOwner, match="Restate refused"):
        await task
    model.gate.set()
    await asyncio.sleep(0.1)
    assert model.finished == 0, "a killed invocation's body went on to finish"
    assert await _last_step_result(backend) == "failure"
    after = await backend.load(w)
    assert after == before and after is not None and after.stale_writes_applied == 0


async def test_crashed_worker_never_resumes_nothing_written(backend: RestateBackend) -> None:
    w, _w1, model, task = await _silent_then_replaced(backend, Policy())
    before = await backend.load(w)
    task.cancel()  # the crash: the awaiting task is gone for good
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _last_step_result(backend) == "failure"
    model.gate.set()
    await asyncio.sleep(0.1)
    assert model.calls == 1 and model.finished == 0
    assert await backend.load(w) == before
