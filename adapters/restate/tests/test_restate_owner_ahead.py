"""The owner shape works a step's write out while the server journals the step: same writes.

In the owner shape, a step's fenced write is applied in the invocation's own process. The
adapter works it out from the value it proposed while the server journals the step's entry,
and takes that work once the entry is journaled (``OwnedBackend.run_and_record``); a replay,
which proposes nothing, works it out from the journaled value instead. Both must issue the very
same state writes, or a replayed invocation diverges from its journal. A real server cannot be
made to answer before or after a given turn of the deployment's event loop, so this test runs
``OwnedBackend`` over a stand-in context whose ``run_typed`` answers either after the work
done ahead (the first run of an invocation) or before it (as good as a replay), with the same
clock, and compares every state write of a whole attempt. The same code runs against the real
server in every owner-shape test of this adapter.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from outlive import Backend, Controller, External, Worker
from outlive import ledger as L
from outlive.records import Attempt, WorkState
from outlive_restate import _engine
from outlive_restate._ledger import _apply, read_all

pytestmark = pytest.mark.asyncio(loop_scope="session")

V1 = {"s1": "Intro.", "s2": "Revenue was 4.1 million.", "s3": "Outlook."}


class _Clock:
    """``time`` as the adapter reads it: one millisecond further at each reading."""

    def __init__(self) -> None:
        self.t = 1_764_547_200.0

    def time(self) -> float:
        self.t += 0.001
        return self.t


class _Request:
    def __init__(self) -> None:
        self.headers: dict[str, str] = {}


class _Ctx:
    """One object's K/V state and the calls an owner makes on its context, in order."""

    def __init__(self, key: str, data: dict[str, bytes], *, answer_late: bool) -> None:
        self._key, self.data, self.answer_late = key, data, answer_late
        self.ops: list[tuple[str, str, bytes | None]] = []

    def key(self) -> str:
        return self._key

    def request(self) -> _Request:
        return _Request()

    async def get(self, name: str, serde: Any = None) -> bytes | None:
        return self.data.get(name)

    def set(self, name: str, value: bytes, serde: Any = None) -> None:
        self.ops.append(("set", name, value))
        self.data[name] = value

    def clear(self, name: str) -> None:
        self.ops.append(("clear", name, None))
        self.data.pop(name, None)

    def run_typed(self, name: str, action: Callable[[], Awaitable[Any]], options: Any = None,
                  ) -> Awaitable[Any]:
        async def run() -> Any:
            value = await asyncio.ensure_future(action())   # as the SDK: in a task of its own
            if self.answer_late:   # the server's answer comes after a few turns of the loop
                for _ in range(5):
                    await asyncio.sleep(0)
            self.ops.append(("run", name, value))
            return value

        return run()


class _Store(Backend):
    """The controller's commands, applied as the ledger handler does."""

    def __init__(self, data: dict[str, bytes]) -> None:
        super().__init__("stand-in://")
        self.data = data

    async def execute(self, work_id: str, command: L.Command) -> L.Outcome:
        return await _apply(_Ctx(work_id, self.data, answer_late=False), command)  # type: ignore[arg-type]

    async def load(self, work_id: str) -> WorkState | None:
        view = await read_all(_Ctx(work_id, self.data, answer_late=False))  # type: ignore[arg-type]
        return view.state if view is not None else None


async def _attempt(data: dict[str, bytes], att: Attempt, *, answer_late: bool,
                   defer: int) -> list[tuple[str, str, bytes | None]]:
    """One whole owner attempt: its context's calls, in order."""
    ctx = _Ctx("owner/ahead", data, answer_late=answer_late)
    b = _engine.OwnedBackend(ctx, ledger="desk", defer=defer)  # type: ignore[arg-type]
    await b.tick()
    w = Worker(b, att, V1, clock=b.clock)
    await w.start()
    for name in V1:
        await w.step(name, lambda **kw: {"summary": next(iter(kw.values()))[:8]}, **{name: V1[name]})
    await w.heartbeat()
    await w.step("s4", lambda **kw: {"n": 4}, n=External(4))
    await w.step("s1", lambda **kw: {"summary": "again"}, s1=V1["s1"])   # restored: no write
    await w.candidate()
    await w.finish()
    b.flush()
    for _ in range(5):   # what was scheduled ahead and came too late, before the next run
        await asyncio.sleep(0)
    return ctx.ops


@pytest.mark.parametrize("defer", [0, 60_000])
async def test_work_done_ahead_writes_what_work_done_after_the_entry_writes(
        monkeypatch: pytest.MonkeyPatch, defer: int) -> None:
    data: dict[str, bytes] = {}
    ctl = Controller(_Store(data), clock=lambda: 1_764_547_200_000)
    await ctl.open_work("owner/ahead")
    await ctl.publish("owner/ahead", "v1", V1)
    att = await ctl.admit("owner/ahead")

    ahead_seen = []
    real = _engine._Ahead.__call__

    def watched(self: Any, raw: bytes) -> None:
        real(self, raw)
        ahead_seen.append(self.raw is not None)

    monkeypatch.setattr(_engine._Ahead, "__call__", watched)
    runs = []
    for late in (True, False):
        monkeypatch.setattr(_engine, "time", _Clock())
        ops = await _attempt(dict(data), att, answer_late=late, defer=defer)
        runs.append((ops, list(ahead_seen)))
        ahead_seen.clear()
    (ahead_ops, ahead_used), (after_ops, after_used) = runs
    # the first run took the work done ahead for each of the 4 steps that ran; in the second,
    # each step went on before the work could be done ahead, which then did nothing
    assert ahead_used == [True] * 4 and after_used == [False] * 4
    assert [op for op in ahead_ops if op[0] == "run"] == [op for op in after_ops if op[0] == "run"]
    assert ahead_ops == after_ops
    assert sum(op[0] == "set" for op in ahead_ops) >= 5
