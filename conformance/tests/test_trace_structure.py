"""The run's trace carries structure (lane, mark, data) that a drawing can rely on, on every line."""

from __future__ import annotations

import json

import outlive
from outlive_conformance.harness import RunSummary, run_scenario
from outlive_conformance.scenario import Switches, q3_report


async def _run(sw: Switches | None = None) -> RunSummary:
    sc = q3_report()
    return await run_scenario(await outlive.open_backend("memory://"), sc, sw or sc.defaults)


async def test_every_line_of_the_main_run_names_its_lane_and_mark() -> None:
    s = await _run()
    assert s.trace and all(e.lane and e.mark for e in s.trace)
    json.dumps([e.data for e in s.trace])          # plain data, ready for a page
    marks = [(e.tick, e.lane, e.mark) for e in s.trace]
    assert (0, "controller", "admit") in marks
    assert (3, "attempt:1", "silent") in marks
    assert (4, "input", "input") in marks
    assert (5, "controller", "unknown") in marks
    assert (12, "consumer:newsletter", "consumer-start") in marks


async def test_late_write_of_paused_worker_is_traced_as_refused() -> None:
    s = await _run()
    (late,) = [e for e in s.trace if e.mark == "late-write"]
    assert (late.tick, late.lane) == (8, "attempt:1")
    assert late.data["refused"] is True and late.data["token"] == 41 and late.data["epoch"] == 42


async def test_fencing_off_traces_stale_writes_as_applied() -> None:
    sc = q3_report()
    s = await _run(sc.defaults.set(fencing="off"))
    stale = [e for e in s.trace if e.lane == "attempt:1" and (
        (e.mark == "late-write" and e.data["refused"] is False) or e.data.get("stale") is True)]
    assert len(stale) == s.stale_writes_applied == 3


async def test_restore_accept_and_effect_carry_their_records() -> None:
    s = await _run()
    restore = [e for e in s.trace if e.mark == "restore"]
    assert restore[0].data == {"steps": ["s1"], "redo": ["s2", "s3", "s4"]}
    (accept,) = [e for e in s.trace if e.mark == "accept"]
    assert accept.data["version"] == "v2" and accept.data["contract"] == "digest-form@1"
    effects = [e.data for e in s.trace if e.mark == "effect"]
    assert [(d["died"], d["duplicate"], d["confirmed"]) for d in effects] == [
        (True, False, False), (False, True, True)]
    assert effects[0]["op_key"] == effects[1]["sent_key"]


async def test_the_attempt_that_completes_the_work_is_traced_finishing() -> None:
    s = await _run()
    assert [(e.tick, e.lane) for e in s.trace if e.mark == "finish"] == [(14, "attempt:3")]
