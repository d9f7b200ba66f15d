"""``run_and_record`` in both shapes: the step's ``ctx.run_typed`` entry plus its fenced journal write.

"overlap" (default) starts the ledger call once Restate acknowledged the entry; "inside" makes
the ledger call from the step invocation (``object_call``). Either way: the worker gets the
journaled result, the entry lands in the ledger, and a stale owner's step is refused with the
same typed error, nothing written.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import outlive
from outlive import Controller, Worker
from outlive import ledger as L
from outlive_restate import RestateBackend

pytestmark = pytest.mark.asyncio(loop_scope="session")

V1 = {"s1": "Intro: a steady quarter.", "s2": "Revenue was 4.1 million."}


@pytest.mark.parametrize("mode", ["overlap", "inside"])
async def test_step_and_journal_write_in_both_shapes(restate_url: str, mode: str) -> None:
    b = await outlive.open_backend(f"{restate_url}&step_record={mode}")
    assert isinstance(b, RestateBackend) and b.step_record == mode
    calls = 0

    async def model(**kw: str) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        return {"summary": next(iter(kw.values()))[:10], "t": (1, 2)}

    try:
        w = f"record/{uuid.uuid4().hex[:8]}"
        ctl = Controller(b, clock=lambda: 0)
        await ctl.open_work(w)
        await ctl.publish(w, "v1", V1)
        a1 = await ctl.admit(w)
        w1 = Worker(b, a1, V1, clock=lambda: 2)
        await w1.start()
        out = await w1.step("s1", model, s1=V1["s1"])
        assert out == {"summary": V1["s1"][:10], "t": (1, 2)}  # the journaled value
        st = await b.load(w)
        assert st is not None and [(e.step, e.result) for e in st.journal] == [("s1", out)]
        # #1 goes silent and is replaced: its next step runs, the ledger refuses the write
        await b.execute(w, L.MarkUnknown(attempt=a1.number, at=5))
        a2 = await ctl.admit(w)
        before = await b.load(w)
        with pytest.raises(outlive.StaleOwner):
            await w1.step("s2", model, s2=V1["s2"])
        assert await b.load(w) == before, "a refused step write changed the ledger"
        assert calls == 2
        w2 = Worker(b, a2, V1, clock=lambda: 6)
        await w2.start()
        assert await w2.step("s1", model, s1=V1["s1"]) == out and calls == 2  # restored
        await w2.step("s2", model, s2=V1["s2"])
        st = await b.load(w)
        assert st is not None and sorted(e.step for e in st.journal) == ["s1", "s2"]
        assert calls == 3
    finally:
        await b.close()


async def test_bad_step_record_is_config_error() -> None:
    with pytest.raises(outlive.errors.ConfigError):
        RestateBackend("restate://127.0.0.1:8080?admin=9070&step_record=twice")
