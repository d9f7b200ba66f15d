"""A step is one commit: its journal entry and LangGraph's write of its task share a transaction.

LangGraph saves a task's result itself (in the background, even under ``durability="sync"``); the
step's fenced journal entry is a second write. The backend writes LangGraph's row with the
journal entry and the saver answers LangGraph's own ``put_writes`` of that very result as already
committed. A prediction of where LangGraph saves the row that turns out wrong costs a commit, not
a stray row.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.func import entrypoint
from langgraph.graph import END, START, StateGraph

import outlive
from outlive import Controller, External, Worker
from outlive import ledger as L
from outlive_langgraph import (
    FencedAsyncSqliteSaver,
    LangGraphBackend,
    _engine,
    outlive_node,
    outlive_task,
    run,
    step_thread_id,
)

from ._q3 import V2, first_attempt

N = 6


async def _worker(b: outlive.Backend) -> Worker:
    _ctl, w = await first_attempt(b)
    return w


async def _commits(saver: FencedAsyncSqliteSaver) -> list[str]:
    seen: list[str] = []
    await saver.in_thread(lambda conn: conn.set_trace_callback(
        lambda sql: seen.append(sql) if sql.strip().upper() == "COMMIT" else None))
    return seen


@outlive_task(external=("i",))
async def step(i: int) -> dict[str, int]:
    return {"i": i}


def _saver(b: LangGraphBackend) -> FencedAsyncSqliteSaver:
    saver = b.checkpointer
    assert isinstance(saver, FencedAsyncSqliteSaver)
    return saver


def _program(saver: FencedAsyncSqliteSaver) -> Any:
    """An entrypoint running ``step(0) … step(n-1)`` on ``saver``."""
    @entrypoint(checkpointer=saver)
    async def prog(n: int) -> list[int]:
        return [(await step(i))["i"] for i in range(n)]

    return prog


@pytest.fixture
async def sqlite_backend(tmp_path: Path) -> Any:
    b = await outlive.open_backend(f"langgraph+sqlite:///{tmp_path}/lg.db")
    try:
        yield b
    finally:
        await b.close()


async def test_each_step_of_an_entrypoint_is_one_commit(sqlite_backend: LangGraphBackend) -> None:
    b = sqlite_backend
    saver = _saver(b)
    prog = _program(saver)
    w = await _worker(b)
    commits = await _commits(saver)
    assert await run(prog, N, worker=w) == list(range(N))
    # N steps, plus the invocation's own checkpoints and the entrypoint's result: not 2 N.
    assert saver.merged == N
    assert len(commits) <= N + 4, commits
    # LangGraph's rows are there, as it would have written them: a resume restores them.
    snapshot = await prog.aget_state({"configurable": {"thread_id": "q3"}})
    assert snapshot.values == list(range(N))
    with sqlite3.connect(b.path) as conn:   # type: ignore[attr-defined]
        (rows,) = conn.execute("SELECT count(*) FROM writes WHERE thread_id = 'q3' AND "
                               "channel = '__return__'").fetchone()
    assert rows == N


async def test_a_worker_step_is_one_commit_with_its_task(sqlite_backend: LangGraphBackend) -> None:
    """The external-worker shape: the one-task program's write and the journal entry."""
    b = sqlite_backend
    saver = _saver(b)
    w = await _worker(b)
    for i in range(N):
        assert await w.step(f"s{i}", lambda i: {"i": i}, i=External(i)) == {"i": i}
    assert saver.merged == N
    st = await b.load("q3")
    assert st is not None and [e.step for e in st.journal] == [f"s{i}" for i in range(N)]


async def test_a_worker_step_is_two_commits_with_its_programs_checkpoints(
        sqlite_backend: LangGraphBackend) -> None:
    """The one-task program's input checkpoint is held for the step's journal transaction: a
    step is two commits (the entry with LangGraph's rows and that checkpoint, then the final
    checkpoint), not three, and every checkpoint LangGraph saved is on the program's thread."""
    b = sqlite_backend
    saver = _saver(b)
    w = await _worker(b)
    commits = await _commits(saver)
    for i in range(N):
        assert await w.step(f"s{i}", lambda i: {"i": i}, i=External(i)) == {"i": i}
    assert saver.carried_puts == N
    assert len(commits) == 2 * N, commits
    thread = step_thread_id("q3", w.attempt.number)
    with sqlite3.connect(b.path) as conn:   # type: ignore[attr-defined]
        sources = [json.loads(m)["source"] for (m,) in conn.execute(
            "SELECT metadata FROM checkpoints WHERE thread_id = ? ORDER BY checkpoint_id",
            (thread,))]
    assert sources == ["input", "loop"] * N


