"""The runtime for many works: kinds, idempotent starts, events instead of polls, errors as
answers, queues, and recovery after a restart (issue: serve many works)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import runtime_kinds as K

import outlive
from outlive import AttemptState, Runtime


@pytest.fixture(params=["memory", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'o.db'}"


async def test_many_works_of_one_kind_complete_each_announced_once(url: str) -> None:
    K._RECEIVER = None
    async with Runtime(url, kinds=[K.SMALL], discover=None) as rt:
        handles = [await rt.start(K.SMALL, f"digest/{i}", "v1", K.parts_for("v1"))
                   for i in range(20)]
        done = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 30)
    assert {d.work_id for d in done} == {f"digest/{i}" for i in range(20)}
    assert all(d.acceptance.version == "v1" for d in done)
    assert len(K.receiver().applied) == 20   # one announcement per work


async def test_starting_the_same_work_twice_returns_the_same_work(url: str) -> None:
    async with Runtime(url, kinds=[K.SMALL], discover=None) as rt:
        a = await rt.start(K.SMALL, "digest/same", "v1", K.parts_for("v1"))
        b = await rt.start(K.SMALL, "digest/same", "v1", K.parts_for("v1"))
        assert a.work_id == b.work_id
        first = await a.result()
        again = await b.result()
        assert first.acceptance.digest == again.acceptance.digest
        st = (await a.state()).state
        assert len(st.inputs) == 1 and len(st.attempts) == 1
        with pytest.raises(outlive.InputConflict):
            await rt.start(K.SMALL, "digest/same", "v1", {"revenue": "other"})


async def test_a_new_version_mid_run_is_carried_to_acceptance(url: str) -> None:
    async with Runtime(url, kinds=[K.SLOW], discover=None) as rt:
        h = await rt.start(K.SLOW, "digest/moving", "v1", K.parts_for("v1"))
        await asyncio.sleep(0.1)
        await h.publish("v2", K.parts_for("v2"))
        done = await asyncio.wait_for(h.result(), 20)
        assert done.acceptance.version == "v2"
        assert await h.dependable(outlive.StrictCurrent()) is not None


async def test_transient_errors_are_retried_and_recorded(url: str) -> None:
    K.RUNS.clear()
    async with Runtime(url, kinds=[K.FLAKY], discover=None) as rt:
        h = await rt.start(K.FLAKY, "digest/flaky", "v1", K.parts_for("v1"))
        done = await asyncio.wait_for(h.result(), 20)
        st = (await h.state()).state
    assert K.RUNS["flaky"] == 3
    assert [a.state for a in done.attempts] == [AttemptState.FAILED, AttemptState.FAILED,
                                                AttemptState.FINISHED]
    err = done.attempts[0].error
    assert err is not None and err.type == "Flaky" and "503 on attempt 1" in err.message
    assert "Traceback" in err.traceback and err.retryable
    assert st.failure is None


async def test_retries_spent_give_up_naming_the_last_error(url: str) -> None:
    K.RUNS.clear()
    async with Runtime(url, kinds=[K.ALWAYS], discover=None) as rt:
        h = await rt.start(K.ALWAYS, "digest/always", "v1", K.parts_for("v1"))
        with pytest.raises(outlive.GaveUp) as info:
            await asyncio.wait_for(h.result(), 20)
        status = await h.state()
    assert K.RUNS["always"] == 4
    assert "Flaky: 503 again" in str(info.value)
    assert "Traceback" in info.value.details["traceback"]
    assert status.status == "failed" and status.last_error is not None


@pytest.mark.parametrize("kind, runs_key, error_type", [
    (K.TYPO, "typo", "TypeError"),
    (K.NONRETRYABLE, "nonretryable", "NonRetryable"),
    (K.DECLARED, "declared", "KeyError"),
])
async def test_a_non_retryable_error_fails_the_work_at_once(
        url: str, kind: outlive.Kind, runs_key: str, error_type: str) -> None:
    K.RUNS.clear()
    async with Runtime(url, kinds=[kind], discover=None) as rt:
        h = await rt.start(kind, f"digest/{runs_key}", "v1", K.parts_for("v1"))
        with pytest.raises(outlive.WorkFailed) as info:
            await asyncio.wait_for(h.result(), 20)
    assert K.RUNS[runs_key] == 1     # never paid for twice
    assert info.value.details["type"] == error_type
    assert "Traceback" in info.value.details["traceback"]


async def test_a_sender_without_receipt_fails_the_work_naming_it(url: str) -> None:
    K.RUNS.clear()
    async with Runtime(url, kinds=[K.NO_RECEIPT], discover=None) as rt:
        h = await rt.start(K.NO_RECEIPT, "digest/noreceipt", "v1", K.parts_for("v1"))
        with pytest.raises(outlive.WorkFailed) as info:
            await asyncio.wait_for(h.result(), 20)
    assert K.RUNS["no_receipt"] == 1
    assert "Receipt" in str(info.value)


async def test_attempt_errors_reach_stderr_without_logging_configured(
        url: str, capfd: pytest.CaptureFixture[str]) -> None:
    import logging
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers.clear()     # as in a script that never called logging.basicConfig()
    try:
        async with Runtime(url, kinds=[K.NONRETRYABLE], discover=None) as rt:
            h = await rt.start(K.NONRETRYABLE, "digest/stderr", "v1", K.parts_for("v1"))
            with pytest.raises(outlive.WorkFailed):
                await asyncio.wait_for(h.result(), 20)
    finally:
        root.handlers[:] = saved
    err = capfd.readouterr().err
    assert "NonRetryable: the ticket was deleted" in err


async def test_a_live_attempt_longer_than_its_lease_is_not_taken_over(url: str) -> None:
    async with Runtime(url, kinds=[K.SLOW], discover=None) as rt:
        h = await rt.start(K.SLOW, "digest/slow", "v1", K.parts_for("v1"))
        done = await asyncio.wait_for(h.result(), 20)
    assert len(done.attempts) == 1


async def test_the_queue_caps_attempts_and_keeps_start_order(url: str) -> None:
    async with Runtime(url, kinds=[K.QUEUED], discover=None) as rt:
        handles = [await rt.start(K.QUEUED, f"q/{i}", "v1", K.parts_for("v1")) for i in range(6)]
        await asyncio.sleep(0.2)
        states = [(await h.state()).status for h in handles]
        assert states.count("running") == 2
        assert states[:2] == ["running", "running"] and set(states[2:]) == {"queued"}
        done = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 30)
    admitted = sorted(done, key=lambda d: d.attempts[0].admitted_at)
    assert [d.work_id for d in admitted][:2] == ["q/0", "q/1"]
    assert all(len(d.attempts) == 1 for d in done)
    # two slots freed together admit two queued works, not one: the fourth did not wait for
    # the third to end (a lost slot made every later work wait for the one before)
    by_id = {d.work_id: d.attempts[0] for d in done}
    assert by_id["q/3"].admitted_at < by_id["q/2"].last_heartbeat


async def test_a_handle_from_anywhere_and_the_works_listing(url: str) -> None:
    async with Runtime(url, kinds=[K.SMALL, K.NONRETRYABLE], discover=None) as rt:
        await (await rt.start(K.SMALL, "w/ok", "v1", K.parts_for("v1"))).result()
        with pytest.raises(outlive.WorkFailed):
            await (await rt.start(K.NONRETRYABLE, "w/bad", "v1", K.parts_for("v1"))).result()
        done = await rt.handle("w/ok").result()
        assert done.work_id == "w/ok"
        failed = await rt.works(state="failed")
        assert [w.work_id for w in failed] == ["w/bad"]
        assert failed[0].last_error is not None and failed[0].last_error.type == "NonRetryable"
        assert [w.work_id for w in await rt.works(kind="small")] == ["w/ok"]


async def test_an_attempt_cannot_act_as_the_runtimes_controller(url: str) -> None:
    """The runtime holds the controller's credential; an attempt holds only its own token."""
    seen: dict[str, BaseException] = {}

    async def meddling(ctx: outlive.AttemptContext) -> None:
        try:   # a buggy or hostile attempt tries to fail the work, as the controller would
            await ctx.worker.backend.execute(ctx.worker.work_id, outlive.ledger.FailWork(
                error=outlive.AttemptError(type="X", message="forged"), at=0))
        except outlive.OutliveError as exc:
            seen["error"] = exc
        await K.small(ctx)

    kind = outlive.Kind(name="meddling", attempt=meddling, contract=K.CONTRACT, inputs=K.parts_for)
    async with Runtime(url, [kind], discover=None, credential="the runtime's own secret") as rt:
        done = await (await rt.start(kind, "digest/meddled", "v1", K.parts_for("v1"))).result()
    assert type(seen["error"]).__name__ == "NotController"
    assert done.acceptance.version == "v1"


