"""The harness reads the ledger once between two writes, and decides as if it read it every time.

An engine reached over the network pays a round trip per read: the harness once read the ledger
about five times per write (112 reads for 23 writes in an average run of the 864), which made
the sweep on Restate take most of an hour. Every run still equals memory://'s (the conformance
suites) and the traces are unchanged (the goldens).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from outlive import ledger as L
from outlive._memory import MemoryBackend
from outlive.backend import StepCall
from outlive.records import WorkState
from outlive_conformance.harness import run_scenario
from outlive_conformance.scenario import all_switches, q3_report


class Counting(MemoryBackend):
    """memory://, counting reads and the calls that may write."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    async def load(self, work_id: str) -> WorkState | None:
        self.calls["load"] += 1
        return await super().load(work_id)

    async def execute(self, work_id: str, command: L.Command) -> L.Outcome:
        self.calls["write"] += 1
        return await super().execute(work_id, command)

    async def run_step(self, call: StepCall, fn: Callable[[], Awaitable[Any]]) -> Any:
        self.calls["write"] += 1
        return await super().run_step(call, fn)


async def test_every_read_follows_a_write() -> None:
    """At most one read per call that may have written, plus the first check and the verdict's
    read, on every eighth combination (both silences, both progress modes, every change)."""
    sc = q3_report()
    over = []
    for i, sw in enumerate(list(all_switches())[::8]):
        b = Counting()
        s = await run_scenario(b, sc, sw, work_id=f"w{i}", trace=False)
        assert s.finished
        if b.calls["load"] > b.calls["write"] + 2:
            over.append((sw.label, dict(b.calls)))
    assert not over, over[:3]


async def test_a_step_held_for_ticks_does_not_turn_reads_back_on() -> None:
    """A paused worker's step body is held across ticks; reads stay one per write meanwhile."""
    sc = q3_report()
    sw = next(s for s in all_switches() if s.silent == "paused" and s.progress == "step"
              and s.protected)
    b = Counting()
    s = await run_scenario(b, sc, sw, trace=False)
    assert s.clean
    assert b.calls["load"] <= b.calls["write"] + 2, dict(b.calls)


class Answering(Counting):
    """memory://, whose writes answer with the state they left (as Restate's driver does)."""

    steps_write_ledger = False   # memory://'s run_step only runs the body

    def __init__(self) -> None:
        super().__init__()
        self.answers: dict[str, WorkState] = {}
        self.taken = 0

    async def execute(self, work_id: str, command: L.Command) -> L.Outcome:
        self.answers.pop(work_id, None)
        out = await super().execute(work_id, command)
        state = await MemoryBackend.load(self, work_id)
        assert state is not None
        self.answers[work_id] = state
        return out

    def answered(self, work_id: str) -> WorkState | None:
        state = self.answers.pop(work_id, None)
        self.taken += state is not None
        return state


async def test_a_write_that_answers_with_its_state_replaces_the_next_read() -> None:
    """Every run decides exactly as with reads (summary and trace equal), with a fraction of
    the reads, on every eighth combination."""
    sc = q3_report()
    for i, sw in enumerate(list(all_switches())[::8]):
        plain, answering = Counting(), Answering()
        a = await run_scenario(plain, sc, sw, work_id=f"w{i}", trace=True)
        b = await run_scenario(answering, sc, sw, work_id=f"w{i}", trace=True)
        assert b.comparable() == a.comparable(), sw.label
        assert b.trace == a.trace, sw.label
        assert answering.taken, sw.label
        assert answering.calls["load"] * 2 <= plain.calls["load"], (sw.label, dict(answering.calls),
                                                                    dict(plain.calls))
        # the check before the run, the verdict's own read, and at most two more: a refused
        # command and a step without its record keep what was read before them
        assert answering.calls["load"] <= 4, (sw.label, dict(answering.calls))
