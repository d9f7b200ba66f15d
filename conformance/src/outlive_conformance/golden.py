"""The article's stated figures, as checks on run summaries (the golden runs)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .harness import RunSummary
from .scenario import Switches

__all__ = ["GOLDEN", "WITNESSES", "Golden", "protected_switches"]


@dataclass(frozen=True, kw_only=True)
class Golden:
    name: str
    #: The article's scene this run is, as a test id ("a_paused_worker_wakes_and_is_refused").
    scene: str
    switches: dict[str, str]
    expect: Callable[[RunSummary], list[str]]

    def check(self, s: RunSummary) -> list[str]:
        """The list of ways ``s`` differs from the article; empty when it agrees."""
        return self.expect(s)


def _eq(problems: list[str], what: str, got: object, want: object) -> None:
    if got != want:
        problems.append(f"{what}: got {got!r}, the article says {want!r}")


def _main(s: RunSummary) -> list[str]:
    p: list[str] = []
    _eq(p, "model calls", s.model_calls, 6)
    _eq(p, "posts", s.posts, 1)
    _eq(p, "newsletter start", s.newsletter_start, 12)
    _eq(p, "newsletter figure", s.newsletter_figure, "4.7")
    _eq(p, "acceptance tick", s.first_acceptance_tick, 10)
    _eq(p, "#1's late write", s.late_writes_rejected, ((8, 1, "StaleOwner"),))
    _eq(p, "#2 restores", s.restored.get("2"), ("s1",))
    _eq(p, "#2 redoes s2 first", (s.redone.get("2") or ("",))[0], "s2")
    _eq(p, "admissions (tick, attempt, token, version)", s.admissions,
        ((0, 1, 41, "v1"), (5, 2, 42, "v2"), (13, 3, 43, "v2")))
    _eq(p, "announcement confirmed", s.announcement_confirmed_at, 14)
    _eq(p, "clean", s.clean, True)
    return p


def _crashed(s: RunSummary) -> list[str]:
    p: list[str] = []
    _eq(p, "model calls", s.model_calls, 6)
    _eq(p, "posts", s.posts, 1)
    _eq(p, "newsletter figure", s.newsletter_figure, "4.7")
    _eq(p, "late writes", s.late_writes_rejected, ())
    _eq(p, "clean", s.clean, True)
    return p


def _fencing_off(s: RunSummary) -> list[str]:
    p: list[str] = []
    _eq(p, "stale writes applied", s.stale_writes_applied, 3)
    _eq(p, "model calls", s.model_calls, 7)
    _eq(p, "#1's v1 candidate refused at acceptance", [r[1:] for r in s.refused],
        [(1, "VersionMismatch")])
    _eq(p, "newsletter figure", s.newsletter_figure, "4.7")
    _eq(p, "no_stale_write holds", s.invariants["no_stale_write"], False)
    return p


def _fencing_off_same_input(s: RunSummary) -> list[str]:
    p: list[str] = []
    _eq(p, "digests accepted (tick, version)",
        [(a.tick, a.recorded_version) for a in s.accepted], [(9, "v1"), (11, "v1")])
    _eq(p, "two different digests", len({a.digest for a in s.accepted}), 2)
    _eq(p, "one_digest_per_version holds", s.invariants["one_digest_per_version"], False)
    return p


def _pins_off(s: RunSummary) -> list[str]:
    p: list[str] = []
    _eq(p, "model calls", s.model_calls, 5)
    _eq(p, "acceptance tick (one early)", s.first_acceptance_tick, 9)
    _eq(p, "version recorded", [a.recorded_version for a in s.accepted], [None])
    _eq(p, "newsletter figure", s.newsletter_figure, "4.1")
    _eq(p, "required figure", s.required_figure, "4.7")
    _eq(p, "parts_match_version holds", s.invariants["parts_match_version"], False)
    return p


def _end_save(s: RunSummary) -> list[str]:
    p: list[str] = []
    _eq(p, "model calls", s.model_calls, 8)
    _eq(p, "acceptance tick", s.first_acceptance_tick, 11)
    _eq(p, "clean", s.clean, True)
    return p


def _late_strict(s: RunSummary) -> list[str]:
    p: list[str] = []
    _eq(p, "newsletter start (waits from t12)", s.newsletter_start, 17)
    _eq(p, "newsletter figure", s.newsletter_figure, "4.7")
    rebuild = [st for a, _t, _tok, v in [(x[1], x[0], x[2], x[3]) for x in s.admissions]
               if v == "v2" for st in s.redone.get(str(a), ())]
    _eq(p, "rebuild model calls", len(rebuild), 1)
    _eq(p, "clean", s.clean, True)
    return p


def _late_relaxed(s: RunSummary) -> list[str]:
    p: list[str] = []
    _eq(p, "newsletter start", s.newsletter_start, 12)
    _eq(p, "newsletter figure", s.newsletter_figure, "4.1")
    _eq(p, "consumer_on_required_version holds",
        s.invariants["consumer_on_required_version"], False)
    return p


def _posted_twice(s: RunSummary) -> list[str]:
    p: list[str] = []
    _eq(p, "posts", s.posts, 2)
    _eq(p, "one_effect_per_operation holds", s.invariants["one_effect_per_operation"], False)
    return p


GOLDEN: tuple[Golden, ...] = (
    Golden(name="main-run",
           scene="the_paused_worker_wakes_and_its_late_write_is_refused",
           switches={}, expect=_main),
    Golden(name="crashed-not-paused",
           scene="a_crashed_worker_never_writes_again",
           switches={"silent": "crashed"}, expect=_crashed),
    Golden(name="fencing-off",
           scene="without_fencing_three_stale_writes_land",
           switches={"fencing": "off"}, expect=_fencing_off),
    Golden(name="fencing-off-input-unchanged",
           scene="without_fencing_two_digests_are_accepted_for_one_report",
           switches={"fencing": "off", "change": "never"},
           expect=_fencing_off_same_input),
    Golden(name="pins-off",
           scene="without_pins_the_old_figure_is_accepted_a_tick_early",
           switches={"pins": "off"}, expect=_pins_off),
    Golden(name="progress-at-end",
           scene="saving_only_at_the_end_costs_two_calls_and_a_tick",
           switches={"progress": "end"}, expect=_end_save),
    Golden(name="late-change-strict",
           scene="a_late_correction_makes_the_strict_newsletter_wait_for_a_rebuild",
           switches={"change": "after"}, expect=_late_strict),
    Golden(name="late-change-latest-accepted",
           scene="a_late_correction_under_latest_accepted_quotes_the_old_figure",
           switches={"change": "after", "rule": "accepted"},
           expect=_late_relaxed),
    Golden(name="late-change-latest-finished",
           scene="a_late_correction_under_latest_finished_quotes_the_old_figure",
           switches={"change": "after", "rule": "finished"},
           expect=_late_relaxed),
    Golden(name="key-per-attempt",
           scene="a_per_attempt_key_posts_twice_when_the_poster_dies",
           switches={"key": "attempt"}, expect=_posted_twice),
    Golden(name="no-key",
           scene="no_key_posts_twice_when_the_poster_dies",
           switches={"key": "none"}, expect=_posted_twice),
)

#: One run per protection removed, each expected to break (and to break the same way everywhere).
WITNESSES: tuple[tuple[str, dict[str, str]], ...] = (
    ("without_fencing_a_woken_worker_overwrites_its_successor", {"fencing": "off", "change": "never"}),
    ("without_pins_a_digest_of_the_old_report_is_accepted", {"pins": "off"}),
    ("without_the_operation_key_the_retry_posts_again", {"key": "attempt"}),
    ("without_the_strict_rule_the_newsletter_quotes_a_superseded_figure",
     {"rule": "accepted", "change": "after"}),
)


def protected_switches() -> list[Switches]:
    """The 24 runs with fencing, pins, the operation key and the strict rule all on."""
    from .scenario import all_switches

    return [sw for sw in all_switches() if sw.protected]

