"""Contracts take part in the rules (issue 40, item 5): a consumer names the contract it
requires, and completion requires the kind's contract."""

from __future__ import annotations

import outlive
from outlive import Contract, Controller, LatestAccepted, PinnedVersion, Requires, StrictCurrent, Worker
from outlive.rules import dependable, meets
from outlive.supervisor import WorkDefinition, work_complete

FORM = Contract(name="digest-form", version="2", assessor="editor")
OLD_FORM = Contract(name="digest-form", version="1", assessor="editor")
MADE_UP = Contract(name="none", version="0", assessor="myself")
V1 = {"s1": "Intro.", "s2": "Revenue was 4.1 million."}


def summ(**kw: str) -> dict[str, str]:
    (text,) = kw.values()
    return {"summary": text[:12]}


async def accepted_under(b: outlive.Backend, contract: Contract) -> Controller:
    ctl = Controller(b, clock=lambda: 0, credential="ctl")
    await ctl.open_work("w")
    await ctl.publish("w", "v1", V1)
    w = Worker(b, await ctl.admit("w"), V1, clock=lambda: 0)
    await w.start()
    for k, v in V1.items():
        await w.step(k, summ, **{k: v})
    cand = await w.candidate()
    await ctl.assess("w", cand.digest, contract, lambda c, v: (True, "ok"))
    return ctl


async def test_an_acceptance_under_another_contract_is_not_dependable(
        backend: outlive.Backend) -> None:
    ctl = await accepted_under(backend, MADE_UP)
    st = await ctl.state("w")
    for rule in (StrictCurrent(contract=FORM), StrictCurrent(contract=Requires(name="digest-form",
                                                                             version="2")),
                 PinnedVersion(version="v1", contract=FORM), LatestAccepted(contract=FORM)):
        assert dependable(st, rule) is None, rule
        assert await ctl.dependable("w", rule) is None
    assert dependable(st, StrictCurrent()) is not None       # a consumer that requires nothing


async def test_an_older_version_of_the_form_does_not_meet_the_new_one(
        backend: outlive.Backend) -> None:
    ctl = await accepted_under(backend, OLD_FORM)
    st = await ctl.state("w")
    assert dependable(st, StrictCurrent(contract=Requires(name="digest-form", version="2"))) is None
    got = dependable(st, StrictCurrent(contract=Requires(name="digest-form", version="1")))
    assert got is not None and got.acceptance is not None and got.acceptance.contract == OLD_FORM


def test_the_assessor_counts_only_when_the_consumer_names_it() -> None:
    assert meets(FORM, Requires(name="digest-form", version="2"))
    assert meets(FORM, Requires(name="digest-form", version="2", assessor="editor"))
    assert not meets(FORM, Requires(name="digest-form", version="2", assessor="someone"))
    assert not meets(FORM, MADE_UP) and meets(FORM, FORM) and meets(FORM, None)


async def test_completion_requires_the_kinds_contract(backend: outlive.Backend) -> None:
    ctl = await accepted_under(backend, MADE_UP)
    st = await ctl.state("w")
    d = WorkDefinition(work_id="w", attempt="tests.test_contracts:summ", contract=FORM)
    assert not d.is_complete(st) and not work_complete(st, FORM)
    assert work_complete(st)      # any contract: what work_complete said before contracts counted
