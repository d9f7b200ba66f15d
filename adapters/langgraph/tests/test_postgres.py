"""``langgraph+postgres``: PostgresSaver checkpoints and the fenced ledger in one database."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from typing import Any, TypedDict

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.func import entrypoint
from langgraph.graph import END, START, StateGraph

import outlive
from outlive import Controller, External, Worker
from outlive import ledger as L
from outlive_conformance.suite import ConformanceSuite
from outlive_langgraph import (
    attempt_config,
    node_step,
    outlive_node,
    outlive_task,
    run,
    step_thread_id,
)
from outlive_langgraph.pgserver import PostgresServer
from outlive_langgraph.postgres import FencedAsyncPostgresSaver

from ._q3 import V1, V2, first_attempt
from .test_fork import Draft, paused_attempt_cannot_fork


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
        ctl, w1 = await first_attempt(b, clock=lambda: 1)
        for k in ("s1", "s2"):
            await w1.step(k, lambda text: {"s": text}, text=V1[k])
        await ctl.publish("q3", "v2", V2)
        await b.execute("q3", Controller(b).stamp(L.MarkUnknown(attempt=1, at=5)))
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


async def test_a_paused_attempt_cannot_fork_the_users_thread_on_postgres(
        pg_server: PostgresServer) -> None:
    """``backend.checkpointer`` on ``langgraph+postgres`` is fenced by default (no ``fence``)."""
    await paused_attempt_cannot_fork(pg_server.create_database(f"f_{uuid.uuid4().hex[:8]}"))


def _draft_graph(saver: Any) -> Any:
    async def draft(state: Draft) -> Draft:   # the user's own node, not an outlive step
        return {"draft": f"digest of {state['report']}"}

    g = StateGraph(Draft)
    g.add_node(draft)
    g.add_edge(START, "draft")
    g.add_edge("draft", END)
    return g.compile(checkpointer=saver)


async def _replaced_first_attempt(b: outlive.Backend) -> tuple[Controller, RunnableConfig]:
    """Attempt #1 made silent (``unknown``) after v2 is published: the controller, and #1's
    config for a stale write to the thread's checkpoint ``c1``."""
    ctl, w1 = await first_attempt(b)
    await ctl.publish("q3", "v2", V2)
    await b.execute("q3", Controller(b).stamp(L.MarkUnknown(attempt=1, at=5)))
    return ctl, attempt_config(w1, {"configurable": {"thread_id": "q3-report", "checkpoint_ns": "",
                                                     "checkpoint_id": "c1"}})


async def _takeover(b: outlive.Backend) -> Worker:
    ctl = Controller(b, clock=lambda: 0)
    await ctl.publish("q3", "v2", V2)
    await b.execute("q3", Controller(b).stamp(L.MarkUnknown(attempt=1, at=5)))
    w2 = Worker(b, await ctl.admit("q3"), V2)
    await w2.start()
    return w2


async def test_a_takeover_between_the_fence_check_and_the_write_refuses_the_write(
        pg_server: PostgresServer) -> None:
    """#1 passed its owner check and has not sent its write yet; a takeover commits meanwhile
    (nothing of #1 holds the work). #1's write is conditional on the head it checked, so it is
    refused and none of it lands (a check, then a plain write, would land it after #2's
    admission and fork the thread)."""
    b = await outlive.open_backend(pg_server.create_database(f"w_{uuid.uuid4().hex[:8]}"))
    try:
        saver = b.checkpointer  # type: ignore[attr-defined]
        assert isinstance(saver, FencedAsyncPostgresSaver)
        graph = _draft_graph(saver)
        _ctl, w1 = await first_attempt(b)
        held, release = asyncio.Event(), asyncio.Event()

        async def pause(owner: tuple[str, int, int]) -> None:
            if owner[1] == 1 and not held.is_set():
                held.set()
                await release.wait()

        saver.before_write = pause
        thread: RunnableConfig = {"configurable": {"thread_id": "q3-report"}}
        stale = asyncio.create_task(run(graph, {"report": "v1"}, worker=w1, config=thread))
        await asyncio.wait_for(held.wait(), 10)     # #1 passed its check, sent nothing yet
        w2 = await asyncio.wait_for(_takeover(b), 30)
        release.set()
        with pytest.raises(outlive.StaleOwner):
            await stale
        assert (await run(graph, {"report": "v2"}, worker=w2, config=thread))["draft"] == \
            "digest of v2"
        history = [t async for t in saver.alist(thread)]
        assert {t.metadata.get("outlive_attempt") for t in history} == {2}, "nothing of #1 landed"
        parents = Counter(t.parent_config["configurable"]["checkpoint_id"]
                          for t in history if t.parent_config)
        assert max(parents.values()) == 1, "no two checkpoints share a parent: no fork"
        assert saver.locked == 0, "every fenced write was one statement"
    finally:
        await b.close()


