"""The article's stories beyond q3-report, as shipped scenario files, against outcomes derived on
paper (docs/conformance.md, "Shipped scenarios"). Each sweep's necessity is computed from its runs
and checked against the file's own [expect.necessity]."""

from __future__ import annotations

import pytest

import outlive
from outlive_conformance.harness import RunSummary, run_scenario
from outlive_conformance.scenario import find_scenario, shipped
from outlive_conformance.sweep import check_claims, sweep


async def _main_run(name: str) -> RunSummary:
    sc = find_scenario(name)
    backend = await outlive.open_backend("memory://")
    try:
        return await run_scenario(backend, sc)
    finally:
        await backend.close()


def test_four_stories_ship_with_the_package() -> None:
    assert set(shipped()) >= {"q3-report", "late-newsletter", "two-corrections", "forgetful-feed"}


async def test_a_second_correction_while_the_first_is_rebuilt_refuses_the_stale_digest() -> None:
    s = await _main_run("two-corrections")
    assert s.model_calls == 7 and s.posts == 1 and s.clean
    assert [(t, a, r) for t, a, r in s.refused] == [(10, 2, "VersionMismatch")]   # built for v2
    assert [(a.tick, a.recorded_version, a.figure) for a in s.accepted] == [(13, "v3", "4.9")]
    assert (s.newsletter_start, s.newsletter_figure) == (14, "4.9")


async def test_a_historical_reader_waits_rather_than_take_another_version() -> None:
    s = await _main_run("two-corrections")
    auditor, dashboard = s.consumers["auditor"], s.consumers["dashboard"]
    assert auditor["start"] is None            # v1 was never accepted: told "not yet", never 4.7
    assert (dashboard["start"], dashboard["figure"]) == (14, "4.9")
    assert s.invariants["consumers_get_what_they_need"]


async def test_a_historical_reader_gets_the_version_it_pinned_when_it_was_accepted() -> None:
    sc = find_scenario("two-corrections")
    backend = await outlive.open_backend("memory://")
    try:
        s = await run_scenario(backend, sc, sc.defaults.set(change="after"))
    finally:
        await backend.close()
    assert (s.consumers["auditor"]["start"], s.consumers["auditor"]["figure"]) == (12, "4.1")
    assert s.clean


async def test_a_feed_that_forgets_the_key_applies_the_retry_again_and_says_so() -> None:
    s = await _main_run("forgetful-feed")
    assert s.posts == 2 and s.applied_after_retention == 1
    assert s.invariants["one_effect_per_operation"]      # once, for as long as the feed kept the key
    assert any("no longer keeps it" in e.text for e in s.trace)


async def test_a_worker_silent_before_its_call_makes_the_call_only_when_it_wakes() -> None:
    s = await _main_run("forgetful-feed")
    silent = [e for e in s.trace if e.mark == "silent"]
    assert silent and "before the model call" in silent[0].text
    assert s.model_calls == 6 and s.late_writes_rejected == ((8, 1, "StaleOwner"),)


@pytest.mark.parametrize("name", [pytest.param("two-corrections", marks=pytest.mark.long),
                                  "forgetful-feed"])
async def test_each_storys_sweep_shows_what_its_author_derived(name: str) -> None:
    backend = await outlive.open_backend("memory://")
    try:
        result = await sweep(backend, find_scenario(name), concurrency=8)
    finally:
        await backend.close()
    claims = check_claims(result)
    assert {c.name for c in claims if not c.must} == {
        "fencing-needed", "pins-needed", "key-needed", "strict-needed"}
    assert all(c.holds for c in claims), [(c.name, c.detail) for c in claims if not c.holds]


async def test_a_worker_silent_after_its_record_keeps_that_step_and_is_refused_at_the_next() -> None:
    from importlib import resources

    from outlive_conformance.scenario import parse_scenario

    text = (resources.files("outlive_conformance") / "scenarios" / "q3-report.toml").read_text()
    text = text.replace('silent_step = "s3"', 'silent_step = "s3"\nsilent_point = "after-record"', 1)
    text = text[:text.index("[expect.necessity]")]
    sc = parse_scenario(text, "after-record.toml")
    backend = await outlive.open_backend("memory://")
    try:
        s = await run_scenario(backend, sc)
    finally:
        await backend.close()
    assert s.restored["2"] == ("s1", "s3")            # #1's s3 was journaled before the silence
    assert [(t, a) for t, a, _ in s.late_writes_rejected] == [(9, 1)]   # its s4, after waking
    assert s.clean


