"""``postgresql://``: the same store on a real server, which cuts off a paused holder.

The server is this project's own throwaway cluster (``initdb`` in a temp dir, a free loopback
port, stopped by its PID): see :mod:`outlive._pgserver`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from storage_work import candidate_of, one_step_work

import outlive
from outlive import Controller
from outlive import ledger as L
from outlive._pgserver import PostgresServer
from outlive_conformance.contract import BackendContractSuite, DurableBackendContract
from outlive_conformance.scenario import q3_report
from outlive_conformance.suite import ConformanceSuite
from outlive_conformance.sweep import check_claims, sweep


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """A PostgreSQL started by this project (initdb in a temp dir, free loopback port)."""
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.cleanup()


def _db(server: PostgresServer, prefix: str) -> str:
    return server.create_database(f"{prefix}_{uuid.uuid4().hex[:8]}")


class TestPostgresConformance(ConformanceSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend_url(cls, pg_server: PostgresServer) -> str:
        return _db(pg_server, "conf")


class TestPostgresContract(BackendContractSuite, DurableBackendContract):
    @pytest.fixture(scope="class")
    @classmethod
    def backend_url(cls, pg_server: PostgresServer) -> str:
        return _db(pg_server, "contract")


@pytest.mark.sweep
@pytest.mark.long
async def test_sweep_reproduces_the_seeds_claims_on_postgres(pg_server: PostgresServer) -> None:
    backend = await outlive.open_backend(_db(pg_server, "sweep") + "?pool=8")
    try:
        result = await sweep(backend, q3_report(), concurrency=8)
    finally:
        await backend.close()
    assert len(result.runs) == 864 and all(r.finished for r in result.runs.values())
    failed = [f"{c.name}: {c.detail}" for c in check_claims(result) if not c.holds]
    assert not failed, failed
    ref = await sweep(await outlive.open_backend("memory://"), q3_report(), concurrency=8)
    differ = [k for k in result.runs if result.runs[k].comparable() != ref.runs[k].comparable()]
    assert not differ, differ[:3]


async def _busy_work(url: str, work_id: str = "busy") -> outlive.Backend:
    b = await outlive.open_backend(url)
    ctl = Controller(b, clock=lambda: 0)
    await ctl.open_work(work_id)
    await ctl.publish(work_id, "v1", {"s1": "x"})
    await ctl.admit(work_id, keyed=False)   # the tests write for it with raw commands
    return b


async def _other_works_commit(b: outlive.Backend, n: int) -> None:
    for i in range(n):
        ctl = Controller(b, clock=lambda: 0)
        await ctl.open_work(f"other-{i}")
        await ctl.publish(f"other-{i}", "v1", {"s1": "x"})
        att = await ctl.admit(f"other-{i}")
        await b.execute(f"other-{i}", L.Heartbeat(attempt=att.number, token=att.token, at=1,
                                                   secret=att.secret))


# A worker process that holds a transaction on its work's row when it is paused. outlive's own
# writes are single statements (no transaction stays open between two of them), so the pause is
# taken inside a transaction the process opened itself on the backend's own session, with the
# backend's settings, as an application or a checkpointer sharing the database would.
PAUSED_IN_TRANSACTION = textwrap.dedent("""
    import asyncio, os, signal, sys
    import outlive
    async def main():
        b = await outlive.open_backend(sys.argv[1])
        async with b.ledger._conn() as conn:
            await conn.execute("BEGIN")
            await conn.execute("SELECT seq FROM outlive_works WHERE work_id = 'busy' FOR UPDATE")
            print("paused", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)   # the whole process stops here, for real
            try:
                await conn.execute("COMMIT")
                print("committed", flush=True)
            except Exception as exc:
                print("cut off:", type(exc).__name__, flush=True)
        await b.close()
    asyncio.run(main())
