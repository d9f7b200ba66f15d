"""The hostile caller: what a buggy or fenced-out worker holding the backend's URL tries.

Every backend passes these (they are part of :class:`~outlive_conformance.contract.BackendContractSuite`,
so a third-party backend runs them with the plugin): the store must hand each command to the
ledger with the command's own fields intact, so the ledger's refusals reach the caller typed and
nothing is written. A store that rebuilds commands from a subset of their fields, caches an
answer by command type, or takes a write's identifiers from the writer fails here.
"""

from __future__ import annotations

from typing import Any

import pytest

from outlive import Backend, Contract, MemoryReceiver, Policy, Receipt, ResultOf
from outlive import ledger as L
from outlive.errors import (
    ContractFailed,
    EffectAmbiguous,
    InputConflict,
    InvalidRecord,
    NotController,
    ResultConflict,
    WrongReceipt,
)
from outlive.hashing import content_hash, input_key
from outlive.records import EffectState
from outlive.rules import StrictCurrent, dependable

from .testing import FORM, V1, V2, OpenedWork, open_work

__all__ = ["HostileCallerContract"]

MYSELF = Contract(name="none", version="0", assessor="myself")


async def _unchanged(backend: Backend, work_id: str, before: Any) -> None:
    assert await backend.load(work_id) == before, "a refused command changed the ledger"


