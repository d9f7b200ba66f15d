"""Faults on a real Restate server of its own: server SIGKILLed and restarted on the same base
directory, the deployment process SIGKILLed and restarted mid-step, and no server at all.

Every command either completes exactly once (a retry with the same idempotency key attaches to
the original invocation) or raises a typed error; the ledger is never half-written.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import outlive
from outlive import Contract, Controller, Worker
from outlive import ledger as L
from outlive_restate import RestateBackend
from outlive_restate.server import RestateServer

pytestmark = pytest.mark.asyncio(loop_scope="session")

V1 = {"s1": "Intro: a steady quarter.", "s2": "Revenue was 4.1 million.",
      "s3": "Costs fell by 3 percent.", "s4": "Outlook: cautious."}
CONTRACT = Contract(name="form", version="1", assessor="test")


@pytest.fixture(scope="module")
def server() -> Iterator[RestateServer]:
    with RestateServer() as srv:
        yield srv


@pytest.fixture(scope="module")
async def backend(server: RestateServer) -> AsyncIterator[RestateBackend]:
    async with await outlive.open_backend(server.url) as b:
        assert isinstance(b, RestateBackend)
        yield b


def summarise(**kw: str) -> dict[str, Any]:
    return {"summary": next(iter(kw.values()))[:10]}


async def _beats(b: RestateBackend, w: str, att: int, tok: int, n: int) -> tuple[int, int]:
    """n concurrent heartbeats: (confirmed, typed failures). Anything else propagates."""
    res = await asyncio.gather(*(b.execute(w, L.Heartbeat(attempt=att, token=tok, at=i))
                                 for i in range(n)), return_exceptions=True)
    bad = [r for r in res if isinstance(r, BaseException)
           and not isinstance(r, outlive.errors.BackendUnavailable)]
    assert not bad, f"untyped failures: {bad!r}"
    ok = sum(1 for r in res if isinstance(r, L.Outcome))
    return ok, len(res) - ok


async def test_server_restart_mid_run_resumes(server: RestateServer,
                                              backend: RestateBackend) -> None:
    w = f"faults/{uuid.uuid4().hex[:8]}"
    ctl = Controller(backend, clock=lambda: 0)
    await ctl.open_work(w)
    await ctl.publish(w, "v1", V1)
    a = await ctl.admit(w)
    wk = Worker(backend, a, V1, clock=lambda: 1)
    await wk.start()
    for k in ("s1", "s2"):
        await wk.step(k, summarise, **{k: V1[k]})
    # a burst of commands in flight while the server is SIGKILLed and restarted
    burst = asyncio.ensure_future(_beats(backend, w, a.number, a.token, 30))
    await asyncio.sleep(0.02)
    await asyncio.to_thread(server.restart_server, hard=True)
    ok, failed = await burst
    st = await backend.load(w)
    assert st is not None
    att = st.attempt(a.number)
    assert att is not None and att.heartbeats == ok, \
        f"{ok} confirmed beats but {att.heartbeats if att else None} applied: half-written?"
    assert failed == 0, "the restart outlasted the retry window"
    # the work resumes on the restarted server, steps included
    for k in ("s3", "s4"):
        await wk.step(k, summarise, **{k: V1[k]})
    cand = await wk.candidate({"text": "digest"})
    acc = await ctl.assess(w, cand.digest, CONTRACT, lambda c, v: (True, "ok"))
    st = await backend.load(w)
    assert st is not None and acc.version == "v1"
    assert sorted(e.step for e in st.journal) == ["s1", "s2", "s3", "s4"]


async def test_deployment_killed_mid_step_work_completes(server: RestateServer,
                                                          backend: RestateBackend) -> None:
    w = f"faults/{uuid.uuid4().hex[:8]}"
    ctl = Controller(backend, clock=lambda: 0)
    await ctl.open_work(w)
    await ctl.publish(w, "v1", V1)
    a = await ctl.admit(w)
    wk = Worker(backend, a, V1, clock=lambda: 1)
    await wk.start()
    entered, gate = asyncio.Event(), asyncio.Event()
    calls = 0

    async def held(**kw: str) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        entered.set()
        await gate.wait()
        return summarise(**kw)

    step = asyncio.ensure_future(wk.step("s1", held, s1=V1["s1"]))
    await asyncio.wait_for(entered.wait(), 10)
    server.stop_deployment(hard=True)  # the ledger's deployment dies mid-step
    gate.set()  # the body finishes; its journal write finds no deployment: Restate retries
    await asyncio.sleep(0.5)
    assert not step.done()
    await asyncio.to_thread(server.start_deployment)
    await asyncio.wait_for(step, 30)
    assert calls == 1, "the body ran more than once"
    # and a kill/restart in the middle of a burst of commands
    burst = asyncio.ensure_future(_beats(backend, w, a.number, a.token, 30))
    await asyncio.sleep(0.02)
    await asyncio.to_thread(server.restart_deployment, hard=True)
    ok, failed = await burst
    for k in ("s2", "s3", "s4"):
        await wk.step(k, summarise, **{k: V1[k]})
    cand = await wk.candidate({"text": "digest"})
    await ctl.assess(w, cand.digest, CONTRACT, lambda c, v: (True, "ok"))
    st = await backend.load(w)
    assert st is not None
    att = st.attempt(a.number)
    assert att is not None and att.heartbeats == ok and failed == 0
    assert sorted(e.step for e in st.journal) == ["s1", "s2", "s3", "s4"]
    assert len(st.acceptances) == 1


async def test_server_down_typed_error_then_recovers(server: RestateServer) -> None:
    b = RestateBackend(server.url + "&retry_for=0.5")
    await b.start()
    try:
        w = f"faults/{uuid.uuid4().hex[:8]}"
        await b.execute(w, L.OpenWork())
        server.stop_server(hard=True)
        with pytest.raises(outlive.errors.BackendUnavailable, match="unreachable"):
            await b.execute(w, L.PublishInput(version="v1", parts={"s1": "h"}, at=0))
        await asyncio.to_thread(server.start_server)
        await asyncio.to_thread(server.wait_callable)
        st = await b.load(w)
        assert st is not None and st.inputs == ()  # the failed command left nothing behind
        await b.execute(w, L.PublishInput(version="v1", parts={"s1": "h"}, at=0))
    finally:
        await b.close()


async def test_durable_timer_marks_a_silent_attempt_unknown(backend: RestateBackend) -> None:
    from datetime import timedelta
    w = f"faults/{uuid.uuid4().hex[:8]}"
    ctl = Controller(backend, clock=lambda: 0)
    await ctl.open_work(w)
    await ctl.publish(w, "v1", V1)
    a = await ctl.admit(w)
    # a live attempt beats after the timer is set: the timer leaves it alone
    await backend.suspect_after(w, a.number, timedelta(milliseconds=300), at=7)
    await backend.execute(w, L.Heartbeat(attempt=a.number, token=a.token, at=1))
    await asyncio.sleep(1.0)
    st = await backend.load(w)
    att = st.attempt(a.number) if st else None
    assert att is not None and att.state is outlive.AttemptState.RUNNING
    # a silent one is marked unknown by the timer, with the logical time it was given
    await backend.suspect_after(w, a.number, timedelta(milliseconds=300), at=9)
    for _ in range(100):
        st = await backend.load(w)
        att = st.attempt(a.number) if st else None
        if att is not None and att.state is outlive.AttemptState.UNKNOWN:
            break
        await asyncio.sleep(0.05)
    assert att is not None and att.state is outlive.AttemptState.UNKNOWN