async def test_an_attempt_dead_between_acceptance_and_announcement_is_carried_on(url: str) -> None:
    """Accepted, then silent before any intent was written: the work is not done; a successor
    restores every step, finds its candidate already accepted and announces, once."""
    K._RECEIVER = None

    async def dies_after_acceptance(ctx: outlive.AttemptContext) -> None:
        w = ctx.worker
        for part in K.SECTIONS:
            await w.step(part, K.summarise, **{part: ctx.inputs[part]})
        acc = await ctx.submit({p: w.result(p) for p in K.SECTIONS})
        if ctx.attempt.number == 1:
            raise asyncio.CancelledError("the process dies here, without a word")
        await w.effect(f"announce:{w.work_id}:{acc.digest[:8]}", {"digest": acc.digest},
                       send=K.post)

    kind = outlive.Kind(name="dies", attempt=dies_after_acceptance, contract=K.CONTRACT,
                        inputs=K.parts_for, lease=K.SMALL.lease)
    async with Runtime(url, [kind], discover=None) as rt:
        done = await asyncio.wait_for(
            (await rt.start(kind, "digest/dies", "v1", K.parts_for("v1"))).result(), 30)
    assert [a.state for a in done.attempts] == [AttemptState.UNKNOWN, AttemptState.FINISHED]
    assert len(K.receiver().applied) == 1
    st = done.attempts
    assert len(st) == 2


