"""The library's supervisor, in process: silence becomes a successor, waiting does not."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import outlive
from outlive import ledger as L
from outlive.supervisor import AttemptContext, Supervisor, TaskDispatcher, WorkDefinition

V1 = {"s1": "Revenue was 4.1 million.", "s2": "Costs fell 3 percent."}
V2 = {**V1, "s1": "Revenue was 4.7 million."}
VERSIONS = {"v1": V1, "v2": V2}
CONTRACT = outlive.Contract(name="digest-form", version="1", assessor="test:complete")
LEASE = outlive.Lease(heartbeat_interval=200, missed_beats=3, start_grace=1_000)  # a loaded machine


def load_inputs(version: str) -> dict[str, str]:
    return VERSIONS[version]


class Story:
    """What the attempt functions of one test did (model calls, crashes), shared by closure."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []
        self.crash_after: dict[int, str] = {}
        self.receiver = outlive.MemoryReceiver()
        self.gate: asyncio.Event | None = None
        #: Raised by the first attempt before any step (an answer, not silence).
        self.fail_first: BaseException | None = None

    async def attempt(self, ctx: AttemptContext) -> None:
        w = ctx.worker
        if self.fail_first is not None and ctx.attempt.number == 1:
            raise self.fail_first
        for name in ("s1", "s2"):
            def summarise(name: str = name, **part: str) -> str:
                self.calls.append((ctx.attempt.number, name))
                return next(iter(part.values())).split(".")[0]

            await w.step(name, summarise, **{name: ctx.inputs[name]})
            if self.crash_after.get(ctx.attempt.number) == name:
                # the runner dies without a word (no error is recorded): silence, not an answer
                raise asyncio.CancelledError(f"attempt #{ctx.attempt.number} dies after {name}")
        if self.gate is not None and ctx.attempt.number == 1:
            await self.gate.wait()
        acc = await ctx.submit({n: w.result(n) for n in ("s1", "s2")})
        op = f"announce:{w.work_id}:{acc.digest[:8]}"
        await w.effect(op, {"digest": acc.digest[:8]},
                       lambda key, body: self.receiver.receive(key, body, lambda b: "P1"))


def definition(story: Story, **kw: Any) -> WorkDefinition:
    return WorkDefinition(work_id="digest/q3", attempt=story.attempt, contract=CONTRACT,
                          inputs=load_inputs, lease=LEASE, **kw)


async def test_supervisor_runs_a_work_to_an_accepted_announced_result(backend: outlive.Backend) \
        -> None:
    story = Story()
    sup = Supervisor(backend, definition(story))
    await sup.controller.open_work("digest/q3")
    await sup.controller.publish("digest/q3", "v1", V1)
    done = await asyncio.wait_for(sup.run(), 20)
    assert done.acceptance.version == "v1"
    assert [a.state for a in done.attempts] == [outlive.AttemptState.FINISHED]
    assert story.calls == [(1, "s1"), (1, "s2")]
    st = await backend.load("digest/q3")
    assert st is not None and [e.state for e in st.effects] == [outlive.EffectState.CONFIRMED]
    await sup.dispatcher.close()


async def test_silent_attempt_is_taken_over_and_the_successor_restores(backend: outlive.Backend) \
        -> None:
    story = Story()
    story.crash_after[1] = "s1"
    sup = Supervisor(backend, definition(story))
    await sup.controller.open_work("digest/q3")
    await sup.controller.publish("digest/q3", "v1", V1)
    done = await asyncio.wait_for(sup.run(), 20)
    states = [(a.number, a.token, a.state) for a in done.attempts]
    assert states == [(1, 1, outlive.AttemptState.UNKNOWN), (2, 2, outlive.AttemptState.FINISHED)]
    # s1 was journaled by #1 and restored by #2: one model call per section in all.
    assert story.calls == [(1, "s1"), (2, "s2")]
    await sup.dispatcher.close()


