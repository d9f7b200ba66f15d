"""Provenance as a graph, and journaled results that cannot be changed afterwards (issue 40,
items 2 and 3): a derived step names its sources by result id, checked against the journal."""

from __future__ import annotations

from typing import Any

import pytest

import outlive
from outlive import Controller, ResultOf, Worker
from outlive import errors as E
from outlive import ledger as L
from outlive.hashing import content_hash, input_key

V1 = {"s1": "Intro.", "s2": "Revenue was 4.1 million."}
V2 = {"s1": "Intro.", "s2": "Revenue was 4.7 million."}


def summ(**kw: str) -> dict[str, str]:
    (text,) = kw.values()
    return {"summary": text}


def headline(s1: dict[str, str], s2: dict[str, str]) -> str:
    return f"{s1['summary']} / {s2['summary']}"


async def started(b: outlive.Backend, snapshot: dict[str, str] = V1) -> tuple[Controller, Worker]:
    ctl = Controller(b, clock=lambda: 0, credential="ctl")
    await ctl.open_work("w")
    await ctl.publish("w", "v1", V1)
    w = Worker(b, await ctl.admit("w"), snapshot, clock=lambda: 0)
    await w.start()
    return ctl, w


async def test_a_derived_step_chains_back_to_the_parts_and_is_redone_when_a_source_changes(
        backend: outlive.Backend) -> None:
    ctl, w1 = await started(backend)
    for k, v in V1.items():
        await w1.step(k, summ, **{k: v})
    h1 = await w1.step("headline", headline, s1=ResultOf("s1"), s2=ResultOf("s2"))
    assert h1 == "Intro. / Revenue was 4.1 million."
    st = await ctl.state("w")
    entry = st.lookup("headline", w1.steps["headline"].input_key)
    assert entry is not None and entry.derived == ("s1", "s2")
    assert entry.sources == {"s1": w1.steps["s1"].result_id, "s2": w1.steps["s2"].result_id}
    assert entry.roots == {"s1": content_hash(V1["s1"]), "s2": content_hash(V1["s2"])}
    cand = await w1.candidate(h1)      # the headline's journaled result
    assert {p.step: p.roots for p in cand.parts}["headline"] == entry.roots
    # v2 changes s2: its successor restores s1, reruns s2, and so reruns the headline
    await ctl.publish("w", "v2", V2)
    await ctl.mark_unknown("w", 1)
    w2 = Worker(backend, await ctl.admit("w"), V2, clock=lambda: 0)
    await w2.start()
    for k, v in V2.items():
        await w2.step(k, summ, **{k: v})
    assert not w2.can_restore("headline", s1=ResultOf("s1"), s2=ResultOf("s2"))
    h2 = await w2.step("headline", headline, s1=ResultOf("s1"), s2=ResultOf("s2"))
    assert w2.steps["s1"].restored and not w2.steps["s2"].restored
    assert not w2.steps["headline"].restored and h2.endswith("4.7 million.")
    cand2 = await w2.candidate(h2)
    acc = await ctl.assess("w", cand2.digest, outlive.Contract(name="f", version="1",
                                                               assessor="t"),
                           lambda c, v: (True, "ok"))
    assert acc.version == "v2"


async def test_a_derived_input_that_names_no_journal_entry_is_refused(
        backend: outlive.Backend) -> None:
    _ctl, w = await started(backend)
    await w.step("s1", summ, s1=V1["s1"])
    before = await backend.load("w")
    sources = {"s1": w.steps["s1"].result_id, "s2": "0" * 64}
    key = input_key("headline", sources)
    cmd = L.RecordSteps(attempt=1, token=w.token, secret=w.attempt.secret, at=1, entries=(
        L.StepWrite(step="headline", sources=sources, input_key=key, result="x",
                    result_id=L.result_id("w", "headline", key, 1), derived=("s1", "s2")),))
    with pytest.raises(E.InvalidRecord, match="not journaled"):
        await backend.execute("w", cmd)
    assert await backend.load("w") == before


async def test_a_derived_step_over_an_old_versions_result_is_refused(
        backend: outlive.Backend) -> None:
    ctl, w1 = await started(backend)
    await w1.step("s2", summ, s2=V1["s2"])
    old = w1.steps["s2"].result_id
    await ctl.publish("w", "v2", V2)
    await ctl.mark_unknown("w", 1)
    w2 = Worker(backend, await ctl.admit("w"), V2, clock=lambda: 0)
    await w2.start()
    before = await backend.load("w")
    sources = {"s2": old}
    key = input_key("headline", sources)
    cmd = L.RecordSteps(attempt=2, token=w2.token, secret=w2.attempt.secret, at=1, entries=(
        L.StepWrite(step="headline", sources=sources, input_key=key, result="4.1",
                    result_id=L.result_id("w", "headline", key, 2), derived=("s2",)),))
    with pytest.raises(E.VersionMismatch):
        await backend.execute("w", cmd)
    assert await backend.load("w") == before


async def test_a_derived_input_must_be_declared_or_it_is_an_undeclared_input(
        backend: outlive.Backend) -> None:
    _ctl, w = await started(backend)
    await w.step("s2", summ, s2=V1["s2"])
    sources = {"summary": w.steps["s2"].result_id}     # a result id, not declared as one
    key = input_key("headline", sources)
    cmd = L.RecordSteps(attempt=1, token=w.token, secret=w.attempt.secret, at=1, entries=(
        L.StepWrite(step="headline", sources=sources, input_key=key, result="x",
                    result_id=L.result_id("w", "headline", key, 1)),))
    with pytest.raises(E.UndeclaredInput):
        await backend.execute("w", cmd)


