"""Faults on a real Restate server of its own: server SIGKILLed and restarted on the same base
directory (under a client's burst of commands, and under an attempt running in the user's
handler), the user's deployment SIGKILLed mid-step, and no server at all.

Every command either completes exactly once (a retry with the same idempotency key attaches to
the original invocation) or raises a typed error; the ledger is never half-written.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from restate_support import HERE, SECTIONS, calls, finished, held, opened, until

import outlive
from outlive import Contract, Controller, Worker
from outlive import ledger as L
from outlive.records import AttemptState
from outlive_restate import RestateBackend
from outlive_restate.server import RestateServer

pytestmark = pytest.mark.asyncio(loop_scope="session")

V1 = {"s1": "Intro: a steady quarter.", "s2": "Revenue was 4.1 million.",
      "s3": "Costs fell by 3 percent.", "s4": "Outlook: cautious."}
CONTRACT = Contract(name="form", version="1", assessor="test")


@pytest.fixture(scope="module")
def server() -> Iterator[RestateServer]:
    """A server of this module's own: its tests kill and restart it."""
    with RestateServer(app="restate_app:app", pythonpath=(str(HERE),)) as srv:
        yield srv


def summarise(**kw: str) -> dict[str, Any]:
    return {"summary": next(iter(kw.values()))[:10]}


async def _beats(b: RestateBackend, w: str, att: int, tok: int, n: int,
                 secret: str | None = None) -> tuple[int, int]:
    """n concurrent heartbeats: (confirmed, typed failures). Anything else propagates."""
    res = await asyncio.gather(*(b.execute(w, L.Heartbeat(attempt=att, token=tok, at=i,
                                                           secret=secret))
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
    burst = asyncio.ensure_future(_beats(backend, w, a.number, a.token, 30, a.secret))
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
    cand = await wk.candidate()
    acc = await ctl.assess(w, cand.digest, CONTRACT, lambda c, v: (True, "ok"))
    st = await backend.load(w)
    assert st is not None and acc.version == "v1"
    assert sorted(e.step for e in st.journal) == ["s1", "s2", "s3", "s4"]


async def _handler_attempt_held_in_s2(server: RestateServer, backend: RestateBackend,
                                      tmp_path: Path, **target: Any) -> tuple[str, Path, Path]:
    """A work started in the user's handler (long lease), its attempt #1 held inside s2."""
    work = f"faults/{uuid.uuid4().hex[:8]}"
    log, hold = held(tmp_path)
    await opened(backend, work)
    target = {"service": "reports", "handler": "summarise", **target}
    if target.get("key") == "{work}":
        target["key"] = work
    await backend.start_work(work, arg={"sections": SECTIONS, "log": str(log)},
                             lease=timedelta(minutes=10), **target)
    await until("#1 to be inside s2", lambda: "1:s2" in calls(log))
    return work, log, hold


async def test_deployment_killed_mid_step_handler_replays(server: RestateServer,
                                                           backend: RestateBackend,
                                                           tmp_path: Path) -> None:
    """SIGKILL the user's deployment while a step's body runs: Restate retries the invocation
    on the restarted deployment, the replay restores s1 from Restate's own journal (the model is
    not asked again), and only the step that never journaled runs again, in the same attempt."""
    work, log, hold = await _handler_attempt_held_in_s2(server, backend, tmp_path)
    await asyncio.to_thread(server.stop_deployment, hard=True)
    hold.unlink()
    await asyncio.to_thread(server.start_deployment)
    st = await until("#1 to finish", lambda: finished(backend, work), timeout=90)
    assert [(a.number, a.state) for a in st.attempts] == [(1, AttemptState.FINISHED)]
    assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1), ("s2", 1)]
    assert calls(log).count("1:s1") == 1 and calls(log).count("1:s2") == 2
    assert st.stale_writes_applied == 0 and len(st.candidates) == 1


async def test_deployment_killed_mid_step_owner_rebuilds_its_held_back_writes(
        server: RestateServer, tmp_path: Path) -> None:
    """The owner shape holds step writes back (written in one go later): s1's write is still
    held when the deployment is SIGKILLed inside s2. The retried invocation replays s1 from
    Restate's journal, holds its write back again, and the finished work has both steps of #1."""
    async with await outlive.open_backend(server.url + "&ledger=desk") as desk:
        assert isinstance(desk, RestateBackend)
        work, log, hold = await _handler_attempt_held_in_s2(
            server, desk, tmp_path, service="desk", handler="draft", key="{work}")
        held = await desk.load(work)
        assert held is not None and held.journal == ()   # s1 is journaled by Restate only
        await asyncio.to_thread(server.stop_deployment, hard=True)
        hold.unlink()
        await asyncio.to_thread(server.start_deployment)
        st = await until("#1 to finish", lambda: finished(desk, work), timeout=90)
    assert [(a.number, a.state) for a in st.attempts] == [(1, AttemptState.FINISHED)]
    assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1), ("s2", 1)]
    assert calls(log).count("1:s1") == 1 and calls(log).count("1:s2") == 2
    assert st.stale_writes_applied == 0 and len(st.candidates) == 1


async def test_server_killed_and_restarted_mid_step_handler_resumes(
        server: RestateServer, backend: RestateBackend, tmp_path: Path) -> None:
    """SIGKILL the Restate server while a step's body runs and start it again on the same base
    directory: the invocation, its journal, the ledger and the lease timer all survive."""
    work, log, hold = await _handler_attempt_held_in_s2(server, backend, tmp_path)
    await asyncio.to_thread(server.stop_server, hard=True)
    hold.unlink()
    await asyncio.to_thread(server.start_server)
    await asyncio.to_thread(server.wait_callable)
    st = await until("the work to finish", lambda: finished(backend, work), timeout=120)
    assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1), ("s2", 1)]
    assert calls(log).count("1:s1") == 1
    assert st.stale_writes_applied == 0 and len(st.candidates) == 1
    lease = await backend.lease(work)
    assert [d["attempt"] for d in lease["history"]] == [1]


async def test_server_down_typed_error_then_recovers(server: RestateServer) -> None:
    b = RestateBackend(server.url + "&retry_for=0.5")
    await b.start()
    try:
        w = f"faults/{uuid.uuid4().hex[:8]}"
        await b.execute(w, L.OpenWork())
        server.stop_server(hard=True)
        with pytest.raises(outlive.errors.BackendUnavailable, match="unreachable"):
            await b.execute(w, Controller(b).stamp(L.PublishInput(version="v1", parts={"s1": "h"}, at=0)))
        await asyncio.to_thread(server.start_server)
        await asyncio.to_thread(server.wait_callable)
        st = await b.load(w)
        assert st is not None and st.inputs == ()  # the failed command left nothing behind
        await b.execute(w, Controller(b).stamp(L.PublishInput(version="v1", parts={"s1": "h"}, at=0)))
    finally:
        await b.close()
