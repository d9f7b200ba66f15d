"""Dependability is relative to the consumer: a historical consumer may rely on the v1 digest."""

from __future__ import annotations

import outlive
from outlive.rules import LatestAccepted, LatestFinished, PinnedVersion, StrictCurrent, dependable
from outlive_conformance.harness import run_scenario
from outlive_conformance.scenario import q3_report


async def test_rules_after_a_late_correction() -> None:
    sc = q3_report()
    b = await outlive.open_backend("memory://")
    s = await run_scenario(b, sc, sc.defaults.set(change="after"))
    st = await b.load(sc.work_id)
    assert st is not None and s.clean
    v1 = dependable(st, PinnedVersion(version="v1"))
    now = dependable(st, StrictCurrent())
    assert v1 is not None and now is not None and v1.digest != now.digest
    assert "4.1" in v1.content["s2"]["summary"] and "4.7" in now.content["s2"]["summary"]
    assert [a.version for a in st.acceptances] == ["v1", "v2"]   # superseded, never edited
    assert dependable(st, PinnedVersion(version="v9")) is None
    latest = dependable(st, LatestAccepted())
    assert latest is not None and latest.digest == now.digest
    finished = dependable(st, LatestFinished())
    assert finished is not None and finished.digest == now.digest


async def test_strict_rule_fails_closed_by_default_without_versions() -> None:
    sc = q3_report()
    b = await outlive.open_backend("memory://")
    await run_scenario(b, sc, sc.defaults.set(pins="off"))
    st = await b.load(sc.work_id)
    assert st is not None
    assert dependable(st, StrictCurrent()) is None                 # closed: waits
    assert dependable(st, StrictCurrent(fail_open=True)) is not None   # the article's model
