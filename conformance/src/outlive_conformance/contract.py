"""The backend contract: every rejection typed, nothing half-written, on any backend.

The scenario suite (:mod:`outlive_conformance.suite`) shows a backend reproduces the article's
runs; this suite pins down the edges a backend author most often gets wrong — an engine error
leaking untyped, a refused command leaving a trace, a retried command applied twice, one work's
writes reaching another, and (:mod:`outlive_conformance.hostile`) what a hostile caller holding
the URL tries. Subclass :class:`BackendContractSuite` with a ``backend_url`` fixture;
add :class:`DurableBackendContract` when the backend claims durability.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from outlive import Backend, MemoryReceiver, Policy, Receipt, Worker, open_backend
from outlive import ledger as L
from outlive.errors import (
    ContractFailed,
    InputConflict,
    NotFound,
    PayloadTooLarge,
    StaleOwner,
    UndeclaredInput,
    UnknownToken,
    VersionMismatch,
)
from outlive.hashing import content_hash, input_key

from .hostile import HostileCallerContract
from .requirements import requires
from .testing import FORM, V1, V2, BackendFixture, open_work, summarise, unique_work_id

__all__ = ["BackendContractSuite", "DurableBackendContract"]


async def _unchanged(backend: Backend, work_id: str, before: Any) -> None:
    assert await backend.load(work_id) == before, "a refused command changed the ledger"


@pytest.mark.asyncio(loop_scope="session")
class BackendContractSuite(BackendFixture, HostileCallerContract):
    async def test_a_replaced_owner_is_refused_and_nothing_is_written(
            self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend)
        await w.worker.step("s1", summarise, s1=V1["s1"])
        second = await w.successor(V1)
        assert second.token == w.attempt.token + 1
        before = await outlive_backend.load(w.work_id)
        with pytest.raises(StaleOwner):
            await w.worker.step("s2", summarise, s2=V1["s2"])
        with pytest.raises(StaleOwner):
            await w.worker.effect("op", {"x": 1}, lambda k, p: Receipt(effect_id="P", duplicate=False,
                                                                      key=k))
        await _unchanged(outlive_backend, w.work_id, before)
        assert await w.worker.heartbeat() is False   # a beat is dropped, not applied

    @pytest.mark.parametrize("token_shift,attempt_shift", [(1, 0), (50, 0), (0, 5), (-10**6, 0)])
    async def test_forged_tokens_are_refused_and_the_epoch_does_not_move(
            self, outlive_backend: Backend, token_shift: int, attempt_shift: int) -> None:
        w = await open_work(outlive_backend)
        before = await outlive_backend.load(w.work_id)
        assert before is not None
        key = input_key("s1", {"s1": content_hash(V1["s1"])})
        forged = L.RecordSteps(
            attempt=w.attempt.number + attempt_shift, token=w.attempt.token + token_shift, at=1,
            entries=(L.StepWrite(step="s1", sources={"s1": content_hash(V1["s1"])},
                                 input_key=key, result="x", result_id="f" * 64),))
        with pytest.raises(UnknownToken):
            await outlive_backend.execute(w.work_id, forged)
        await _unchanged(outlive_backend, w.work_id, before)

    async def test_restore_is_by_input_key_across_attempts(self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend, versions={"v1": V1, "v2": V2})
        await w.steps(V1)
        await w.ctl.publish(w.work_id, "v2", V2)
        second = await w.successor(V2)
        assert second.attempt.pinned_version == "v2"
        assert second.can_restore("s1", s1=V2["s1"])
        assert not second.can_restore("s2", s2=V2["s2"])
        calls: list[str] = []

        def counted(**kw: str) -> dict[str, str]:
            calls.append(next(iter(kw)))
            return summarise(**kw)

        for part, text in V2.items():
            await second.step(part, counted, **{part: text})
        assert calls == ["s2"]
        assert [s.restored for s in second.steps.values()] == [True, False]

    async def test_a_candidate_for_another_version_is_refused(self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend, versions={"v1": V1, "v2": V2})
        await w.steps(V1)
        cand = await w.worker.candidate()
        await w.ctl.publish(w.work_id, "v2", V2)
        before = await outlive_backend.load(w.work_id)
        with pytest.raises(VersionMismatch):
            await w.ctl.assess(w.work_id, cand.digest, FORM, lambda c, v: (True, "ok"))
        await _unchanged(outlive_backend, w.work_id, before)

    async def test_a_step_that_read_another_version_is_refused(self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend)
        before = await outlive_backend.load(w.work_id)
        with pytest.raises(VersionMismatch):
            await w.worker.step("s2", summarise, s2=V2["s2"])
        await _unchanged(outlive_backend, w.work_id, before)

    async def test_a_failed_contract_is_recorded_as_a_refusal(self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend)
        await w.steps(V1)
        cand = await w.worker.candidate()
        with pytest.raises(ContractFailed):
            await w.ctl.assess(w.work_id, cand.digest, FORM, lambda c, v: (False, "incomplete"))
        st = await w.ctl.state(w.work_id)
        assert [(r.digest, r.reason) for r in st.refusals] == [(cand.digest, "incomplete")]
        assert st.acceptances == ()
        with pytest.raises(ContractFailed):       # never turned into an acceptance afterwards
            await w.ctl.assess(w.work_id, cand.digest, FORM, lambda c, v: (True, "ok"))
        await _unchanged(outlive_backend, w.work_id, st)

    async def test_an_acceptance_is_idempotent_and_append_only(self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend)
        await w.steps(V1)
        cand = await w.worker.candidate()
        acc = await w.ctl.assess(w.work_id, cand.digest, FORM, lambda c, v: (True, "ok"))
        again = await w.ctl.assess(w.work_id, cand.digest, FORM, lambda c, v: (False, "late"))
        assert acc == again and acc.version == "v1"   # idempotent, append-only

    async def test_oversized_and_undeclared_results_are_refused(
            self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend)
        before = await outlive_backend.load(w.work_id)
        with pytest.raises(PayloadTooLarge):
            await w.worker.step("s1", lambda s1: "x" * (L.MAX_PAYLOAD_BYTES + 10), s1=V1["s1"])
        bad = L.RecordSteps(attempt=w.attempt.number, token=w.attempt.token, at=1,
                            secret=w.attempt.secret, entries=(
            L.StepWrite(step="s1", sources={"s1": content_hash("something else")},
                        input_key=input_key("s1", {"s1": content_hash(V1["s1"])}),
                        result="r", result_id="u" * 64),))
        with pytest.raises(UndeclaredInput):
            await outlive_backend.execute(w.work_id, bad)
        await _unchanged(outlive_backend, w.work_id, before)

    async def test_versions_are_immutable_and_unknown_things_are_not_found(
            self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend)
        with pytest.raises(InputConflict):
            await w.ctl.publish(w.work_id, "v1", V2)
        with pytest.raises(NotFound):
            await outlive_backend.execute(unique_work_id("never-opened"), L.Admit(at=0))
        with pytest.raises(NotFound):
            await w.ctl.assess(w.work_id, "0" * 64, FORM, lambda c, v: (True, ""))

    async def test_effects_are_confirmed_once_and_never_resent(
            self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend)
        feed = MemoryReceiver()
        sent: list[str | None] = []

        def send(key: str | None, payload: Any) -> Receipt:
            sent.append(key)
            return feed.receive(key, payload, lambda p: f"P{len(feed.applied) + 1}")

        r1 = await w.worker.effect("announce:x", {"d": 1}, send)
        r2 = await w.worker.effect("announce:x", {"d": 1}, send)
        assert r1 == r2 and sent == ["announce:x"] and len(feed.applied) == 1
        second = await w.successor(V1)
        r3 = await second.effect("announce:x", {"d": 1}, send)
        assert r3 == r1 and sent == ["announce:x"]

    async def test_retried_commands_apply_once(self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend)
        key = input_key("s1", {"s1": content_hash(V1["s1"])})
        cmd = L.RecordSteps(attempt=w.attempt.number, token=w.attempt.token, at=1,
                            secret=w.attempt.secret, entries=(
            L.StepWrite(step="s1", sources={"s1": content_hash(V1["s1"])}, input_key=key,
                        result={"summary": "x"},
                        result_id=L.result_id(w.work_id, "s1", key, w.attempt.number)),))
        await outlive_backend.execute(w.work_id, cmd)
        await outlive_backend.execute(w.work_id, cmd)
        st = await outlive_backend.load(w.work_id)
        assert st is not None and len(st.journal) == 1

    async def test_a_batch_journals_each_step_before_the_next(
            self, outlive_backend: Backend) -> None:
        report = {"s1": "Intro.", "s2": "Revenue was 4.1 million.", "s3": "Costs fell."}
        w = await open_work(outlive_backend, versions={"v1": report})
        ran: list[str] = []
        successor: list[Worker] = []

        async def body(**kw: str) -> dict[str, str]:
            name = next(iter(kw))
            ran.append(name)
            if name == "s2" and not successor:
                successor.append(await w.successor(report))   # replaced mid-batch
            return summarise(**kw)

        plan = [(k, body, {k: v}) for k, v in report.items()]
        with pytest.raises(StaleOwner):
            await w.worker.run_steps(plan)
        assert ran == ["s1", "s2"], "the batch went on after a fenced write failed"
        st = await outlive_backend.load(w.work_id)
        assert st is not None and [e.step for e in st.journal] == ["s1"]
        ran.clear()
        out = await successor[0].run_steps(plan)
        assert ran == ["s2", "s3"] and len(out) == 3
        assert [s.restored for s in successor[0].steps.values()] == [True, False, False]
        st = await outlive_backend.load(w.work_id)
        assert st is not None and [e.step for e in st.journal] == ["s1", "s2", "s3"]

    @requires("atomic-commands")
    async def test_works_are_isolated_under_concurrency(self, outlive_backend: Backend) -> None:
        works = await asyncio.gather(*(open_work(outlive_backend) for _ in range(8)))
        await asyncio.gather(*(w.steps(V1) for w in works))
        await works[0].successor(V1)
        for w in works[1:]:
            st = await outlive_backend.load(w.work_id)
            assert st is not None and st.epoch == w.attempt.token and len(st.journal) == 2
        st0 = await outlive_backend.load(works[0].work_id)
        assert st0 is not None and st0.epoch == works[0].attempt.token + 1

    async def test_fencing_off_is_visible_in_the_records(self, outlive_backend: Backend) -> None:
        w = await open_work(outlive_backend, policy=Policy(fencing=False))
        await w.successor(V1)
        await w.worker.step("s1", summarise, s1=V1["s1"])      # stale, yet applied
        st = await outlive_backend.load(w.work_id)
        assert st is not None and st.stale_writes_applied == 1 and st.journal[0].stale


@pytest.mark.asyncio(loop_scope="session")
class DurableBackendContract:
    """For backends that claim durability: a new client on the same URL sees everything."""

    @requires("durable")
    async def test_the_epoch_and_journal_survive_a_new_client(self, backend_url: str) -> None:
        first = await open_backend(backend_url)
        try:
            w = await open_work(first)
            await w.steps(V1)
            await w.successor(V1)
            st = await first.load(w.work_id)
        finally:
            await first.close()
        again = await open_backend(backend_url)
        try:
            assert await again.load(w.work_id) == st
            assert st is not None
            att = await w.ctl.__class__(again, clock=lambda: 10_000, heartbeat_interval=1) \
                .observe(w.work_id)
            assert [a.number for a in att] == [2]
            nxt = await w.ctl.__class__(again, clock=lambda: 10_000).admit(w.work_id)
            assert nxt.token == st.epoch + 1   # the epoch never goes back
            w3 = Worker(again, nxt, V1)
            await w3.start()
            assert w3.can_restore("s1", s1=V1["s1"]) and w3.can_restore("s2", s2=V1["s2"])
        finally:
            await again.close()
