"""``durability="async"``: a step's journal write may be in flight while the next step runs.

LangGraph's own write of a task's result is in flight while the next task runs (under "async",
and inside an entrypoint under "sync" too) and is awaited before the run ends. Under "async" an
``outlive_task`` follows that mode: its call returns once its journal write is sent, and a
barrier lands every write in flight before anything depends on it (the next step's write, a
candidate, an effect, a wait, the end of the attempt, LangGraph's own writes of the attempt, the
end of the run). A write in flight that fails raises its own error at that barrier. Under "sync"
the call still returns only after the commit (``test_postgres.py``, ``test_one_commit.py``).

Each write here is held (the store's hook before it sends or commits) until the user's code
has gone past the step: before this change the step's ``await`` waited for the commit, so the
hold ran out (``_HOLD`` seconds) and the line after the step had not run.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import select
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypedDict

import psycopg
import pytest
from langgraph.func import entrypoint
from langgraph.graph import END, START, StateGraph

import outlive
from outlive import Controller, Worker
from outlive import ledger as L
from outlive_langgraph import LangGraphBackend, outlive_node, outlive_task, run
from outlive_langgraph.pgserver import PostgresServer

from ._q3 import V2, first_attempt
from .test_faults import CHILD, _second

#: How long a held write waits for the user's code to go past its step (seconds; generous:
#: only a build where the step waits for its commit ever runs it out).
_HOLD = 10.0


@pytest.fixture(params=["postgres", "sqlite"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path,
                  pg_server: PostgresServer) -> AsyncIterator[LangGraphBackend]:
    if request.param == "postgres":
        url = pg_server.create_database(f"f_{uuid.uuid4().hex[:8]}")
    else:
        url = f"langgraph+sqlite:///{tmp_path}/lg.db"
    b = await outlive.open_backend(url)
    assert isinstance(b, LangGraphBackend)
    try:
        yield b
    finally:
        await b.close()


@pytest.fixture
async def pg_backend(pg_server: PostgresServer) -> AsyncIterator[LangGraphBackend]:
    b = await outlive.open_backend(pg_server.create_database(f"f_{uuid.uuid4().hex[:8]}"))
    assert isinstance(b, LangGraphBackend)
    try:
        yield b
    finally:
        await b.close()


class _Held:
    """Holds the journal write of step ``i`` (before it reaches the database) until the user's
    code ran the line after that step; ``ran_out``: it never did within ``_HOLD``."""

    def __init__(self, b: LangGraphBackend, i: int, past: int | None = None) -> None:
        self.i = i
        #: The step after which the user's line releases the hold (default: step ``i``).
        self.past_at = i if past is None else past
        self.past = threading.Event()
        self.ran_out = False
        self.writes = 0
        self.then: Any = None   # called once the hold ends (a takeover, an injected failure)
        if b.url.startswith("langgraph+postgres"):
            async def before(_conn: Any) -> None:
                self.writes += 1
                if self.writes == self.i + 1:
                    self.ran_out = not await asyncio.to_thread(self.past.wait, _HOLD)
                    if self.then is not None:
                        # In a context of its own, as another process would be: the held
                        # write's context names the task rows its statement carries.
                        await asyncio.get_running_loop().create_task(
                            self.then(), context=contextvars.Context())

            b.ledger.before_write = before  # type: ignore[attr-defined]
        else:
            store = b._store  # type: ignore[attr-defined]

            def hold(_tx: Any) -> None:   # in the connection's thread, before COMMIT
                self.writes += 1
                if self.writes == self.i + 1:
                    self.ran_out = not self.past.wait(_HOLD)

            store.before_commit = hold


async def _task_rows(b: LangGraphBackend) -> int:
    """LangGraph's rows of task results on the thread ``q3``."""
    if b.url.startswith("langgraph+postgres"):
        with psycopg.connect(b.conninfo) as conn:  # type: ignore[attr-defined]
            row = conn.execute("SELECT count(*) FROM checkpoint_writes WHERE thread_id = 'q3' "
                               "AND channel = '__return__'").fetchone()
    else:
        row = await b.checkpointer.in_thread(  # type: ignore[attr-defined]
            lambda conn: conn.execute("SELECT count(*) FROM writes WHERE thread_id = 'q3' AND "
                                      "channel = '__return__'").fetchone())
    assert row is not None
    return int(row[0])