async def test_a_blocking_step_runs_off_the_loop_and_is_not_taken_over(url: str) -> None:
    """A plain step that blocks for three leases (a synchronous HTTP client, say) runs in a
    thread: the lease is renewed meanwhile and another work completes in the meantime."""
    import time as _time

    def blocking(**section: str) -> str:
        _time.sleep(3.6)      # three times the 1.2 s lease
        return "slow summary"

    async def slow_sync(ctx: outlive.AttemptContext) -> None:
        w = ctx.worker
        await w.step("revenue", blocking, revenue=ctx.inputs["revenue"])
        await ctx.submit({"revenue": w.result("revenue")})

    kind = outlive.Kind(name="blocking", attempt=slow_sync, contract=K.CONTRACT,
                        inputs=K.parts_for, lease=K.SMALL.lease)
    async with Runtime(url, [kind, K.SMALL], discover=None) as rt:
        slow = await rt.start(kind, "digest/blocking", "v1", K.parts_for("v1"))
        quick = await rt.start(K.SMALL, "digest/quick", "v1", K.parts_for("v1"))
        await asyncio.wait_for(quick.result(), 3.0)   # done while the other step still blocks
        assert (await slow.state()).status == "running"
        done = await asyncio.wait_for(slow.result(), 30)
    assert len(done.attempts) == 1


async def test_a_waiting_attempt_sends_no_heartbeats(url: str) -> None:
    """Waiting is not silence and no lease runs while it lasts: thousands of works waiting on
    people must cost no writes."""
    release = asyncio.Event()

    async def waits(ctx: outlive.AttemptContext) -> None:
        async with ctx.worker.waiting("approval"):
            await release.wait()
        await K.small(ctx)

    kind = outlive.Kind(name="waits", attempt=waits, contract=K.CONTRACT, inputs=K.parts_for,
                        lease=outlive.Lease(heartbeat_interval=100, missed_beats=3))
    async with Runtime(url, [kind], discover=None) as rt:
        h = await rt.start(kind, "digest/waits", "v1", K.parts_for("v1"))
        for _ in range(200):
            if (await h.state()).status == "waiting":
                break
            await asyncio.sleep(0.01)
        before = (await h.state()).state.attempts[0].heartbeats
        await asyncio.sleep(0.6)     # six heartbeat intervals
        assert (await h.state()).state.attempts[0].heartbeats == before
        release.set()
        done = await asyncio.wait_for(h.result(), 20)
    assert len(done.attempts) == 1


