"""The LangGraph bench's alternation (``bench_langgraph._Alternation``, ``_track``): each side is
charged its own turns only, turns go raw, outlive, outlive, raw, ..., and a side's saver writes
still in flight at the end of its turn are waited for and charged to it, not to the other side."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import bench_langgraph as bench


class _Saver:
    """Stands in for a checkpointer: its writes run in the background, as LangGraph's do."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def aput(self, *_: Any) -> None:
        await asyncio.sleep(self.seconds)

    async def aput_writes(self, *_: Any) -> None:
        await asyncio.sleep(self.seconds)


async def test_each_side_pays_its_own_turns_in_abba_order() -> None:
    order: list[str] = []
    alt = bench._Alternation({"raw": _no_wait, "outlive": _no_wait})

    async def side(name: str, chunks: int, seconds: float) -> None:
        for c in range(chunks):
            if c:
                await alt.pause(name)
            order.append(name)
            await asyncio.sleep(seconds)

    spent = await alt.run(lambda: side("raw", 4, 0.02), lambda: side("outlive", 4, 0.0))
    assert order == ["raw", "outlive", "outlive", "raw", "raw", "outlive", "outlive", "raw"]
    assert 0.075 <= spent["raw"] < 0.2      # its four 20 ms chunks
    assert spent["outlive"] < 0.02          # none of raw's sleeps


async def test_a_writes_in_flight_at_the_end_of_a_turn_are_charged_to_its_side() -> None:
    saver = _Saver(0.05)
    settle = bench._track(saver)   # type: ignore[arg-type]
    alt = bench._Alternation({"raw": settle, "outlive": _no_wait})
    pending: list[asyncio.Task[Any]] = []

    async def raw() -> None:
        # LangGraph creates the write's coroutine when it submits it, and does not await it
        pending.append(asyncio.ensure_future(saver.aput_writes()))
        await alt.pause("raw")

    async def outlive() -> None:
        await alt.pause("outlive")

    spent = await alt.run(raw, outlive)
    assert all(t.done() for t in pending)
    assert alt.settled["raw"] >= 0.04 and spent["raw"] >= 0.04
    assert spent["outlive"] < 0.03   # the raw write did not run in outlive's turn


async def _no_wait() -> float:
    return 0.0
