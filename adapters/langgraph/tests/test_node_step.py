"""``node_step``: a step inside a running node whose journal entry rides the node's own save.

A model call inside a prebuilt agent's node, a tool call inside a ``ToolNode``: LangGraph saves
the node's update (``put_writes``) and the superstep's checkpoint anyway; the step's entry joins
that transaction instead of a commit of its own. Nothing the node returned lands without the
entry, a refusal is raised before the next superstep, and another ledger command of the attempt
(an effect's intent) commits the entries first.
"""

from __future__ import annotations

import operator
import sqlite3
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

import outlive
from outlive import Controller, External, Receipt, Worker
from outlive import ledger as L
from outlive_langgraph import FencedAsyncSqliteSaver, LangGraphBackend, node_step, run

from ._q3 import V1, V2, first_attempt

N = 6


class _Loop(TypedDict):
    i: int
    stop: int
    seen: Annotated[list[int], operator.add]


def _graph(saver: Any, node: Any) -> Any:
    g = StateGraph(_Loop)
    g.add_node("work", node)
    g.add_edge(START, "work")
    g.add_conditional_edges("work", lambda s: END if s["i"] >= s["stop"] else "work")
    return g.compile(checkpointer=saver)


async def _commits(saver: FencedAsyncSqliteSaver) -> list[str]:
    seen: list[str] = []
    await saver.in_thread(lambda conn: conn.set_trace_callback(
        lambda sql: seen.append(sql) if sql.strip().upper() == "COMMIT" else None))
    return seen


def _saver(b: outlive.Backend) -> FencedAsyncSqliteSaver:
    assert isinstance(b, LangGraphBackend)
    saver = b.checkpointer
    assert isinstance(saver, FencedAsyncSqliteSaver)
    return saver


async def _loop(path: Path, n: int, *, journaled: bool) -> tuple[int, list[str], int]:
    """``n`` supersteps of one node (a step inside it, or the same work without outlive):
    the commits of the run, the journal, the entries carried in LangGraph's writes."""
    b = await outlive.open_backend(f"langgraph+sqlite:///{path}")
    try:
        saver = _saver(b)
        saver.hold_seconds = 30.0    # only the checkpoint releases a held put_writes
        saver.entry_seconds = 30.0   # only a write of the attempt sends the entries
        _ctl, w = await first_attempt(b)

        async def node(state: _Loop) -> dict[str, Any]:
            async def body(i: Any) -> dict[str, int]:
                return {"i": i + 1}

            if journaled:
                got = await node_step(f"s{state['i']}", body, i=External(state["i"]))
            else:
                got = await body(state["i"])
            return {"i": got["i"], "seen": [state["i"]]}

        commits = await _commits(saver)
        await run(_graph(saver, node), {"i": 0, "stop": n, "seen": []}, worker=w,
                  config={"configurable": {"thread_id": "loop"}})
        st = await b.load("q3")
        assert st is not None
        return len(commits), [e.step for e in st.journal], saver.carried_entries
    finally:
        await b.close()


async def test_a_step_inside_a_node_costs_no_commit_of_its_own(tmp_path: Path) -> None:
    """The same graph with a journaled step in its node commits less than without: each
    entry, the node's ``put_writes`` (held for the checkpoint) and the checkpoint are the
    superstep's one transaction, where LangGraph alone commits the update and the checkpoint
    apart (before, ``Worker.step`` inside a node ran a LangGraph invocation of its own and
    committed its entry apart)."""
    ours, journal, carried = await _loop(tmp_path / "a.db", N, journaled=True)
    plain, none, _ = await _loop(tmp_path / "b.db", N, journaled=False)
    assert journal == [f"s{i}" for i in range(N)] and none == []
    assert carried == N
    assert ours == plain - N


async def test_a_replaced_attempts_queued_entry_is_refused_with_the_nodes_writes(
        tmp_path: Path) -> None:
    """#2 is admitted (through another connection) while #1's node runs, after its step:
    ``StaleOwner`` from #1's run before any next node ran; neither #1's entry nor the node's
    update nor its superstep's checkpoint landed."""
    url = f"langgraph+sqlite:///{tmp_path}/p.db"
    b = await outlive.open_backend(url)
    b2 = await outlive.open_backend(url)
    calls: list[int] = []
    try:
        saver = _saver(b)
        saver.hold_seconds = saver.entry_seconds = 30.0
        _ctl, w1 = await first_attempt(b)

        async def node(state: _Loop) -> dict[str, Any]:
            calls.append(state["i"])

            async def body(i: Any) -> dict[str, int]:
                return {"i": i + 1}

            got = await node_step(f"s{state['i']}", body, i=External(state["i"]))
            if state["i"] == 1:   # the second superstep: #2 is admitted meanwhile
                ctl = Controller(b2, clock=lambda: 0)
                await ctl.publish("q3", "v2", V2)
                await b2.execute("q3", ctl.stamp(L.MarkUnknown(attempt=1, at=5)))
                await Worker(b2, await ctl.admit("q3"), V2).start()
            return {"i": got["i"], "seen": [state["i"]]}

        with pytest.raises(outlive.StaleOwner):
            await run(_graph(saver, node), {"i": 0, "stop": 5, "seen": []}, worker=w1,
                      config={"configurable": {"thread_id": "loop"}})
        st = await b2.load("q3")
    finally:
        await b.close()
        await b2.close()
    assert calls == [0, 1]
    assert st is not None
    assert [(e.step, e.attempt) for e in st.journal] == [("s0", 1)]
    with sqlite3.connect(tmp_path / "p.db") as conn:
        (updates,) = conn.execute("SELECT count(*) FROM writes WHERE thread_id = 'loop' AND "
                                  "channel = 'seen'").fetchone()
    assert updates == 2   # the input's and the first node's: not the refused second's