async def test_a_failed_step_lets_its_held_checkpoint_go_alone(
        sqlite_backend: LangGraphBackend) -> None:
    """No journal entry comes for a body that raises: the held input checkpoint is written by
    itself as soon as LangGraph saves the error (not when the hold runs out), and lands."""
    b = sqlite_backend
    saver = _saver(b)
    saver.carry_seconds = 600.0
    w = await _worker(b)

    def boom() -> None:
        raise RuntimeError("model down")

    with pytest.raises(RuntimeError, match="model down"):
        await asyncio.wait_for(w.step("s0", boom), 60)
    assert saver.carried_puts == 0
    thread = step_thread_id("q3", w.attempt.number)
    with sqlite3.connect(b.path) as conn:   # type: ignore[attr-defined]
        sources = [json.loads(m)["source"] for (m,) in conn.execute(
            "SELECT metadata FROM checkpoints WHERE thread_id = ?", (thread,))]
    assert sources == ["input"]


async def test_a_step_saved_at_the_end_is_the_programs_exit_checkpoint_alone(
        sqlite_backend: LangGraphBackend) -> None:
    """``persist="end"`` is LangGraph's ``"exit"``: the program saves one checkpoint when the
    invocation ends (one commit a step), no task writes; the journal comes with the candidate."""
    b = sqlite_backend
    saver = _saver(b)
    _ctl, w = await first_attempt(b, persist="end")
    commits = await _commits(saver)
    for i in range(N):
        assert await w.step(f"s{i}", lambda i: {"i": i}, i=External(i)) == {"i": i}
    assert len(commits) == N, commits
    thread = step_thread_id("q3", w.attempt.number)
    with sqlite3.connect(b.path) as conn:   # type: ignore[attr-defined]
        (writes,) = conn.execute("SELECT count(*) FROM writes WHERE thread_id = ?",
                                 (thread,)).fetchone()
        (checkpoints,) = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = ?",
                                      (thread,)).fetchone()
    assert (writes, checkpoints) == (0, N)
    st = await b.load("q3")
    assert st is not None and not st.journal
    await w.candidate()
    st = await b.load("q3")
    assert st is not None and [e.step for e in st.journal] == [f"s{i}" for i in range(N)]


async def test_a_wrong_guess_of_langgraphs_place_leaves_no_stray_row(
        sqlite_backend: LangGraphBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    b = sqlite_backend
    saver = _saver(b)
    real = _engine.running_task_write

    def wrong() -> Any:
        slot = real()
        return None if slot is None else dataclasses.replace(slot, checkpoint_id="not-there")

    monkeypatch.setattr(_engine, "running_task_write", wrong)

    prog = _program(saver)
    w = await _worker(b)
    assert await run(prog, N, worker=w) == list(range(N))
    assert saver.merged == 0
    with sqlite3.connect(b.path) as conn:   # type: ignore[attr-defined]
        stray = conn.execute("SELECT count(*) FROM writes WHERE checkpoint_id = 'not-there'"
                             ).fetchone()[0]
        rows = conn.execute("SELECT count(*) FROM writes WHERE thread_id = 'q3' AND "
                            "channel = '__return__'").fetchone()[0]
    assert (stray, rows) == (0, N)


async def test_the_fence_check_copies_no_journal(sqlite_backend: LangGraphBackend) -> None:
    """Each of LangGraph's writes is checked against the cached work when the head says it is
    current: a whole load (which copies the journal) on every write made each step of a long
    run cost more than the one before."""
    b = sqlite_backend
    saver = _saver(b)
    prog = _program(saver)
    w = await _worker(b)
    loads: list[str] = []
    whole = saver.store.load

    def counted(conn: sqlite3.Connection, work_id: str) -> Any:
        loads.append(work_id)
        return whole(conn, work_id)

    saver.store.load = counted  # type: ignore[method-assign]
    assert await run(prog, N, worker=w) == list(range(N))
    assert loads == []


class _Loop(TypedDict):
    i: int
    stop: int


def _loop_graph(saver: FencedAsyncSqliteSaver, body: Any) -> Any:
    g = StateGraph(_Loop)
    g.add_node("step", outlive_node(body, name="step", inputs=("i",), external=["i"]))
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["i"] < s["stop"] else END)
    return g.compile(checkpointer=saver)