async def _waiting_on_locks(conn: psycopg.AsyncConnection[Any], n: int) -> None:
    for _ in range(1000):
        cur = await conn.execute("SELECT count(*) FROM pg_stat_activity WHERE "
                                 "wait_event_type = 'Lock' AND datname = current_database()")
        row = await cur.fetchone()
        if row is not None and row[0] >= n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{n} sessions never waited on a lock")


async def test_a_write_sent_while_an_admission_is_in_flight_waits_for_it_and_is_refused(
        pg_server: PostgresServer) -> None:
    """The fenced statement share-locks the work's head: sent while another process's admission
    holds that row, it waits, then finds the head moved and writes nothing (without the lock it
    would have read the old head and landed)."""
    db = f"e_{uuid.uuid4().hex[:8]}"
    url = pg_server.create_database(db) + "?lock_timeout=20000"
    b = await outlive.open_backend(url)
    b2 = await outlive.open_backend(url)   # the supervisor's process: its admission is not ours
    try:
        saver = b.checkpointer  # type: ignore[attr-defined]
        assert isinstance(saver, FencedAsyncPostgresSaver)
        _ctl, config = await _replaced_first_attempt(b)
        async with await psycopg.AsyncConnection.connect(pg_server.conninfo(db),
                                                         autocommit=True) as other:
            watch = await psycopg.AsyncConnection.connect(pg_server.conninfo(db), autocommit=True)
            try:
                async with other.transaction():    # holds the head row as a ledger write would
                    await other.execute("SELECT 1 FROM outlive_works WHERE work_id = 'q3' FOR UPDATE")
                    admit = asyncio.create_task(Controller(b2, clock=lambda: 0).admit("q3"))
                    await _waiting_on_locks(watch, 1)
                    late = asyncio.create_task(saver.aput_writes(config, [("draft", "late")], "t1"))
                    await _waiting_on_locks(watch, 2)
                await asyncio.wait_for(admit, 30)
                with pytest.raises(outlive.StaleOwner):
                    await asyncio.wait_for(late, 30)
                cur = await watch.execute("SELECT count(*) FROM checkpoint_writes WHERE task_id = 't1'")
                assert await cur.fetchone() == (0,)
            finally:
                await watch.close()
    finally:
        await b2.close()
        await b.close()


async def test_a_write_asked_while_our_own_admission_is_in_flight_waits_for_it_client_side(
        pg_server: PostgresServer) -> None:
    """An admission this process has in flight is waited for before the fenced write is built:
    the write is then refused on the state the admission left, and no statement bound to miss
    the head (and to be sent again) goes out."""
    db = f"o_{uuid.uuid4().hex[:8]}"
    url = pg_server.create_database(db) + "?lock_timeout=20000"
    b = await outlive.open_backend(url)
    try:
        saver = b.checkpointer  # type: ignore[attr-defined]
        assert isinstance(saver, FencedAsyncPostgresSaver)
        ctl, config = await _replaced_first_attempt(b)
        sent, missed = saver.statements, saver.missed
        async with await psycopg.AsyncConnection.connect(pg_server.conninfo(db),
                                                         autocommit=True) as other:
            watch = await psycopg.AsyncConnection.connect(pg_server.conninfo(db), autocommit=True)
            try:
                async with other.transaction():    # holds the head row: the admission waits
                    await other.execute("SELECT 1 FROM outlive_works WHERE work_id = 'q3' FOR UPDATE")
                    admit = asyncio.create_task(ctl.admit("q3"))
                    await _waiting_on_locks(watch, 1)
                    late = asyncio.create_task(saver.aput_writes(config, [("draft", "late")], "t1"))
                    for _ in range(20):
                        await asyncio.sleep(0.01)
                    assert not late.done()          # waiting for our admission, client side
                    cur = await watch.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND datname = current_database()")
                    assert await cur.fetchone() == (1,)   # only the admission waits on the row
                await asyncio.wait_for(admit, 30)
                with pytest.raises(outlive.StaleOwner):
                    await asyncio.wait_for(late, 30)
                cur = await watch.execute("SELECT count(*) FROM checkpoint_writes WHERE task_id = 't1'")
                assert await cur.fetchone() == (0,)
                assert (saver.statements, saver.missed) == (sent, missed)
            finally:
                await watch.close()
    finally:
        await b.close()


