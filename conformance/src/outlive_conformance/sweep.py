"""All 864 combinations, and the article's necessity claims checked against them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from outlive import Backend

from .harness import RunSummary, run_scenario
from .scenario import Scenario, Switches, all_switches

__all__ = ["PROTECTIONS", "Claim", "Necessity", "SweepResult", "check_claims", "necessity", "sweep"]


@dataclass(frozen=True, kw_only=True)
class SweepResult:
    runs: dict[str, RunSummary]
    seconds: float
    #: The scenario's expected necessity (its ``[expect.necessity]``), judged by check_claims.
    expected: dict[str, dict[str, Any]] | None = None

    def by_switches(self, sw: Switches) -> RunSummary:
        return self.runs[sw.label]


async def sweep(backend: Backend, scenario: Scenario, *, concurrency: int = 1,
                namespace: str = "sweep", progress: Callable[[int, int], None] | None = None,
                trace: bool = False,
                on_run: Callable[[str, RunSummary], None] | None = None) -> SweepResult:
    """Run every combination on ``backend``, each under its own work id, ``concurrency`` at once.

    ``on_run(label, summary)`` sees each run as it ends, so a caller keeps partial results when
    the sweep is interrupted.
    """
    combos = list(all_switches())
    sem = asyncio.Semaphore(max(1, concurrency))
    runs: dict[str, RunSummary] = {}
    done = 0
    t0 = time.perf_counter()

    async def one(i: int, sw: Switches) -> None:
        nonlocal done
        async with sem:
            try:
                runs[sw.label] = await run_scenario(
                    backend, scenario, sw, work_id=f"{namespace}/{i:03d}/{scenario.work_id}",
                    trace=trace)
                if on_run is not None:
                    on_run(sw.label, runs[sw.label])
            except Exception as exc:
                exc.add_note(f"in the sweep's run {sw.label}")
                raise
            done += 1
            if progress is not None:
                progress(done, len(combos))

    # A failed run cancels the others and the sweep raises its error once they have stopped
    # (gather would leave them running against a backend the caller is about to close).
    try:
        async with asyncio.TaskGroup() as tg:
            for i, sw in enumerate(combos):
                tg.create_task(one(i, sw))
    except ExceptionGroup as group:
        raise group.exceptions[0] from None
    return SweepResult(runs=runs, seconds=time.perf_counter() - t0,
                       expected=scenario.expect_necessity)


@dataclass(frozen=True, kw_only=True)
class Claim:
    """A statement checked run by run. ``must`` claims hold on every scenario; the others are
    what one scenario's author (the article, for q3-report) says the sweep will show."""

    name: str
    text: str
    holds: bool
    detail: str
    must: bool = True


#: The four protections, each as (name, switch, the protected value).
PROTECTIONS: tuple[tuple[str, str, str], ...] = (
    ("fencing", "fencing", "on"), ("pins", "pins", "on"), ("key", "key", "operation"),
    ("strict", "rule", "strict"),
)
#: The switches that set the story rather than a protection.
_STORY = ("silent", "progress", "change", "dies")


@dataclass(frozen=True, kw_only=True)
class Necessity:
    """What removing one protection (all others on) did in this sweep, computed from the runs."""

    protection: str
    runs: int
    broken: int
    #: The story settings under which it broke, as the smallest exact description found
    #: (e.g. ``{"silent": ("paused",)}``), or None when no single switch describes it.
    breaks_when: dict[str, tuple[str, ...]] | None
    broken_labels: tuple[str, ...]
    #: When the removed protection has several "off" values (``rule=accepted``, ``rule=finished``)
    #: that break under different stories: each value's own description.
    by_value: dict[str, dict[str, tuple[str, ...]] | None] = field(default_factory=dict)

    @property
    def necessary(self) -> bool:
        return self.broken > 0

    def _broke(self, value: str) -> bool:
        return any(value in label.split(",") for label in self.broken_labels)

    @property
    def described(self) -> str:
        if not self.broken:
            return "never broke a run here"
        if self.breaks_when is None and self.by_value:
            parts = [f"{k}: " + ("never" if w is None and not self._broke(k) else
                                 "every run" if w == {} else
                                 _condition(w) if w is not None else "no single switch")
                     for k, w in self.by_value.items()]
            return f"broke {self.broken}/{self.runs} runs - " + "; ".join(parts)
        if self.breaks_when is None:
            return f"broke {self.broken}/{self.runs} runs (no single switch describes which)"
        if not self.breaks_when:
            return f"broke every run ({self.broken}/{self.runs})"
        return f"broke exactly the runs where {_condition(self.breaks_when)} ({self.broken}/{self.runs})"


def _condition(when: dict[str, tuple[str, ...]]) -> str:
    """``{"change": ("after", "during")}`` as text: ``change in {after, during}``."""
    return " and ".join(f"{k} in {{{', '.join(v)}}}" for k, v in when.items())


