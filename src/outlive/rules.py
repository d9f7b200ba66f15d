"""Dependability: may consumer C rely on a result now? Answered relative to what C requires."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from ._check import argument
from .records import Acceptance, WorkState

__all__ = ["Dependable", "LatestAccepted", "LatestFinished", "PinnedVersion", "Rule",
           "StrictCurrent", "dependable"]


@dataclass(frozen=True, kw_only=True)
class StrictCurrent:
    """Accepted for the input version that is current now.

    ``fail_open`` decides what happens when acceptances name no version (a work run without
    pins): closed (the default) waits forever; open takes the latest acceptance, as the article's
    model does to show the damage.
    """

    fail_open: bool = False


@dataclass(frozen=True, kw_only=True)
class PinnedVersion:
    """A historical consumer: accepted for this named version, whatever is current."""

    version: str


@dataclass(frozen=True, kw_only=True)
class LatestAccepted:
    """Relaxed: the newest acceptance, for whatever input. Shown to break when inputs move."""


@dataclass(frozen=True, kw_only=True)
class LatestFinished:
    """Relaxed further: the newest candidate, judged or not."""


Rule = Union[StrictCurrent, PinnedVersion, LatestAccepted, LatestFinished]
_RULES = (StrictCurrent, PinnedVersion, LatestAccepted, LatestFinished)


@dataclass(frozen=True, kw_only=True)
class Dependable:
    digest: str
    version: str | None
    content: Any
    acceptance: Acceptance | None


def _from_acc(state: WorkState, acc: Acceptance) -> Dependable:
    cand = state.candidate(acc.digest)
    return Dependable(digest=acc.digest, version=acc.version,
                      content=cand.content if cand else None, acceptance=acc)


def dependable(state: WorkState, rule: Rule) -> Dependable | None:
    """The result ``rule`` allows a consumer to rely on now, or None (wait)."""
    if not isinstance(rule, _RULES):
        argument(rule, _RULES, "rule", "dependable", "a rule: StrictCurrent(), "
                 "PinnedVersion(version=...), LatestAccepted() or LatestFinished()")
    if isinstance(rule, LatestFinished):
        if not state.candidates:
            return None
        c = max(state.candidates, key=lambda c: c.seq)
        acc = next((a for a in reversed(state.acceptances) if a.digest == c.digest), None)
        return Dependable(digest=c.digest, version=c.version, content=c.content, acceptance=acc)
    if isinstance(rule, LatestAccepted):
        acc = state.latest_acceptance
        return _from_acc(state, acc) if acc else None
    want = rule.version if isinstance(rule, PinnedVersion) else state.current_version
    for acc in reversed(state.acceptances):
        if acc.version is not None and acc.version == want:
            return _from_acc(state, acc)
    if isinstance(rule, StrictCurrent) and rule.fail_open:
        unversioned = [a for a in state.acceptances if a.version is None]
        if unversioned:
            return _from_acc(state, unversioned[-1])
    return None