""")


async def test_a_worker_paused_mid_transaction_is_cut_off_and_others_keep_committing(
        pg_server: PostgresServer) -> None:
    url = _db(pg_server, "pause")
    b = await _busy_work(url + "?lock_timeout=200")
    child_url = url + "?idle_in_transaction_session_timeout=1000"
    proc = subprocess.Popen([sys.executable, "-c", PAUSED_IN_TRANSACTION, child_url],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "paused"
        # Other works: their rows are not locked, they commit at once.
        await _other_works_commit(b, 5)
        # The paused session's own work: the write waits on the row lock (lock_timeout, retried)
        # until the server ends the paused session (idle_in_transaction_session_timeout).
        # (On a loaded machine the server may already have ended the paused session by now, so
        # whether this write had to wait - busy_retries - is not asserted; that it lands is.)
        await b.execute("busy", Controller(b).stamp(L.MarkUnknown(attempt=1, at=50)))
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.stdout.readline().startswith("cut off:")
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    st = await b.load("busy")
    await b.close()
    assert st is not None and st.attempts[0].state.value == "unknown"


async def test_connection_killed_mid_commit_is_backend_unavailable_resolved_by_reading_back(
        pg_server: PostgresServer) -> None:
    """pg_terminate_backend while the write's commit runs: never InvalidRecord, and read back."""
    url = _db(pg_server, "kill")
    b = await _busy_work(url)
    admin = await psycopg.AsyncConnection.connect(url, autocommit=True)
    try:
        # A deferred trigger makes the commit itself slow, so the kill lands inside it.
        await admin.execute(
            "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN PERFORM pg_sleep(30); RETURN NULL; END $$")
        await admin.execute(
            "CREATE CONSTRAINT TRIGGER slow_commit AFTER UPDATE ON outlive_works "
            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()")
        before = await b.load("busy")
        assert before is not None
        task = asyncio.create_task(b.execute("busy", L.Heartbeat(attempt=1, token=1, at=5)))
        pid = None
        while pid is None:
            await asyncio.sleep(0.05)
            row = await (await admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep' "
                "AND query LIKE '%outlive_works%'")).fetchone()
            pid = row[0] if row else None
        await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(outlive.BackendUnavailable) as info:
            await task
        assert not isinstance(info.value, outlive.InvalidRecord)
        assert info.value.details["landed"] is False
        await admin.execute("DROP TRIGGER slow_commit ON outlive_works")
        assert await b.load("busy") == before
        # The backend replaced the dead connection: the same command now lands once.
        assert (await b.execute("busy", L.Heartbeat(attempt=1, token=1, at=5))).kind == "beat"
        st = await b.load("busy")
        assert st is not None and st.attempts[0].heartbeats == before.attempts[0].heartbeats + 1
    finally:
        await admin.close()
        await b.close()


async def test_a_heartbeat_writes_the_same_wal_bytes_whatever_the_candidates(
        pg_server: PostgresServer) -> None:
    """Measured in the server's own WAL (pg_current_wal_lsn), not in time."""

    async def wal_bytes(candidates: int, size: int) -> int:
        url = _db(pg_server, "bytes")
        b = await outlive.open_backend(url)
        admin = await psycopg.AsyncConnection.connect(url, autocommit=True)
        try:
            att, _ = await one_step_work(b)
            for i in range(candidates):
                await b.execute("w", candidate_of(att, f"c{i}", {"text": f"{i}" + "c" * size}))
            await b.execute("w", L.Heartbeat(attempt=att.number, token=att.token, at=3,
                                             secret=att.secret))
            await admin.execute("CHECKPOINT")  # full-page images after a checkpoint: same for both
            lsn: Any = await (await admin.execute("SELECT pg_current_wal_lsn()")).fetchone()
            await b.execute("w", L.Heartbeat(attempt=att.number, token=att.token, at=4,
                                             secret=att.secret))
            n: Any = await (await admin.execute(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (lsn[0],))).fetchone()
            return int(n[0])
        finally:
            await admin.close()
            await b.close()

    small = await wal_bytes(1, 10)
    large = await wal_bytes(6, 200_000)
    # Same order of bytes, and far below one candidate (200 kB): candidates are not rewritten.
    assert large < 3 * small + 8192 and large < 50_000, (small, large)