def _removed(sw: Switches, switch: str, on: str) -> bool:
    return getattr(sw, switch) != on and sw.set(**{switch: on}).protected


def _describe(subset: list[tuple[Switches, RunSummary]], broken: set[str],
              switches: tuple[str, ...]) -> dict[str, tuple[str, ...]] | None:
    """The one switch whose values pick out exactly ``broken`` in ``subset`` ({}: all of it)."""
    if not broken:
        return None
    if len(broken) == len(subset):
        return {}
    for story in switches:
        values = sorted({getattr(sw, story) for sw, _ in subset if sw.label in broken})
        if {sw.label for sw, _ in subset if getattr(sw, story) in values} == broken:
            return {story: tuple(values)}
    return None


def necessity(result: SweepResult) -> list[Necessity]:
    """For each protection: which runs broke with only it removed, and the switch that explains it."""
    runs = [(Switches(**r.switches), r) for r in result.runs.values()]
    out: list[Necessity] = []
    for name, switch, on in PROTECTIONS:
        subset = [(sw, r) for sw, r in runs if _removed(sw, switch, on)]
        broken = {sw.label for sw, r in subset if not r.clean}
        when = _describe(subset, broken, (*_STORY, switch))
        by_value: dict[str, dict[str, tuple[str, ...]] | None] = {}
        if when is None and broken:
            for value in sorted({getattr(sw, switch) for sw, _ in subset}):
                part = [(sw, r) for sw, r in subset if getattr(sw, switch) == value]
                by_value[f"{switch}={value}"] = _describe(
                    part, {sw.label for sw, r in part if not r.clean}, _STORY)
        out.append(Necessity(protection=name, runs=len(subset), broken=len(broken),
                             breaks_when=when, broken_labels=tuple(sorted(broken)),
                             by_value=by_value))
    return out


def check_claims(result: SweepResult, expected: dict[str, dict[str, Any]] | None = None
                 ) -> list[Claim]:
    """The claims every scenario's sweep must satisfy, then the expected necessity, if any.

    ``expected`` defaults to the scenario's own ``[expect.necessity]`` (``result.expected``).
    ``expected`` maps a protection to the story settings under which its removal must break a run
    (``{}``: every run) — what a scenario's author derived on paper. Without it, necessity is
    reported (:func:`necessity`) but not judged: a scenario that never exercises a protection is
    not a failure of the system.
    """
    runs = [(Switches(**r.switches), r) for r in result.runs.values()]
    claims: list[Claim] = []
    prot = [r for sw, r in runs if sw.protected]
    bad = [r for r in prot if not r.clean]
    claims.append(Claim(
        name="protected-clean",
        text="fencing, pins, the operation key and the strict rule all on: every run clean",
        holds=bool(prot) and not bad,
        detail=f"{len(prot) - len(bad)}/{len(prot)} clean"))
    differ = []
    for sw, r in runs:
        if sw.progress == "step":
            other = result.runs.get(sw.set(progress="end").label)
            if other is not None and r.clean != other.clean:
                differ.append(sw.label)
    pairs = sum(1 for sw, _ in runs if sw.progress == "step")
    claims.append(Claim(
        name="progress-is-cost", text="saving progress only at the end changes cost, never "
        "correctness", holds=not differ,
        detail=f"{pairs - len(differ)}/{pairs} pairs agree" + (f"; e.g. {differ[:2]}" if differ else "")))
    fenced = [r for sw, r in runs if sw.fencing == "on"]
    pinned = [r for sw, r in runs if sw.pins == "on"]
    claims.append(Claim(
        name="fencing-stops-stale-writes", text="with fencing on, no stale write ever lands",
        holds=all(r.stale_writes_applied == 0 for r in fenced),
        detail=f"{sum(1 for r in fenced if r.stale_writes_applied)} of {len(fenced)} fenced runs "
        "had one"))
    claims.append(Claim(
        name="pins-stop-wrong-digests", text="with pins on, no digest is accepted for a version "
        "its parts were not computed from",
        holds=all(r.invariants["parts_match_version"] for r in pinned),
        detail=f"{sum(1 for r in pinned if not r.invariants['parts_match_version'])} of "
        f"{len(pinned)} pinned runs accepted one"))
    expected = expected if expected is not None else result.expected
    if expected is not None:
        found = {n.protection: n for n in necessity(result)}
        for name, when in expected.items():
            n = found[name]
            if when and all("=" in k for k in when):       # per value of the removed switch
                holds = n.necessary and n.by_value == when
                want = "; ".join(f"{k}: {_condition(w or {})}" for k, w in when.items())
            else:
                holds = n.necessary and n.breaks_when == when
                want = "every run" if not when else _condition(when)
            claims.append(Claim(
                name=f"{name}-needed", text=f"removing {name} breaks exactly the runs where {want}",
                holds=holds, detail=n.described, must=False))
    return claims