def _program(b: LangGraphBackend, held: _Held, after: list[int]) -> Any:
    @outlive_task(external=("i",))
    async def step(i: int) -> dict[str, int]:
        return {"i": i}

    @entrypoint(checkpointer=b.checkpointer)
    async def prog(n: int) -> list[int]:
        out = []
        for i in range(n):
            got = await step(i)
            after.append(i)
            if i == held.past_at:
                held.past.set()
            got["i"] += 100   # the caller's copy: what was journaled stays as it was
            out.append(got["i"] - 100)
        return out

    return prog


async def test_an_async_step_returns_with_its_write_in_flight_and_the_run_lands_it(
        backend: LangGraphBackend) -> None:
    """Step 0's write is held until the line after ``await step(2)`` ran: under "async" steps 1
    and 2 return while it is in flight (their writes queue behind it: on PostgreSQL both in one
    statement sent once it ended), and by the time the run returns every entry committed with
    LangGraph's row for its task, once."""
    _ctl, w = await first_attempt(backend)
    held = _Held(backend, 0, past=2)
    after: list[int] = []
    w0 = held.writes
    out = await run(_program(backend, held, after), 3, worker=w, durability="async")
    assert not held.ran_out, "the step's call waited for its commit"
    assert out == [0, 1, 2] and after == [0, 1, 2]
    st = await backend.load("q3")
    assert st is not None
    mine = [e for e in st.journal if e.attempt == 1]
    assert [e.result for e in mine] == [{"i": 0}, {"i": 1}, {"i": 2}]
    # PostgreSQL: steps 1 and 2 queued while step 0's write was at the server, one statement;
    # SQLite: each its own transaction, queued in order on the connection's thread.
    assert held.writes - w0 == (2 if backend.url.startswith("langgraph+postgres") else 3)
    saver: Any = backend.checkpointer
    assert not saver.flying and not saver.flight_errors
    assert sorted(w.steps) == sorted(e.step for e in mine)   # the worker knows every step
    cand = await w.candidate()
    assert set(cand.content) == {e.step for e in mine}
    assert await _task_rows(backend) == 3   # LangGraph's row for each task, once


async def _take_over(other: Any) -> None:
    """Elsewhere, while #1's write is held: v2 published, #1 suspected, #2 admitted and
    started, so #1's write in flight is stale."""
    ctl = Controller(other, clock=lambda: 0)
    await ctl.publish("q3", "v2", V2)
    await other.execute("q3", Controller(other).stamp(L.MarkUnknown(attempt=1, at=5)))
    await Worker(other, await ctl.admit("q3"), V2).start()


async def test_a_refusal_of_a_write_in_flight_raises_at_the_barrier(
        pg_backend: LangGraphBackend) -> None:
    """#2 is admitted while #1's write of step 0 is in flight: the user's code has gone on
    (under "async" that is allowed, as LangGraph's own write is), the write is refused, and the
    refusal (``StaleOwner``) raises out of the run at the next barrier; nothing of #1 lands."""
    backend = pg_backend   # the takeover runs inside the held write, before it is sent
    other = await outlive.open_backend(backend.url)
    try:
        _ctl, w = await first_attempt(backend)
        held = _Held(backend, 0)
        after: list[int] = []
        held.then = functools.partial(_take_over, other)
        with pytest.raises(outlive.StaleOwner):
            await run(_program(backend, held, after), 3, worker=w, durability="async")
        assert not held.ran_out, "the step's call waited for its commit"
        assert after[:1] == [0]
        with pytest.raises(outlive.StaleOwner):   # and at every later barrier of the attempt
            await w.candidate()
    finally:
        await other.close()
    st = await backend.load("q3")
    assert st is not None and not [e for e in st.journal if e.attempt == 1]
    assert await _task_rows(backend) == 0


class _Injected(RuntimeError):
    pass


async def test_an_error_of_a_write_in_flight_is_raised_never_lost(
        pg_backend: LangGraphBackend) -> None:
    """Step 0's write fails after the user's code went on (an error injected where the write
    would be sent): the run raises that very error, and no later step's write is sent after
    it (the journal holds nothing of the attempt)."""
    backend = pg_backend   # the failure is injected where the statement would be sent
    _ctl, w = await first_attempt(backend)
    held = _Held(backend, 0)
    after: list[int] = []
    boom = _Injected("the server went away")

    async def fail() -> None:
        raise boom

    held.then = fail
    with pytest.raises(_Injected) as got:
        await run(_program(backend, held, after), 3, worker=w, durability="async")
    assert got.value is boom
    assert not held.ran_out
    assert after[:1] == [0]
    st = await backend.load("q3")
    assert st is not None and not [e for e in st.journal if e.attempt == 1]
    with pytest.raises(_Injected):
        await w.finish()   # the attempt's end is a barrier too: the error is still there


