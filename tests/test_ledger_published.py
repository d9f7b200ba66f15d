"""The ledger's published answers: what controller, worker, stores and adapters ask, not guess."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import outlive
from outlive import errors as E
from outlive import ledger as L
from outlive.hashing import content_hash, input_key
from outlive.records import AttemptState, Contract, Part, WorkState

C = Contract(name="form", version="1", assessor="test")
V1 = {"s1": "one", "s2": "two", "s3": "three"}


def _hashes(v: dict[str, str]) -> dict[str, str]:
    return {k: content_hash(x) for k, x in v.items()}


def _go(state: WorkState | None, *cmds: Any) -> WorkState:
    for c in cmds:
        state, _ = L.apply(state, c, work_id="w")
    assert state is not None
    return state


def _write(step: str, attempt: int, token: int) -> L.StepWrite:
    sources = {step: content_hash(V1[step])}
    key = input_key(step, sources)
    return L.StepWrite(step=step, sources=sources, input_key=key, result=f"r-{step}-{attempt}",
                       result_id=L.result_id("w", step, key, attempt))


def _opened() -> WorkState:
    return _go(None, L.OpenWork(epoch_floor=0), L.PublishInput(version="v1", parts=_hashes(V1), at=0),
               L.Admit(at=0))


def test_the_command_set_is_published_and_apply_refuses_anything_else() -> None:
    assert set(L.COMMANDS) == {t for t in L.COMMANDS if dataclasses.is_dataclass(t)}
    assert all(L.is_command(t.__new__(t)) for t in L.COMMANDS)
    assert not L.is_command(L.Outcome(kind="x")) and not L.is_command("RecordSteps")
    with pytest.raises(E.InvalidRecord):
        L.apply(_opened(), L.Outcome(kind="x"), work_id="w")  # type: ignore[arg-type]


def test_liveness_is_published() -> None:
    att = _opened().current_attempt
    assert att is not None and L.is_live(att)
    for s in AttemptState:
        assert L.is_live(dataclasses.replace(att, state=s)) == (s in L.LIVE_STATES)
    assert L.LIVE_STATES == {AttemptState.ADMITTED, AttemptState.RUNNING, AttemptState.WAITING}
    # waiting holds the work but its silence is not suspicious: only the others are leased
    assert L.LEASED_STATES == {AttemptState.ADMITTED, AttemptState.RUNNING}
    assert not L.is_live(None) and not L.is_leased(None)


def test_the_size_check_is_published() -> None:
    assert L.check_size("x" * 10, "v") == 12
    with pytest.raises(E.PayloadTooLarge) as info:
        L.check_size("x" * L.MAX_PAYLOAD_BYTES, "the value")
    assert info.value.details["limit"] == L.MAX_PAYLOAD_BYTES
    # a template and its name: formatted into the message only when the value is too large
    assert L.check_size("x" * 10, "result of step {!r}", "s{1}") == 12
    with pytest.raises(E.PayloadTooLarge, match=r"^result of step 's\{1\}' is \d+ bytes"):
        L.check_size("x" * L.MAX_PAYLOAD_BYTES, "result of step {!r}", "s{1}")


def test_changed_says_whether_a_store_must_write() -> None:
    st0, _ = L.apply(None, L.OpenWork(), work_id="w")
    assert L.changed(None, st0)
    same, _ = L.apply(st0, L.OpenWork(), work_id="w")
    assert not L.changed(st0, same)
    st1, _ = L.apply(st0, L.PublishInput(version="v1", parts=_hashes(V1), at=0), work_id="w")
    assert L.changed(st0, st1)
    again, _ = L.apply(st1, L.PublishInput(version="v1", parts=_hashes(V1), at=0), work_id="w")
    assert not L.changed(st1, again)


def _only(state: WorkState, rids: frozenset[str]) -> WorkState:
    return dataclasses.replace(state, journal=tuple(e for e in state.journal if e.result_id in rids))


def _outcome_or_error(state: WorkState, cmd: Any) -> tuple[str, Any]:
    try:
        new, out = L.apply(state, cmd, work_id="w")
    except E.OutliveError as exc:
        return "error", type(exc).__name__
    added = new.journal[len(state.journal):] if new.journal[:len(state.journal)] == state.journal \
        else None
    return "ok", (out.kind, dataclasses.replace(new, journal=()), added)


@settings(max_examples=60, deadline=None)
@given(done=st.sets(st.sampled_from(sorted(V1))), cmd_steps=st.lists(st.sampled_from(sorted(V1)),
       min_size=1, max_size=3), submit=st.booleans(), attempt=st.sampled_from([1, 2]))
def test_apply_sees_only_the_journal_entries_reads_names(done: set[str], cmd_steps: list[str],
                                                         submit: bool, attempt: int) -> None:
    """A store that hands ``apply`` only ``reads(state, cmd)`` gets the same answer as the whole."""
    state = _opened()
    for step in sorted(done):
        state = _go(state, L.RecordSteps(attempt=1, token=1, entries=(_write(step, 1, 1),), at=1))
    writes = tuple(_write(s, attempt, attempt) for s in cmd_steps)
    cmd: Any
    if submit:
        parts = tuple(Part(step=e.step, input_key=e.input_key, sources=e.sources,
                           result_id=e.result_id) for e in state.journal) + tuple(
            Part(step=w.step, input_key=w.input_key, sources=w.sources, result_id=w.result_id)
            for w in writes)
        content = {**{e.step: e.result for e in state.journal},
                   **{w.step: w.result for w in writes}}     # the parts' results, by step
        cmd = L.SubmitCandidate(attempt=attempt, token=attempt, parts=parts, content=content, at=2,
                                flush=writes, digest=L.candidate_digest("w", "v1", parts, content))
    else:
        cmd = L.RecordSteps(attempt=attempt, token=attempt, entries=writes, at=2)
    full = _outcome_or_error(state, cmd)
    part = _outcome_or_error(_only(state, L.reads(state, cmd)), cmd)
    if full[0] == "ok" and part[0] == "ok":
        assert full[1][0] == part[1][0] and full[1][1].seq == part[1][1].seq
        assert full[1][1].candidates == part[1][1].candidates
        assert full[1][2] == part[1][2]
    else:
        assert full == part


async def test_assess_is_idempotent_after_a_takeover() -> None:
    """The digest accepted for #1 is the answer to a second assess even once #2 holds the epoch."""
    b = await outlive.open_backend("memory://")
    ctl = outlive.Controller(b, clock=lambda: 0)
    await ctl.open_work("w")
    await ctl.publish("w", "v1", V1)
    w = outlive.Worker(b, await ctl.admit("w"), V1)
    await w.start()
    for k, v in V1.items():
        await w.step(k, lambda **kw: "sum", **{k: v})
    cand = await w.candidate()
    acc = await ctl.assess("w", cand.digest, C, lambda c, v: (True, "ok"))
    await b.execute("w", ctl.stamp(L.MarkUnknown(attempt=1, at=9)))
    await ctl.admit("w")
    judged: list[str] = []

    def assessor(c: Any, v: Any) -> tuple[bool, str]:
        judged.append(c.digest)
        return True, "ok"

    assert await ctl.assess("w", cand.digest, C, assessor) == acc
    assert judged == []


def test_accepted_answers_the_recorded_acceptance() -> None:
    state = _opened()
    for step in V1:
        state = _go(state, L.RecordSteps(attempt=1, token=1, entries=(_write(step, 1, 1),), at=1))
    parts = tuple(Part(step=e.step, input_key=e.input_key, sources=e.sources, result_id=e.result_id)
                  for e in state.journal)
    content = {e.step: e.result for e in state.journal}
    digest = L.candidate_digest("w", "v1", parts, content)
    state = _go(state, L.SubmitCandidate(attempt=1, token=1, parts=parts, content=content, at=2,
                                         digest=digest))
    assert L.accepted(state, digest, C) is None
    state = _go(state, L.Accept(digest=digest, contract=C, verdict=True, at=3))
    acc = L.accepted(state, digest, C)
    assert acc is not None and acc.version == "v1"
    assert L.accepted(state, digest, dataclasses.replace(C, version="2")) is None

