"""SQLite: one transaction per command, survives process death, refuses a corrupt file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import outlive
from outlive import Controller, Policy, Worker
from outlive import ledger as L
from outlive.errors import InvalidRecord, StaleOwner

CHILD = textwrap.dedent("""
    import asyncio, os, sys
    import outlive
    from outlive import Controller, Worker
    async def main():
        b = await outlive.open_backend(sys.argv[1])
        ctl = Controller(b, clock=lambda: 0)
        await ctl.open_work("w")
        await ctl.publish("w", "v1", {"s1": "a", "s2": "b"})
        att = await ctl.admit("w")
        w = Worker(b, att, {"s1": "a", "s2": "b"}, clock=lambda: 1)
        await w.start()
        await w.step("s1", lambda s1: s1.upper(), s1="a")
        print("recorded", flush=True)
        await asyncio.sleep(60)      # killed here, mid-attempt
    asyncio.run(main())
""")


async def test_a_killed_process_loses_nothing_it_reported_done(tmp_path: Path) -> None:
    db = tmp_path / "o.db"
    url = f"sqlite:///{db}"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, url], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "recorded"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    b = await outlive.open_backend(url)
    try:
        st = await b.load("w")
        assert st is not None and [e.step for e in st.journal] == ["s1"]
        ctl = Controller(b, clock=lambda: 10, heartbeat_interval=1)
        assert [a.number for a in await ctl.observe("w")] == [1]
        att = await ctl.admit("w")
        assert att.token == 2  # the epoch went on after the "controller" process died
        w = Worker(b, att, {"s1": "a", "s2": "b"})
        await w.start()
        assert w.can_restore("s1", s1="a") and not w.can_restore("s2", s2="b")
    finally:
        await b.close()


async def test_two_processes_share_one_ledger_and_the_stale_one_is_fenced(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    a = await outlive.open_backend(url)
    b = await outlive.open_backend(url)   # a second connection with its own cache
    try:
        ca = Controller(a, clock=lambda: 0, heartbeat_interval=1)
        await ca.open_work("w")
        await ca.publish("w", "v1", {"s1": "x"})
        first = await ca.admit("w")
        wa = Worker(a, first, {"s1": "x"})
        await wa.start()
        cb = Controller(b, clock=lambda: 9, heartbeat_interval=1)
        await cb.observe("w")
        second = await cb.admit("w")
        with pytest.raises(StaleOwner):
            await wa.step("s1", lambda s1: s1, s1="x")
        st = await a.load("w")
        assert st is not None and st.epoch == second.token and st.journal == ()
    finally:
        await a.close()
        await b.close()


async def test_a_rejected_command_leaves_the_file_unchanged(tmp_path: Path) -> None:
    db = tmp_path / "o.db"
    b = await outlive.open_backend(f"sqlite:///{db}")
    try:
        await b.execute("w", L.OpenWork(policy=Policy()))
        await b.execute("w", L.PublishInput(version="v1", parts={"s1": "a" * 64}, at=0))
        st = await b.load("w")
        with pytest.raises(outlive.errors.InputConflict):
            await b.execute("w", L.PublishInput(version="v1", parts={"s1": "b" * 64}, at=1))
        b2 = await outlive.open_backend(f"sqlite:///{db}")
        assert await b2.load("w") == st
        await b2.close()
    finally:
        await b.close()


async def test_a_corrupt_file_is_a_typed_error(tmp_path: Path) -> None:
    db = tmp_path / "o.db"
    db.write_bytes(b"this is not a database" * 100)
    with pytest.raises(InvalidRecord):
        b = await outlive.open_backend(f"sqlite:///{db}")
        await b.load("w")


async def test_a_corrupt_row_is_a_typed_error(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "o.db"
    b = await outlive.open_backend(f"sqlite:///{db}")
    await b.execute("w", L.OpenWork(policy=Policy()))
    await b.close()
    con = sqlite3.connect(db)
    con.execute("UPDATE outlive_works SET state = '{\"@t\": \"Nope\", \"v\": {}}', seq = seq + 1")
    con.commit()
    con.close()
    b = await outlive.open_backend(f"sqlite:///{db}")
    try:
        with pytest.raises(InvalidRecord):
            await b.load("w")
    finally:
        await b.close()


async def test_missing_directory_is_backend_unavailable(tmp_path: Path) -> None:
    with pytest.raises(outlive.errors.BackendUnavailable):
        await outlive.open_backend(f"sqlite:///{tmp_path}/no/such/dir/o.db")


HAMMER = textwrap.dedent("""
    import asyncio, sys
    import outlive
    from outlive import ledger as L
    async def main():
        b = await outlive.open_backend(sys.argv[1])
        st = await b.load("w")
        att = st.attempts[0]
        for i in range(int(sys.argv[2])):
            await b.execute("w", L.Heartbeat(attempt=att.number, token=att.token, at=i))
        await b.close()
    asyncio.run(main())
""")


async def test_concurrent_processes_lose_no_command(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    b = await outlive.open_backend(url)
    ctl = Controller(b, clock=lambda: 0)
    await ctl.open_work("w")
    await ctl.publish("w", "v1", {"s1": "x"})
    await ctl.admit("w")
    before = await b.load("w")
    assert before is not None
    procs = [subprocess.Popen([sys.executable, "-c", HAMMER, url, "150"]) for _ in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    after = await b.load("w")
    await b.close()
    assert after is not None
    assert after.seq - before.seq == 600 and after.attempts[0].heartbeats == 600
