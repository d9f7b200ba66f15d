"""The engine-orchestrated shape: an ``@entrypoint`` of ``outlive_task`` steps.

The seed's main run with a paused attempt #1, driven by LangGraph's durability modes: ``"sync"``
(progress saved every step) gives 6 model calls, ``"exit"`` (saved at the end of the attempt)
gives 8, as in the article.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langgraph.func import entrypoint

import outlive
from outlive import Contract, Controller, Worker
from outlive import ledger as L
from outlive_langgraph import (
    LangGraphBackend,
    current_worker,
    outlive_task,
    persist_for,
    run,
)

from ._q3 import V1, V2, first_attempt

CONTRACT = Contract(name="form", version="1", assessor="test")


class Harness:
    """Counts model calls and can hold attempt #1 at one section (the pause)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []
        self.hold_at: tuple[int, str] | None = None
        self.held = asyncio.Event()
        self.release = asyncio.Event()




def make_program(b: LangGraphBackend, h: Harness) -> Any:
    @outlive_task(step=lambda section, **_: section, external=("section",))
    async def summarise(section: str, text: str) -> dict[str, Any]:
        att = current_worker().attempt.number
        h.calls.append((att, section))
        if h.hold_at == (att, section):
            h.held.set()
            await h.release.wait()
        return {"summary": text, "by": att}

    @entrypoint(checkpointer=b.checkpointer)
    async def digest(report: dict[str, str]) -> str:
        parts = [await summarise(section=k, text=v) for k, v in report.items()]
        cand = await current_worker().candidate(
            await current_worker().assemble({"revenue": parts[1]["summary"]}))
        return cand.digest

    return digest


@pytest.mark.parametrize("durability,calls", [("sync", 6), ("exit", 8)])
async def test_durability_modes_give_the_seed_call_counts(
        lg_url: str, durability: Any, calls: int) -> None:
    b = await outlive.open_backend(lg_url)
    assert isinstance(b, LangGraphBackend)
    try:
        h = Harness()
        h.hold_at = (1, "s3")
        program = make_program(b, h)
        ctl, w1 = await first_attempt(b, persist=persist_for(durability), clock=lambda: 1)
        first = asyncio.create_task(run(program, V1, worker=w1, durability=durability))
        await asyncio.wait_for(h.held.wait(), 10)
        # t4: the corrected report; t5: #1 is silent -> unknown; #2 admitted on v2
        await ctl.publish("q3", "v2", V2)
        await b.execute("q3", Controller(b).stamp(L.MarkUnknown(attempt=1, at=5)))
        a2 = await ctl.admit("q3")
        w2 = Worker(b, a2, V2, persist=persist_for(durability), clock=lambda: 6)
        await w2.start()
        digest = await run(program, V2, worker=w2, durability=durability)
        acc = await ctl.assess("q3", digest, CONTRACT, lambda c, v: (True, "ok"))
        assert acc.version == "v2"
        # t8: #1 wakes; its late writes are refused by the ledger, whatever LangGraph saved.
        h.release.set()
        with pytest.raises(outlive.StaleOwner):
            await first
        assert len(h.calls) == calls, h.calls
        restored = {k for k, s in w2.steps.items() if s.restored}
        assert restored == ({"s1"} if durability == "sync" else set())
        st = await b.load("q3")
        assert st is not None and st.stale_writes_applied == 0
        assert all(e.attempt == 2 or e.step in ("s1", "s2") for e in st.journal)
        assert [a.version for a in st.acceptances] == ["v2"]
    finally:
        await b.close()


async def test_langgraph_keeps_none_of_the_stale_task_write(tmp_path: Path) -> None:
    """Under "sync", #1's late s3 result is refused twice: by outlive's journal write and by the
    fenced checkpointer (LangGraph's own ``put_writes`` on the user's thread, the work id)."""
    b = await outlive.open_backend(f"langgraph+sqlite:///{tmp_path}/lg.db")
    assert isinstance(b, LangGraphBackend)
    try:
        h = Harness()
        h.hold_at = (1, "s3")
        program = make_program(b, h)
        ctl, w1 = await first_attempt(b, clock=lambda: 1)
        first = asyncio.create_task(run(program, V1, worker=w1))
        await asyncio.wait_for(h.held.wait(), 10)
        await b.execute("q3", Controller(b).stamp(L.MarkUnknown(attempt=1, at=5)))
        await ctl.admit("q3")
        h.release.set()
        with pytest.raises(outlive.StaleOwner):
            await first
        conn = sqlite3.connect(f"{tmp_path}/lg.db")
        rows = conn.execute("SELECT channel FROM writes WHERE thread_id = ?", ("q3",)).fetchall()
        conn.close()
        # s1's and s2's results are saved in the background: those still queued when #2 was
        # admitted are refused as well. Nothing of s3 (its result, its error) got through.
        assert len(rows) <= 2 and all(r[0] == "__return__" for r in rows), rows
        st = await b.load("q3")
        assert st is not None
        assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1), ("s2", 1)]
    finally:
        await b.close()


async def test_outlive_task_outside_run_is_refused(backend: outlive.Backend) -> None:
    @outlive_task
    def f(x: int) -> int:
        return x

    with pytest.raises(outlive.ConfigError):
        await f(1)


async def test_durability_and_persist_must_agree(backend: outlive.Backend) -> None:
    assert isinstance(backend, LangGraphBackend)
    _ctl, w = await first_attempt(backend, work="w", start=False, persist="step")
    program = make_program(backend, Harness())
    with pytest.raises(outlive.ConfigError):
        await run(program, V1, worker=w, durability="exit")


async def test_plain_outlive_task_names_each_step_from_its_function_and_inputs(
        backend: outlive.Backend) -> None:
    """No ``step=``, no extra argument: a successor on the corrected report restores the
    sections whose text did not change and redoes the one that did."""
    assert isinstance(backend, LangGraphBackend)
    calls: list[str] = []

    @outlive_task
    async def summarise(text: str) -> str:
        calls.append(text)
        return text.upper()

    @entrypoint(checkpointer=backend.checkpointer)
    async def digest(report: dict[str, str]) -> list[str]:
        return [await summarise(t) for t in report.values()]

    ctl, w1 = await first_attempt(backend)
    await run(digest, V1, worker=w1)
    await w1.finish()
    await ctl.publish("q3", "v2", V2)
    w2 = Worker(backend, await ctl.admit("q3"), V2)
    await w2.start()
    assert await run(digest, V2, worker=w2) == [t.upper() for t in V2.values()]
    assert calls == [*V1.values(), V2["s2"]], "only the corrected section is recomputed"
    assert all(name.startswith("summarise:") for name in w2.steps)
    assert [s.restored for s in w2.steps.values()] == [True, False, True, True]