async def _node_loop(path: Path, n: int, *, defer: bool) -> tuple[int, int, list[Any], int]:
    """(commits, entries carried, the journal, the node's updates saved) for ``n`` node
    supersteps on a fresh file."""
    b = await outlive.open_backend(f"langgraph+sqlite:///{path}")
    try:
        saver = _saver(b)
        if not defer:
            b.defer_node_entry = None  # type: ignore[attr-defined]

        async def body(state: _Loop) -> dict[str, int]:
            return {"i": state["i"] + 1}

        graph = _loop_graph(saver, body)
        w = await _worker(b)
        commits = await _commits(saver)
        out = await run(graph, {"i": 0, "stop": n}, worker=w,
                        config={"configurable": {"thread_id": "loop"}})
        assert out == {"i": n, "stop": n}
        assert not saver.entries and not saver._held
        st = await b.load("q3")
        assert st is not None
        journal = [(e.step, e.input_key, e.result, e.attempt) for e in st.journal]
        count, carried = len(commits), saver.carried_entries
    finally:
        await b.close()
    with sqlite3.connect(path) as conn:
        (updates,) = conn.execute("SELECT count(*) FROM writes WHERE thread_id = 'loop' AND "
                                  "channel = 'i'").fetchone()
    return count, carried, journal, updates


async def test_a_node_superstep_is_one_commit_on_sqlite(tmp_path: Path) -> None:
    """A StateGraph node that is an outlive step: its journal entry, LangGraph's write of the
    node's update and the superstep's checkpoint are one transaction (the entry is queued, the
    ``put_writes`` held for the ``put``, which carries both): one commit a superstep, where the
    entry committing before the node returns costs three (the entry, the update, the checkpoint). The same
    entries and rows either way; runs of 6 and 12 supersteps, the difference over 6."""
    commits, carried, journal, updates = await _node_loop(tmp_path / "a.db", N, defer=True)
    more, _, _, _ = await _node_loop(tmp_path / "b.db", 2 * N, defer=True)
    assert carried == N and updates == N + 1   # every entry carried; the input, each update
    base, base_carried, base_journal, base_updates = await _node_loop(
        tmp_path / "c.db", N, defer=False)
    base_more, _, _, _ = await _node_loop(tmp_path / "d.db", 2 * N, defer=False)
    assert base_carried == 0 and base_updates == updates
    assert journal == base_journal and len(journal) == N
    assert (more - commits, base_more - base) == (N, 3 * N)   # commits a superstep: 1, was 3


async def test_a_paused_nodes_late_entry_is_refused_with_its_checkpoint_on_sqlite(
        tmp_path: Path) -> None:
    """Attempt #1's node body returns while #2 is admitted through another connection; its
    entry is then queued for the superstep's checkpoint, whose transaction the ledger refuses:
    ``StaleOwner`` from the run, before any next node's body ran; neither the entry nor the
    node's update nor the checkpoint landed."""
    url = f"langgraph+sqlite:///{tmp_path}/p.db"
    b = await outlive.open_backend(url)
    b2 = await outlive.open_backend(url)
    try:
        saver = _saver(b)
        saver.entry_seconds = 30.0   # only the checkpoint can carry the entry
        calls: list[int] = []
        w1 = await _worker(b)

        async def body(state: _Loop) -> dict[str, int]:
            calls.append(state["i"])
            if state["i"] == 1:   # the second superstep: #2 is admitted meanwhile
                ctl = Controller(b2, clock=lambda: 0)
                await ctl.publish("q3", "v2", V2)
                await b2.execute("q3", Controller(b2).stamp(L.MarkUnknown(attempt=1, at=5)))
                await Worker(b2, await ctl.admit("q3"), V2).start()
            return {"i": state["i"] + 1}

        graph = _loop_graph(saver, body)
        with pytest.raises(outlive.StaleOwner):
            await run(graph, {"i": 0, "stop": 5}, worker=w1,
                      config={"configurable": {"thread_id": "loop"}})
        assert calls == [0, 1]        # no next node's body ran after the refusal
        assert saver.carried_entries == 1   # the first superstep's entry was carried
        assert not saver.entries
        st = await b2.load("q3")
    finally:
        await b.close()
        await b2.close()
    assert st is not None
    assert [(e.step, e.attempt) for e in st.journal] == [("step", 1)]
    with sqlite3.connect(tmp_path / "p.db") as conn:
        (updates,) = conn.execute("SELECT count(*) FROM writes WHERE thread_id = 'loop' AND "
                                  "channel = 'i'").fetchone()
        (steps,) = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = 'loop'"
                                ).fetchone()
    assert updates == 2   # the input and the first node's update
    assert steps == 3     # the input's, the start's, the first node's superstep's


