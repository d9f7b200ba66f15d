"""All 864 combinations, and the article's necessity claims checked against them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from outlive import Backend

from .harness import RunSummary, run_scenario
from .scenario import Scenario, Switches, all_switches

__all__ = ["Claim", "SweepResult", "check_claims", "sweep"]


@dataclass(frozen=True, kw_only=True)
class SweepResult:
    runs: dict[str, RunSummary]
    seconds: float

    def by_switches(self, sw: Switches) -> RunSummary:
        return self.runs[sw.label]


async def sweep(backend: Backend, scenario: Scenario, *, concurrency: int = 1,
                namespace: str = "sweep", progress: Callable[[int, int], None] | None = None,
                trace: bool = False) -> SweepResult:
    """Run every combination on ``backend``, each under its own work id, ``concurrency`` at once."""
    combos = list(all_switches())
    sem = asyncio.Semaphore(max(1, concurrency))
    runs: dict[str, RunSummary] = {}
    done = 0
    t0 = time.perf_counter()

    async def one(i: int, sw: Switches) -> None:
        nonlocal done
        async with sem:
            runs[sw.label] = await run_scenario(
                backend, scenario, sw, work_id=f"{namespace}/{i:03d}/{scenario.work_id}",
                trace=trace)
            done += 1
            if progress is not None:
                progress(done, len(combos))

    await asyncio.gather(*(one(i, sw) for i, sw in enumerate(combos)))
    return SweepResult(runs=runs, seconds=time.perf_counter() - t0)


@dataclass(frozen=True, kw_only=True)
class Claim:
    name: str
    text: str
    holds: bool
    detail: str


def check_claims(result: SweepResult) -> list[Claim]:
    """The seed's claims about the sweep, each checked run by run."""
    runs = [(Switches(**r.switches), r) for r in result.runs.values()]
    claims: list[Claim] = []
    prot = [r for sw, r in runs if sw.protected]
    bad = [r for r in prot if not r.clean]
    claims.append(Claim(
        name="protected-clean",
        text="fencing, pins, the operation key and the strict rule all on: every run clean",
        holds=len(prot) == 24 and not bad,
        detail=f"{len(prot) - len(bad)}/{len(prot)} clean"))

    def removal(name: str, text: str, off: Callable[[Switches], bool],
                where: Callable[[Switches], bool]) -> None:
        """With only this protection removed, runs break exactly ``where``."""
        subset = [(sw, r) for sw, r in runs if off(sw)]
        wrong = [sw.label for sw, r in subset if (not r.clean) != where(sw)]
        broken = sum(1 for _, r in subset if not r.clean)
        claims.append(Claim(name=name, text=text, holds=not wrong and broken > 0,
                            detail=f"{broken}/{len(subset)} broken"
                            + (f"; mismatches: {wrong[:3]}" if wrong else "")))

    removal("fencing-needed", "fencing off breaks every run where the old worker was only paused",
            lambda s: s.fencing == "off" and s.set(fencing="on").protected,
            lambda s: s.silent == "paused")
    removal("pins-needed", "pins off break every run where the input changes",
            lambda s: s.pins == "off" and s.set(pins="on").protected,
            lambda s: s.change != "never")
    removal("key-needed", "a per-attempt or missing key breaks every run where the poster dies",
            lambda s: s.key != "operation" and s.set(key="operation").protected,
            lambda s: s.dies == "yes")
    removal("strict-needed", "a relaxed rule breaks every run where the input changes after "
            "acceptance", lambda s: s.rule != "strict" and s.set(rule="strict").protected,
            lambda s: s.change == "after")
    differ = []
    for sw, r in runs:
        if sw.progress == "step":
            other = result.runs[sw.set(progress="end").label]
            if r.clean != other.clean:
                differ.append(sw.label)
    claims.append(Claim(
        name="progress-is-cost", text="saving progress only at the end changes cost, never "
        "correctness", holds=not differ,
        detail=f"{432 - len(differ)}/432 pairs agree" + (f"; e.g. {differ[:2]}" if differ else "")))
    ff = [r for sw, r in runs if sw.fencing == "off" and sw.pins == "on"]
    pp = [r for sw, r in runs if sw.pins == "off" and sw.fencing == "on"]
    claims.append(Claim(
        name="fencing-vs-pins",
        text="fencing off with pins on: stale writes land but no wrong digest is accepted; "
        "pins off with fencing on: no stale write lands but a wrong digest is",
        holds=all(r.invariants["parts_match_version"] for r in ff)
        and any(r.stale_writes_applied for r in ff)
        and all(r.stale_writes_applied == 0 for r in pp)
        and any(not r.invariants["parts_match_version"] for r in pp),
        detail=f"{sum(1 for r in ff if r.stale_writes_applied)} runs with stale writes; "
        f"{sum(1 for r in pp if not r.invariants['parts_match_version'])} with a wrong digest"))
    return claims