async def test_under_sync_the_step_still_returns_after_its_commit(
        backend: LangGraphBackend) -> None:
    """The same program under "sync": the step's call waits for its commit, so the held write
    runs its hold out before the line after the step runs (the journal holds it by then)."""
    global _HOLD
    _ctl, w = await first_attempt(backend)
    held = _Held(backend, 0)
    after: list[int] = []
    saved, _HOLD = _HOLD, 0.3   # the hold only delays the commit here
    try:
        assert await run(_program(backend, held, after), 2, worker=w, durability="sync") == [0, 1]
    finally:
        _HOLD = saved
    assert held.ran_out, "under sync the step returned before its commit"
    saver: Any = backend.checkpointer
    assert not getattr(saver, "flying", None)



class _Loop(TypedDict):
    i: int
    stop: int


async def test_an_async_node_returns_with_its_entry_in_flight_in_the_checkpoints_statement(
        backend: LangGraphBackend) -> None:
    """A ``StateGraph`` node under "async": its journal entry rides the superstep's checkpoint
    write, which LangGraph sends in the background; the next node's body runs while it is in
    flight (held here until that body ran), and its own entry waits for it. Every superstep's
    entry lands, and the run returns after the last one."""
    _ctl, w = await first_attempt(backend)
    held = _Held(backend, 0)
    bodies: list[int] = []

    async def body(state: _Loop) -> dict[str, int]:
        bodies.append(state["i"])
        if state["i"] == 1:
            held.past.set()   # the second node's body: the first entry may land now
        return {"i": state["i"] + 1}

    g = StateGraph(_Loop)
    g.add_node("step", outlive_node(body, name="step", inputs=("i",), external=["i"]))
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["i"] < s["stop"] else END)
    graph = g.compile(checkpointer=backend.checkpointer)
    out = await run(graph, {"i": 0, "stop": 4}, worker=w, durability="async")
    assert not held.ran_out, "the node's entry committed before the next node's body ran"
    assert out["i"] == 4 and bodies == [0, 1, 2, 3]
    st = await backend.load("q3")
    assert st is not None
    assert sorted(e.result["i"] for e in st.journal if e.attempt == 1) == [1, 2, 3, 4]


def _line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The child's next line on stdout, or '' if none came within ``timeout`` seconds."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline().strip() if ready else ""