async def test_an_attempt_that_writes_within_each_interval_sends_no_heartbeats(url: str) -> None:
    """A beat is due one interval after the attempt's latest sign of life, its own writes
    included: an attempt writing every fifth of an interval needs no beat at all (a renewal on a
    fixed phase beat whenever the last write was over half an interval old: a write for nothing,
    which for thousands of works is most of the ledger's load)."""
    async def steady(ctx: outlive.AttemptContext) -> None:
        w = ctx.worker
        for n, part in enumerate(K.SECTIONS * 3):
            await asyncio.sleep(0.1)   # a fifth of the 500 ms interval: room for a slow write
            await w.step(f"{part}-{n}", K.summarise, **{part: ctx.inputs[part]})
        beats.append((await w.backend.load(w.work_id)).attempts[0].heartbeats)  # type: ignore[union-attr]
        await K.small(ctx)

    beats: list[int] = []
    kind = outlive.Kind(name="steady", attempt=steady, contract=K.CONTRACT, inputs=K.parts_for,
                        lease=outlive.Lease(heartbeat_interval=500, missed_beats=5))
    async with Runtime(url, [kind], discover=None) as rt:
        h = await rt.start(kind, "digest/steady", "v1", K.parts_for("v1"))
        done = await asyncio.wait_for(h.result(), 30)
    assert len(done.attempts) == 1
    assert beats == [0]   # no renewal beat in 1.2 s of steady writes (the claim is no beat)



async def test_a_type_error_inside_a_step_is_retried_like_any_error(url: str) -> None:
    """Only a step *called* with inputs its signature does not take fails the work at once; a
    TypeError raised inside a step (a model's answer of an unexpected shape) is transient."""
    async def shaky(ctx: outlive.AttemptContext) -> None:
        def parse(revenue: str) -> str:
            if ctx.attempt.number == 1:
                return revenue + 1   # type: ignore[operator]  # the shape was not the expected one
            return revenue
        await ctx.worker.step("parse", parse, revenue=ctx.inputs["revenue"])
        await K.small(ctx)

    kind = outlive.Kind(name="shaky", attempt=shaky, contract=K.CONTRACT, inputs=K.parts_for,
                        retry=outlive.RetryPolicy(maximum_attempts=3, initial_interval=0.01))
    async with Runtime(url, [kind], discover=None, report_errors=False) as rt:
        h = await rt.start(kind, "digest/shaky", "v1", K.parts_for("v1"))
        done = await asyncio.wait_for(h.result(), 30)
    first = done.attempts[0]
    assert first.state is AttemptState.FAILED and first.error is not None
    assert first.error.type == "TypeError" and first.error.retryable
    assert len(done.attempts) == 2


async def test_a_refused_candidate_stops_its_attempt_and_is_judged_once(url: str) -> None:
    """The runtime judges a candidate the moment its attempt submits it; a refusal is recorded
    once, the attempt is stopped, and no later pass or attempt pays the assessor again for it."""
    K.JUDGED.clear()
    async with Runtime(url, kinds=[K.REFUSING], discover=None) as rt:
        h = await rt.start(K.REFUSING, "digest/refused", "v1", K.parts_for("v1"))
        with pytest.raises(outlive.GaveUp) as failed:
            await asyncio.wait_for(h.result(), 20)
        st = (await h.state()).state
        assert "refused" in str(failed.value) and "do not reconcile" in str(failed.value)
        assert len(st.refusals) == 1 and not st.acceptances
        assert [a.state for a in st.attempts] == [AttemptState.STOPPED] * 2
        assert list(K.JUDGED.values()) == [1]      # one digest, judged once for both attempts
        h2 = await rt.start(K.REFUSING, "digest/accepted", "v2", K.parts_for("v2"))
        done = await asyncio.wait_for(h2.result(), 20)
        assert done.acceptance.version == "v2" and len(done.attempts) == 1


