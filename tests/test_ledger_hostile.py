"""The records hold against a hostile or careless caller, through the public API, on every
embedded backend: stale and ended attempts, tokens, leases, takeover, acceptance."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

import outlive
from outlive import Contract, Controller, External, Worker
from outlive import errors as E
from outlive import ledger as L
from outlive.hashing import content_hash, input_key
from outlive.records import AttemptState, Part

C = Contract(name="form", version="1", assessor="test")
V1 = {"s1": "Intro.", "s2": "Revenue was 4.1 million."}
V2 = {"s1": "Intro.", "s2": "Revenue was 4.7 million."}


def summ(**kw: str) -> dict[str, str]:
    (text,) = kw.values()
    return {"summary": text[:12]}


def ok(c: Any, v: Any) -> tuple[bool, str]:
    return True, "ok"


async def opened(b: outlive.Backend, work: str = "w", clock: list[int] | None = None,
                 heartbeat_interval: int = 10) -> tuple[Controller, Worker, list[int]]:
    clk = clock if clock is not None else [0]
    ctl = Controller(b, clock=lambda: clk[0], heartbeat_interval=heartbeat_interval,
                     missed_beats=2)
    await ctl.open_work(work)
    await ctl.publish(work, "v1", V1)
    w = Worker(b, await ctl.admit(work), V1, clock=lambda: clk[0])
    await w.start()
    return ctl, w, clk


async def successor(ctl: Controller, work: str, snapshot: dict[str, str],
                    clk: list[int]) -> Worker:
    st = await ctl.state(work)
    cur = st.current_attempt
    assert cur is not None
    await ctl.backend.execute(work, ctl.stamp(L.MarkUnknown(attempt=cur.number, at=clk[0])))
    w = Worker(ctl.backend, await ctl.admit(work), snapshot, clock=lambda: clk[0])
    await w.start()
    return w


# -- acceptance is checked against the journal -------------------------------------------------
async def test_a_part_claiming_the_new_version_for_an_old_result_is_refused(
        backend: outlive.Backend) -> None:
    ctl, w1, clk = await opened(backend)
    for k, v in V1.items():
        await w1.step(k, summ, **{k: v})
    old_s2 = w1.steps["s2"].result_id
    await ctl.publish("w", "v2", V2)
    w2 = await successor(ctl, "w", V2, clk)
    await w2.step("s1", summ, s1=V2["s1"])                      # restored: same content
    sources = {"s2": content_hash(V2["s2"])}
    lie = Part(step="s2", input_key=input_key("s2", sources), sources=sources, result_id=old_s2)
    parts = (Part(step="s1", input_key=w2.steps["s1"].input_key,
                  sources={"s1": content_hash(V2["s1"])}, result_id=w2.steps["s1"].result_id), lie)
    content = {"sections": "4.1"}
    before = await backend.load("w")
    with pytest.raises(E.VersionMismatch):
        await backend.execute("w", L.SubmitCandidate(
            attempt=w2.attempt.number, token=w2.token, secret=w2.attempt.secret, parts=parts,
            content=content, at=5, digest=L.candidate_digest("w", "v2", parts, content)))
    assert await backend.load("w") == before


async def test_an_input_that_names_no_part_of_the_version_is_refused(
        backend: outlive.Backend) -> None:
    ctl, _w1, clk = await opened(backend)
    await ctl.publish("w", "v2", V2)
    w2 = await successor(ctl, "w", V2, clk)
    before = await backend.load("w")
    with pytest.raises(E.UndeclaredInput) as refused:
        await w2.step("s2", summ, text=V1["s2"])               # v1's text under another name
    # the message names the input, where its content comes from, and both ways to fix it
    assert "'text'" in str(refused.value) and "part 's2' of version v1" in str(refused.value)
    assert "External(value)" in str(refused.value) and "'s1', 's2'" in str(refused.value)
    assert await backend.load("w") == before
    # the same content under another name is a part of v2 by content; a declared extra is fine
    await w2.step("s2", lambda text, style: {"s": text[:5] + style}, text=V2["s2"],
                  style=External("terse"))
    st = await backend.load("w")
    assert st is not None and st.journal[-1].external == ("style",)


async def test_an_external_input_cannot_shadow_a_part(backend: outlive.Backend) -> None:
    _ctl, w, _clk = await opened(backend)
    with pytest.raises(E.InvalidRecord):
        await w.step("s2", summ, s2=External(V2["s2"]))


# -- takeover never gets stuck -----------------------------------------------------------------
async def test_a_successor_that_rebuilds_the_same_digest_gets_it_accepted(
        backend: outlive.Backend) -> None:
    ctl, w1, clk = await opened(backend)
    for k, v in V1.items():
        await w1.step(k, summ, **{k: v})
    cand1 = await w1.candidate()       # then #1 dies before anyone judges it
    w2 = await successor(ctl, "w", V1, clk)
    for k, v in V1.items():
        await w2.step(k, summ, **{k: v})
    assert all(r.restored for r in w2.steps.values())
    cand2 = await w2.candidate()
    assert cand2.digest == cand1.digest and cand2.attempt == 2
    acc = await ctl.assess("w", cand2.digest, C, ok)
    assert acc.version == "v1" and acc.attempt == 2


# -- one token, one live worker; ended attempts have no authority ----------------------------
async def test_a_second_worker_given_the_same_attempt_cannot_claim_it(
        backend: outlive.Backend) -> None:
    _ctl, w1, _clk = await opened(backend)
    twin = Worker(backend, w1.attempt, V1)
    with pytest.raises(E.AttemptClaimed):
        await twin.start()
    await w1.step("s1", summ, s1=V1["s1"])


async def test_a_worker_whose_attempt_went_silent_before_it_claimed_it_is_told_so(
        backend: outlive.Backend) -> None:
    """Not "already claimed by a worker": nobody claimed it. The attempt stays unknown (no
    worker holds it) and the successor is admitted and claims as usual."""
    ctl = Controller(backend, clock=lambda: 0)
    await ctl.open_work("w")
    await ctl.publish("w", "v1", V1)
    att = await ctl.admit("w")
    await backend.execute("w", ctl.stamp(L.MarkUnknown(attempt=att.number, at=5, signs=0)))
    with pytest.raises(E.AttemptSilent, match="before any worker claimed it") as raised:
        await Worker(backend, att, V1).start()
    assert not isinstance(raised.value, E.AttemptClaimed)
    st = await backend.load("w")
    assert st is not None and st.attempts[0].state is AttemptState.UNKNOWN
    assert st.attempts[0].signs == 0
    nxt = Worker(backend, await ctl.admit("w"), V1)
    await nxt.start()
    await nxt.step("s1", summ, s1=V1["s1"])
    # Once claimed, a second claim is still "already claimed", even after silence.
    await backend.execute("w", ctl.stamp(L.MarkUnknown(attempt=nxt.attempt.number, at=6)))
    with pytest.raises(E.AttemptClaimed):
        await Worker(backend, nxt.attempt, V1).start()


async def test_a_slow_starting_worker_is_not_taken_over_the_moment_it_claims(
        backend: outlive.Backend) -> None:
    """``start_grace`` covers the start; the lease runs from the claim. (It ran from the
    admission: a worker that claimed after more than one lease of start-up was marked unknown
    on the supervisor's next pass and replaced before its first step.)"""
    now = [0]
    ctl = Controller(backend, clock=lambda: now[0], heartbeat_interval=500, missed_beats=4,
                     start_grace=300_000)
    await ctl.open_work("w")
    await ctl.publish("w", "v1", V1)
    att = await ctl.admit("w")
    now[0] = 10_000                                   # the process took 10 s to start
    w = Worker(backend, att, V1, clock=lambda: now[0])
    await w.start()
    now[0] = 10_050
    assert await ctl.observe("w") == []               # heard from 50 ms ago: not silent
    now[0] = 12_001                                   # a whole lease after the claim: silent
    assert [a.number for a in await ctl.observe("w")] == [att.number]


async def test_a_restarted_controller_retrying_an_admission_never_doubles_the_token(
        backend: outlive.Backend) -> None:
    ctl = Controller(backend, clock=lambda: 0)
    await ctl.open_work("w")
    await ctl.publish("w", "v1", V1)
    first = await ctl.admit("w", request_id="r1")
    w1 = Worker(backend, first, V1)
    await w1.start()                                           # dispatched and claimed
    restarted = Controller(backend, clock=lambda: 1)
    with pytest.raises(E.AttemptActive):
        await restarted.admit("w", request_id="r1")
    await w1.step("s1", summ, s1=V1["s1"])


async def test_a_retried_admission_before_dispatch_hands_the_attempt_to_one_holder(
        backend: outlive.Backend) -> None:
    ctl = Controller(backend, clock=lambda: 0)
    await ctl.open_work("w")
    await ctl.publish("w", "v1", V1)
    lost = await ctl.admit("w", request_id="r1")               # the answer never arrived
    again = await Controller(backend, clock=lambda: 1).admit("w", request_id="r1")
    assert (again.number, again.token) == (lost.number, lost.token)
    with pytest.raises(E.UnknownToken):
        await Worker(backend, lost, V1).start()
    w = Worker(backend, again, V1)
    await w.start()
    await w.step("s1", summ, s1=V1["s1"])


async def test_a_stopped_attempt_cannot_write_or_finish(backend: outlive.Backend) -> None:
    ctl, w, _clk = await opened(backend)
    await ctl.stop("w", w.attempt.number)
    before = await backend.load("w")
    with pytest.raises(E.AttemptEnded):
        await w.step("s1", summ, s1=V1["s1"])
    with pytest.raises(E.AttemptEnded):
        await w.finish()
    assert await w.heartbeat() is False
    st = await backend.load("w")
    assert st == before and st is not None
    assert st.attempts[0].state is AttemptState.STOPPED


async def test_a_finished_attempt_cannot_write(backend: outlive.Backend) -> None:
    _ctl, w, _clk = await opened(backend)
    await w.finish()
    await w.finish()                                           # idempotent
    with pytest.raises(E.AttemptEnded):
        await w.step("s1", summ, s1=V1["s1"])
    assert await w.heartbeat() is False


# -- tokens are bound to their work and not guessable -------------------------------------------
async def test_another_works_token_cannot_write_here(backend: outlive.Backend) -> None:
    _ca, wa, _ = await opened(backend, "a")
    _cb, wb, _ = await opened(backend, "b")
    assert (wa.attempt.number, wa.token) == (wb.attempt.number, wb.token)
    before = await backend.load("a")
    intruder = Worker(backend, dataclasses.replace(wb.attempt, work_id="a"), V1)
    intruder._state = before                                   # skip start(): a raw writer
    with pytest.raises(E.UnknownToken):
        await intruder.step("s1", summ, s1=V1["s1"])
    key = input_key("s1", {"s1": content_hash(V1["s1"])})
    for secret in (None, "", "0" * 32):
        with pytest.raises(E.UnknownToken):
            await backend.execute("a", L.RecordSteps(
                attempt=1, token=wa.token, secret=secret, at=1, entries=(L.StepWrite(
                    step="s1", sources={"s1": content_hash(V1["s1"])}, input_key=key,
                    result="x", result_id=L.result_id("a", "s1", key, 1)),)))
    assert await backend.load("a") == before
    st = await backend.load("a")
    assert st is not None and st.attempts[0].secret is None    # only the hash is stored
    assert st.attempts[0].key_hash == L.key_hash(wa.attempt.secret or "")


# -- leases on a clock the worker does not control ----------------------------------------------
async def test_a_worker_clock_far_ahead_cannot_wedge_the_work(backend: outlive.Backend) -> None:
    ctl, w, _clk = await opened(backend)
    w.clock = lambda: 2 ** 62
    assert await w.heartbeat() is True
    later = int(time.time() * 1000) + 60_000                   # a minute of silence, store time
    ctl.clock = lambda: later
    marked = await ctl.observe("w")
    assert [a.number for a in marked] == [1]
    nxt = await ctl.admit("w")
    assert nxt.number == 2


async def test_a_suspicion_from_an_old_snapshot_spares_a_worker_that_just_beat(
        backend: outlive.Backend) -> None:
    ctl, w, clk = await opened(backend)
    old = await ctl.state("w")
    clk[0] = 100
    assert await w.heartbeat() is True
    assert await ctl.observe("w", old) == []
    st = await ctl.state("w")
    assert st.attempts[0].state is AttemptState.RUNNING


async def test_an_unknown_attempt_that_beats_again_is_told_the_truth(
        backend: outlive.Backend) -> None:
    ctl, w, _clk = await opened(backend)
    await backend.execute("w", ctl.stamp(L.MarkUnknown(attempt=1, at=5)))
    assert await w.heartbeat() is True                         # no successor yet: revived
    st = await ctl.state("w")
    assert st.attempts[0].state is AttemptState.RUNNING
    await backend.execute("w", ctl.stamp(L.MarkUnknown(attempt=1, at=6)))
    await ctl.admit("w")
    assert await w.heartbeat() is False                        # a successor holds the epoch


async def test_a_checked_command_is_not_a_command_a_store_takes(backend: outlive.Backend) -> None:
    """``ledger.checked`` wraps a command a store has checked and copied once; handed to a store
    from outside, the wrapper is refused like anything else that is not a command."""
    await backend.execute("w", L.OpenWork())
    with pytest.raises(E.InvalidRecord):
        await backend.execute("w", L.checked(L.PublishInput(version="v1", parts={"p": "x"}, at=0)))
    with pytest.raises(E.InvalidRecord):
        L.checked(L.PublishInput(version="v1", parts={"p": 1}, at=0))  # type: ignore[dict-item]
    st = await backend.load("w")
    assert st is not None and st.inputs == ()
