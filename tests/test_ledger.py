"""The pure ledger: every protection, and every rejection writes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from outlive import errors as E
from outlive import ledger as L
from outlive.hashing import content_hash, input_key
from outlive.records import AttemptState, Contract, EffectState, Part, Policy, Receipt, WorkState

#: An intent carries its payload; this is its digest.
P = content_hash("p")

C = Contract(name="form", version="1", assessor="test")
V1 = {"s1": "one", "s2": "Revenue was 4.1 million."}
V2 = {"s1": "one", "s2": "Revenue was 4.7 million."}


def hashes(v: dict[str, str]) -> dict[str, str]:
    return {k: content_hash(x) for k, x in v.items()}


def go(st: WorkState | None, *cmds: Any) -> WorkState:
    for c in cmds:
        st, _ = L.apply(st, c, work_id="w")
    assert st is not None
    return st


def opened(policy: Policy | None = None) -> WorkState:
    return go(None, L.OpenWork(policy=policy or Policy(), epoch_floor=40),
              L.PublishInput(version="v1", parts=hashes(V1), at=0), L.Admit(at=0))


def write(step: str, text: str, attempt: int, token: int, result: Any = "r") -> L.RecordSteps:
    sources = {step: content_hash(text)}
    key = input_key(step, sources)
    return L.RecordSteps(attempt=attempt, token=token, at=1, entries=(L.StepWrite(
        step=step, sources=sources, input_key=key, result=result,
        result_id=L.result_id("w", step, key, attempt)),))


def rejects(st: WorkState, cmd: Any, err: type[Exception]) -> None:
    with pytest.raises(err):
        L.apply(st, cmd, work_id="w")


def test_first_token_follows_the_floor_and_the_attempt_is_written_before_work() -> None:
    st = opened()
    att = st.current_attempt
    assert att is not None and att.token == 41 and st.epoch == 41
    assert att.state is AttemptState.ADMITTED and att.pinned_version == "v1"


def test_stale_token_is_rejected_and_nothing_is_written() -> None:
    st = go(opened(), L.MarkUnknown(attempt=1, at=5), L.Admit(at=5))
    assert st.epoch == 42
    rejects(st, write("s1", V1["s1"], 1, 41), E.StaleOwner)


@pytest.mark.parametrize("token,attempt", [(43, 1), (999, 1), (41, 2), (0, 1), (-1, 1), (41, 7)])
def test_forged_tokens_are_rejected_and_do_not_move_the_epoch(token: int, attempt: int) -> None:
    st = opened()
    with pytest.raises(E.UnknownToken):
        L.apply(st, write("s1", V1["s1"], attempt, token), work_id="w")
    assert st.epoch == 41
    st2, _ = L.apply(st, L.MarkUnknown(attempt=1, at=3), work_id="w")
    st2, out = L.apply(st2, L.Admit(at=3), work_id="w")
    assert out.record.token == 42  # the forged 43/999 never moved the epoch


def test_a_successor_needs_the_owner_to_be_unknown_or_finished() -> None:
    rejects(opened(), L.Admit(at=1), E.AttemptActive)


def test_silence_makes_open_intents_ambiguous_never_failed() -> None:
    st = go(opened(), L.RecordIntent(attempt=1, token=41, op_key="k", payload_digest=P,
                                     payload="p", sent_key="k", at=2),
            L.MarkUnknown(attempt=1, at=5))
    assert st.attempts[0].state is AttemptState.UNKNOWN
    assert st.effects[0].state is EffectState.AMBIGUOUS


def test_restore_is_by_input_key_not_by_name() -> None:
    st = go(opened(), write("s1", V1["s1"], 1, 41), write("s2", V1["s2"], 1, 41))
    assert st.lookup("s2", input_key("s2", {"s2": content_hash(V1["s2"])})) is not None
    assert st.lookup("s2", input_key("s2", {"s2": content_hash(V2["s2"])})) is None


def test_without_pins_restore_falls_back_to_the_name() -> None:
    st = go(opened(Policy(pins=False)), write("s2", V1["s2"], 1, 41))
    assert st.lookup("s2", input_key("s2", {"s2": content_hash(V2["s2"])})) is not None
    assert st.journal[0].input_key is None


def test_a_step_result_for_an_undeclared_input_is_refused() -> None:
    cmd = write("s1", V1["s1"], 1, 41)
    bad = L.RecordSteps(attempt=1, token=41, at=1, entries=(
        L.StepWrite(step="s1", sources={"s1": "0" * 64}, input_key=cmd.entries[0].input_key,
                    result="r", result_id="x"),))
    rejects(opened(), bad, E.UndeclaredInput)


def test_a_step_that_read_another_version_is_refused() -> None:
    rejects(opened(), write("s2", V2["s2"], 1, 41), E.VersionMismatch)


def test_oversized_results_are_refused_with_the_limit() -> None:
    with pytest.raises(E.PayloadTooLarge) as info:
        L.apply(opened(), write("s1", V1["s1"], 1, 41, result="x" * (L.MAX_PAYLOAD_BYTES + 1)),
                work_id="w")
    assert info.value.details["limit"] == L.MAX_PAYLOAD_BYTES
    assert "result of step 's1'" in info.value.message


def test_a_result_is_sized_in_utf8_bytes_not_characters() -> None:
    wide = "é" * (L.MAX_PAYLOAD_BYTES // 2)      # half as many characters as the limit, 2 bytes each
    with pytest.raises(E.PayloadTooLarge) as info:
        L.apply(opened(), write("s1", V1["s1"], 1, 41, result=wide), work_id="w")
    assert info.value.details["size"] == L.MAX_PAYLOAD_BYTES + 2     # and its two quotes


def _candidate(st: WorkState, attempt: int, token: int, version: str | None) -> L.SubmitCandidate:
    parts = tuple(Part(step=e.step, input_key=e.input_key, sources=e.sources,
                       result_id=e.result_id) for e in st.journal if e.attempt == attempt)
    content = {e.step: e.result for e in st.journal if e.attempt == attempt}   # bound: the parts
    return L.SubmitCandidate(attempt=attempt, token=token, parts=parts, content=content, at=3,
                             digest=L.candidate_digest("w", version, parts, content))


def test_a_candidate_for_the_wrong_version_is_refused_at_acceptance() -> None:
    st = go(opened(), write("s1", V1["s1"], 1, 41), write("s2", V1["s2"], 1, 41))
    st = go(st, _candidate(st, 1, 41, "v1"), L.PublishInput(version="v2", parts=hashes(V2), at=4))
    digest = st.candidates[0].digest
    before = st
    rejects(st, L.Accept(digest=digest, contract=C, verdict=True, at=5), E.VersionMismatch)
    assert before.acceptances == ()


def test_acceptance_is_append_only_and_idempotent() -> None:
    st = go(opened(), write("s1", V1["s1"], 1, 41), write("s2", V1["s2"], 1, 41))
    st = go(st, _candidate(st, 1, 41, "v1"))
    d = st.candidates[0].digest
    st = go(st, L.Accept(digest=d, contract=C, verdict=True, at=4))
    st2 = go(st, L.Accept(digest=d, contract=C, verdict=True, at=6))
    assert st2.acceptances == st.acceptances and st.acceptances[0].version == "v1"
    # a verdict of no after the acceptance changes nothing: acceptances are append-only
    assert go(st, L.Accept(digest=d, contract=C, verdict=False, reason="no", at=7)) is st


def test_a_refusal_is_a_record_and_is_never_turned_into_an_acceptance() -> None:
    st = go(opened(), write("s1", V1["s1"], 1, 41), write("s2", V1["s2"], 1, 41))
    st = go(st, _candidate(st, 1, 41, "v1"))
    d = st.candidates[0].digest
    st, out = L.apply(st, L.Accept(digest=d, contract=C, verdict=False, reason="too short", at=4))
    assert out.kind == "refused" and st.refusals[0].reason == "too short"
    assert (st.refusals[0].digest, st.refusals[0].contract, st.refusals[0].attempt) == (d, C, 1)
    assert go(st, L.Accept(digest=d, contract=C, verdict=False, reason="again", at=5)) is st
    rejects(st, L.Accept(digest=d, contract=C, verdict=True, at=6), E.ContractFailed)
    assert not st.acceptances


def test_a_candidate_whose_digest_is_a_label_is_refused() -> None:
    st = go(opened(), write("s1", V1["s1"], 1, 41))
    cmd = _candidate(st, 1, 41, "v1")
    rejects(st, L.SubmitCandidate(attempt=1, token=41, parts=cmd.parts, content=cmd.content,
                                  at=3, digest="0" * 64), E.InvalidRecord)


def test_versions_are_immutable() -> None:
    st = opened()
    rejects(st, L.PublishInput(version="v1", parts=hashes(V2), at=1), E.InputConflict)
    assert go(st, L.PublishInput(version="v1", parts=hashes(V1), at=1)) is st


def test_effect_intent_then_confirmation_and_a_confirmed_key_is_not_resent() -> None:
    st = go(opened(), L.RecordIntent(attempt=1, token=41, op_key="k", payload_digest=P,
                                     payload="p", sent_key="k", at=2))
    r = Receipt(effect_id="P1", duplicate=False, key="k")
    st = go(st, L.ConfirmEffect(attempt=1, token=41, op_key="k", receipt=r, at=3))
    _, out = L.apply(st, L.RecordIntent(attempt=1, token=41, op_key="k", payload_digest=P,
                                        payload="p", sent_key="k", at=4), work_id="w")
    assert out.kind == "confirmed" and out.record.receipt == r
    rejects(st, L.RecordIntent(attempt=1, token=41, op_key="k", payload="other",
                               payload_digest=content_hash("other"), sent_key="k", at=4),
            E.EffectConflict)


def test_confirming_without_an_intent_is_refused() -> None:
    rejects(opened(), L.ConfirmEffect(attempt=1, token=41, op_key="k", at=1,
                                      receipt=Receipt(effect_id="P", duplicate=False, key="k")),
            E.NotFound)


def test_a_replaced_owners_heartbeat_is_dropped_not_applied() -> None:
    st = go(opened(), L.MarkUnknown(attempt=1, at=5), L.Admit(at=5))
    st2, out = L.apply(st, L.Heartbeat(attempt=1, token=41, at=6), work_id="w")
    assert out.kind == "superseded" and st2 is st


def test_fencing_off_applies_stale_writes_and_counts_them() -> None:
    st = go(opened(Policy(fencing=False)), L.MarkUnknown(attempt=1, at=5), L.Admit(at=5),
            write("s1", V1["s1"], 1, 41))
    assert st.stale_writes_applied == 1 and st.journal[0].stale


def test_every_change_moves_seq() -> None:
    st = opened()
    st2 = go(st, L.Heartbeat(attempt=1, token=41, at=1))
    assert st2.seq > st.seq