async def test_bad_urls_and_an_unreachable_server_are_typed_errors() -> None:
    with pytest.raises(outlive.BackendUnavailable):
        await outlive.open_backend("postgresql://outlive@127.0.0.1:9/nope")
    with pytest.raises(outlive.ConfigError):
        await outlive.open_backend("postgresql://")
    with pytest.raises(outlive.ConfigError):
        await outlive.open_backend("postgresql://u@127.0.0.1:9/db?lock_timeot=5")


async def test_a_connection_left_mid_command_is_not_handed_out_again(
        pg_server: PostgresServer) -> None:
    """A caller cancelled while awaiting the server can return its connection with the command
    still in progress; the pool must not give it to the next caller, whose command would fail
    with "another command is already in progress" (seen under load in the postgres sweep)."""
    b: Any = await _busy_work(_db(pg_server, "left") + "?pool=1")
    try:
        async with b.ledger._conn() as conn:
            conn.pgconn.send_query(b"SELECT pg_sleep(0.2)")  # sent; its result never read
        st = await b.load("busy")
        assert st is not None and st.attempts[0].number == 1
        await b.execute("busy", L.Heartbeat(attempt=1, token=1, at=5))
    finally:
        await b.close()


async def test_a_loaded_state_cannot_reach_the_stores_cache(pg_server: PostgresServer) -> None:
    """``load`` hands out a copy: editing what it returned changes neither the next load nor
    what the next command is applied to (the store keeps the work cached between commands)."""
    b = await outlive.open_backend(_db(pg_server, "copy"))
    try:
        _, w = await one_step_work(b)
        st = await b.load("w")
        assert st is not None
        st.journal[0].result["r"] = "edited"
        st.journal[0].sources.clear()
        st.inputs[0].parts["s1"] = "edited"
        await w.heartbeat()
        fresh = await b.load("w")
        assert fresh is not None
        assert fresh.journal[0].result == {"r": "x"}
        assert fresh.journal[0].sources and fresh.inputs[0].parts["s1"] != "edited"
    finally:
        await b.close()


async def test_a_database_of_the_first_layout_is_refused_typed_and_left_unchanged(
        pg_server: PostgresServer) -> None:
    """Tables of the first layout (``outlive_rows``): a ConfigError that says so, and no table of
    this version is created beside them."""
    url = _db(pg_server, "old")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE outlive_works (work_id TEXT PRIMARY KEY, seq BIGINT NOT NULL, "
                     "epoch BIGINT NOT NULL, write_id TEXT NOT NULL, state TEXT NOT NULL)")
        conn.execute("CREATE TABLE outlive_rows (work_id TEXT NOT NULL, kind TEXT NOT NULL, "
                     "idx INTEGER NOT NULL, wseq BIGINT NOT NULL, body TEXT NOT NULL, "
                     "PRIMARY KEY (work_id, kind, idx))")
    with pytest.raises(outlive.ConfigError, match="layout 1"):
        await outlive.open_backend(url)
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass('outlive_log')").fetchone()
        assert row is not None and row[0] is None