def _q3_with(old: str, new: str) -> str:
    from importlib import resources

    text = (resources.files("outlive_conformance") / "scenarios" / "q3-report.toml").read_text()
    assert old in text
    return text.replace(old, new, 1)


async def test_two_silent_attempts_the_second_after_its_candidate_wakes_to_a_refused_post() -> None:
    from outlive_conformance.scenario import parse_scenario

    sc = parse_scenario(_q3_with('poster_dies = "first"',
                                 'silences = [{ attempt = 2, point = "after-candidate", wake_at = 16 }]\n'
                                 'poster_dies = "first"'), "two-silences.toml")
    backend = await outlive.open_backend("memory://")
    try:
        s = await run_scenario(backend, sc)
    finally:
        await backend.close()
    # #2's candidate is judged while #2 is silent; #3 restores everything and posts; #2 wakes at
    # t16 and its attempt to announce is refused by the token
    assert [(a.tick, a.recorded_version) for a in s.accepted] == [(10, "v2")]
    assert s.late_writes_rejected == ((8, 1, "StaleOwner"), (17, 2, "StaleOwner"))
    assert s.model_calls == 6 and s.posts == 1 and s.clean


@pytest.mark.parametrize("entry,field", [
    ('{ attempt = 2, point = "after-lunch", wake_at = 9 }', "timeline.silences[0].point"),
    ('{ attempt = 1, step = "s3", point = "before-call", wake_at = 9 }', "timeline.silences[0]"),
    ('{ attempt = 2, step = "s9", point = "after-call", wake_at = 9 }', "timeline.silences[0].step"),
    ('{ attempt = 2, point = "after-candidate", wake_at = 99 }', "timeline.silences[0].wake_at"),
    ('{ attempt = 2, point = "after-candidate", wake_at = 9, when = 3 }', "timeline.silences[0].when"),
    ('{ attempt = 2, step = "s3", point = "after-intent", wake_at = 9 }', "timeline.silences[0].step"),
    ('{ attempt = 2, point = "after-send", wake_at = 9 }, '
     '{ attempt = 2, point = "after-send", wake_at = 11 }', "timeline.silences[1]"),
])
def test_a_malformed_silence_is_refused_naming_its_entry(entry: str, field: str) -> None:
    from outlive.errors import ScenarioError
    from outlive_conformance.scenario import parse_scenario

    with pytest.raises(ScenarioError) as info:
        parse_scenario(_q3_with('poster_dies = "first"', f"silences = [{entry}]\nposter_dies = \"first\""),
                       "bad.toml")
    assert info.value.details.get("field") == field, info.value.message


@pytest.mark.parametrize("key,posts,clean", [("operation", 1, True), ("attempt", 2, False)])
async def test_a_successor_paused_after_its_intent_wakes_to_a_post_already_settled(
        key: str, posts: int, clean: bool) -> None:
    from outlive_conformance.scenario import parse_scenario

    sc = parse_scenario(_q3_with('poster_dies = "first"',
                                 'silences = [{ attempt = 2, point = "after-intent", wake_at = 14 }]\n'
                                 'poster_dies = "first"'), "paused-poster.toml")
    backend = await outlive.open_backend("memory://")
    try:
        s = await run_scenario(backend, sc, sc.defaults.set(dies="no", key=key))
    finally:
        await backend.close()
    # #2 records its intent at t10 and falls silent; #3 is admitted at t13 to settle it. At t14
    # #2 wakes first and sends (the feed applies P1); its record of the answer is refused by the
    # token; #3 resends with the operation key: "already seen", P1. With a key per attempt the
    # feed cannot tell the two sends apart: two posts for one operation.
    assert [(t, n) for t, n, *_ in s.admissions] == [(0, 1), (5, 2), (13, 3)]
    assert (14, 2, "StaleOwner") in s.late_writes_rejected
    assert s.posts == posts and s.clean is clean
    assert s.invariants["one_effect_per_operation"] is clean