async def test_an_exception_is_an_answer_recorded_and_retried_at_once(
        backend: outlive.Backend) -> None:
    """An attempt that raises says so: its error is kept with it (failed, not unknown) and the
    successor is admitted at once, without waiting out the lease."""
    story = Story()
    story.fail_first = RuntimeError("503 from the model")
    sup = Supervisor(backend, definition(story), poll=600)
    await sup.publish("v1", V1)
    done = await asyncio.wait_for(sup.run(), 60)
    first = done.attempts[0]
    assert first.state is outlive.AttemptState.FAILED
    assert first.error is not None and first.error.type == "RuntimeError"
    assert "503 from the model" in first.error.message and "Traceback" in first.error.traceback
    assert done.attempts[1].admitted_at - first.last_heartbeat < LEASE.timeout
    await sup.dispatcher.close()


async def test_a_non_retryable_exception_fails_the_work_naming_it(backend: outlive.Backend) -> None:
    story = Story()
    story.fail_first = outlive.NonRetryable("the report was withdrawn")
    sup = Supervisor(backend, definition(story))
    await sup.publish("v1", V1)
    with pytest.raises(outlive.WorkFailed) as info:
        await asyncio.wait_for(sup.run(), 60)
    assert info.value.details["type"] == "NonRetryable"
    st = await backend.load("digest/q3")
    assert st is not None and len(st.attempts) == 1 and st.failure is not None
    await sup.dispatcher.close()


async def test_silence_is_acted_on_when_the_lease_runs_out_not_at_the_next_poll(
        backend: outlive.Backend) -> None:
    """The supervisor sleeps until the next lease runs out, not a whole poll interval: with a
    poll of ten minutes, a dead attempt is still taken over and the work ends within seconds."""
    story = Story()
    story.crash_after[1] = "s1"
    sup = Supervisor(backend, definition(story), poll=600)
    await sup.publish("v1", V1)
    done = await asyncio.wait_for(sup.run(), 60)
    assert [(a.number, a.state) for a in done.attempts] == [
        (1, outlive.AttemptState.UNKNOWN), (2, outlive.AttemptState.FINISHED)]
    await sup.dispatcher.close()


async def test_input_changed_during_the_attempt_refuses_its_candidate(backend: outlive.Backend) \
        -> None:
    story = Story()
    story.gate = asyncio.Event()
    sup = Supervisor(backend, definition(story))
    await sup.controller.open_work("digest/q3")
    await sup.controller.publish("digest/q3", "v1", V1)
    run = asyncio.create_task(sup.run())
    while len(story.calls) < 2:
        await asyncio.sleep(0.01)
    await sup.controller.publish("digest/q3", "v2", V2)   # while #1 is live, pinned to v1
    story.gate.set()
    done = await asyncio.wait_for(run, 20)
    assert done.acceptance.version == "v2"
    assert [(a.number, a.pinned_version, a.state) for a in done.attempts] == [
        (1, "v1", outlive.AttemptState.STOPPED), (2, "v2", outlive.AttemptState.FINISHED)]
    assert story.calls == [(1, "s1"), (1, "s2"), (2, "s1")]   # s2 restored: its input is unchanged
    await sup.dispatcher.close()


async def test_cap_on_successors_ends_in_gave_up(backend: outlive.Backend) -> None:
    story = Story()
    story.crash_after.update({1: "s1", 2: "s1", 3: "s1"})   # every attempt dies after s1
    sup = Supervisor(backend, definition(story, max_attempts=3, backoff=20))
    await sup.controller.open_work("digest/q3")
    await sup.controller.publish("digest/q3", "v1", V1)
    with pytest.raises(outlive.GaveUp) as info:
        await asyncio.wait_for(sup.run(), 20)
    attempts = info.value.details["attempts"]
    assert [a["number"] for a in attempts] == [1, 2, 3]
    assert {a["state"] for a in attempts} == {"unknown"}      # silent, never "failed"
    # the backoff is computed from the ledger: #3 was admitted at least 2*20 ms after #2's last beat
    st = await backend.load("digest/q3")
    assert st is not None
    assert st.attempts[2].admitted_at - st.attempts[1].last_heartbeat >= 40
    await sup.dispatcher.close()