async def test_rows_added_to_the_ledgers_write_land_only_with_its_compare_and_set(
        pg_server: PostgresServer) -> None:
    """``pg_write_with``: a store built on ours (LangGraph's saver) adds its rows as CTEs of the
    ledger's one-statement write; they land with a write that took and never with one whose
    head had moved since (the same statement sent again later answers 0 and inserts nothing)."""
    from outlive.sqlstore import pg_write_carries, pg_write_with

    url = _db(pg_server, "also")
    b = await outlive.open_backend(url)
    sent: list[tuple[str, tuple[Any, ...]]] = []
    try:
        ledger = b.ledger  # type: ignore[attr-defined]
        inner = ledger._write

        async def write(req: Any) -> bool:
            merged = pg_write_with(req.single, [("INSERT INTO side (n) SELECT %s FROM head",
                                                 [len(sent)])])
            if merged is None:
                return bool(await inner(req))
            sent.append(merged)
            return bool(await inner(dataclasses.replace(req, single=merged)))

        ledger._write = write
        with psycopg.connect(pg_server.conninfo(url.rsplit('/', 1)[1]), autocommit=True) as conn:
            conn.execute("CREATE TABLE side (n int)")
            ctl = Controller(b, clock=lambda: 0)
            await ctl.open_work("w")
            await ctl.publish("w", "v1", {"s1": "x"})
            await ctl.admit("w")
            landed = [r[0] for r in conn.execute("SELECT n FROM side ORDER BY n").fetchall()]
            assert sent and landed == list(range(len(sent)))
            # the first write again: its head is long gone, so neither it nor its rows land
            stale = conn.execute(*sent[0]).fetchone()
            assert stale == (0,)
            assert conn.execute("SELECT count(*) FROM side").fetchone() == (len(sent),)
    finally:
        await b.close()
    assert pg_write_with(None, [("SELECT 1 FROM head", [])]) is None
    assert all(pg_write_carries(s) for s in sent) and not pg_write_carries(None)
    assert pg_write_with(("UPDATE outlive_works SET seq = 1", ()), []) is None


async def _xid(url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        row = await (await conn.execute("SELECT pg_current_xact_id()::text::bigint")).fetchone()
        assert row is not None
        return int(row[0])


async def test_commands_in_flight_together_share_one_transaction(pg_server: PostgresServer) -> None:
    """Group commit on PostgreSQL: the writes of many works queued at the same moment go to the
    server as one pipeline, one implicit transaction, one commit (each write had its own: a
    runtime recovering a thousand works spent its time in round trips and commits)."""
    import asyncio
    url = _db(pg_server, "group")
    b = await outlive.open_backend(url)
    try:
        before = await _xid(url)
        outs = await asyncio.gather(*(b.execute(f"w{i}", L.OpenWork(policy=outlive.Policy()))
                                      for i in range(40)))
        after = await _xid(url)
        assert [o.kind for o in outs] == ["opened"] * 40
        assert after - before <= 5   # a transaction per batch (and the probe's own): not 40
        assert sorted(await b.works()) == sorted(f"w{i}" for i in range(40))
    finally:
        await b.close()


async def test_a_batch_with_a_failing_statement_lands_each_command_alone(
        pg_server: PostgresServer) -> None:
    """One statement of a batch fails (here: a row another session holds past lock_timeout):
    the server rolled the whole batch back, so each command runs again on its own; every caller
    gets its own answer and nothing is lost or applied twice."""
    import asyncio
    url = _db(pg_server, "groupfail")
    b = await outlive.open_backend(url + "?lock_timeout=100&timeout=20000")
    holder = await psycopg.AsyncConnection.connect(url)
    try:
        for i in range(20):
            await b.execute(f"w{i}", L.OpenWork(policy=outlive.Policy()))
        await holder.execute("SELECT 1 FROM outlive_works WHERE work_id = 'w7' FOR UPDATE")

        async def release() -> None:   # once w7, alone after the batch, waited for the row
            for _ in range(1000):
                if b.busy_retries:
                    break
                await asyncio.sleep(0.01)
            await holder.rollback()
        releasing = asyncio.ensure_future(release())
        outs = await asyncio.gather(*(b.execute(f"w{i}", L.PublishInput(
            version="v1", parts={"s1": f"{i:064x}"}, at=0)) for i in range(20)))
        await releasing
        assert all(o.kind == "published" for o in outs)
        for i in range(20):
            st = await b.load(f"w{i}")
            assert st is not None and [v.version for v in st.inputs] == ["v1"]
        assert b.busy_retries > 0   # w7 waited alone for the row, after the batch was undone
    finally:
        await holder.close()
        await b.close()