async def test_an_effect_after_a_queued_step_follows_its_entry_in_the_ledger(
        tmp_path: Path) -> None:
    """A read inside the node, then an effect: the read's entry has committed by the time the
    effect is sent (its intent written after it), as ``Worker.step``'s would have."""
    b = await outlive.open_backend(f"langgraph+sqlite:///{tmp_path}/e.db")
    sent: list[tuple[str | None, list[str], list[str]]] = []
    try:
        saver = _saver(b)
        saver.hold_seconds = saver.entry_seconds = 30.0
        _ctl, w = await first_attempt(b)

        async def node(state: _Loop) -> dict[str, Any]:
            async def read(s2: str) -> str:
                return s2.upper()

            text = await node_step("read", read, s2=V1["s2"])

            async def post(key: str | None, payload: Any) -> Receipt:
                st = await b.load("q3")   # what a successor would find at this moment
                assert st is not None
                sent.append((key, [e.step for e in st.journal], [e.op_key for e in st.effects]))
                return Receipt(effect_id="p1", duplicate=False, key=key)

            await w.effect("post:q3", {"text": text}, post)
            return {"i": state["stop"], "seen": [0]}

        await run(_graph(saver, node), {"i": 0, "stop": 1, "seen": []}, worker=w,
                  config={"configurable": {"thread_id": "fx"}})
        st = await b.load("q3")
    finally:
        await b.close()
    assert sent == [("post:q3", ["read"], ["post:q3"])]   # the entry, then the intent, then sent
    assert st is not None and [e.step for e in st.journal] == ["read"]


async def test_a_step_of_a_node_that_fails_afterwards_stays_journaled(
        backend_path: Path) -> None:
    """The node raises after its step: the entry still lands (with LangGraph's write of the
    error), so the retry restores the step instead of running it again."""
    b = await outlive.open_backend(f"langgraph+sqlite:///{backend_path}")
    ran: list[int] = []
    try:
        saver = _saver(b)
        _ctl, w = await first_attempt(b)
        fail = [True]

        async def node(state: _Loop) -> dict[str, Any]:
            async def call(s1: str) -> str:
                ran.append(1)
                return s1[:5]

            await node_step("model", call, s1=V1["s1"])
            if fail[0]:
                raise RuntimeError("after the model call")
            return {"i": state["stop"], "seen": [0]}

        graph = _graph(saver, node)
        cfg: Any = {"configurable": {"thread_id": "f"}}
        with pytest.raises(RuntimeError):
            await run(graph, {"i": 0, "stop": 1, "seen": []}, worker=w, config=cfg)
        st = await b.load("q3")
        assert st is not None and [e.step for e in st.journal] == ["model"]
        fail[0] = False
        await run(graph, None, worker=w, config=cfg)
    finally:
        await b.close()
    assert ran == [1]


async def test_outside_a_fenced_saver_a_node_step_is_a_plain_step(tmp_path: Path) -> None:
    """On another saver (here LangGraph's in-memory one, fenced by ``backend.fence``) the entry
    commits before the step returns, as ``Worker.step``'s."""
    from langgraph.checkpoint.memory import InMemorySaver

    b = await outlive.open_backend(f"langgraph+sqlite:///{tmp_path}/m.db")
    try:
        saver = b.fence(InMemorySaver())  # type: ignore[attr-defined]
        _ctl, w = await first_attempt(b)
        journaled: list[list[str]] = []

        async def node(state: _Loop) -> dict[str, Any]:
            async def body(i: Any) -> int:
                return int(i) + 1

            await node_step("s", body, i=External(state["i"]))
            st = await b.load("q3")
            assert st is not None
            journaled.append([e.step for e in st.journal])
            return {"i": state["stop"], "seen": [0]}

        await run(_graph(saver, node), {"i": 0, "stop": 1, "seen": []}, worker=w,
                  config={"configurable": {"thread_id": "m"}})
    finally:
        await b.close()
    assert journaled == [["s"]]


@pytest.fixture
def backend_path(tmp_path: Path) -> Path:
    return tmp_path / "n.db"