async def test_a_writer_paused_inside_the_locked_fence_is_cut_off(pg_server: PostgresServer) -> None:
    """The locked way (a predicted task row to remove, a statement of another shape): a writer
    that stops inside its fenced transaction (SIGSTOP, a long GC pause) does not hold the work:
    the server ends its session after ``idle_in_transaction_session_timeout``, the takeover
    commits, and the paused write never lands."""
    url = pg_server.create_database(f"c_{uuid.uuid4().hex[:8]}") + \
        "?idle_in_transaction_session_timeout=300"
    b1 = await outlive.open_backend(url)
    b2 = await outlive.open_backend(url)        # the successor's process
    try:
        saver = b1.checkpointer  # type: ignore[attr-defined]
        assert isinstance(saver, FencedAsyncPostgresSaver)
        saver.one_statement = False
        _ctl, w1 = await first_attempt(b1)
        held, release = asyncio.Event(), asyncio.Event()

        async def pause(owner: tuple[str, int, int]) -> None:
            if not held.is_set():
                held.set()
                await release.wait()

        saver.before_write = pause
        thread: RunnableConfig = {"configurable": {"thread_id": "q3-report"}}
        stale = asyncio.create_task(run(_draft_graph(saver), {"report": "v1"}, worker=w1,
                                        config=thread))
        await asyncio.wait_for(held.wait(), 10)
        w2 = await asyncio.wait_for(_takeover(b2), 30)   # waits until the server cuts #1 off
        release.set()
        # The server's FATAL read as the timeout itself, or the closed session after it.
        with pytest.raises((psycopg.OperationalError, psycopg.errors.IdleInTransactionSessionTimeout)):
            await stale
        graph2 = _draft_graph(b2.checkpointer)  # type: ignore[attr-defined]
        assert (await run(graph2, {"report": "v2"}, worker=w2, config=thread))["draft"] == \
            "digest of v2"
        assert {t.metadata.get("outlive_attempt")
                async for t in b2.checkpointer.alist(thread)} == {2}  # type: ignore[attr-defined]
    finally:
        await b1.close()
        await b2.close()


async def test_a_step_is_one_transaction_with_langgraphs_task_write(
        pg_server: PostgresServer) -> None:
    """The journal entry and LangGraph's row for the task commit together (inside an entrypoint
    and in the external-worker shape); LangGraph's own ``put_writes`` of it is not sent again."""
    db = f"m_{uuid.uuid4().hex[:8]}"
    b = await outlive.open_backend(pg_server.create_database(db))
    try:
        saver = b.checkpointer  # type: ignore[attr-defined]
        assert isinstance(saver, FencedAsyncPostgresSaver)

        @outlive_task(external=("i",))
        async def step(i: int) -> dict[str, int]:
            return {"i": i}

        @entrypoint(checkpointer=saver)
        async def prog(n: int) -> list[int]:
            return [(await step(i))["i"] for i in range(n)]

        _ctl, w = await first_attempt(b)
        assert await run(prog, 5, worker=w) == list(range(5))
        assert saver.merged == 5
        for i in range(3):
            await w.step(f"x{i}", lambda i: {"i": i}, i=outlive.External(i))
        assert saver.merged == 8
        st = await b.load("q3")
        assert st is not None and len(st.journal) == 8
    finally:
        await b.close()
    with psycopg.connect(pg_server.conninfo(db)) as conn:
        row = conn.execute("SELECT count(*) FROM checkpoint_writes WHERE thread_id = 'q3' "
                           "AND channel = '__return__'").fetchone()
    assert row is not None and row[0] == 5


