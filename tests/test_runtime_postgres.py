"""Many runtimes on one postgresql:// ledger: events by LISTEN/NOTIFY, and a runtime SIGKILLed
while another carries its works on (issue: serve many works)."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import runtime_kinds as K
from test_runtime_processes import _serve, _stop

from outlive import Runtime


def _db(server: Any) -> str:
    return str(server.create_database(f"rt_{uuid.uuid4().hex[:8]}"))


async def test_one_runtime_on_postgres_runs_works_a_client_started(pg_cluster: Any) -> None:
    url = _db(pg_cluster)
    async with Runtime(url, [K.SMALL], discover=None) as rt, \
            Runtime(url, [], supervise=False, report_errors=False) as client:
        handles = [await client.start("small", f"pg/{i}", "v1", K.parts_for("v1"))
                   for i in range(10)]
        # No discovery poll: the runtime hears of each start, the client of each end.
        done = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 30)
        assert rt.discover is None
    assert [d.acceptance.version for d in done] == ["v1"] * 10


async def test_two_runtimes_share_postgres_and_one_is_killed(pg_cluster: Any,
                                                              tmp_path: Path) -> None:
    url = _db(pg_cluster)
    receiver = tmp_path / "receiver.db"
    n = 80
    a = _serve(url, receiver, "runtime_kinds:RECOVER")
    b = _serve(url, receiver, "runtime_kinds:RECOVER")
    try:
        async with Runtime(url, [], supervise=False, report_errors=False) as client:
            await asyncio.sleep(1.0)   # both listening
            for i in range(n):
                await client.start("recover", f"two/{i}", "v1", K.parts_for("v1"))
            for _ in range(3000):   # until the first is done: the rest are in flight
                if (await client.handle("two/0").state()).status == "completed":
                    break
                await asyncio.sleep(0.01)
            a.send_signal(signal.SIGKILL)
            a.wait()
            assert len(await client.works(state="completed", kind="recover")) < n
            results = await asyncio.wait_for(asyncio.gather(
                *(client.handle(f"two/{i}").result() for i in range(n))), 120)
            states = [(await client.handle(f"two/{i}").state()).state for i in range(n)]
    finally:
        _stop(a, b)
    assert len(results) == n
    assert all(len(st.acceptances) == 1 for st in states)
    with sqlite3.connect(receiver) as conn:
        keys = [k for (k,) in conn.execute("SELECT op_key FROM posts")]
    assert len(keys) == n and len(set(keys)) == n
    assert any(len(st.attempts) > 1 for st in states)   # the survivor took some over
