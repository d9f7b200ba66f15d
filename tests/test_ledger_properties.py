"""Random command sequences against the pure ledger: the protections hold whatever the order."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from outlive import errors as E
from outlive import ledger as L
from outlive.hashing import content_hash, input_key
from outlive.records import AttemptState, Contract, Part, Policy, Receipt, WorkState
from outlive.rules import LatestAccepted, StrictCurrent, dependable

C = Contract(name="c", version="1", assessor="t")
#: Another contract (a made-up one, or an older form): consumers of C must not rely on it.
OTHER = Contract(name="c", version="0", assessor="t")
TEXTS = {"v1": {"a": "A1", "b": "B1"}, "v2": {"a": "A1", "b": "B2"}}


#: The controller's credential; a worker (or anyone) sends another or none.
CONTROLLER = "credential-of-the-controller"


def step_write(att: int, tok: int, step: str, ver: str, rid: str = "derived") -> L.RecordSteps:
    src = {step: content_hash(TEXTS[ver][step])}
    key = input_key(step, src)
    other = "b" if step == "a" else "a"
    result_id = {"derived": L.result_id("w", step, key, att), "chosen": "x",
                 "another-step": L.result_id("w", other, key, att)}[rid]
    return L.RecordSteps(attempt=att, token=tok, at=0, entries=(L.StepWrite(
        step=step, sources=src, input_key=key, result=f"{step}-{ver}-{att}",
        result_id=result_id),))


WHO = st.integers(0, 2)                        # 0 = the newest attempt, 1 = the one before...
CRED = st.sampled_from(["controller", "controller", "controller", "none", "worker"])
RID = st.sampled_from(["derived", "derived", "derived", "chosen", "another-step"])
TOK = st.sampled_from(["own", "own", "own", "forged", "other"])

ops = st.one_of(
    st.tuples(st.just("admit"), CRED),
    st.tuples(st.just("unknown"), CRED, WHO),
    st.tuples(st.just("stop"), CRED, WHO),
    st.tuples(st.just("publish"), CRED, st.sampled_from(["v1", "v2"])),
    st.tuples(st.just("write"), WHO, TOK, st.sampled_from("ab"), st.sampled_from(["v1", "v2"]), RID),
    st.tuples(st.just("write"), WHO, TOK, st.sampled_from("ab"), st.sampled_from(["v1", "v2"]), RID),
    st.tuples(st.just("write"), WHO, TOK, st.sampled_from("ab"), st.sampled_from(["v1", "v2"]), RID),
    st.tuples(st.just("candidate"), WHO, TOK),
    st.tuples(st.just("candidate"), WHO, TOK),
    st.tuples(st.just("accept"), CRED, st.integers(0, 5), st.booleans(), st.sampled_from([C, OTHER])),
    st.tuples(st.just("accept"), CRED, st.integers(0, 5), st.booleans(), st.sampled_from([C, OTHER])),
    st.tuples(st.just("intent"), WHO, TOK, st.sampled_from("xy")),
    st.tuples(st.just("confirm"), WHO, TOK, st.sampled_from("xy")),
    st.tuples(st.just("finish"), WHO, TOK),
)


def who(state: WorkState, i: int, mode: str) -> tuple[int, int]:
    """(attempt number, token) for an op: the attempt's own token, a forged one, or another's."""
    if not state.attempts:
        return 1, 1
    att = state.attempts[max(0, len(state.attempts) - 1 - i)]
    if mode == "forged":
        return att.number, state.epoch + 1
    if mode == "other":
        return att.number, state.attempts[-1].token if att.number != state.attempts[-1].number \
            else att.token - 1
    return att.number, att.token


def build(state: WorkState, op: tuple[Any, ...]) -> L.Command:
    kind = op[0]
    if kind in ("admit", "unknown", "stop", "publish", "accept"):
        cred = {"controller": CONTROLLER, "none": None, "worker": "a-workers-secret"}[op[1]]
    if kind == "admit":
        return L.Admit(at=0, credential=cred)
    if kind == "unknown":
        return L.MarkUnknown(attempt=who(state, op[2], "own")[0], at=0, credential=cred)
    if kind == "stop":
        return L.MarkStopped(attempt=who(state, op[2], "own")[0], at=0, credential=cred)
    if kind == "publish":
        return L.PublishInput(version=op[2], parts={k: content_hash(v)
                                                    for k, v in TEXTS[op[2]].items()}, at=0,
                              credential=cred)
    if kind == "accept":
        cands = state.candidates
        digest = cands[op[2] % len(cands)].digest if cands else "0" * 64
        return L.Accept(digest=digest, contract=op[4], verdict=op[3], at=0, credential=cred)
    att, tok = who(state, op[1], op[2])
    if kind == "write":
        return step_write(att, tok, op[3], op[4], op[5])
    if kind == "candidate":
        mine = [e for e in state.journal if e.attempt == att]
        parts = tuple(Part(step=e.step, input_key=e.input_key, sources=e.sources,
                           result_id=e.result_id) for e in mine) or (
            Part(step="a", input_key=None, sources={}, result_id="missing"),)
        rec = state.attempt(att)
        ver = rec.pinned_version if rec else None
        content = {e.step: e.result for e in mine}     # bound: the parts' results
        return L.SubmitCandidate(attempt=att, token=tok, parts=parts, content=content, at=0,
                                 digest=L.candidate_digest("w", ver, parts, content))
    if kind == "intent":
        return L.RecordIntent(attempt=att, token=tok, op_key=op[3], payload="p",
                              payload_digest=content_hash("p"), sent_key=op[3], at=0)
    if kind == "confirm":
        return L.ConfirmEffect(attempt=att, token=tok, op_key=op[3], at=0,
                               receipt=Receipt(effect_id="P", duplicate=False, key=op[3]))
    return L.Finish(attempt=att, token=tok, at=0)


@settings(max_examples=600, deadline=None)
@given(st.lists(ops, min_size=5, max_size=60))
def test_protections_hold_for_any_sequence(seq: list[tuple[Any, ...]]) -> None:
    state, _ = L.apply(None, L.OpenWork(policy=Policy(),
                                        controller_key_hash=L.key_hash(CONTROLLER)), work_id="w")
    state, _ = L.apply(state, L.PublishInput(version="v1", parts={
        k: content_hash(v) for k, v in TEXTS["v1"].items()}, at=0, credential=CONTROLLER))
    state, first = L.apply(state, L.Admit(at=0, credential=CONTROLLER))
    issued: list[int] = [first.record.token]
    for op in seq:
        cmd = build(state, op)
        try:
            new, out = L.apply(state, cmd)
        except E.OutliveError:
            continue   # a rejection: `state` is untouched by construction (immutable)
        assert new.epoch >= state.epoch
        assert new.journal[:len(state.journal)] == state.journal          # append-only
        assert new.acceptances[:len(state.acceptances)] == state.acceptances
        assert new.refusals[:len(state.refusals)] == state.refusals
        if isinstance(cmd, L.CONTROLLER_COMMANDS) and new is not state:
            assert cmd.credential == CONTROLLER, "a controller's command landed without its credential"
        for e in new.journal[len(state.journal):]:     # ids come from the store, never the writer
            assert e.input_key is not None
            assert e.result_id == L.result_id("w", e.step, e.input_key, e.attempt)
        refused = {(r.digest, r.contract) for r in new.refusals}
        for acc in new.acceptances[len(state.acceptances):]:
            assert (acc.digest, acc.contract) not in refused, "a refused digest was accepted"
            made_by = state.attempt(acc.attempt)
            assert made_by is not None and made_by.state is not AttemptState.STOPPED
        token = getattr(cmd, "token", None)
        if token is not None and new is not state and not isinstance(cmd, L.Heartbeat):
            assert token == state.epoch, "a write landed with a token that is not the epoch"
        for acc in new.acceptances[len(state.acceptances):]:
            cand = new.candidate(acc.digest)
            assert cand is not None and acc.version == new.current_version
            assert cand.token == new.epoch
        for contract in (C, OTHER):       # a consumer relies only on its own contract
            for rule in (StrictCurrent(contract=contract), LatestAccepted(contract=contract)):
                got = dependable(new, rule)
                assert got is None or (got.acceptance is not None
                                       and got.acceptance.contract == contract)
        if isinstance(cmd, L.Admit):
            issued.append(out.record.token)
        state = new
    assert issued == sorted(set(issued))
    assert state.stale_writes_applied == 0
