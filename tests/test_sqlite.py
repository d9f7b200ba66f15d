"""SQLite: one transaction per command, survives process death, refuses a corrupt file."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from storage_work import candidate_of, one_step_work

import outlive
from outlive import Controller, Policy, Worker
from outlive import ledger as L
from outlive.errors import ConfigError, InvalidRecord, StaleOwner
from outlive.sqlstore import SCHEMA, SqliteLedgerStore

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
        wa = Worker(a, first, {"s1": "x"}, clock=lambda: 0)
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
            await b.execute("w", L.Heartbeat(attempt=att.number, token=att.token, at=i,
                                             secret=sys.argv[3] or None))
        await b.close()
    asyncio.run(main())
""")


async def test_concurrent_processes_lose_no_command(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    b = await outlive.open_backend(url)
    ctl = Controller(b, clock=lambda: 0)
    await ctl.open_work("w")
    await ctl.publish("w", "v1", {"s1": "x"})
    att = await ctl.admit("w")
    before = await b.load("w")
    assert before is not None
    procs = [subprocess.Popen([sys.executable, "-c", HAMMER, url, "150", att.secret or ""])
             for _ in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    after = await b.load("w")
    await b.close()
    assert after is not None
    assert after.seq - before.seq == 600 and after.attempts[0].heartbeats == 600


# -- short write transactions: a paused process and the others -------------------------------
PAUSING = textwrap.dedent("""
    import asyncio, os, signal, sys, threading
    import outlive
    from outlive import ledger as L, sqlstore
    url, beats, pause_at, where = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    writes = [0]

    def pause(*_):
        writes[0] += 1
        if writes[0] == pause_at:
            print("paused", flush=True)
            # The whole process stops, for real, and this thread (the one holding the SQLite
            # connection) before its next instruction: sent to the thread itself. A SIGSTOP sent
            # to the process (os.kill) is taken by the main thread, which stops the others only
            # when it is next scheduled - meanwhile this thread ran on past the chosen point.
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)

    if where == "encode":      # after the read and the apply, while encoding: no lock held
        original = sqlstore.SqlLedgerStore.write_request
        def write_request(self, *a, **k):
            pause()
            return original(self, *a, **k)
        sqlstore.SqlLedgerStore.write_request = write_request

    async def main():
        b = await outlive.open_backend(url)
        if where == "commit":  # inside the write transaction, just before COMMIT
            b.ledger.before_commit = pause
        att = (await b.load("busy")).attempts[0]
        kinds = []
        for i in range(beats):
            out = await b.execute("busy", L.Heartbeat(attempt=att.number, token=att.token, at=i))
            kinds.append(out.kind)
        print(" ".join(kinds), flush=True)
        await b.close()
    asyncio.run(main())
""")


def _wait_until_stopped(pid: int) -> None:
    """Return once every thread of ``pid`` is stopped (Linux: its /proc state is T)."""
    import time

    tasks = Path(f"/proc/{pid}/task")
    if not tasks.is_dir():
        return  # no /proc: the thread that paused itself is stopped already (pthread_kill)
    deadline = time.monotonic() + 60
    while True:
        states = []
        for task in tasks.iterdir():
            try:
                states.append((task / "stat").read_text().rpartition(")")[2].split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue
        if states and all(s in ("T", "t") for s in states):
            return
        assert time.monotonic() < deadline, f"process {pid} did not stop: {states}"
        time.sleep(0.005)


async def _busy_work(url: str) -> outlive.Backend:
    b = await outlive.open_backend(url)
    ctl = Controller(b, clock=lambda: 0)
    await ctl.open_work("busy")
    await ctl.publish("busy", "v1", {"s1": "x"})
    await ctl.admit("busy", keyed=False)   # the child process rebuilds the attempt from the file
    return b


async def _other_works_commit(b: outlive.Backend, n: int) -> None:
    for i in range(n):
        ctl = Controller(b, clock=lambda: 0)
        await ctl.open_work(f"other-{i}")
        await ctl.publish(f"other-{i}", "v1", {"s1": "x"})
        att = await ctl.admit(f"other-{i}")
        await b.execute(f"other-{i}", L.Heartbeat(attempt=att.number, token=att.token, at=1,
                                                   secret=att.secret))




async def test_a_worker_paused_mid_command_does_not_stop_the_others(tmp_path: Path) -> None:
    """SIGSTOP a real worker process between its read and its write: every other work commits,
    and the controller can mark the paused worker's own attempt unknown (no lock is held)."""
    url = f"sqlite:///{tmp_path / 'o.db'}"
    b = await _busy_work(url)
    b.lock_timeout = 10.0     # were the file wedged, this would raise instead of committing
    proc = subprocess.Popen([sys.executable, "-c", PAUSING, url, "8", "4", "encode"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "paused"
        _wait_until_stopped(proc.pid)
        await _other_works_commit(b, 5)
        await b.execute("busy", Controller(b).stamp(L.MarkUnknown(attempt=1, at=50)))
        os.kill(proc.pid, signal.SIGCONT)
        kinds = proc.stdout.readline().split()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    # The paused heartbeat lost the compare-and-set and was re-applied to the new state: the
    # attempt had been marked unknown, but no successor was admitted, so its beat revives it
    # (the ledger says so: "revived", and the worker is told it still holds the work).
    assert kinds == ["beat"] * 3 + ["revived"] + ["beat"] * 4
    st = await b.load("busy")
    await b.close()
    assert st is not None and st.attempts[0].state.value == "running"
    assert st.attempts[0].heartbeats == 8


async def test_an_embedded_file_cannot_fence_a_process_paused_inside_its_write(
        tmp_path: Path) -> None:
    """The limit of a file lock, shown: paused between its write and COMMIT, a process keeps
    SQLite's write lock; other writers get BackendUnavailable (nothing written) after their
    lock timeout, the event loop stays free meanwhile, and all resumes when the process does."""
    import asyncio

    url = f"sqlite:///{tmp_path / 'o.db'}"
    b = await _busy_work(url)
    proc = subprocess.Popen([sys.executable, "-c", PAUSING, url, "3", "2", "commit"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "paused"
        _wait_until_stopped(proc.pid)
        before = await b.load("busy")
        b.lock_timeout = 1.0
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        running = asyncio.create_task(ticker())
        with pytest.raises(outlive.errors.BackendUnavailable) as info:
            await b.execute("busy", Controller(b).stamp(L.MarkUnknown(attempt=1, at=50)))
        running.cancel()
        assert info.value.details["landed"] is False
        assert ticks >= 10, "the event loop was blocked while waiting for the lock"
        assert await b.load("busy") == before
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.stdout.readline().split() == ["beat"] * 3
        assert proc.wait(timeout=60) == 0
        b.lock_timeout = 30.0
        await b.execute("busy", Controller(b).stamp(L.MarkUnknown(attempt=1, at=50)))
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        await b.close()


# -- O(1) small writes -------------------------------------------------------------------------
async def _wal_bytes_of_a_heartbeat(path: Path, candidates: int, size: int) -> tuple[int, int]:
    import sqlite3

    b = await outlive.open_backend(f"sqlite:///{path}")
    try:
        att, _ = await one_step_work(b)
        for i in range(candidates):
            await b.execute("w", candidate_of(att, f"c{i}", {"text": f"{i}" + "c" * size}))
        side = sqlite3.connect(path)
        side.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        wal = Path(f"{path}-wal")
        assert wal.stat().st_size == 0
        await b.execute("w", L.Heartbeat(attempt=att.number, token=att.token, at=3,
                                         secret=att.secret))
        written = wal.stat().st_size
        side.close()
        assert isinstance(b, outlive._sqlite.SqliteBackend)  # type: ignore[attr-defined]
        return written, b.ledger.store.last_write_bytes
    finally:
        await b.close()


async def test_a_heartbeat_writes_the_same_bytes_whatever_the_candidates(tmp_path: Path) -> None:
    """Measured in bytes the file really gained (the WAL after a checkpoint), not in time."""
    import outlive._sqlite  # noqa: F401

    one_small = await _wal_bytes_of_a_heartbeat(tmp_path / "a.db", 1, 10)
    six_large = await _wal_bytes_of_a_heartbeat(tmp_path / "b.db", 6, 200_000)
    # Encoded bytes (head + one attempt row) differ only by the digits of the larger seq.
    assert abs(six_large[1] - one_small[1]) <= 4 and one_small[1] < 1_000
    assert six_large[0] == one_small[0] <= 6 * 4128 + 32  # WAL: the same few pages (+ headers)


# -- honest errors -----------------------------------------------------------------------------
async def test_disk_full_is_backend_unavailable_and_says_nothing_landed(tmp_path: Path) -> None:
    """A real SQLITE_FULL (the file may not grow): never InvalidRecord, and read back."""

    b = await outlive.open_backend(f"sqlite:///{tmp_path / 'o.db'}")
    try:
        att, _ = await one_step_work(b)
        before = await b.load("w")
        assert before is not None
        cmd = candidate_of(att, "big", {"text": "c" * 200_000})
        sb: Any = b
        pages = await sb._call(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
        await sb._call(lambda c: c.execute(f"PRAGMA max_page_count={pages + 2}"))
        with pytest.raises(outlive.errors.BackendUnavailable) as info:
            await b.execute("w", cmd)
        assert not isinstance(info.value, InvalidRecord)
        assert info.value.details["landed"] is False
        assert "full" in info.value.message
        assert await b.load("w") == before
        await sb._call(lambda c: c.execute("PRAGMA max_page_count=1073741823"))
        assert (await b.execute("w", cmd)).kind == "candidate"
    finally:
        await b.close()


def test_the_receiver_is_durable(tmp_path: Path) -> None:
    receiver = outlive.SqliteReceiver(str(tmp_path / "r.db"))
    try:
        assert receiver._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    finally:
        receiver.close()


#: The first storage layout (before 2026-12-01): rows keyed (work_id, kind, idx), indexed by seq.
_LAYOUT_1 = """
CREATE TABLE outlive_works (work_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, epoch INTEGER NOT NULL,
                            write_id TEXT NOT NULL, state TEXT NOT NULL);
CREATE TABLE outlive_rows (work_id TEXT NOT NULL, kind TEXT NOT NULL, idx INTEGER NOT NULL,
                           wseq INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (work_id, kind, idx));
CREATE INDEX outlive_rows_by_seq ON outlive_rows (work_id, wseq);
INSERT INTO outlive_works VALUES ('w', 1, 1, 'x', '{}');
"""


async def test_a_file_of_the_first_layout_is_refused_typed_and_left_unchanged(tmp_path: Path) -> None:
    """A file written before the layout-2 log (``outlive_rows``) is refused with a ConfigError
    that says so, read-only or not, and nothing in it is created or changed; a caller that laid
    this version's tables over it (``SCHEMA``) gets the same error at its first read."""
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    conn.executescript(_LAYOUT_1)
    conn.commit()
    conn.close()
    before = db.read_bytes()
    for url in (f"sqlite:///{db}", f"sqlite:///{db}?mode=ro"):
        with pytest.raises(ConfigError, match="layout 1"):
            await outlive.open_backend(url)
    assert db.read_bytes() == before
    assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0
    conn = sqlite3.connect(db, isolation_level=None)
    conn.executescript(SCHEMA)      # what langgraph+sqlite does on its own connection
    with pytest.raises(ConfigError, match="layout 1"):
        SqliteLedgerStore(str(db)).load(conn, "w")
    conn.close()


def test_the_thread_answers_its_first_loop_by_a_reader_and_any_other_loop_all_the_same() -> None:
    """The backend's thread answers the loop that called first through a socket that loop
    reads (no handle per answer); a later loop is answered by its ``call_soon_threadsafe``.
    Every call asked before ``stop()`` is answered, and the reader leaves the first loop once
    the thread has ended."""
    import asyncio
    import functools
    import threading

    from outlive._sqlite import _Answers, _Writer

    writer = _Writer()
    seen: list[Any] = []

    def where(i: int) -> int:
        seen.append(threading.get_ident())
        return i

    async def many() -> list[int]:
        return list(await asyncio.gather(*[writer.call(functools.partial(where, i))
                                           for i in range(200)]))

    async def first() -> None:
        assert await many() == list(range(200))
        answers = writer._answers
        assert isinstance(answers, _Answers)
        assert answers.loop is asyncio.get_running_loop()
        with pytest.raises(ZeroDivisionError):
            await writer.call(lambda: 1 // 0)     # an error reaches the caller as itself

    asyncio.run(first())
    first_answers = writer._answers
    assert first_answers is not None

    async def second() -> None:
        assert await many() == list(range(200))   # through this loop's call_soon_threadsafe
        futs = [writer.call(functools.partial(int, i)) for i in range(50)]
        writer.stop()                              # asked after the 50: they are still answered
        assert await asyncio.gather(*futs) == list(range(50))

    asyncio.run(second())
    writer._thread.join(5)
    assert not writer._thread.is_alive()
    assert threading.get_ident() not in seen        # every call ran on the thread
    assert first_answers._read.fileno() == -1       # closed once its loop was gone

    async def third() -> None:
        w = _Writer()
        assert await w.call(lambda: "x") == "x"
        answers = w._answers
        assert answers is not None
        fd = answers._read.fileno()
        selector = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]
        assert fd in selector.get_map()
        w.stop()
        w._thread.join(5)
        for _ in range(3):
            await asyncio.sleep(0)                  # the thread's last act: close the reader
        assert answers._read.fileno() == -1
        assert fd not in selector.get_map()

    asyncio.run(third())


def _holding_the_writer(commits: list[int], *,
                        fail_second: bool = False) -> Callable[[sqlite3.Connection], None]:
    """A ``before_commit`` hook: the first commit keeps the writer thread busy for 0.3 s (the
    commands sent meanwhile queue up, so they form one batch); with ``fail_second`` the next
    commit (the batch's) fails as a disk would."""
    def hook(conn: sqlite3.Connection) -> None:
        import time
        commits.append(1)
        if len(commits) == 1:
            time.sleep(0.3)
        elif len(commits) == 2 and fail_second:
            raise sqlite3.OperationalError("disk I/O error")
    return hook


async def test_commands_queued_together_share_one_commit(tmp_path: Path) -> None:
    """Group commit: commands of many works queued at the same moment land in one transaction,
    one fsync for the batch (each had its own: recovering a thousand works was write-bound),
    and each lands exactly as it would alone."""
    import asyncio
    url = f"sqlite:///{tmp_path / 'o.db'}"
    b = await outlive.open_backend(url)
    commits: list[int] = []
    try:
        b.ledger.before_commit = _holding_the_writer(commits)  # type: ignore[attr-defined]
        busy = asyncio.ensure_future(b.execute("busy", L.OpenWork(policy=Policy())))
        await asyncio.sleep(0.05)
        outs = await asyncio.gather(*(b.execute(f"w{i}", L.OpenWork(policy=Policy()))
                                      for i in range(40)))
        assert (await busy).kind == "opened"
        assert [o.kind for o in outs] == ["opened"] * 40
        assert len(commits) == 2   # the busy one, then the forty in one transaction
    finally:
        await b.close()
    again = await outlive.open_backend(url)
    try:
        assert sorted(await again.works()) == sorted(["busy", *(f"w{i}" for i in range(40))])
    finally:
        await again.close()


async def test_a_failed_group_commit_lands_each_command_on_its_own(tmp_path: Path) -> None:
    """When a batch's commit fails, nothing of it landed: each command runs again alone, so
    every caller gets its own answer and no command is lost or applied twice."""
    import asyncio
    url = f"sqlite:///{tmp_path / 'o.db'}"
    b = await outlive.open_backend(url)
    commits: list[int] = []
    try:
        for i in range(20):
            await b.execute(f"w{i}", L.OpenWork(policy=Policy()))
        b.ledger.before_commit = _holding_the_writer(  # type: ignore[attr-defined]
            commits, fail_second=True)
        busy = asyncio.ensure_future(b.execute("busy", L.OpenWork(policy=Policy())))
        await asyncio.sleep(0.05)
        outs = await asyncio.gather(*(b.execute(f"w{i}", L.PublishInput(
            version="v1", parts={"s1": f"{i:064x}"}, at=0)) for i in range(20)))
        assert (await busy).kind == "opened"
        assert all(o.kind == "published" for o in outs)
        assert len(commits) == 2 + 20   # the failed batch, then each command alone
        for i in range(20):
            st = await b.load(f"w{i}")
            assert st is not None and [v.version for v in st.inputs] == ["v1"]
            assert st.version("v1").parts == {"s1": f"{i:064x}"}   # type: ignore[union-attr]
    finally:
        await b.close()


async def test_runner_files_tell_a_gone_runtime_from_a_live_one_and_are_swept(
        tmp_path: Path) -> None:
    """Each runtime holds a locked file named by its runner id beside the database; a file whose
    lock is free is a runner gone, and the next runtime to open removes it (none piles up)."""
    url = f"sqlite:///{tmp_path / 'o.db'}"
    folder = tmp_path / "o.db.runners"
    first, second = await outlive.open_backend(url), await outlive.open_backend(url)
    try:
        assert await first.hold_runner("aaaa") and await first.hold_runner("cccc")
        assert not await second.runner_gone("aaaa") and not await second.runner_gone("cccc")
        await first.release_runner("aaaa")          # a runtime closed: its file stays, unlocked
        assert sorted(os.listdir(folder)) == ["aaaa", "cccc"]
        assert await second.hold_runner("bbbb")     # ... and the next one to open sweeps it
        assert sorted(os.listdir(folder)) == ["bbbb", "cccc"]
        assert await second.runner_gone("aaaa")     # removed: gone
        assert not await second.runner_gone("cccc")  # held by a live backend
        assert not await second.runner_gone("../x") and not await first.hold_runner("a/b")
    finally:
        await first.close()
    assert await second.runner_gone("cccc")          # its holder closed
    await second.close()
