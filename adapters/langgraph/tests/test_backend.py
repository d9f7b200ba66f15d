"""The backend's contract, driven through outlive's own Controller and Worker."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import pytest

import outlive
from outlive import Contract, Controller, MemoryReceiver, StrictCurrent, Worker
from outlive import ledger as L
from outlive_langgraph import LangGraphBackend, LangGraphSqliteBackend, step_thread_id

from ._q3 import V1, V2, Model

CONTRACT = Contract(name="form", version="1", assessor="test")


def ok(_c: Any, _v: Any) -> tuple[bool, str]:
    return True, "complete"


async def _open(b: outlive.Backend, wid: str = "digest/q3") -> Controller:
    ctl = Controller(b, clock=lambda: 0)
    await ctl.open_work(wid)
    await ctl.publish(wid, "v1", V1)
    return ctl


async def test_url_resolves_through_entry_points(lg_url: str) -> None:
    b = await outlive.open_backend(lg_url)
    try:
        assert type(b).__module__ == "outlive_langgraph._backend"
    finally:
        await b.close()


async def test_main_flow_restore_by_input_key(backend: outlive.Backend) -> None:
    model = Model()
    ctl = await _open(backend)
    a1 = await ctl.admit("digest/q3")
    w1 = Worker(backend, a1, V1, clock=lambda: 1)
    await w1.start()
    for k in ("s1", "s2"):
        await w1.step(k, lambda text, k=k: model.summarise(1, k, text), text=V1[k])
    await ctl.publish("digest/q3", "v2", V2)
    await backend.execute("digest/q3", Controller(backend).stamp(L.MarkUnknown(attempt=1, at=5)))
    a2 = await ctl.admit("digest/q3")
    w2 = Worker(backend, a2, V2, clock=lambda: 6)
    await w2.start()
    for k in V2:
        await w2.step(k, lambda text, k=k: model.summarise(2, k, text), text=V2[k])
    # s1 restored (same input key), s2 redone (its text changed), s3/s4 new.
    assert model.calls == [(1, "s1"), (1, "s2"), (2, "s2"), (2, "s3"), (2, "s4")]
    assert w2.steps["s1"].restored and not w2.steps["s2"].restored
    cand = await w2.candidate(await w2.assemble({"revenue": w2.result("s2")["summary"]}))
    acc = await ctl.assess("digest/q3", cand.digest, CONTRACT, ok)
    assert acc.version == "v2"
    feed = MemoryReceiver()
    op = f"announce:digest/q3:{cand.digest}"
    r1 = await w2.effect(op, {"m": 1}, lambda key, p: feed.receive(key, p, lambda p: "P1"))
    assert r1.effect_id == "P1"
    dep = await ctl.dependable("digest/q3", StrictCurrent())
    assert dep is not None and dep.version == "v2"
    # Paused #1 wakes and tries a late write: fenced.
    with pytest.raises(outlive.StaleOwner):
        await w1.step("s3", lambda text: model.summarise(1, "s3", text), text=V1["s3"])
    st = await backend.load("digest/q3")
    assert st is not None and st.stale_writes_applied == 0


async def test_steps_run_as_langgraph_tasks_in_the_same_file(tmp_path: Any) -> None:
    url = f"langgraph+sqlite:///{tmp_path}/same.db"
    b = await outlive.open_backend(url)
    try:
        ctl = await _open(b, "w")
        a = await ctl.admit("w")
        w = Worker(b, a, V1, clock=lambda: 1)
        await w.start()
        await w.step("s1", lambda text: {"s": text[:5]}, text=V1["s1"])
    finally:
        await b.close()
    conn = sqlite3.connect(f"{tmp_path}/same.db")
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"checkpoints", "writes", "outlive_works"} <= tables
    thread = step_thread_id("w", 1)
    n = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = ?", (thread,)).fetchone()
    assert n[0] >= 1
    rows = conn.execute("SELECT channel FROM writes WHERE thread_id = ?", (thread,))
    names = {r[0] for r in rows}
    assert names, "the @task result was written as a LangGraph checkpoint write"


async def test_forged_token_is_unknown_and_writes_nothing(backend: outlive.Backend) -> None:
    ctl = await _open(backend)
    a = await ctl.admit("digest/q3")
    before = await backend.load("digest/q3")
    forged = L.RecordSteps(attempt=a.number, token=a.token + 7, entries=(), at=1)
    with pytest.raises(outlive.UnknownToken):
        await backend.execute("digest/q3", forged)
    after = await backend.load("digest/q3")
    assert after == before


async def test_candidate_for_another_version_is_refused(backend: outlive.Backend) -> None:
    ctl = await _open(backend)
    a = await ctl.admit("digest/q3")
    w = Worker(backend, a, V1, clock=lambda: 1)
    await w.start()
    for k in V1:
        await w.step(k, lambda text: {"s": text[:9]}, text=V1[k])
    cand = await w.candidate()
    await ctl.publish("digest/q3", "v2", V2)
    before = await backend.load("digest/q3")
    with pytest.raises(outlive.VersionMismatch):
        await ctl.assess("digest/q3", cand.digest, CONTRACT, ok)
    assert await backend.load("digest/q3") == before
    # and a step result that claims a section of the pinned version it was not computed from
    with pytest.raises(outlive.VersionMismatch):
        await w.step("s2", lambda s2: {"s": s2}, s2=V2["s2"])


async def test_wrong_snapshot_for_pin(backend: outlive.Backend) -> None:
    ctl = await _open(backend)
    a = await ctl.admit("digest/q3")
    with pytest.raises(outlive.VersionMismatch):
        await Worker(backend, a, V2).start()


async def test_body_runs_once_even_when_it_fails(backend: outlive.Backend) -> None:
    ctl = await _open(backend)
    a = await ctl.admit("digest/q3")
    w = Worker(backend, a, V1, clock=lambda: 1)
    await w.start()
    calls = []

    def boom(text: str) -> None:
        calls.append(text)
        raise RuntimeError("model down")

    with pytest.raises(RuntimeError, match="model down"):
        await w.step("s1", boom, text=V1["s1"])
    assert len(calls) == 1, "no engine retry of the body"
    st = await backend.load("digest/q3")
    assert st is not None and st.journal == ()


async def test_held_body_then_cancel_and_release(backend: outlive.Backend) -> None:
    """A paused body is held across ticks; a crashed caller is cancelled and never resumes."""
    ctl = await _open(backend)
    a = await ctl.admit("digest/q3")
    w = Worker(backend, a, V1, clock=lambda: 1)
    await w.start()
    gate = asyncio.Event()
    ran: list[str] = []

    async def held(text: str) -> dict[str, str]:
        ran.append(text)
        await gate.wait()
        return {"s": text[:4]}

    crashed = asyncio.create_task(w.step("s1", held, text=V1["s1"]))
    await asyncio.sleep(0.3)
    crashed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await crashed
    st = await backend.load("digest/q3")
    assert st is not None and st.journal == ()
    paused = asyncio.create_task(w.step("s2", held, text=V1["s2"]))
    await asyncio.sleep(0.5)
    assert not paused.done()
    gate.set()
    assert (await paused) == {"s": "Reve"}
    st = await backend.load("digest/q3")
    assert st is not None and [e.step for e in st.journal] == ["s2"]


async def test_concurrent_works(backend: outlive.Backend) -> None:
    async def one(i: int) -> int:
        wid = f"w{i}"
        ctl = await _open(backend, wid)
        a = await ctl.admit(wid)
        w = Worker(backend, a, V1, clock=lambda: 1)
        await w.start()
        for k in V1:
            await w.step(k, lambda text: {"s": text[:3]}, text=V1[k])
        await w.candidate()
        st = await backend.load(wid)
        assert st is not None
        return len(st.journal)

    assert await asyncio.gather(*(one(i) for i in range(12))) == [4] * 12
    assert len(await backend.works()) == 12


async def test_bad_urls() -> None:
    with pytest.raises(outlive.ConfigError):
        await outlive.open_backend("langgraph+sqlite://host/x.db")
    with pytest.raises(outlive.ConfigError):
        await outlive.open_backend("langgraph+memory://?durability=sometimes")
    with pytest.raises(outlive.BackendUnavailable):
        await outlive.open_backend("langgraph+sqlite:////no/such/dir/x.db")
    with pytest.raises(outlive.BackendUnavailable):
        await LangGraphSqliteBackend("langgraph+sqlite:///x.db").load("w")


async def test_the_attempts_thread_does_not_grow_with_each_step(backend: outlive.Backend) -> None:
    """``Worker.step`` runs each body in an invocation on the attempt's own thread. LangGraph
    keeps every task name it has seen in that thread's checkpoint, so a task name per step made
    each checkpoint (loaded and saved on every invocation) grow with the number of steps."""
    assert isinstance(backend, LangGraphBackend)
    ctl = await _open(backend)
    w = Worker(backend, await ctl.admit("digest/q3"), V1)
    await w.start()
    for i in range(12):
        await w.step(f"s{i}", lambda i: {"i": i}, i=outlive.External(i))
    latest = await backend.checkpointer.aget_tuple(
        {"configurable": {"thread_id": step_thread_id("digest/q3", 1)}})
    assert latest is not None
    assert len(latest.checkpoint["versions_seen"]) <= 3, list(latest.checkpoint["versions_seen"])