def _journaled(conninfo: str, work: str) -> int:
    with psycopg.connect(conninfo) as conn:
        row = conn.execute("SELECT seq FROM outlive_works WHERE work_id = %s", (work,)).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_task_hands_langgraph_its_result_once_sent_and_the_user_once_committed(
        pg_server: PostgresServer) -> None:
    """In an entrypoint, an ``outlive_task``'s body returns its envelope to LangGraph once the
    journal write is sent; the user's ``await`` gets the result only after the commit. Each
    commit is slowed here, so LangGraph's ``put_writes`` of the task comes while the write is in
    flight: it waits for it and is answered as done (no second statement, one row per task), and
    the work's head has moved by the time the user's next line runs."""
    db = f"s_{uuid.uuid4().hex[:8]}"
    conninfo = pg_server.conninfo(db)
    b = await outlive.open_backend(pg_server.create_database(db))
    try:
        saver = b.checkpointer  # type: ignore[attr-defined]
        assert isinstance(saver, FencedAsyncPostgresSaver)
        seen: list[int] = []

        @outlive_task(external=("i",))
        async def step(i: int) -> dict[str, int]:
            return {"i": i}

        @entrypoint(checkpointer=saver)
        async def prog(n: int) -> list[int]:
            out = []
            for i in range(n):
                out.append((await step(i))["i"])
                seen.append(await asyncio.to_thread(_journaled, conninfo, "q3"))
            return out

        _ctl, w = await first_attempt(b)
        start = await asyncio.to_thread(_journaled, conninfo, "q3")

        async def slow(_conn: Any) -> None:
            await asyncio.sleep(0.05)

        b.ledger.before_write = slow  # type: ignore[attr-defined]
        # A held put_writes goes only with the next fenced write (never alone on a timer that a
        # loaded machine can outlast): the statement count does not depend on timing.
        saver.hold_seconds = 30.0
        before = (saver.merged, saver.waited, saver.statements)
        assert await run(prog, 4, worker=w) == list(range(4))
        assert (saver.merged - before[0], saver.waited - before[1]) == (4, 4)
        assert seen == [start + i + 1 for i in range(4)]   # committed before the user's next line
        assert saver.statements - before[2] <= 2            # the input's and the end's checkpoints
    finally:
        await b.close()
    with psycopg.connect(conninfo) as conn:
        row = conn.execute("SELECT count(*) FROM checkpoint_writes WHERE thread_id = 'q3' "
                           "AND channel = '__return__'").fetchone()
    assert row is not None and row[0] == 4


async def test_a_tasks_refused_entry_raises_at_the_users_await(pg_server: PostgresServer) -> None:
    """#2 is admitted (another process) while #1's step runs: #1's body hands LangGraph its
    envelope once the write is sent, the write is refused, and ``StaleOwner`` raises at the
    user's ``await``: the line after it never runs and no row of the refused task lands."""
    db = f"u_{uuid.uuid4().hex[:8]}"
    url = pg_server.create_database(db)
    b = await outlive.open_backend(url)
    b2 = await outlive.open_backend(url)
    try:
        saver = b.checkpointer  # type: ignore[attr-defined]
        assert isinstance(saver, FencedAsyncPostgresSaver)
        after: list[int] = []

        @outlive_task(external=("i",))
        async def step(i: int) -> dict[str, int]:
            if i == 1:
                await _takeover(b2)
            return {"i": i}

        @entrypoint(checkpointer=saver)
        async def prog(n: int) -> list[int]:
            out = []
            for i in range(n):
                out.append((await step(i))["i"])
                after.append(i)
            return out

        _ctl, w = await first_attempt(b)
        with pytest.raises(outlive.StaleOwner):
            await run(prog, 3, worker=w)
        assert after == [0]
        assert not saver.in_flight
    finally:
        await b.close()
        await b2.close()
    with psycopg.connect(pg_server.conninfo(db)) as conn:
        row = conn.execute("SELECT count(*) FROM checkpoint_writes WHERE thread_id = 'q3' "
                           "AND channel = '__return__'").fetchone()
    assert row is not None and row[0] == 1


class _Loop(TypedDict):
    i: int
    stop: int


def _loop_graph(saver: Any, body: Any) -> Any:
    g = StateGraph(_Loop)
    g.add_node("step", outlive_node(body, name="step", inputs=("i",), external=["i"]))
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["i"] < s["stop"] else END)
    return g.compile(checkpointer=saver)


