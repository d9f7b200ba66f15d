"""The oracle — an independent model of the article's story — against memory://, run by run.

memory:// shares the ledger and the harness with every backend, so comparing backends with it
cannot see a bug in either. The oracle (``outlive_conformance.oracle``) is written from the
article and the timing model alone; here every one of q3-report's 864 runs and every shipped
scenario's main run is compared with it field by field. Where the harness disagrees with the
article the run is a strict expected failure naming the disagreement (``known_disagreement``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from importlib import resources
from typing import Any

import pytest

from outlive import open_backend
from outlive_conformance.harness import run_scenario
from outlive_conformance.oracle import compare, known_disagreement, predict
from outlive_conformance.scenario import (
    Scenario,
    Switches,
    all_switches,
    find_scenario,
    parse_scenario,
    q3_report,
    shipped,
)
from outlive_conformance.sweep import sweep


def _sweep_q3() -> dict[str, dict[str, Any]]:
    async def go() -> dict[str, dict[str, Any]]:
        backend = await open_backend("memory://")
        try:
            result = await sweep(backend, q3_report(), concurrency=8, namespace="oracle")
        finally:
            await backend.close()
        return {label: run.comparable() for label, run in result.runs.items()}

    return asyncio.run(go())


@pytest.fixture(scope="module")
def q3_runs() -> dict[str, dict[str, Any]]:
    """All 864 runs of q3-report on memory://, once for the module."""
    return _sweep_q3()


def _param(sw: Switches) -> Any:
    # Every run must agree: the 72 runs the harness once ended with a dead poster's intent
    # unconfirmed (it now settles every intent, as the article's t13 does) agree too.
    assert known_disagreement(sw) is None
    return pytest.param(sw, id=sw.label)


@pytest.mark.parametrize("sw", [_param(sw) for sw in all_switches()])
def test_every_q3_run_on_memory_agrees_with_the_oracle(q3_runs: dict[str, dict[str, Any]],
                                                        sw: Switches) -> None:
    diff = compare(predict(q3_report(), sw), q3_runs[sw.label])
    assert not diff, f"{sw.label}: memory:// differs from the oracle:\n  " + "\n  ".join(diff)


@pytest.mark.parametrize("name", shipped())
async def test_every_shipped_scenarios_main_run_agrees_with_the_oracle(name: str) -> None:
    sc = find_scenario(name)
    backend = await open_backend("memory://")
    try:
        got = await run_scenario(backend, sc, trace=False)
    finally:
        await backend.close()
    diff = compare(predict(sc), got.comparable())
    assert not diff, f"{name}: memory:// differs from the oracle:\n  " + "\n  ".join(diff)


# -- the oracle tells the article's numbers on its own (no harness, no ledger) --------------------


def _q3(**changes: str) -> Any:
    sc = q3_report()
    return predict(sc, sc.defaults.set(**changes))


def test_the_oracles_main_run_is_the_articles_t0_to_t14() -> None:
    p = _q3()
    assert (p.model_calls, p.posts, p.stale_writes_applied) == (6, 1, 0)
    assert p.admissions == ((0, 1, 41, "v1"), (5, 2, 42, "v2"), (13, 3, 43, "v2"))
    assert p.restored["2"] == ("s1",)
    assert p.late_writes_rejected == ((8, 1),)
    assert p.accepted == ((10, "v2", "4.7"),)
    assert (p.newsletter_start, p.newsletter_figure) == (12, "4.7")
    assert p.announcement_confirmed_at == 14
    assert p.finished and all(p.invariants.values())


def test_the_oracle_tells_each_switch_as_the_article_does() -> None:
    crashed = _q3(silent="crashed")
    assert (crashed.model_calls, crashed.posts, crashed.newsletter_figure) == (6, 1, "4.7")
    assert crashed.late_writes_rejected == ()
    unfenced = _q3(fencing="off")
    assert (unfenced.stale_writes_applied, unfenced.model_calls) == (3, 7)
    assert [n for _, n in unfenced.refused] == [1]
    same_input = _q3(fencing="off", change="never")
    assert [(t, v) for t, v, _ in same_input.accepted] == [(9, "v1"), (11, "v1")]
    assert not same_input.invariants["one_digest_per_version"]
    unpinned = _q3(pins="off")
    assert (unpinned.model_calls, unpinned.first_acceptance_tick) == (5, 9)
    assert unpinned.accepted[0][1:] == (None, "4.1")
    assert (unpinned.newsletter_figure, unpinned.required_figure) == ("4.1", "4.7")
    at_end = _q3(progress="end")
    assert (at_end.model_calls, at_end.first_acceptance_tick) == (8, 11)
    late = _q3(change="after")
    assert (late.newsletter_start, late.newsletter_figure) == (17, "4.7")
    for rule in ("accepted", "finished"):
        relaxed = _q3(change="after", rule=rule)
        assert (relaxed.newsletter_start, relaxed.newsletter_figure) == (12, "4.1")
    for key in ("attempt", "none"):
        twice = _q3(key=key)
        assert twice.posts == 2 and not twice.invariants["one_effect_per_operation"]


