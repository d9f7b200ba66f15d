"""Server down at start, server restarted mid-run on the same database file."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from outlive import Worker, open_backend
from outlive.errors import BackendUnavailable
from outlive_conformance.testing import open_work
from outlive_temporal import DevServer, TemporalBackend
from outlive_temporal.devserver import free_port

V1 = {"s1": "Intro.", "s2": "Revenue was 4.1 million.", "s3": "Costs.", "s4": "Outlook."}


def summarise(**kw: Any) -> dict[str, str]:
    (text,) = kw.values()
    return {"summary": str(text)[:12]}


async def test_server_down_at_start_is_backend_unavailable() -> None:
    url = f"temporal://127.0.0.1:{free_port()}?retry_s=2"
    t0 = time.monotonic()
    with pytest.raises(BackendUnavailable, match="cannot reach a Temporal server"):
        await open_backend(url)
    assert time.monotonic() - t0 < 10


async def test_restart_mid_run_resumes_without_half_writes() -> None:
    srv = DevServer().start()
    try:
        b = TemporalBackend(srv.url + "?retry_s=60")
        await b.start()
        opened = await open_work(b, versions={"v1": V1}, work_id=f"fault/{uuid.uuid4().hex[:8]}/digest")
        work, a1, w1 = opened.work_id, opened.attempt, opened.worker
        await w1.step("s1", summarise, s1=V1["s1"])
        await w1.step("s2", summarise, s2=V1["s2"])
        before = await b.load(work)
        assert before is not None

        # The server dies (SIGKILL, no clean shutdown) and comes back on the same file and port.
        srv.kill()
        calls: list[str] = []

        def counted(**kw: Any) -> dict[str, str]:
            calls.append(next(iter(kw)))
            return summarise(**kw)

        step3 = asyncio.create_task(w1.step("s3", counted, s3=V1["s3"]))
        await asyncio.sleep(1.0)
        assert not step3.done(), "a command must wait for the server, not fail half-way"
        await asyncio.to_thread(srv.start)
        await asyncio.wait_for(step3, 60)  # transparent reconnect: the step completes
        await w1.step("s4", counted, s4=V1["s4"])
        assert calls == ["s3", "s4"], "each body ran exactly once"
        after = await b.load(work)
        assert after is not None
        assert after.journal[:2] == before.journal, "nothing written before the crash was lost"
        assert [e.step for e in after.journal] == ["s1", "s2", "s3", "s4"]
        cand = await w1.candidate()
        assert cand.version == "v1"

        # A server that stays down: a typed error within retry_s, and nothing half-written.
        await b.close()
        b2 = TemporalBackend(srv.url + "?retry_s=2")
        await b2.start()
        w2 = Worker(b2, a1, V1, clock=lambda: opened.clock[0])
        await w2.start(claim=False)   # the same worker, reconnected: it claimed a1 already
        srv.stop()
        with pytest.raises(BackendUnavailable):
            await w2.heartbeat()
        await asyncio.to_thread(srv.start)
        st = await b2.load(work)
        assert st is not None and st.attempts[0].heartbeats == after.attempts[0].heartbeats
        await w2.heartbeat()  # and work resumes
        st2 = await b2.load(work)
        assert st2 is not None and st2.attempts[0].heartbeats == st.attempts[0].heartbeats + 1
        await b2.close()
    finally:
        srv.cleanup()
