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
from typing import Any

import pytest
from langgraph.func import entrypoint

import outlive
from outlive import External, Worker
from outlive_langgraph import (
    FencedAsyncSqliteSaver,
    LangGraphBackend,
    _engine,
    outlive_task,
    run,
    step_thread_id,
)

from ._q3 import first_attempt

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
    await w.candidate({"digest": "d"})
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