@pytest.mark.parametrize("write", ["cut_off", "let_go"])
def test_a_kill_with_journal_writes_in_flight_leaves_whole_entries(
        pg_server: PostgresServer, write: str) -> None:
    """A process under "async" is SIGKILLed the instant step s2's call returned, its writes
    held at the server (the parent holds the work's row): the server then cuts that session
    off (``cut_off``) or lets its statement run (``let_go``). Either way the journal holds
    whole entries, a prefix of the steps the process reported, each with LangGraph's row for
    its task and none without, and a new process restores exactly those and runs the rest."""
    url = pg_server.create_database(f"k_{uuid.uuid4().hex[:8]}")
    conninfo = pg_server.conninfo(url.rsplit("/", 1)[-1])
    proc = subprocess.Popen([sys.executable, CHILD, "program-async", url + "?lock_timeout=120000",
                             "s2"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert _line(proc, 60) == "done s1"
        with psycopg.connect(conninfo) as holder:
            holder.execute("SELECT 1 FROM outlive_works WHERE work_id = 'q3' FOR UPDATE")
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
            reported = _line(proc, 30)
            assert reported == "done s2", "the step's call waited for its commit"
            assert proc.wait(timeout=30) == -signal.SIGKILL
            with psycopg.connect(conninfo, autocommit=True) as admin:
                waiting = [r[0] for r in admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND "
                    "query LIKE '%outlive_works%'").fetchall()]
                if write == "cut_off":
                    for pid in waiting:
                        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            holder.rollback()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with psycopg.connect(conninfo) as conn:
        # whatever was still at the server has ended (committed or cut off) before the count
        conn.execute("SELECT 1 FROM outlive_works WHERE work_id = 'q3' FOR UPDATE")
        rows = conn.execute("SELECT count(*) FROM checkpoint_writes WHERE thread_id = 'q3' AND "
                            "channel = '__return__'").fetchone()
    got = _second(url)
    journaled = got["journal_before"]
    assert journaled in (["s1"], ["s1", "s2"]) or (write == "cut_off" and journaled == []), got
    assert rows is not None and rows[0] == len(journaled), "an entry without its task's row"
    assert got["restored"] == journaled
    assert got["calls"] == [k for k in ("s1", "s2", "s3", "s4") if k not in journaled]
    assert got["accepted"] == "v1" and got["stale"] == 0


async def test_a_refused_node_entry_in_flight_lands_nothing_of_its_superstep(
        pg_backend: LangGraphBackend) -> None:
    """Under "async" node 0's entry rides superstep 0's checkpoint statement, held at the send
    while #2 is admitted (elsewhere) and until node 1's body ran: the statement is refused
    whole (no entry, no checkpoint of superstep 0), node 1's entry waits for it and raises its
    ``StaleOwner``, and nothing of #1's supersteps lands."""
    backend = pg_backend
    other = await outlive.open_backend(backend.url)
    try:
        _ctl, w = await first_attempt(backend)
        held = _Held(backend, 0)
        bodies: list[int] = []

        held.then = functools.partial(_take_over, other)

        async def body(state: _Loop) -> dict[str, int]:
            bodies.append(state["i"])
            if state["i"] == 1:
                held.past.set()
            return {"i": state["i"] + 1}

        g = StateGraph(_Loop)
        g.add_node("step", outlive_node(body, name="step", inputs=("i",), external=["i"]))
        g.add_edge(START, "step")
        g.add_conditional_edges("step", lambda s: "step" if s["i"] < s["stop"] else END)
        graph = g.compile(checkpointer=backend.checkpointer)
        with pytest.raises(outlive.StaleOwner):
            await run(graph, {"i": 0, "stop": 4}, worker=w, durability="async")
        assert not held.ran_out
        assert bodies == [0, 1]   # node 1 ran (LangGraph went on), node 2 never did
    finally:
        await other.close()
    st = await backend.load("q3")
    assert st is not None and not [e for e in st.journal if e.attempt == 1]
    with psycopg.connect(backend.conninfo) as conn:  # type: ignore[attr-defined]
        steps = [r[0] for r in conn.execute(
            "SELECT metadata->>'step' FROM checkpoints WHERE thread_id = 'q3'").fetchall()]
    assert all(int(step) < 0 for step in steps), steps   # the input's checkpoint at most


async def test_an_effect_and_an_interrupt_wait_for_the_writes_in_flight(
        backend: LangGraphBackend) -> None:
    """Under "async" an effect inside the entrypoint is sent only once the step before it is
    journaled (the receiver finds the entry), and an ``interrupt()`` after a step leaves the
    attempt ``waiting`` with that step journaled: both are barriers."""
    from langgraph.types import interrupt

    from outlive import AttemptState
    from outlive.records import Receipt

    _ctl, w = await first_attempt(backend)
    held = _Held(backend, 0)
    seen: list[list[Any]] = []

    @outlive_task(external=("i",))
    async def step(i: int) -> dict[str, int]:
        return {"i": i}

    async def send(key: str | None, payload: Any) -> Receipt:
        st = await backend.load("q3")
        assert st is not None
        seen.append([e.result for e in st.journal if e.attempt == 1])
        return Receipt(effect_id="e1", duplicate=False, key=key)

    @entrypoint(checkpointer=backend.checkpointer)
    async def prog(n: int) -> str:
        got = await step(0)
        held.past.set()   # step 0's write is released only now: it was in flight
        await w.effect("tell:q3", got, send)
        answer = interrupt("approve?")
        return str(answer)

    await run(prog, 1, worker=w, durability="async")
    assert not held.ran_out
    assert seen == [[{"i": 0}]], "the effect was sent before the step it follows landed"
    st = await backend.load("q3")
    assert st is not None
    me = st.attempt(1)
    assert me is not None and me.state is AttemptState.WAITING


async def test_a_candidate_inside_the_graph_names_the_step_in_flight(
        backend: LangGraphBackend) -> None:
    """A candidate submitted inside the entrypoint right after a step whose write is in flight
    names that step: the worker waits for it (``Worker.landed``) before it builds its parts."""
    _ctl, w = await first_attempt(backend)
    held = _Held(backend, 0)

    @outlive_task(external=("i",))
    async def step(i: int) -> dict[str, int]:
        return {"i": i}

    @entrypoint(checkpointer=backend.checkpointer)
    async def prog(n: int) -> list[str]:
        await step(0)
        held.past.set()
        cand = await w.candidate()
        return sorted(cand.content)

    names = await run(prog, 1, worker=w, durability="async")
    assert not held.ran_out
    assert names == sorted(w.steps) and len(names) == 1
