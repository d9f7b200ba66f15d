"""Malformed scenario files: a typed error naming the file, the field and the problem."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from outlive.errors import ScenarioError
from outlive_conformance.scenario import SWITCHES, Switches, all_switches, load_scenario, q3_report

TEXT = (resources.files("outlive_conformance") / "scenarios" / "q3-report.toml").read_text()


def test_the_shipped_scenario_is_the_seeds() -> None:
    sc = q3_report()
    assert sc.work_id == "digest/q3-report" and sc.steps == ("s1", "s2", "s3", "s4")
    v1, v2 = sc.versions["v1"], sc.versions["v2"]
    assert [k for k in v1 if v1[k] != v2[k]] == ["s2"]   # 1, 3, 4 byte-identical
    assert (sc.figure("v1"), sc.figure("v2")) == ("4.1", "4.7")


def test_there_are_864_combinations() -> None:
    combos = list(all_switches())
    assert len(combos) == 864 == len({c.label for c in combos})
    assert sum(1 for c in combos if c.protected) == 24


@pytest.mark.parametrize("old,new,field", [
    ("format = 1", "format = 2", "format"),
    ('s2 = "Revenue was 4.7', 'x2 = "Revenue was 4.7', "versions.v2"),
    ('steps = ["s1", "s2", "s3", "s4"]', 'steps = ["s1", "s1"]', "work.steps"),
    ('steps = ["s1", "s2", "s3", "s4"]', "steps = 4", "work.steps"),
    ('announce = "announce:{work_id}:{digest}"', 'announce = "announce:{work_id}"', "work.announce"),
    ('ready_at = 12', 'ready_at = "12"', "consumer.ready_at"),
    ("pattern = 'Revenue was (\\d+\\.\\d+) million'", "pattern = '('", "consumer.pattern"),
    ('silent_step = "s3"', 'silent_step = "s9"', "timeline.silent_step"),
    ('fencing = "on"', 'fencing = "maybe"', "switches.fencing"),
    ('key = "operation"', 'key = "operation"\ncolour = "red"', "switches.colour"),
    ("max_ticks = 60", "max_ticks = 0", "clock.max_ticks"),
    ("wake_at = 8", "wake_at = true", "timeline.wake_at"),
])
def test_malformed_files_name_file_and_field(tmp_path: Path, old: str, new: str,
                                             field: str) -> None:
    assert old in TEXT, old
    path = tmp_path / "bad.toml"
    path.write_text(TEXT.replace(old, new, 1))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(path) in info.value.message
    assert info.value.details.get("field") == field, info.value.message


def test_not_toml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "x.toml"
    bad.write_text("this = = broken")
    with pytest.raises(ScenarioError, match="not valid TOML"):
        load_scenario(bad)
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.toml")


def test_switch_values_are_checked() -> None:
    with pytest.raises(ScenarioError):
        Switches(change="sometimes")
    assert set(SWITCHES) == {"silent", "fencing", "progress", "change", "pins", "rule", "dies",
                             "key"}


# Each case below passed validation on an earlier main and then misbehaved at run time (a silent
# default, "quotes None million", a traceback halfway through a run): now refused up front.
@pytest.mark.parametrize("old,new,field,says", [
    ('title = "Q3 report digest"', 'titel = "Q3 report digest"', "work.titel", "did you mean 'title'"),
    ('work_id = "digest/q3-report"', 'wrok_id = "digest/q3-report"', "wrok_id",
     "did you mean 'work_id'"),
    ("fail_open = true", "fail_opne = true", "consumer.fail_opne", "did you mean 'fail_open'"),
    ("epoch_floor = 40", "epoch_flor = 40", "epoch_flor", "did you mean 'epoch_floor'"),
    ("pattern = 'Revenue was (\\d+\\.\\d+) million'", "pattern = 'Turnover was (\\d+) bn'",
     "consumer.pattern", "finds no figure"),
    ('announce = "announce:{work_id}:{digest}"', 'announce = "a:{digest}{"', "work.announce",
     "not a valid format string"),
    ('announce = "announce:{work_id}:{digest}"', 'announce = "a:{digest}:{attempt}"', "work.announce",
     "only {work_id} and {digest}"),
    ("max_summary_chars = 280", "max_summary_chars = -5", "work.max_summary_chars", "between 1"),
    ("ready_at = 12", "ready_at = -1", "consumer.ready_at", "between 0"),
    ("max_ticks = 60", "max_ticks = 100000000", "clock.max_ticks", "bounded"),
    ("wake_at = 8", "wake_at = 60", "timeline.wake_at", "between 0"),
    ("change_at = { during = 4, after = 12 }", "change_at = { during = 4, after = 99 }",
     "timeline.change_at.after", "between 0"),
    ("epoch_floor = 40", "epoch_floor = -3", "epoch_floor", "between 0"),
])
def test_every_field_is_checked_before_anything_runs(tmp_path: Path, old: str, new: str, field: str,
                                                     says: str) -> None:
    assert old in TEXT, old
    path = tmp_path / "bad.toml"
    path.write_text(TEXT.replace(old, new, 1))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert info.value.details.get("field") == field, info.value.message
    assert says in info.value.message


def test_a_section_over_the_payload_limit_is_refused_up_front(tmp_path: Path) -> None:
    big = "Revenue was 4.7 million. " + "x" * (5 * 1024 * 1024)
    path = tmp_path / "big.toml"
    path.write_text(TEXT.replace('s4 = "Outlook: the board', f's4 = "{big} Outlook: the board', 1))
    with pytest.raises(ScenarioError, match="bytes encoded") as info:
        load_scenario(path)
    assert info.value.details.get("field") == "versions.v1"


async def test_a_reused_work_id_is_refused_before_anything_is_written() -> None:
    from outlive import open_backend
    from outlive_conformance.harness import run_scenario

    sc = q3_report()
    backend = await open_backend("memory://")
    try:
        first = await run_scenario(backend, sc)
        assert first.clean
        before = await backend.load(sc.work_id)
        with pytest.raises(ScenarioError, match="already exists") as info:
            await run_scenario(backend, sc)
        assert info.value.details.get("field") == "work_id"
        assert await backend.load(sc.work_id) == before
    finally:
        await backend.close()


async def test_the_harness_tells_any_story_in_the_scenarios_own_words() -> None:
    """No q3 prose in the harness: a story about another figure, with another consumer, reads
    in its own terms (it said "section 2 corrected ... million" for every scenario)."""
    from outlive import open_backend
    from outlive_conformance.harness import run_scenario
    from outlive_conformance.scenario import parse_scenario

    text = (TEXT.replace("ready_at = 12", "ready_at = 12\nname = \"ticker\"", 1)
            .replace('name = "newsletter"\n', "", 1)
            .replace('unit = "million"', 'unit = "units"'))
    sc = parse_scenario(text, "ticker.toml")
    backend = await open_backend("memory://")
    try:
        s = await run_scenario(backend, sc)
    finally:
        await backend.close()
    prose = "\n".join(e.text for e in s.trace)
    assert "million" not in prose and "newsletter" not in prose and "section 2" not in prose
    assert "ticker admitted" in prose and "4.7 units" in prose and "s2 changed" in prose
    assert s.consumer_name == "ticker" and s.figure_unit == "units"


@pytest.mark.parametrize("nested", ["[" * 10_000 + "]" * 10_000,
                                    "{ b = " * 10_000 + "1" + " }" * 10_000])
def test_a_scenario_nested_ten_thousand_deep_is_refused_typed(tmp_path: Path, nested: str) -> None:
    path = tmp_path / "deep.toml"
    path.write_text(f"format = 1\na = {nested}\n", encoding="utf-8")
    with pytest.raises(ScenarioError, match="nested too deep") as info:
        load_scenario(path)
    assert str(path) in info.value.message