def _writes(conninfo: str) -> int:
    """The server's next transaction id: each transaction that wrote took one (a read takes
    none, this one included), so the difference between two reads counts write commits (and
    aborted writes, of which these runs have none: no statement missed or was refused)."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        row = conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text").fetchone()
    assert row is not None
    return int(row[0])


async def _node_loop_commits(pg_server: PostgresServer, n: int, *,
                             defer: bool) -> tuple[int, int, int, list[Any]]:
    """(server commits, fenced statements, entries carried, the journal) for one run of ``n``
    node supersteps."""
    db = f"h_{uuid.uuid4().hex[:8]}"
    b = await outlive.open_backend(pg_server.create_database(db))
    try:
        saver = b.checkpointer  # type: ignore[attr-defined]
        assert isinstance(saver, FencedAsyncPostgresSaver)
        if not defer:
            saver.one_statement = True
            b.defer_node_entry = None  # type: ignore[attr-defined]
        # A held put_writes goes only with the next fenced write (never alone on a timer that a
        # loaded machine can outlast): the statement count does not depend on timing.
        saver.hold_seconds = 30.0

        async def body(state: _Loop) -> dict[str, int]:
            return {"i": state["i"] + 1}

        graph = _loop_graph(saver, body)
        _ctl, w = await first_attempt(b)
        before = (_writes(pg_server.conninfo(db)), saver.statements, saver.carried_entries)
        out = await run(graph, {"i": 0, "stop": n}, worker=w,
                        config={"configurable": {"thread_id": "loop"}})
        assert out == {"i": n, "stop": n}
        after = (_writes(pg_server.conninfo(db)), saver.statements, saver.carried_entries)
        assert saver.locked == 0 and saver.missed == 0
        st = await b.load("q3")
        assert st is not None
        journal = [(e.step, e.input_key, e.result, e.attempt) for e in st.journal]
    finally:
        await b.close()
    with psycopg.connect(pg_server.conninfo(db)) as conn:
        row = conn.execute("SELECT count(*) FROM checkpoint_writes WHERE thread_id = 'loop' "
                           "AND channel = 'i'").fetchone()
    assert row is not None and row[0] == n + 1   # the input, then every node's update
    commits, statements, carried = (a - z for a, z in zip(after, before, strict=True))
    return commits, statements, carried, journal


async def test_a_node_superstep_is_one_commit(pg_server: PostgresServer) -> None:
    """A StateGraph node that is an outlive step: its journal entry, LangGraph's write of the
    node's updates and the superstep's checkpoint go out as one statement (the entry waits for
    the ``put_writes``, held for the ``put``): one commit a superstep, where a plain node on
    LangGraph's own saver costs two. Without the carried entry it is two (the entry, then the
    rest), counted by the server (write transactions): runs of 12 and 24 supersteps, the
    difference over 12."""
    n = 12
    commits, statements, carried, journal = await _node_loop_commits(pg_server, n, defer=True)
    assert carried == n              # every superstep's entry rode in its checkpoint statement
    assert statements <= 2           # fenced statements of their own: the input's, the end's
    more, _, _, _ = await _node_loop_commits(pg_server, 2 * n, defer=True)
    base, base_statements, base_carried, base_journal = await _node_loop_commits(
        pg_server, n, defer=False)
    assert base_carried == 0 and base_statements >= n
    assert journal == base_journal and len(journal) == n   # the same entries either way
    base_more, _, _, _ = await _node_loop_commits(pg_server, 2 * n, defer=False)
    assert (more - commits, base_more - base) == (n, 2 * n)   # commits a superstep: 1, was 2


async def _step_in_node_commits(pg_server: PostgresServer, n: int, *,
                                journaled: bool) -> tuple[int, list[str], int]:
    """(server commits, the journal, entries carried) for ``n`` supersteps of one plain node
    on the fenced saver, with a ``node_step`` inside it or the same work without outlive."""
    db = f"s_{uuid.uuid4().hex[:8]}"
    b = await outlive.open_backend(pg_server.create_database(db))
    try:
        saver = b.checkpointer  # type: ignore[attr-defined]
        assert isinstance(saver, FencedAsyncPostgresSaver)
        saver.hold_seconds = saver.entry_seconds = 30.0   # only a fenced write carries them

        async def node(state: _Loop) -> dict[str, int]:
            async def body(i: Any) -> dict[str, int]:
                return {"i": i + 1}

            if journaled:
                got: dict[str, int] = await node_step(f"s{state['i']}", body,
                                                      i=External(state["i"]))
                return got
            return await body(state["i"])

        g = StateGraph(_Loop)
        g.add_node("work", node)
        g.add_edge(START, "work")
        g.add_conditional_edges("work", lambda s: END if s["i"] >= s["stop"] else "work")
        _ctl, w = await first_attempt(b)
        before = _writes(pg_server.conninfo(db))
        await run(g.compile(checkpointer=saver), {"i": 0, "stop": n}, worker=w,
                  config={"configurable": {"thread_id": "loop"}})
        commits = _writes(pg_server.conninfo(db)) - before
        st = await b.load("q3")
        assert st is not None
        return commits, [e.step for e in st.journal], saver.carried_entries
    finally:
        await b.close()


async def test_a_step_inside_a_node_costs_no_commit_of_its_own(pg_server: PostgresServer) -> None:
    """A ``node_step`` (a model call in an agent's node, a tool call in a ``ToolNode``) on
    PostgreSQL: its entry is queued and rides the superstep's one statement (the node's held
    ``put_writes`` and the checkpoint), so the graph commits no more than the same graph
    without the step (before, the entry was a commit of its own: one more a superstep)."""
    n = 6
    ours, journal, carried = await _step_in_node_commits(pg_server, n, journaled=True)
    plain, none, _ = await _step_in_node_commits(pg_server, n, journaled=False)
    assert journal == [f"s{i}" for i in range(n)] and none == []
    assert carried == n
    assert ours == plain


async def test_a_node_step_costs_no_asyncio_task_of_its_own(pg_server: PostgresServer) -> None:
    """An outlive node's step runs in the node itself and queues its entry for the superstep's
    checkpoint statement: the run makes as many asyncio tasks as the same graph with a plain
    node on the same saver (before, the step ran in a task of its own, which the node then
    waited on while the entry waited for its carrier: one more task and several more loop
    turns a superstep)."""
    n = 8
    db = f"t_{uuid.uuid4().hex[:8]}"
    b = await outlive.open_backend(pg_server.create_database(db))
    try:
        saver = b.checkpointer  # type: ignore[attr-defined]
        assert isinstance(saver, FencedAsyncPostgresSaver)
        saver.hold_seconds = saver.entry_seconds = 30.0   # no timer decides where a write goes
        _ctl, w = await first_attempt(b)
        loop = asyncio.get_running_loop()
        made = [0]

        def counting(lp: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
            made[0] += 1
            return asyncio.Task(coro, loop=lp, **kw)

        async def body(state: _Loop) -> dict[str, int]:
            return {"i": state["i"] + 1}

        g = StateGraph(_Loop)
        g.add_node("step", body)
        g.add_edge(START, "step")
        g.add_conditional_edges("step", lambda s: "step" if s["i"] < s["stop"] else END)
        plain = g.compile(checkpointer=saver)
        ours = _loop_graph(saver, body)

        async def tasks(graph: Any, thread: str) -> int:
            made[0] = 0
            loop.set_task_factory(counting)
            try:
                out = await run(graph, {"i": 0, "stop": n}, worker=w,
                                config={"configurable": {"thread_id": thread}})
            finally:
                loop.set_task_factory(None)
            assert out == {"i": n, "stop": n}
            return made[0]

        base = await tasks(plain, "plain")
        got = await tasks(ours, "ours")
        assert saver.carried_entries == n   # every entry rode in its superstep's statement
        st = await b.load("q3")
        assert st is not None and len(st.journal) == n
        assert got <= base, (got, base)
    finally:
        await b.close()


async def test_a_paused_nodes_late_entry_in_the_checkpoint_statement_is_refused(
        pg_server: PostgresServer) -> None:
    """Attempt #1's node body returns while #2 is admitted in another process; its entry then
    waits for the superstep's checkpoint statement, which the ledger's compare-and-set refuses:
    ``StaleOwner`` from the run, before any next node's body ran; neither the entry nor the
    node's update nor the checkpoint landed."""
    db = f"p_{uuid.uuid4().hex[:8]}"
    url = pg_server.create_database(db)
    b = await outlive.open_backend(url)
    b2 = await outlive.open_backend(url)
    try:
        saver = b.checkpointer  # type: ignore[attr-defined]
        assert isinstance(saver, FencedAsyncPostgresSaver)
        saver.entry_seconds = 30.0   # only the checkpoint statement can send the entry
        calls: list[int] = []
        _ctl, w1 = await first_attempt(b)

        async def body(state: _Loop) -> dict[str, int]:
            calls.append(state["i"])
            if state["i"] == 1:   # the second superstep: #2 is admitted meanwhile
                await _takeover(b2)
            return {"i": state["i"] + 1}

        graph = _loop_graph(saver, body)
        before = saver.carried_entries
        with pytest.raises(outlive.StaleOwner):
            await run(graph, {"i": 0, "stop": 5}, worker=w1,
                      config={"configurable": {"thread_id": "loop"}})
        assert calls == [0, 1]           # no next node's body ran after the refusal
        assert saver.carried_entries == before + 1   # the first superstep's entry was carried
        assert not saver.entries
    finally:
        await b.close()
        await b2.close()
    with psycopg.connect(pg_server.conninfo(db)) as conn:
        updates = conn.execute("SELECT count(*) FROM checkpoint_writes WHERE thread_id = 'loop' "
                               "AND channel = 'i'").fetchone()
        steps = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = 'loop'").fetchone()
    b3 = await outlive.open_backend(url)
    try:
        st = await b3.load("q3")
    finally:
        await b3.close()
    assert st is not None
    assert [(e.step, e.attempt) for e in st.journal] == [("step", 1)]
    assert updates is not None and updates[0] == 2   # the input and the first node's update
    # The input's, the start's, and the first node's superstep's: none of the second's.
    assert steps is not None and steps[0] == 3


