"""Many runtimes on one postgresql:// ledger: events by LISTEN/NOTIFY, and a runtime SIGKILLed
while another carries its works on (issue: serve many works)."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import uuid
from pathlib import Path
from typing import Any

import runtime_kinds as K
from test_runtime_processes import _serve, _stop, held_then, survivor_takes_over

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


async def test_two_runtimes_share_postgres_and_one_is_killed(pg_cluster: Any, tmp_path: Path,
                                                              monkeypatch: Any) -> None:
    url = _db(pg_cluster)
    receiver = tmp_path / "receiver.db"
    gate = tmp_path / "gate"   # the works are held running until both runtimes run some
    gate.touch()
    monkeypatch.setenv("OUTLIVE_TEST_GATE", str(gate))
    n = 80
    a = _serve(url, receiver, "runtime_kinds:HELD_SHARED")
    b = _serve(url, receiver, "runtime_kinds:HELD_SHARED")
    try:
        async with Runtime(url, [], supervise=False, report_errors=False) as client:
            for i in range(n):
                await client.start("held_shared", f"two/{i}", "v1", K.parts_for("v1"))
            for _ in range(3000):   # both runtimes run attempts (the ledger says which)
                seen = await asyncio.gather(*(client.handle(f"two/{i}").state()
                                              for i in range(n)))
                runners = {s.state.current_attempt.runner for s in seen
                           if s.state.current_attempt is not None}
                if len(runners - {None}) == 2:
                    break
                await asyncio.sleep(0.05)
            a.send_signal(signal.SIGKILL)
            a.wait()
            gate.unlink()
            results = await asyncio.wait_for(asyncio.gather(
                *(client.handle(f"two/{i}").result() for i in range(n))), 120)
            states = [(await client.handle(f"two/{i}").state()).state for i in range(n)]
    finally:
        _stop(a, b)
    assert len(runners - {None}) == 2, "one runtime ran every attempt"
    assert len(results) == n
    assert all(len(st.acceptances) == 1 for st in states)
    with sqlite3.connect(receiver) as conn:
        keys = [k for (k,) in conn.execute("SELECT op_key FROM posts")]
    assert len(keys) == n and len(set(keys)) == n
    assert any(len(st.attempts) > 1 for st in states)   # the survivor took some over


async def test_a_survivor_takes_over_a_killed_runtimes_attempts_when_it_dies(
        pg_cluster: Any, tmp_path: Path, monkeypatch: Any) -> None:
    """Two runtimes; one SIGKILLed with attempts running: the other hears of its end (its
    advisory lock is granted the moment its session ends) and takes them over at once, not
    after their lease (a minute here)."""
    await survivor_takes_over(_db(pg_cluster), tmp_path, monkeypatch)


async def test_a_paused_runtimes_attempts_wait_out_their_lease(
        pg_cluster: Any, tmp_path: Path, monkeypatch: Any) -> None:
    """A paused runtime is silent, not dead (its session and lock live on): the other runtime
    takes its attempts over only after their lease ran out."""
    url = _db(pg_cluster)

    async def pause(a: subprocess.Popen[bytes], gate: Path) -> subprocess.Popen[bytes]:
        a.send_signal(signal.SIGSTOP)
        gate.unlink()
        return _serve(url, tmp_path / "receiver.db", "runtime_kinds:HELD_SHORT")
    states = await held_then(url, tmp_path, monkeypatch, "held_short",
                             [f"p/{i}" for i in range(4)], pause)
    lease = K.HELD_SHORT.lease.timeout
    for st in states:
        first, second = st.attempts[0], st.attempts[1]
        assert second.admitted_at >= first.last_heartbeat + lease, st.work_id
        assert len(st.acceptances) == 1