def test_the_oracle_tells_the_articles_necessity_claims() -> None:
    """"Remove any one of those four and some combination breaks: fencing in every case where the
    old worker was only paused, pins in every case where the input changes, the key in every case
    where the posting worker dies, the strict rule in every case where the input changes after
    acceptance" — and with all four on, none breaks an invariant."""
    sc = q3_report()

    def clean(sw: Switches) -> bool:
        p = predict(sc, sw)
        return p.finished and all(p.invariants.values())

    protected = [sw for sw in all_switches() if sw.protected]
    assert len(protected) == 24 and all(clean(sw) for sw in protected)
    removals: dict[str, tuple[dict[str, str], Callable[[Switches], bool]]] = {
        "fencing": (dict(fencing="off"), lambda sw: sw.silent == "paused"),
        "pins": (dict(pins="off"), lambda sw: sw.change != "never"),
        "key": (dict(key="attempt"), lambda sw: sw.dies == "yes"),
        "no key": (dict(key="none"), lambda sw: sw.dies == "yes"),
        "strict": (dict(rule="accepted"), lambda sw: sw.change == "after"),
        "strict (finished)": (dict(rule="finished"), lambda sw: sw.change == "after"),
    }
    for name, (off, breaks_where) in removals.items():
        for sw in protected:
            assert clean(sw.set(**off)) != breaks_where(sw), f"removing {name}: {sw.label}"


# -- what the format offers beyond the shipped scenarios ----------------------------------------

_Q3_TEXT = (resources.files("outlive_conformance") / "scenarios" / "q3-report.toml").read_text()
#: q3-report with one format feature changed each: name -> (the TOML edit, or text to append).
_VARIANTS: dict[str, tuple[str, str]] = {
    "silent-after-record": ('silent_step = "s3"', 'silent_step = "s3"\nsilent_point = "after-record"'),
    "silent-before-call": ('silent_step = "s3"', 'silent_step = "s3"\nsilent_point = "before-call"'),
    "silent-in-s1": ('silent_step = "s3"', 'silent_step = "s1"'),
    "poster-dies-twice": ('poster_dies = "first"', "poster_dies = [1, 2]"),
    "receiver-keeps-keys-5-ticks": ("", "\n[receiver]\nretention = 5\n"),
    "slower-suspicion": ("missed_beats = 2", "missed_beats = 4"),
    "three-more-consumers": ("", '\n[[consumers]]\nname = "early"\nready_at = 3\nneeds = "current"\n'
                             '[[consumers]]\nname = "pinned"\nready_at = 20\nneeds = "version:v2"\n'
                             '[[consumers]]\nname = "finished"\nready_at = 9\n'
                             'needs = "latest-finished"\n'),
    "wakes-before-suspicion": ("wake_at = 8", "wake_at = 4"),
    "silent-after-candidate": ('silent_step = "s3"', 'silent_step = "s3"\nsilent_point = "after-candidate"'),
    "silent-after-intent": ('silent_step = "s3"', 'silent_step = "s3"\nsilent_point = "after-intent"'),
    "silent-after-send": ('silent_step = "s3"', 'silent_step = "s3"\nsilent_point = "after-send"'),
    "successor-silent-after-intent": (
        'poster_dies = "first"', 'silences = [{ attempt = 2, point = "after-intent", wake_at = 14 }]\n'
        'poster_dies = "first"'),
    "successor-silent-after-send": (
        'poster_dies = "first"', 'silences = [{ attempt = 2, point = "after-send", wake_at = 16 }]\n'
        'poster_dies = "first"'),
    "one-attempt-silent-twice": (
        'poster_dies = "first"', 'silences = [{ attempt = 1, point = "after-intent", wake_at = 12 }]\n'
        'poster_dies = "first"'),
}
#: The article's scenes (the golden runs' switches), run on each variant.
_SCENES: tuple[dict[str, str], ...] = (
    {}, {"silent": "crashed"}, {"fencing": "off"}, {"fencing": "off", "change": "never"},
    {"pins": "off"}, {"progress": "end"}, {"change": "after"}, {"change": "after", "rule": "accepted"},
    {"change": "after", "rule": "finished"}, {"key": "attempt"}, {"key": "none"},
)

def _variant(name: str) -> Scenario:
    old, new = _VARIANTS[name]
    text = _Q3_TEXT.replace(old, new) if old else _Q3_TEXT + new
    assert text != _Q3_TEXT
    return parse_scenario(text.replace('work_id = "digest/q3-report"',
                                       f'work_id = "oracle/{name}"'), f"{name}.toml")


def _variant_params() -> list[Any]:
    out = []
    for name in _VARIANTS:
        for scene in _SCENES:
            sw = q3_report().defaults.set(**scene)
            label = f"{name}:{','.join(f'{k}={v}' for k, v in scene.items()) or 'main'}"
            out.append(pytest.param(name, sw, id=label))
    return out


@pytest.mark.parametrize("name,sw", _variant_params())
async def test_the_formats_features_agree_with_the_oracle(name: str, sw: Switches) -> None:
    sc = _variant(name)
    backend = await open_backend("memory://")
    try:
        got = await run_scenario(backend, sc, sw, trace=False)
    finally:
        await backend.close()
    diff = compare(predict(sc, sw), got.comparable())
    assert not diff, f"{name} {sw.label}: memory:// differs from the oracle:\n  " + "\n  ".join(diff)