async def test_a_node_cancelled_while_its_step_runs_cancels_the_step(
        pg_server: PostgresServer) -> None:
    """A node cancelled while its step's body runs: the body sees the cancellation, no entry is
    written, and nothing is left queued for a carrier (the first superstep's entry went with
    its checkpoint)."""
    db = f"x_{uuid.uuid4().hex[:8]}"
    b = await outlive.open_backend(pg_server.create_database(db))
    try:
        saver = b.checkpointer  # type: ignore[attr-defined]
        assert isinstance(saver, FencedAsyncPostgresSaver)
        started, seen = asyncio.Event(), []
        _ctl, w = await first_attempt(b)

        async def body(state: _Loop) -> dict[str, int]:
            if state["i"] == 1:
                started.set()
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    seen.append("cancelled")
                    raise
            return {"i": state["i"] + 1}

        graph = _loop_graph(saver, body)
        invocation = asyncio.ensure_future(run(graph, {"i": 0, "stop": 5}, worker=w,
                                               config={"configurable": {"thread_id": "loop"}}))
        await asyncio.wait_for(started.wait(), 10)
        assert not saver.entries and saver.carried_entries == 1   # the first's, carried
        invocation.cancel()
        with pytest.raises(asyncio.CancelledError):
            await invocation
        for _ in range(5):
            await asyncio.sleep(0)
        assert seen == ["cancelled"] and not saver.entries
        st = await b.load("q3")
        assert st is not None and [e.step for e in st.journal] == ["step"]   # the first only
    finally:
        await b.close()


