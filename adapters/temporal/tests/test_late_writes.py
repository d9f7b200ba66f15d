"""Which late writes Temporal refuses on its own, and which only outlive's fencing refuses.

Attempt #1 is paused inside a step: its process stops heartbeating the activity (modelled with
``auto_heartbeat=0``), Temporal times the activity out, the controller marks #1 unknown and admits
#2. When #1 wakes:

* its activity completion is refused **by Temporal** (the activity is closed: history shows
  ``ActivityTaskTimedOut`` and no completion; completing by task id returns NOT_FOUND);
* its journal write, candidate and effect intent are ordinary ledger updates that Temporal
  happily delivers — only the **owner token** check in the ledger refuses them. With fencing off
  (the same Temporal, the same code) all three land as stale writes.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.service import RPCError, RPCStatusCode

from outlive import Controller, Policy, Worker
from outlive import ledger as L
from outlive.errors import StaleOwner
from outlive_temporal import TemporalBackend, workflow_id

V1 = {"s1": "Intro.", "s2": "Revenue was 4.1 million."}


def summarise(**kw: Any) -> dict[str, str]:
    (text,) = kw.values()
    return {"summary": str(text)[:12]}


async def history_types(b: TemporalBackend, work: str) -> list[tuple[int, str]]:
    assert b._client is not None
    out = []
    async for ev in b._client.get_workflow_handle(workflow_id(work)).fetch_history_events():
        out.append((ev.event_type, _activity_id(ev)))
    return out


def _activity_id(ev: Any) -> str:
    if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
        return str(ev.activity_task_scheduled_event_attributes.activity_id)
    return ""


@pytest.mark.parametrize("fencing", [True, False], ids=["fencing-on", "fencing-off"])
async def test_stale_completion_vs_stale_writes(backend_url: str, fencing: bool) -> None:
    b = TemporalBackend(backend_url + "?heartbeat_ms=1000&auto_heartbeat=0")
    await b.start()
    try:
        work = f"late/{uuid.uuid4().hex[:8]}/digest#q3"
        tick = iter(range(1, 1000))
        ctl = Controller(b, clock=lambda: next(tick))
        await ctl.open_work(work, Policy(fencing=fencing))
        await ctl.publish(work, "v1", V1)
        a1 = await ctl.admit(work)
        w1 = Worker(b, a1, V1, clock=lambda: next(tick))
        await w1.start()
        await w1.step("s1", summarise, s1=V1["s1"])

        paused, wake = asyncio.Event(), asyncio.Event()

        async def held(**kw: Any) -> dict[str, str]:
            paused.set()
            await wake.wait()
            return summarise(**kw)

        late = asyncio.create_task(w1.step("s2", held, s2=V1["s2"]))
        await paused.wait()
        # silence: Temporal times the activity out on its own clock (heartbeat 1 s) ...
        for _ in range(100):
            if any(r.step == "s2" for r in b.stats.reports) or late.done():
                break
            await asyncio.sleep(0.1)
        hist = await history_types(b, work)
        assert any(t == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT for t, _ in hist)
        # ... while outlive's controller marks #1 unknown and admits #2 with a larger token.
        await b.execute(work, Controller(b).stamp(L.MarkUnknown(attempt=a1.number, at=next(tick))))
        a2 = await ctl.admit(work)
        w2 = Worker(b, a2, V1, clock=lambda: next(tick))
        await w2.start()
        await w2.step("s1", summarise, s1=V1["s1"])
        await w2.step("s2", summarise, s2=V1["s2"])

        # #1 wakes. Temporal already refuses its activity completion by itself:
        s2_ids = [aid for t, aid in hist if aid.startswith(f"{a1.number}:s2:")]
        assert len(s2_ids) == 1
        assert b._client is not None
        stale = b._client.get_async_activity_handle(
            workflow_id=workflow_id(work), run_id=None, activity_id=s2_ids[0])
        with pytest.raises(RPCError) as refused:
            await stale.complete("late result")
        assert refused.value.status == RPCStatusCode.NOT_FOUND
        wake.set()
        if fencing:
            with pytest.raises(StaleOwner):
                await late  # the journal write: refused only by the owner token
        else:
            await late  # Temporal delivered it; nothing but the token could have stopped it
        report = next(r for r in b.stats.reports if r.step == "s2" and r.attempt == a1.number)
        assert report.status == "timed_out" and report.detail == "HEARTBEAT"
        hist = await history_types(b, work)
        completed = [t for t, _ in hist if t == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED]
        assert len(completed) == 2, "s1 by #1, s2 by #2 (#2 restored s1); #1's s2 never completed"

        if fencing:
            w1._parts.setdefault("s2", w2._parts["s2"])  # what a stale worker would try to submit
            with pytest.raises(StaleOwner):
                await w1.candidate({"s1": w1.result("s1"), "s2": w2.result("s2")})
            with pytest.raises(StaleOwner):
                await w1.effect("announce:late", {"m": 1}, lambda k, p: pytest.fail("sent"))
            st = await b.load(work)
            assert st is not None and st.stale_writes_applied == 0
            assert all(e.attempt == a2.number for e in st.journal if e.step == "s2")
        else:
            await w1.candidate({"s1": w1.result("s1"), "s2": w2.result("s2")})
            sent: list[str | None] = []

            def send(k: str | None, p: Any) -> Any:
                sent.append(k)
                from outlive import Receipt
                return Receipt(effect_id="E1", duplicate=False, key=k)

            await w1.effect("announce:late", {"m": 1}, send)
            st = await b.load(work)
            assert st is not None
            # journal s2, the candidate, the intent and its confirmation: all from token 1
            assert st.stale_writes_applied >= 3
            assert any(e.stale and e.attempt == a1.number for e in st.journal)
            assert any(c.stale for c in st.candidates)
            assert sent == ["announce:late"]
    finally:
        await b.close()
