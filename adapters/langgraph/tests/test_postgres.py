"""``langgraph+postgres``: PostgresSaver checkpoints and the fenced ledger in one database."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

import outlive
from outlive import Controller, Worker
from outlive import ledger as L
from outlive_conformance.suite import ConformanceSuite
from outlive_langgraph import step_thread_id
from outlive_langgraph.pgserver import PostgresServer

from ._q3 import V1, V2


class TestLangGraphPostgres(ConformanceSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend_url(cls, pg_server: PostgresServer) -> str:
        return pg_server.create_database(f"conf_{uuid.uuid4().hex[:8]}")


async def test_fencing_and_restore_on_postgres(pg_server: PostgresServer) -> None:
    db = f"t_{uuid.uuid4().hex[:8]}"
    url = pg_server.create_database(db)
    b = await outlive.open_backend(url)
    try:
        ctl = Controller(b, clock=lambda: 0)
        await ctl.open_work("q3")
        await ctl.publish("q3", "v1", V1)
        w1 = Worker(b, await ctl.admit("q3"), V1, clock=lambda: 1)
        await w1.start()
        for k in ("s1", "s2"):
            await w1.step(k, lambda text: {"s": text}, text=V1[k])
        await ctl.publish("q3", "v2", V2)
        await b.execute("q3", L.MarkUnknown(attempt=1, at=5))
        w2 = Worker(b, await ctl.admit("q3"), V2, clock=lambda: 6)
        await w2.start()
        for k in V2:
            await w2.step(k, lambda text: {"s": text}, text=V2[k])
        assert {k for k, s in w2.steps.items() if s.restored} == {"s1"}
        before = await b.load("q3")
        with pytest.raises(outlive.StaleOwner):
            await w1.step("s3", lambda text: {"s": text}, text=V1["s3"])
        with pytest.raises(outlive.UnknownToken):
            await b.execute("q3", L.Heartbeat(attempt=2, token=99, at=7))
        assert await b.load("q3") == before
    finally:
        await b.close()
    # A second process (here: a fresh connection) sees the same ledger and LangGraph's checkpoints.
    b2 = await outlive.open_backend(url)
    try:
        st = await b2.load("q3")
        assert st is not None and [e.step for e in st.journal] == ["s1", "s2", "s2", "s3", "s4"]
        assert await b2.works() == ["q3"]
    finally:
        await b2.close()
    with psycopg.connect(pg_server.conninfo(db)) as conn:
        n = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = %s",
                         (step_thread_id("q3", 2),)).fetchone()
    assert n is not None and n[0] > 0


async def test_two_backends_race_on_one_work(pg_server: PostgresServer) -> None:
    """Two writers (two connections) admitting at once: the row lock serialises them."""
    url = pg_server.create_database(f"r_{uuid.uuid4().hex[:8]}")
    a = await outlive.open_backend(url)
    b = await outlive.open_backend(url)
    try:
        await Controller(a, clock=lambda: 0).open_work("w")
        await Controller(a, clock=lambda: 0).publish("w", "v1", V1)
        ca, cb = Controller(a, clock=lambda: 1), Controller(b, clock=lambda: 1)
        outs = await asyncio.gather(ca.admit("w"), cb.admit("w"), return_exceptions=True)
        ok = [o for o in outs if not isinstance(o, BaseException)]
        errs = [o for o in outs if isinstance(o, BaseException)]
        assert len(ok) == 1 and len(errs) == 1
        assert isinstance(errs[0], (outlive.AttemptActive, outlive.BackendUnavailable)), errs
        st = await b.load("w")
        assert st is not None and st.epoch == 1
    finally:
        await a.close()
        await b.close()


async def test_unreachable_postgres_is_backend_unavailable() -> None:
    with pytest.raises(outlive.BackendUnavailable):
        await outlive.open_backend("langgraph+postgres://outlive@127.0.0.1:9/nope")
    with pytest.raises(outlive.ConfigError):
        await outlive.open_backend("langgraph+postgres://")