class _Pair(TypedDict, total=False):
    i: int
    a: int
    b: int


async def test_parallel_nodes_in_one_superstep_each_journal_their_step(
        pg_server: PostgresServer) -> None:
    """Two outlive nodes in one superstep, one returning after the other's ``put_writes`` was
    sent: both entries are queued and carried by the attempt's fenced writes; both are
    journaled, nothing waits for the safety net, and the second run restores both."""
    db = f"q_{uuid.uuid4().hex[:8]}"
    b = await outlive.open_backend(pg_server.create_database(db))
    try:
        saver = b.checkpointer  # type: ignore[attr-defined]
        assert isinstance(saver, FencedAsyncPostgresSaver)
        saver.entry_seconds = 30.0   # a wait for the safety net would time the test out
        calls: list[str] = []

        async def left(state: _Pair) -> _Pair:
            calls.append("a")
            return {"a": state["i"] + 1}

        async def right(state: _Pair) -> _Pair:
            await asyncio.sleep(0.02)   # returns after the other node's put_writes was sent
            calls.append("b")
            return {"b": state["i"] + 2}

        g = StateGraph(_Pair)
        g.add_node("a", outlive_node(left, inputs=("i",), external=["i"]))
        g.add_node("b", outlive_node(right, inputs=("i",), external=["i"]))
        g.add_edge(START, "a")
        g.add_edge(START, "b")
        g.add_edge("a", END)
        g.add_edge("b", END)
        graph = g.compile(checkpointer=saver)
        _ctl, w = await first_attempt(b)
        out = await asyncio.wait_for(
            run(graph, {"i": 1}, worker=w, config={"configurable": {"thread_id": "pair"}}), 10)
        assert out == {"i": 1, "a": 2, "b": 3}
        assert saver.carried_entries >= 1 and not saver.entries
        st = await b.load("q3")
        assert st is not None and sorted(e.step for e in st.journal) == ["a", "b"]
        out = await asyncio.wait_for(
            run(graph, {"i": 1}, worker=w, config={"configurable": {"thread_id": "pair2"}}), 10)
        assert out == {"i": 1, "a": 2, "b": 3} and sorted(calls) == ["a", "b"]   # restored
    finally:
        await b.close()


