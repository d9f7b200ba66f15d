"""``Worker.run_steps`` on Temporal: one ``steps`` update drives the whole batch in the ledger
workflow, journaling each step (fenced, by the core ledger) before the next activity starts."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType

from outlive import Controller, Worker
from outlive import ledger as L
from outlive.errors import StaleOwner
from outlive_temporal import TemporalBackend, workflow_id

PARTS = {f"s{i}": f"Section {i} of the report." for i in range(1, 6)}


def summarise(**kw: Any) -> dict[str, str]:
    (text,) = kw.values()
    return {"summary": str(text)[:12]}


def plan(calls: list[str], held: dict[str, Any] | None = None) -> list[tuple[str, Any, dict[str, Any]]]:
    out: list[tuple[str, Any, dict[str, Any]]] = []
    for name, text in PARTS.items():
        def fn(_name: str = name, **kw: Any) -> Any:
            calls.append(_name)
            if held and _name in held:
                return held[_name](**kw)
            return summarise(**kw)
        out.append((name, fn, {name: text}))
    return out


async def update_count(b: TemporalBackend, work: str) -> tuple[int, int]:
    """(accepted updates, completed activities) in the ledger workflow's history."""
    assert b._client is not None
    ups = acts = 0
    async for ev in b._client.get_workflow_handle(workflow_id(work)).fetch_history_events():
        if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            ups += 1
        if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            acts += 1
    return ups, acts


async def opened(b: TemporalBackend) -> tuple[str, Controller, Any]:
    work = f"batch/{uuid.uuid4().hex[:8]}/q3 ü#1"
    tick = iter(range(1, 10_000))
    ctl = Controller(b, clock=lambda: next(tick))
    await ctl.open_work(work)
    await ctl.publish(work, "v1", PARTS)
    return work, ctl, tick


async def test_batch_journals_every_step_in_one_update(backend: TemporalBackend) -> None:
    work, ctl, tick = await opened(backend)
    a1 = await ctl.admit(work)
    w = Worker(backend, a1, PARTS, clock=lambda: next(tick))
    await w.start()
    before = await update_count(backend, work)
    calls: list[str] = []
    results = await w.run_steps(plan(calls))
    after = await update_count(backend, work)
    assert calls == list(PARTS)
    assert results == [summarise(**{n: t}) for n, t in PARTS.items()]
    assert after[0] - before[0] == 1, "the whole batch is one update"
    assert after[1] - before[1] == len(PARTS), "each step is one real activity"
    st = await backend.load(work)
    assert st is not None
    assert [e.step for e in st.journal] == list(PARTS)
    assert all(e.attempt == a1.number and not e.stale for e in st.journal)
    assert [e.result for e in st.journal] == results
    assert all(not r.restored for r in w.steps.values())
    # run again in the same attempt: nothing runs, nothing is sent
    assert await w.run_steps(plan(calls)) == results
    assert calls == list(PARTS)
    assert (await update_count(backend, work))[0] == after[0]


async def test_successor_restores_then_batches_the_rest(backend: TemporalBackend) -> None:
    work, ctl, tick = await opened(backend)
    a1 = await ctl.admit(work)
    w1 = Worker(backend, a1, PARTS, clock=lambda: next(tick))
    await w1.start()
    calls: list[str] = []
    await w1.run_steps(plan(calls)[:2])
    assert calls == ["s1", "s2"]
    await backend.execute(work, Controller(backend).stamp(L.MarkUnknown(attempt=a1.number, at=next(tick))))
    a2 = await ctl.admit(work)
    w2 = Worker(backend, a2, PARTS, clock=lambda: next(tick))
    await w2.start()
    calls.clear()
    results = await w2.run_steps(plan(calls))
    assert calls == ["s3", "s4", "s5"], "s1, s2 restored by input key, not re-run"
    assert results == [summarise(**{n: t}) for n, t in PARTS.items()]
    assert w2.steps["s1"].restored and w2.steps["s2"].restored
    assert not any(w2.steps[n].restored for n in ("s3", "s4", "s5"))
    st = await backend.load(work)
    assert st is not None
    by_step = {e.step: e.attempt for e in st.journal}
    assert by_step == {"s1": a1.number, "s2": a1.number, "s3": a2.number, "s4": a2.number,
                       "s5": a2.number}


async def test_successor_admitted_mid_batch_fences_the_rest(backend: TemporalBackend) -> None:
    work, ctl, tick = await opened(backend)
    a1 = await ctl.admit(work)
    w1 = Worker(backend, a1, PARTS, clock=lambda: next(tick))
    await w1.start()
    paused, wake = asyncio.Event(), asyncio.Event()

    async def held_s3(**kw: Any) -> dict[str, str]:
        paused.set()
        await wake.wait()
        return summarise(**kw)

    calls: list[str] = []
    batch = asyncio.create_task(w1.run_steps(plan(calls, {"s3": held_s3})))
    await asyncio.wait_for(paused.wait(), 30)
    # s1 and s2 are journaled already, while the batch is still running
    st = await backend.load(work)
    assert st is not None and [e.step for e in st.journal] == ["s1", "s2"]
    await backend.execute(work, Controller(backend).stamp(L.MarkUnknown(attempt=a1.number, at=next(tick))))
    a2 = await ctl.admit(work)
    assert a2.number > a1.number
    wake.set()
    with pytest.raises(StaleOwner):
        await asyncio.wait_for(batch, 30)
    assert calls == ["s1", "s2", "s3"], "the batch stops at the refused write"
    st = await backend.load(work)
    assert st is not None
    assert [(e.step, e.attempt) for e in st.journal] == [("s1", a1.number), ("s2", a1.number)]
    assert st.stale_writes_applied == 0
    # the successor restores s1, s2 and runs the rest in its own batch
    w2 = Worker(backend, a2, PARTS, clock=lambda: next(tick))
    await w2.start()
    calls.clear()
    await w2.run_steps(plan(calls))
    assert calls == ["s3", "s4", "s5"]
    st = await backend.load(work)
    assert st is not None and len(st.journal) == 5 and st.stale_writes_applied == 0


async def test_big_result_and_failing_body_mid_batch(backend: TemporalBackend) -> None:
    """A result too big to come back inline is journaled by the client and the batch goes on;
    a body that raises stops the batch with its own exception, earlier steps journaled."""
    work, ctl, tick = await opened(backend)
    a1 = await ctl.admit(work)
    w = Worker(backend, a1, PARTS, clock=lambda: next(tick))
    await w.start()
    big = "x" * 100_000  # over the 64 KB inline limit, under the ledger's 256 KB

    def boom(**kw: Any) -> Any:
        raise ValueError("model refused")

    calls: list[str] = []
    with pytest.raises(ValueError, match="model refused"):
        await w.run_steps(plan(calls, {"s2": lambda **kw: {"summary": big}, "s4": boom}))
    assert calls == ["s1", "s2", "s3", "s4"]
    st = await backend.load(work)
    assert st is not None
    assert [e.step for e in st.journal] == ["s1", "s2", "s3"]
    assert st.journal[1].result == {"summary": big}
    assert [(r.step, r.status, r.inline) for r in backend.stats.reports if r.work_id == work] \
        == [("s1", "completed", True), ("s2", "completed", False), ("s3", "completed", True),
            ("s4", "failed", False)]
