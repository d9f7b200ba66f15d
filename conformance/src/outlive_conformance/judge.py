"""The judge: the verdict of one run, from what the parties saw and the records they left.

The harness plays the parties (workers, controller, receiver, consumers) and writes down what it
*saw* — which text each result was really computed from, which attempt was pinned to which
version, which writes from replaced attempts the store accepted, how often the receiver applied
each operation, what each consumer quoted. The judge holds those observations against the
article's invariants. It never takes the ledger's own word for a verdict (no counter of the
ledger's decides one), so a ledger that miscounts cannot pass itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from outlive.hashing import content_hash
from outlive.records import WorkState

from .scenario import Scenario

__all__ = ["INVARIANTS", "Observations", "judge"]

#: The invariants every run is judged by, with what each one means.
INVARIANTS: dict[str, str] = {
    "no_stale_write": "no write from a replaced attempt was accepted by the store",
    "parts_match_version": "every accepted digest's parts were computed from the version its "
    "attempt was pinned to",
    "one_digest_per_version": "at most one digest accepted per input version",
    "one_effect_per_operation": "the receiver applied each operation once, as far as it could "
    "tell (a retry after its retention ended is its declared limit, not a second application)",
    "consumer_on_required_version": "the main consumer started, quoting the current version's figure",
    "ends_accepted_and_announced": "the run ends with a digest accepted for the final input, "
    "built from it, and its announcement confirmed",
    "consumers_get_what_they_need": "(with further consumers) each that started quoted the "
    "version it needs",
}


@dataclass(frozen=True, kw_only=True)
class Observations:
    """What the harness saw happen, kept apart from what the ledger recorded."""

    #: result id -> hash of the text the model call really read
    truth: dict[str, str]
    #: attempt number -> the version it was pinned to at admission
    pins: dict[int, str | None]
    #: writes from attempts already replaced (their token older than the epoch) that landed
    stale_landed: int
    #: operation key -> how many times the receiver applied it as new within its memory
    op_applied: dict[str, int]
    consumer_started: bool
    consumer_figure: str | None
    consumer_required: str | None
    #: further consumers: name -> {"start", "figure", "required", "needs", ...}
    consumers: dict[str, dict[str, Any]] = field(default_factory=dict)


def judge(state: WorkState, seen: Observations, scenario: Scenario, *,
          announced: Any) -> dict[str, bool]:
    """The invariants of one run. ``announced(state, digest)``: is that digest's post confirmed."""
    final = state.current_version
    parts_ok = True
    per_version: dict[str | None, set[str]] = {}
    for acc in state.acceptances:
        cand = state.candidate(acc.digest)
        assert cand is not None
        claimed = seen.pins.get(cand.attempt)
        per_version.setdefault(claimed, set()).add(acc.digest)
        for p in cand.parts:
            # a derived part (an assembly of the sections) is true when its sources are
            sources = ([(p.sources.get(n, ""), n) for n in p.derived] if p.derived
                       else [(p.result_id, p.step)])
            for rid, step in sources:
                if claimed is None or step not in scenario.versions[claimed] \
                        or seen.truth.get(rid) != content_hash(scenario.versions[claimed][step]):
                    parts_ok = False
    latest = state.latest_acceptance
    ends_ok = False
    if latest is not None:
        cand = state.candidate(latest.digest)
        named = latest.version == final or (latest.version is None and len(state.inputs) == 1)
        ends_ok = bool(named and cand is not None and seen.pins.get(cand.attempt) == final
                       and announced(state, latest.digest))
    verdict = {
        "no_stale_write": seen.stale_landed == 0,
        "parts_match_version": parts_ok,
        "one_digest_per_version": all(len(d) <= 1 for d in per_version.values()),
        "one_effect_per_operation": all(n <= 1 for n in seen.op_applied.values()),
        "consumer_on_required_version": seen.consumer_started
        and seen.consumer_figure == seen.consumer_required,
        "ends_accepted_and_announced": ends_ok,
    }
    if scenario.consumers:
        # A consumer that starts must quote what it needs; one whose version is never accepted
        # waits (told "not yet", never handed another version). A relaxed need - latest
        # accepted or finished - names no version, so it is not judged.
        verdict["consumers_get_what_they_need"] = all(
            got["start"] is None or got["figure"] == got["required"]
            for got in seen.consumers.values()
            if got["needs"] == "current" or got["needs"].startswith("version:"))
    return verdict