async def test_a_held_write_nobody_takes_is_sent_alone(pg_server: PostgresServer) -> None:
    """A fenced ``put_writes`` with no ``put`` after it is sent by itself once its hold ends."""
    db = f"a_{uuid.uuid4().hex[:8]}"
    b = await outlive.open_backend(pg_server.create_database(db))
    try:
        saver = b.checkpointer  # type: ignore[attr-defined]
        assert isinstance(saver, FencedAsyncPostgresSaver)
        _ctl, w1 = await first_attempt(b)
        config = attempt_config(w1, {"configurable": {"thread_id": "q3-report", "checkpoint_ns": "",
                                                      "checkpoint_id": "c1"}})
        before = (saver.statements, saver.held)
        await asyncio.wait_for(saver.aput_writes(config, [("draft", "alone")], "t1"), 10)
        assert (saver.statements, saver.held) == (before[0] + 1, before[1])
    finally:
        await b.close()
    with psycopg.connect(pg_server.conninfo(db)) as conn:
        row = conn.execute("SELECT count(*) FROM checkpoint_writes WHERE task_id = 't1'").fetchone()
    assert row is not None and row[0] == 1


async def test_a_held_write_of_a_replaced_attempt_is_refused_with_the_write_that_took_it(
        pg_server: PostgresServer) -> None:
    """Held and taken by the attempt's next write (the checkpoint's ``put``), which the fence
    refuses (a successor was admitted meanwhile by another process): the held write is asked
    again on its own and refused too; neither lands."""
    db = f"r_{uuid.uuid4().hex[:8]}"
    url = pg_server.create_database(db)
    b = await outlive.open_backend(url)
    b2 = await outlive.open_backend(url)
    try:
        saver = b.checkpointer  # type: ignore[attr-defined]
        assert isinstance(saver, FencedAsyncPostgresSaver)
        saver.hold_seconds = 30.0        # only the next write can send it
        _ctl, config = await _replaced_first_attempt(b)
        first = asyncio.create_task(saver.aput_writes(config, [("draft", "held")], "t1"))
        for _ in range(100):
            if saver._held:
                break
            await asyncio.sleep(0.01)
        assert saver._held                      # waiting for the next write to carry it
        await Controller(b2, clock=lambda: 0).admit("q3")   # another process: not in our cache
        with pytest.raises(outlive.StaleOwner):   # the superstep's checkpoint takes it along
            await asyncio.wait_for(saver.aput(config, empty_checkpoint(), {}, {}), 30)
        with pytest.raises(outlive.StaleOwner):
            await asyncio.wait_for(first, 30)
    finally:
        await b2.close()
        await b.close()
    with psycopg.connect(pg_server.conninfo(db)) as conn:
        row = conn.execute("SELECT (SELECT count(*) FROM checkpoint_writes), "
                           "(SELECT count(*) FROM checkpoints)").fetchone()
    assert row == (0, 0)