@pytest.mark.asyncio(loop_scope="session")
class HostileCallerContract:
    """A worker holds its token, its secret and the URL; the controller's role stays the
    controller's, and what the worker writes is what the store checks."""

    async def test_a_worker_cannot_issue_the_controllers_commands(
            self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend)
        await w.steps(V1)
        cand = await w.worker.candidate()
        before = await outlive_backend.load(w.work_id)
        secret = w.attempt.secret
        for cmd in (
            L.MarkUnknown(attempt=w.attempt.number, at=1, credential=secret),
            L.MarkStopped(attempt=w.attempt.number, at=1),
            L.Admit(at=1, key_hash=L.key_hash("mine")),
            L.PublishInput(version="mine", parts={"s1": "0" * 64}, at=1, credential=secret),
            L.Accept(digest=cand.digest, contract=MYSELF, verdict=True, at=1, credential=secret),
        ):
            with pytest.raises(NotController):
                await outlive_backend.execute(w.work_id, cmd)
        await _unchanged(outlive_backend, w.work_id, before)
        st = await outlive_backend.load(w.work_id)
        assert st is not None and dependable(st, StrictCurrent()) is None

    async def test_a_judges_refusal_is_a_record(self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend)
        await w.steps(V1)
        cand = await w.worker.candidate()
        with pytest.raises(ContractFailed):
            await w.ctl.assess(w.work_id, cand.digest, FORM, lambda c, v: (False, "too short"))
        st = await outlive_backend.load(w.work_id)
        assert st is not None
        assert [(r.digest, r.contract, r.reason) for r in st.refusals] == \
            [(cand.digest, FORM, "too short")]

    async def test_an_acceptance_under_another_contract_is_not_dependable(
            self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend)
        await w.steps(V1)
        cand = await w.worker.candidate()
        await w.ctl.assess(w.work_id, cand.digest, MYSELF, lambda c, v: (True, "ok"))
        st = await outlive_backend.load(w.work_id)
        assert st is not None and dependable(st, StrictCurrent(contract=FORM)) is None
        got = dependable(st, StrictCurrent(contract=MYSELF))
        assert got is not None and got.digest == cand.digest

    # -- provenance is a graph ----------------------------------------------------------------
    async def test_a_derived_step_names_journaled_results_of_its_version(
            self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend, versions={"v1": V1, "v2": V2})
        await w.steps(V1)
        before = await outlive_backend.load(w.work_id)
        s2 = w.worker.steps["s2"].result_id
        for src, error in (("0" * 64, InvalidRecord), (s2, None)):
            sources = {"s2": src}
            key = input_key("headline", sources)
            cmd = L.RecordSteps(attempt=w.attempt.number, token=w.attempt.token,
                                secret=w.attempt.secret, at=1, entries=(L.StepWrite(
                                    step="headline", sources=sources, input_key=key, result="h",
                                    result_id=L.result_id(w.work_id, "headline", key,
                                                          w.attempt.number), derived=("s2",)),))
            if error is not None:
                with pytest.raises(error):
                    await outlive_backend.execute(w.work_id, cmd)
                await _unchanged(outlive_backend, w.work_id, before)
            else:
                out = await outlive_backend.execute(w.work_id, cmd)
                assert out.record.roots == {"s2": content_hash(V1["s2"])}

    # -- the candidate's content is bound -----------------------------------------------------
    async def test_content_quoting_anything_but_the_journal_is_refused(
            self, outlive_backend: Backend) -> None:
        """On every work, with no policy declared: honest v2 parts, content of the worker's own
        (v1's figure, or a step's result changed after it was journaled), is refused."""
        w = await open_work(outlive_backend, versions={"v2": V2})
        await w.steps(V2)
        got = await w.worker.step("digest", _assemble, s1=ResultOf("s1"), s2=ResultOf("s2"))
        before = await outlive_backend.load(w.work_id)
        quoting_v1 = {"digest": f"{V2['s1']} {V1['s2']}"}
        changed = dict(got, digest=got["digest"].replace("4.7", "4.1"))   # edited after
        for lie in (quoting_v1, changed, {"s1": w.worker.result("s1"),
                                          "s2": {"summary": V1["s2"]}}):
            with pytest.raises(InvalidRecord, match="content"):
                await w.worker.candidate(lie)
        await _unchanged(outlive_backend, w.work_id, before)
        cand = await w.worker.candidate(got)
        assert "4.7" in cand.content["digest"]
        await w.ctl.assess(w.work_id, cand.digest, FORM, lambda c, v: (True, "ok"))
        st = await outlive_backend.load(w.work_id)
        dep = dependable(st, StrictCurrent()) if st is not None else None
        assert dep is not None and "4.1" not in dep.content["digest"]

    async def test_a_part_named_twice_or_a_required_part_missing_is_refused(
            self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend, policy=Policy(assembly=L.ASSEMBLE_PARTS,
                                                           required=("s1", "s2")))
        await w.steps(V1)
        before = await outlive_backend.load(w.work_id)
        with pytest.raises(InvalidRecord):        # a part named twice
            await w.worker.candidate({"s1": w.worker.result("s1")}, ["s1", "s1"])
        with pytest.raises(InvalidRecord):        # a required part missing
            await w.worker.candidate({"s1": w.worker.result("s1")}, ["s1"])
        with pytest.raises(InvalidRecord):        # the declared assembly: the parts' map
            await w.worker.candidate(w.worker.result("s2"))
        await _unchanged(outlive_backend, w.work_id, before)
        cand = await w.worker.candidate({n: w.worker.result(n) for n in ("s1", "s2")})
        assert cand.content["s2"] == w.worker.result("s2")

    # -- result ids come from the store ------------------------------------------------------
    async def test_a_result_id_chosen_by_the_writer_is_refused(
            self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend)
        await w.steps({"s1": V1["s1"]})
        s1 = w.worker.steps["s1"].result_id
        before = await outlive_backend.load(w.work_id)
        for rid in ("x", s1):     # a label; the id of another step's entry
            with pytest.raises(InvalidRecord):
                await outlive_backend.execute(w.work_id, _write(w, "s2", V1["s2"], rid, "4.1"))
        await _unchanged(outlive_backend, w.work_id, before)

    async def test_a_second_value_under_a_journaled_id_is_refused_never_merged(
            self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend)
        await w.steps({"s2": V1["s2"]})
        entry = w.worker.steps["s2"]
        before = await outlive_backend.load(w.work_id)
        with pytest.raises(ResultConflict):
            await outlive_backend.execute(w.work_id, _write(w, "s2", V1["s2"], entry.result_id,
                                                            {"summary": "forged"}))
        await _unchanged(outlive_backend, w.work_id, before)

    # -- effects and values -------------------------------------------------------------------
    async def test_a_receipt_for_another_key_confirms_nothing(
            self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend)
        op = f"announce:{w.work_id}"

        def dropped(key: str | None, payload: Any) -> Receipt:
            raise ConnectionResetError("no answer")

        with pytest.raises(EffectAmbiguous):
            await w.worker.effect(op, {"d": 1}, dropped)
        before = await outlive_backend.load(w.work_id)
        with pytest.raises(WrongReceipt):
            await outlive_backend.execute(w.work_id, L.ConfirmEffect(
                attempt=w.attempt.number, token=w.attempt.token, secret=w.attempt.secret,
                op_key=op, at=1, receipt=Receipt(effect_id="P9", duplicate=False, key="other")))
        await _unchanged(outlive_backend, w.work_id, before)

    async def test_an_intent_without_its_payload_is_refused(
            self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend)
        before = await outlive_backend.load(w.work_id)
        with pytest.raises(InvalidRecord):
            await outlive_backend.execute(w.work_id, L.RecordIntent(
                attempt=w.attempt.number, token=w.attempt.token, secret=w.attempt.secret,
                op_key="op", payload_digest=content_hash({"d": 1}), sent_key="op", at=1))
        await _unchanged(outlive_backend, w.work_id, before)

    async def test_a_resend_answered_new_is_flagged_possibly_duplicated(
            self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend)
        op = f"announce:{w.work_id}"
        first = MemoryReceiver()

        def applied_then_lost(key: str | None, payload: Any) -> Receipt:
            first.receive(key, payload, lambda p: "P1")
            raise ConnectionResetError("the answer was lost")

        with pytest.raises(EffectAmbiguous):
            await w.worker.effect(op, {"d": 1}, applied_then_lost)
        forgetful = MemoryReceiver()   # the receiver lost its keys
        await w.worker.resend(op, lambda key, payload: forgetful.receive(key, payload,
                                                                         lambda p: "P2"))
        st = await outlive_backend.load(w.work_id)
        assert st is not None
        (eff,) = st.effects
        assert eff.sends == 2 and eff.state is EffectState.POSSIBLY_DUPLICATED

    async def test_floats_are_values_and_nan_is_refused(self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend)
        scored = {"score": 0.93, "p": [0.25, 1e-9], "n": 3}
        assert await w.worker.step("s1", lambda s1: scored, s1=V1["s1"]) == scored
        st = await outlive_backend.load(w.work_id)
        assert st is not None and st.journal[-1].result == scored
        before = st
        with pytest.raises(InvalidRecord):
            await w.worker.step("s2", lambda s2: {"score": float("nan")}, s2=V1["s2"])
        await _unchanged(outlive_backend, w.work_id, before)

    async def test_an_older_version_cannot_be_published_again(
            self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend)
        await w.ctl.publish(w.work_id, "v2", V2)
        before = await outlive_backend.load(w.work_id)
        with pytest.raises(InputConflict):
            await w.ctl.publish(w.work_id, "v1", V1)
        await _unchanged(outlive_backend, w.work_id, before)


def _assemble(s1: dict[str, str], s2: dict[str, str]) -> dict[str, str]:
    return {"digest": f"{s1['summary']} {s2['summary']}"}


def _write(w: OpenedWork, step: str, text: str, rid: str, result: Any) -> L.RecordSteps:
    sources = {step: content_hash(text)}
    return L.RecordSteps(attempt=w.attempt.number, token=w.attempt.token, secret=w.attempt.secret,
                         at=1, entries=(L.StepWrite(step=step, sources=sources,
                                                    input_key=input_key(step, sources),
                                                    result=result, result_id=rid),))
