"""Dependability: may consumer C rely on a result now? Answered relative to what C requires.

What C requires is an input version (the rule) and a standard: ``contract=`` on a rule names the
contract an acceptance must have been judged under (its name and version, and the assessor if
the consumer cares who judged). An acceptance under another contract — a made-up one, an older
version of the form — is not dependable for that consumer, however recent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from ._check import argument
from .records import Acceptance, Contract, WorkState

__all__ = ["Dependable", "LatestAccepted", "LatestFinished", "PinnedVersion", "Requires", "Rule",
           "StrictCurrent", "dependable", "meets"]


@dataclass(frozen=True, kw_only=True)
class Requires:
    """The contract a consumer requires: its name and version; ``assessor`` too when given."""

    name: str
    version: str
    assessor: str | None = None


def meets(contract: Contract, required: Requires | Contract | None) -> bool:
    """Whether an acceptance judged under ``contract`` meets what the consumer ``required``
    (None: any contract; a :class:`~outlive.records.Contract`: exactly that one)."""
    if required is None:
        return True
    if isinstance(required, Contract):
        return contract == required
    return (contract.name == required.name and contract.version == required.version
            and (required.assessor is None or contract.assessor == required.assessor))


@dataclass(frozen=True, kw_only=True)
class StrictCurrent:
    """Accepted for the input version that is current now.

    ``fail_open`` decides what happens when acceptances name no version (a work run without
    pins): closed (the default) waits forever; open takes the latest acceptance, as the article's
    model does to show the damage.
    """

    fail_open: bool = False
    #: The contract an acceptance must meet (None: any).
    contract: Requires | Contract | None = None


@dataclass(frozen=True, kw_only=True)
class PinnedVersion:
    """A historical consumer: accepted for this named version, whatever is current."""

    version: str
    contract: Requires | Contract | None = None


@dataclass(frozen=True, kw_only=True)
class LatestAccepted:
    """Relaxed: the newest acceptance, for whatever input. Shown to break when inputs move."""

    contract: Requires | Contract | None = None


@dataclass(frozen=True, kw_only=True)
class LatestFinished:
    """Relaxed further: the newest candidate, judged or not (``contract`` only picks which
    acceptance of it is reported)."""

    contract: Requires | Contract | None = None


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
    """The result ``rule`` allows a consumer to rely on now, or None (wait).

    Only acceptances that meet the rule's ``contract`` count (see :func:`meets`).
    """
    if not isinstance(rule, _RULES):
        argument(rule, _RULES, "rule", "dependable", "a rule: StrictCurrent(), "
                 "PinnedVersion(version=...), LatestAccepted() or LatestFinished()")
    required = rule.contract
    acceptances = [a for a in state.acceptances if meets(a.contract, required)]
    if isinstance(rule, LatestFinished):
        if not state.candidates:
            return None
        c = max(state.candidates, key=lambda c: c.seq)
        acc = next((a for a in reversed(acceptances) if a.digest == c.digest), None)
        return Dependable(digest=c.digest, version=c.version, content=c.content, acceptance=acc)
    if isinstance(rule, LatestAccepted):
        return _from_acc(state, acceptances[-1]) if acceptances else None
    want = rule.version if isinstance(rule, PinnedVersion) else state.current_version
    for acc in reversed(acceptances):
        if acc.version is not None and acc.version == want:
            return _from_acc(state, acc)
    if isinstance(rule, StrictCurrent) and rule.fail_open:
        unversioned = [a for a in acceptances if a.version is None]
        if unversioned:
            return _from_acc(state, unversioned[-1])
    return None