async def test_a_node_cancelled_while_its_step_runs_cancels_the_step_on_sqlite(
        sqlite_backend: LangGraphBackend) -> None:
    """Cancelled while its step's body runs, the node's step is cancelled with it: the body
    sees it, no entry is written, nothing is left queued for a checkpoint."""
    b = sqlite_backend
    saver = _saver(b)
    started, seen = asyncio.Event(), []
    w = await _worker(b)

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


class _Pair(TypedDict, total=False):
    i: int
    a: int
    b: int


async def test_parallel_nodes_in_one_superstep_each_journal_their_step_on_sqlite(
        sqlite_backend: LangGraphBackend) -> None:
    """Two outlive nodes in one superstep, one returning after the other's ``put_writes`` was
    held: both entries are queued and carried by the attempt's fenced writes; both are
    journaled, nothing waits for the safety net, and a second run restores both."""
    b = sqlite_backend
    saver = _saver(b)
    saver.entry_seconds = 30.0   # a wait for the safety net would time the test out
    calls: list[str] = []

    async def left(state: _Pair) -> _Pair:
        calls.append("a")
        return {"a": state["i"] + 1}

    async def right(state: _Pair) -> _Pair:
        await asyncio.sleep(0.02)   # returns after the other node's put_writes was held
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
    w = await _worker(b)
    out = await asyncio.wait_for(
        run(graph, {"i": 1}, worker=w, config={"configurable": {"thread_id": "pair"}}), 10)
    assert out == {"i": 1, "a": 2, "b": 3}
    assert saver.carried_entries >= 1 and not saver.entries and not saver._held
    st = await b.load("q3")
    assert st is not None and sorted(e.step for e in st.journal) == ["a", "b"]
    snapshot = await graph.aget_state({"configurable": {"thread_id": "pair"}})
    assert snapshot.values == {"i": 1, "a": 2, "b": 3}
    out = await asyncio.wait_for(
        run(graph, {"i": 1}, worker=w, config={"configurable": {"thread_id": "pair2"}}), 10)
    assert out == {"i": 1, "a": 2, "b": 3} and sorted(calls) == ["a", "b"]   # restored


async def test_a_task_hands_langgraph_its_result_once_queued_and_the_user_once_committed(
        sqlite_backend: LangGraphBackend) -> None:
    """On ``langgraph+sqlite`` too, an ``outlive_task``'s body returns its envelope to LangGraph
    once its journal write is queued to the connection's thread, and the user's ``await`` gets
    the result only after the commit. Each commit is slowed here, so LangGraph's ``put_writes``
    of the task comes while the write is in flight: it waits for it and is answered as done (one
    row per task); each entry is committed before the user's next line runs."""
    b = sqlite_backend
    saver = _saver(b)
    seen: list[int] = []
    path = b.path  # type: ignore[attr-defined]

    def journaled() -> int:
        with sqlite3.connect(path) as conn:
            (n,) = conn.execute("SELECT seq FROM outlive_works WHERE work_id = 'q3'").fetchone()
        return int(n)

    @entrypoint(checkpointer=saver)
    async def prog(n: int) -> list[int]:
        out = []
        for i in range(n):
            out.append((await step(i))["i"])
            seen.append(await asyncio.to_thread(journaled))
        return out

    w = await _worker(b)
    start = await asyncio.to_thread(journaled)
    store = b._store  # type: ignore[attr-defined]
    store.before_commit = lambda conn: __import__("time").sleep(0.05)   # a slow disk
    try:
        assert await run(prog, 4, worker=w) == list(range(4))
    finally:
        store.before_commit = None
    assert saver.merged == 4 and saver.waited >= 1, "put_writes came in flight, answered as done"
    assert seen == [start + i + 1 for i in range(4)], "committed before the user's next line"
    with sqlite3.connect(path) as conn:
        (rows,) = conn.execute("SELECT count(*) FROM writes WHERE thread_id = 'q3' AND "
                               "channel = '__return__'").fetchone()
    assert rows == 4