async def test_changing_a_returned_result_changes_nothing_submitted(
        backend: outlive.Backend) -> None:
    _ctl, w = await started(backend)
    got: Any = await w.step("s2", summ, s2=V1["s2"])
    got["summary"] = "Revenue was 9.9 million."          # the caller edits what it got back
    assert w.result("s2") == {"summary": V1["s2"]}
    w.result("s2")["summary"] = "edited too"
    h = await w.step("headline", lambda s2: s2["summary"], s2=ResultOf("s2"))
    assert h == V1["s2"]
    st = await backend.load("w")
    assert st is not None and st.journal[0].result == {"summary": V1["s2"]}


async def test_a_derived_step_in_an_end_of_attempt_flush_finds_its_source_in_the_same_batch(
        backend: outlive.Backend) -> None:
    ctl = Controller(backend, clock=lambda: 0, credential="ctl")
    await ctl.open_work("w")
    await ctl.publish("w", "v1", V1)
    w = Worker(backend, await ctl.admit("w"), V1, clock=lambda: 0, persist="end")
    await w.start()
    for k, v in V1.items():
        await w.step(k, summ, **{k: v})
    h = await w.step("headline", headline, s1=ResultOf("s1"), s2=ResultOf("s2"))
    cand = await w.candidate(h)
    st = await ctl.state("w")
    assert [e.step for e in st.journal] == ["s1", "s2", "headline"]
    assert cand.parts[-1].derived == ("s1", "s2")


# -- the candidate's content is bound (item 3) ---------------------------------------------------
async def bound(b: outlive.Backend, policy: outlive.Policy) -> tuple[Controller, Worker]:
    ctl = Controller(b, clock=lambda: 0, credential="ctl")
    await ctl.open_work("w", policy)
    await ctl.publish("w", "v1", V1)
    await ctl.publish("w", "v2", V2)
    w = Worker(b, await ctl.admit("w"), V2, clock=lambda: 0)
    await w.start()
    for k, v in V2.items():
        await w.step(k, summ, **{k: v})
    return ctl, w


def assemble(s1: dict[str, str], s2: dict[str, str]) -> dict[str, str]:
    return {"digest": f"{s1['summary']} {s2['summary']}"}


async def test_honest_parts_with_content_quoting_the_old_version_are_refused(
        backend: outlive.Backend) -> None:
    _ctl, w = await bound(backend, outlive.Policy(assembly="digest"))
    made = await w.step("digest", assemble, s1=ResultOf("s1"), s2=ResultOf("s2"))
    before = await backend.load("w")
    lie = {"digest": "Intro. Revenue was 4.1 million."}        # v1's figure under v2's parts
    with pytest.raises(E.InvalidRecord, match="content"):
        await w.candidate(lie)
    assert await backend.load("w") == before
    cand = await w.candidate(made)
    assert cand.content == {"digest": "Intro. Revenue was 4.7 million."}
    with pytest.raises(E.InvalidRecord, match="assembly step"):
        await w.candidate(made, ["s1", "s2"])


async def test_content_assembled_from_the_parts_is_checked_against_their_results(
        backend: outlive.Backend) -> None:
    _ctl, w = await bound(backend, outlive.Policy(assembly=L.ASSEMBLE_PARTS))
    with pytest.raises(E.InvalidRecord, match="content"):
        await w.candidate({"s1": {"summary": "Intro."}, "s2": {"summary": "4.1"}})
    cand = await w.candidate({"s1": w.result("s1"), "s2": w.result("s2")})
    assert cand.content["s2"] == {"summary": V2["s2"]}


async def test_a_part_named_twice_or_a_required_part_missing_is_refused(
        backend: outlive.Backend) -> None:
    _ctl, w = await bound(backend, outlive.Policy(required=("s1", "s2")))
    before = await backend.load("w")
    with pytest.raises(E.InvalidRecord, match="twice"):
        await w.candidate({"n": 1}, ["s1", "s2", "s2"])
    with pytest.raises(E.InvalidRecord, match="required"):
        await w.candidate({"n": 1}, ["s1"])
    assert await backend.load("w") == before
    await w.candidate(steps=["s1", "s2"])


async def test_a_derived_step_over_sections_read_by_content_under_one_name_is_accepted(
        backend: outlive.Backend) -> None:
    """Each section's step reads its part by content as ``text`` (a label as the other input):
    the assembly over them chains back to two different parts under one input name. That is
    two parts of one version, not two versions of one part; a part read by its own name
    at two hashes still is (``VersionMismatch``)."""
    ctl, w = await started(backend)
    for k, v in V1.items():
        await w.step(k, lambda section, text: {"summary": text}, section=outlive.External(k),
                     text=v)
    made = await w.step("digest", lambda s1, s2: [s1, s2], s1=ResultOf("s1"), s2=ResultOf("s2"))
    cand = await w.candidate(made)
    roots = cand.parts[-1].roots
    assert roots is not None and sorted(roots.values()) == sorted(content_hash(v) for v in V1.values())
    acc = await ctl.assess("w", cand.digest, outlive.Contract(name="f", version="1", assessor="t"),
                           lambda c, v: (True, "ok"))
    assert acc.version == "v1"
