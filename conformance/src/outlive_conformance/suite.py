"""Base test classes any backend author runs against their backend (like SQLAlchemy's suite).

Subclass :class:`ConformanceSuite` in your tests and provide a ``backend_url`` fixture (or run
``pytest --pyargs outlive_conformance --outlive-backend URL``). Every run is compared, field by
field, with the same run on ``memory://``: an engine may be slower, never different.
"""

from __future__ import annotations

import uuid

import pytest

from outlive import Backend, open_backend

from .golden import GOLDEN, WITNESSES, Golden, protected_switches
from .harness import RunSummary, run_scenario
from .oracle import compare, known_disagreement, predict
from .runtime_chapter import RuntimeChapter
from .scenario import Scenario, Switches, q3_report
from .testing import BackendFixture

__all__ = ["ConformanceSuite", "reference_run"]

_REFERENCE: dict[str, RunSummary] = {}


async def reference_run(scenario: Scenario, sw: Switches) -> RunSummary:
    """The same run on ``memory://`` (cached): the outcome every backend must reproduce."""
    key = f"{scenario.source}|{sw.label}"
    if key not in _REFERENCE:
        backend = await open_backend("memory://")
        try:
            _REFERENCE[key] = await run_scenario(backend, scenario, sw)
        finally:
            await backend.close()
    return _REFERENCE[key]


def _diff(a: RunSummary, b: RunSummary) -> list[str]:
    da, db = a.comparable(), b.comparable()
    return [f"{k}: backend {da[k]!r} != memory:// {db[k]!r}" for k in da if da[k] != db[k]]


@pytest.mark.asyncio(loop_scope="session")
class ConformanceSuite(BackendFixture, RuntimeChapter):
    """Golden runs, the 24 protected runs and one witness per protection removed; many works
    through one runtime (:class:`RuntimeChapter`)."""

    @pytest.fixture(scope="class")
    @classmethod
    def scenario(cls) -> Scenario:
        return q3_report()

    async def run(self, backend: Backend, scenario: Scenario, sw: Switches) -> RunSummary:
        work_id = f"conformance/{uuid.uuid4().hex[:12]}/{scenario.work_id}"
        got = await run_scenario(backend, scenario, sw, work_id=work_id)
        ref = await reference_run(scenario, sw)
        assert got.stale_writes_seen == got.stale_writes_applied, (
            f"the store counts {got.stale_writes_applied} stale writes applied; the harness saw "
            f"{got.stale_writes_seen} land")
        diff = _diff(got, ref)
        assert not diff, "outcome differs from memory://:\n" + "\n".join(diff)
        # memory:// shares the ledger and the harness with every backend; the oracle does not.
        if known_disagreement(sw) is None:
            off = compare(predict(scenario, sw), got.comparable())
            assert not off, ("outcome differs from the oracle (the article's rules, modelled "
                             "independently of outlive):\n" + "\n".join(off))
        return got

    @pytest.mark.parametrize("golden", GOLDEN, ids=[g.scene for g in GOLDEN])
    async def test_the_articles_scene(self, outlive_backend: Backend, scenario: Scenario,
                              golden: Golden) -> None:
        got = await self.run(outlive_backend, scenario, scenario.defaults.set(**golden.switches))
        problems = golden.check(got)
        assert not problems, f"{golden.name} disagrees with the article:\n" + "\n".join(problems)

    @pytest.mark.parametrize("sw", protected_switches(), ids=lambda s: s.label)
    async def test_with_every_protection_on_the_story_ends_clean(
            self, outlive_backend: Backend, scenario: Scenario, sw: Switches) -> None:
        got = await self.run(outlive_backend, scenario, sw)
        assert got.clean, f"{sw.label} broke {got.broken}"

    @pytest.mark.parametrize("name,changes", WITNESSES, ids=[w[0] for w in WITNESSES])
    async def test_removing_one_protection_breaks_the_story(
            self, outlive_backend: Backend, scenario: Scenario, name: str,
            changes: dict[str, str]) -> None:
        got = await self.run(outlive_backend, scenario, scenario.defaults.set(**changes))
        assert not got.clean, f"{name}: removing this protection broke nothing"