async def test_waiting_is_not_silence(backend: outlive.Backend) -> None:
    story = Story()
    clock = [0]
    sup = Supervisor(backend, definition(story), TaskDispatcher(backend), clock=lambda: clock[0])
    await sup.controller.open_work("digest/q3")
    await sup.controller.publish("digest/q3", "v1", V1)
    att = await sup.controller.admit("digest/q3")
    await backend.execute("digest/q3", L.Wait(attempt=1, token=att.token, reason="approval by a person",
                                              at=0, secret=att.secret))
    clock[0] = 10 * LEASE.timeout
    status = await sup.tick()
    waiting = status.state.attempt(1)
    assert waiting is not None and waiting.state is outlive.AttemptState.WAITING
    assert waiting.waiting_for == "approval by a person"
    assert status.actions == ()
    # a beat keeps it waiting; a write or Resume ends the wait
    await backend.execute("digest/q3", L.Heartbeat(attempt=1, token=att.token, at=clock[0],
                                                   secret=att.secret))
    st = await backend.load("digest/q3")
    assert st is not None and st.attempts[0].state is outlive.AttemptState.WAITING
    await backend.execute("digest/q3", L.Resume(attempt=1, token=att.token, at=clock[0],
                                                secret=att.secret))
    clock[0] += LEASE.timeout + 1
    status = await sup.tick()
    assert status.actions[0] == "marked #1 unknown (silent)"
    await sup.dispatcher.close()


async def test_two_supervisors_never_both_admit(backend: outlive.Backend) -> None:
    story = Story()
    story.gate = asyncio.Event()
    a = Supervisor(backend, definition(story))
    b = Supervisor(backend, definition(story))
    await a.controller.open_work("digest/q3")
    await a.controller.publish("digest/q3", "v1", V1)
    await asyncio.gather(a.tick(), b.tick(), a.tick(), b.tick())
    st = await backend.load("digest/q3")
    assert st is not None and len(st.attempts) == 1
    story.gate.set()
    await a.dispatcher.close()
    await b.dispatcher.close()


async def test_a_restarted_supervisor_carries_on(backend: outlive.Backend) -> None:
    story = Story()
    story.gate = asyncio.Event()
    first = Supervisor(backend, definition(story))
    await first.controller.open_work("digest/q3")
    await first.controller.publish("digest/q3", "v1", V1)
    await first.tick()
    await first.dispatcher.close()       # the supervisor dies, and its in-process attempt with it
    second = Supervisor(backend, definition(story))
    done = await asyncio.wait_for(second.run(), 20)
    assert [a.token for a in done.attempts] == [1, 2]   # the epoch is never reused
    await second.dispatcher.close()


async def test_a_successor_that_rebuilds_the_same_digest_owns_its_candidate(
        backend: outlive.Backend) -> None:
    """#1 submits and dies before judgement; #2 restores every part, so its digest is the same.
    The ledger records #2's candidate as #2's, so it can be accepted (#1's never can)."""
    ctl = outlive.Controller(backend, clock=lambda: 0)
    await ctl.open_work("w")
    await ctl.publish("w", "v1", V1)
    first = outlive.Worker(backend, await ctl.admit("w"), V1, clock=lambda: 0)
    await first.start()
    for name in V1:
        await first.step(name, lambda **p: next(iter(p.values()))[:5], **{name: V1[name]})
    cand1 = await first.candidate({n: first.result(n) for n in V1})
    await backend.execute("w", ctl.stamp(L.MarkUnknown(attempt=1, at=0)))
    second = outlive.Worker(backend, await ctl.admit("w"), V1, clock=lambda: 0)
    await second.start()
    for name in V1:
        await second.step(name, lambda **p: "never called", **{name: V1[name]})
    cand2 = await second.candidate({n: second.result(n) for n in V1})
    assert cand2.digest == cand1.digest and (cand1.attempt, cand2.attempt) == (1, 2)
    acc = await ctl.assess("w", cand2.digest, CONTRACT, lambda c, v: (True, "ok"))
    assert acc.attempt == 2 and acc.version == "v1"
    again = await second.candidate({n: second.result(n) for n in V1})
    assert again.seq == cand2.seq          # a retry by the same attempt is still one record