async def test_an_inputs_loader_longer_than_the_lease_is_not_taken_over(url: str) -> None:
    """The runtime's admission is the attempt's claim, so its lease runs while the kind's
    inputs loader runs: it is renewed meanwhile, and another runtime on the same ledger sees a
    live attempt, not a silent one."""
    backend = await outlive.open_backend(url)
    try:
        async with Runtime(backend, [K.SLOW_INPUTS], discover=0.1), \
                Runtime(backend, [K.SLOW_INPUTS], discover=0.1), \
                Runtime(backend, [], supervise=False, report_errors=False) as client:
            # started by a client: the runtimes that find it hold no parts and call the loader
            h = await client.start("slow_inputs", "digest/slow-inputs", "v1", K.parts_for("v1"))
            done = await asyncio.wait_for(h.result(), 30)
    finally:
        await backend.close()
    assert len(done.attempts) == 1


async def test_a_work_whose_admission_lost_to_another_runtime_is_taken_over_when_it_ends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runtimes a and b both find a new work; a admits it first and b's admission is refused
    (AttemptActive). a then ends with the attempt running (closed: its attempts stay in the
    ledger, as after a crash). b takes the attempt over as soon as a's runner is gone, not at
    the attempt's lease (a minute here): it watches the runtime that won the admission."""
    url = f"sqlite:///{tmp_path / 'o.db'}"
    gate = tmp_path / "gate"
    gate.touch()
    monkeypatch.setattr(K, "GATE", str(gate))
    b_read = asyncio.Event()      # b read the work with no attempt and goes to admit it
    a_running = asyncio.Event()   # a admitted it: b's admission may go now
    b_refused: list[str] = []
    a = Runtime(url, [K.HELD], name="a", discover=0.05, report_errors=False)
    b = Runtime(url, [K.HELD], name="b", discover=0.05, report_errors=False)

    def admitting(rt: Runtime, before: Any) -> None:
        """``rt``'s admissions run ``before()`` first (and note a refusal)."""
        make = rt._controller

        def controller(kind: outlive.Kind | None) -> outlive.Controller:
            ctl = make(kind)
            if not getattr(ctl, "_late", False):
                admit = ctl._admit

                async def late(*args: Any, **kwargs: Any) -> Any:
                    await before()
                    try:
                        return await admit(*args, **kwargs)
                    except outlive.AttemptActive:
                        b_refused.append(rt.name)
                        raise

                ctl._admit = late   # type: ignore[method-assign]
                ctl._late = True   # type: ignore[attr-defined]
            return ctl

        rt._controller = controller   # type: ignore[method-assign]

    async def b_before() -> None:
        b_read.set()
        await a_running.wait()

    admitting(a, b_read.wait)   # a admits only once b has read the work without an attempt
    admitting(b, b_before)
    async with Runtime(url, [], supervise=False, report_errors=False) as client:
        await a.open()
        await b.open()
        try:
            await client.start("held", "w", "v1", K.parts_for("v1"))
            for _ in range(1000):
                st = (await client.handle("w").state()).state
                if st.current_attempt is not None and st.current_attempt.runner == a.runner:
                    break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError("a never admitted the work")
            a_running.set()
            for _ in range(1000):
                if b_refused:
                    break
                await asyncio.sleep(0.02)
            assert b_refused == ["b"], "b's admission was never refused"
            await a.close()   # its attempt is left running in the ledger, its runner released
            gate.unlink()
            await asyncio.wait_for(client.handle("w").result(), 20)   # the lease is 60 s
        finally:
            await a.close()
            await b.close()
        st = (await client.handle("w").state()).state
    assert [att.runner for att in st.attempts] == [a.runner, b.runner]
    assert st.attempts[0].state is AttemptState.UNKNOWN
    assert len(st.acceptances) == 1
