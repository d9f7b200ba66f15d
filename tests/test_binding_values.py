"""The records bind what they claim, for effects, values and times (issue 40, items 6-8).

Each scene runs on memory://, sqlite:// and postgresql:// (this project's throwaway cluster):
a receipt confirms only the key it answers; an intent carries its payload; a resend after an
ambiguous send works in the same attempt; a resend answered "new" is flagged possibly
duplicated by the ledger itself; floats are values (RFC 8785), NaN is not; a dataclass is
refused with its fix; an older version cannot be published again; no time a caller supplies is
later than the store's clock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest

import outlive
from outlive import Controller, MemoryReceiver, Worker
from outlive import errors as E
from outlive import ledger as L
from outlive._pgserver import PostgresServer
from outlive.hashing import canonical, content_hash
from outlive.records import EffectState, Receipt

V1 = {"s1": "Intro.", "s2": "Revenue was 4.1 million."}
V2 = {"s1": "Intro.", "s2": "Revenue was 4.7 million."}
HOUR = 3_600_000


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[outlive.Backend]:
    if request.param == "memory":
        url = "memory://"
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'o.db'}"
    else:
        server: PostgresServer = request.getfixturevalue("pg")
        url = server.create_database(f"v_{uuid.uuid4().hex[:8]}")
    b = await outlive.open_backend(url)
    try:
        yield b
    finally:
        await b.close()


def _ms() -> int:
    return int(time.time() * 1000)


async def started(b: outlive.Backend, work: str = "w") -> tuple[Controller, Worker]:
    ctl = Controller(b)
    await ctl.open_work(work)
    await ctl.publish(work, "v1", V1)
    w = Worker(b, await ctl.admit(work), V1)
    await w.start()
    return ctl, w


def _never(key: str | None, payload: Any) -> Receipt:
    raise ConnectionResetError("the connection dropped before any answer")


# -- the candidate's content is bound (item 3), with no policy set ------------------------------
def _digest(s1: dict[str, str], s2: dict[str, str]) -> dict[str, str]:
    return {"digest": f"{s1['summary']} {s2['summary']}"}


def _summary(**kw: str) -> dict[str, str]:
    (text,) = kw.values()
    return {"summary": text}


async def _on_v2(b: outlive.Backend) -> tuple[Controller, Worker]:
    """A work at v2 (v1 published first), #2 pinned to v2 with honest v2 parts journaled."""
    ctl = Controller(b, clock=lambda: 0, credential="ctl")
    await ctl.open_work("w")                       # no Policy: the defaults
    await ctl.publish("w", "v1", V1)
    await ctl.publish("w", "v2", V2)
    w = Worker(b, await ctl.admit("w"), V2, clock=lambda: 0)
    await w.start()
    for k, v in V2.items():
        await w.step(k, _summary, **{k: v})
    return ctl, w


async def test_honest_v2_parts_with_content_quoting_v1_are_refused(store: outlive.Backend) -> None:
    ctl, w = await _on_v2(store)
    before = await store.load("w")
    for lie in ({"digest": "Intro. Revenue was 4.1 million."},          # v1's figure
                {"s1": {"summary": "Intro."}, "s2": {"summary": V1["s2"]}},
                {"sections": {"s1": "Intro.", "s2": V1["s2"]}}):
        with pytest.raises(E.InvalidRecord, match="content is bound to the journal") as info:
            await w.candidate(lie)
        assert "ResultOf" in str(info.value)                      # the one-line fix
    assert await store.load("w") == before
    made = await w.step("digest", _digest, s1=outlive.ResultOf("s1"), s2=outlive.ResultOf("s2"))
    cand = await w.candidate(made)                               # the assembly step's result
    await ctl.assess("w", cand.digest, outlive.Contract(name="c", version="1", assessor="t"),
                     lambda c, v: (True, "ok"))
    dep = await ctl.dependable("w", outlive.StrictCurrent())
    assert dep is not None and dep.content == {"digest": "Intro. Revenue was 4.7 million."}


async def test_a_step_result_changed_after_journaling_changes_nothing_submitted(
        store: outlive.Backend) -> None:
    _ctl, w = await _on_v2(store)
    got = await w.step("digest", _digest, s1=outlive.ResultOf("s1"), s2=outlive.ResultOf("s2"))
    got["digest"] = "Intro. Revenue was 4.1 million."                # the caller edits it
    with pytest.raises(E.InvalidRecord, match="content"):
        await w.candidate(got)
    parts = w.result("s2")
    parts["summary"] = V1["s2"]
    with pytest.raises(E.InvalidRecord, match="content"):
        await w.candidate({"s1": w.result("s1"), "s2": parts, "digest": w.result("digest")})
    cand = await w.candidate()                                   # the parts' results by step
    assert cand.content["digest"] == {"digest": "Intro. Revenue was 4.7 million."}
    assert cand.content["s2"] == {"summary": V2["s2"]}
    st = await store.load("w")
    assert st is not None and st.candidates[-1].content == cand.content


async def test_a_final_answer_handed_over_is_journaled_as_the_assembly(
        store: outlive.Backend) -> None:
    """A wrapper handed a framework's final answer journals it as the assembly step (with the
    candidate, in one write): its provenance chains through the parts to the version."""
    _ctl, w = await _on_v2(store)
    answer = await w.assemble({"answer": "Revenue rose to 4.7 million."})
    cand = await w.candidate(answer)
    assert [p.step for p in cand.parts] == ["s1", "s2", L.ASSEMBLY]
    assert cand.parts[-1].derived == ("s1", "s2")
    assert cand.parts[-1].roots == {"s1": content_hash(V2["s1"]), "s2": content_hash(V2["s2"])}
    st = await store.load("w")
    assert st is not None and st.journal[-1].result == answer and len(st.candidates) == 1


# -- effects -----------------------------------------------------------------------------------
async def test_a_receipt_for_another_key_confirms_nothing(store: outlive.Backend) -> None:
    _ctl, w = await started(store)
    with pytest.raises(E.EffectAmbiguous):
        await w.effect("announce:w:abc", {"d": "abc"}, _never)
    before = await store.load("w")
    other = Receipt(effect_id="P9", duplicate=False, key="announce:w:OTHER")
    with pytest.raises(E.WrongReceipt):
        await store.execute("w", L.ConfirmEffect(attempt=1, token=w.token, secret=w.attempt.secret,
                                                 op_key="announce:w:abc", receipt=other, at=1))
    after = await store.load("w")
    assert after == before and after is not None
    assert after.effects[0].state is EffectState.INTENDED


async def test_an_intent_without_its_payload_is_refused(store: outlive.Backend) -> None:
    _ctl, w = await started(store)
    before = await store.load("w")
    with pytest.raises(E.InvalidRecord, match="carries no payload"):
        await store.execute("w", L.RecordIntent(
            attempt=1, token=w.token, secret=w.attempt.secret, op_key="announce:w:abc",
            payload_digest=content_hash({"d": "abc"}), sent_key="announce:w:abc", at=1))
    assert await store.load("w") == before


async def test_a_resend_in_the_same_attempt_after_ambiguity_settles_the_intent(
        store: outlive.Backend) -> None:
    _ctl, w = await started(store)
    with pytest.raises(E.EffectAmbiguous):
        await w.effect("announce:w:abc", {"d": "abc"}, _never)
    feed = MemoryReceiver()
    receipt = await w.resend("announce:w:abc",
                             lambda key, payload: feed.receive(key, payload, lambda p: "P1"))
    assert receipt.effect_id == "P1" and feed.applied == [("P1", "announce:w:abc", {"d": "abc"})]
    st = await store.load("w")
    assert st is not None and L.is_settled(st.effects[0])


async def test_a_forgetful_receiver_answering_new_to_a_resend_is_flagged_by_the_ledger(
        store: outlive.Backend) -> None:
    ctl, w1 = await started(store)
    first = MemoryReceiver()

    def applied_then_died(key: str | None, payload: Any) -> Receipt:
        first.receive(key, payload, lambda p: "P1")
        raise ConnectionResetError("the poster died after the receiver applied it")

    with pytest.raises(E.EffectAmbiguous):
        await w1.effect("announce:w:abc", {"d": "abc"}, applied_then_died)
    await store.execute("w", ctl.stamp(L.MarkUnknown(attempt=1, at=_ms())))
    w2 = Worker(store, await ctl.admit("w"), V1)
    await w2.start()
    forgetful = MemoryReceiver()        # the receiver restarted and lost its keys
    receipt = await w2.resend("announce:w:abc",
                              lambda key, payload: forgetful.receive(key, payload, lambda p: "P2"))
    assert not receipt.duplicate and not receipt.possibly_duplicated   # it says "new"
    st = await store.load("w")
    assert st is not None
    (eff,) = st.effects
    assert eff.sends == 2 and eff.state is EffectState.POSSIBLY_DUPLICATED


# -- values ------------------------------------------------------------------------------------
def test_floats_are_canonical_by_rfc_8785() -> None:
    assert canonical({"p": 0.1, "n": 1.0, "e": 1e21, "s": 1e-7, "z": -0.0}) == \
        b'{"e":1e+21,"n":1,"p":0.1,"s":1e-7,"z":0}'
    assert content_hash(1.0) == content_hash(1)
    assert content_hash({"score": 0.93}) == hashlib.sha256(b'{"score":0.93}').hexdigest()
    # values without a float keep the digests they always had
    assert content_hash({"b": [1, "x", None, True], "a": "ü"}) == hashlib.sha256(
        '{"a":"ü","b":[1,"x",null,true]}'.encode()).hexdigest()


async def test_a_score_a_price_and_a_probability_are_record_values(store: outlive.Backend) -> None:
    ctl, w = await started(store)
    scored = {"score": 0.93, "price": 12.5, "p": [0.25, 1e-9], "n": 3}
    got = await w.step("s2", lambda s2: scored, s2=V1["s2"])
    cand = await w.candidate(got, ["s2"])      # floats in the content too
    acc = await ctl.assess("w", cand.digest, outlive.Contract(name="c", version="1", assessor="t"),
                           lambda c, v: (True, "ok"))
    receipt = await w.effect("announce:w", {"confidence": 0.8},
                             lambda key, payload: MemoryReceiver().receive(key, payload,
                                                                           lambda p: "P1"))
    assert got == scored and acc.digest == cand.digest and receipt.effect_id == "P1"
    st = await store.load("w")
    assert st is not None
    assert st.journal[0].result == scored
    assert st.candidates[0].content == scored
    assert st.effects[0].payload == {"confidence": 0.8}
    # a successor restores the float result by its input key
    await w.finish()
    w2 = Worker(store, await ctl.admit("w"), V1)
    await w2.start()
    assert await w2.step("s2", lambda s2: pytest.fail("recomputed"), s2=V1["s2"]) == scored
    assert w2.steps["s2"].restored


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"),
                                 {"p": [0.5, float("nan")]}])
async def test_nan_and_infinity_are_refused_typed(store: outlive.Backend, bad: Any) -> None:
    _ctl, w = await started(store)
    before = await store.load("w")
    with pytest.raises(E.InvalidRecord, match="not a JSON number"):
        await w.step("s2", lambda s2: bad, s2=V1["s2"])
    with pytest.raises(E.InvalidRecord, match="not a JSON number"):
        await w.effect("op", bad, lambda k, p: pytest.fail("sent"))
    assert await store.load("w") == before


@dataclasses.dataclass
class Summary:
    text: str
    score: float


class Scored(pydantic.BaseModel):
    text: str
    score: float


@pytest.mark.parametrize(("value", "fix"), [
    (Summary(text="4.1", score=0.9), "dataclasses.asdict(value)"),
    (Scored(text="4.1", score=0.9), "value.model_dump(mode='json')"),
])
async def test_a_dataclass_or_a_model_is_refused_with_its_one_line_fix(
        store: outlive.Backend, value: Any, fix: str) -> None:
    _ctl, w = await started(store)
    before = await store.load("w")
    with pytest.raises(E.InvalidRecord) as info:
        await w.step("s2", lambda s2: value, s2=V1["s2"])
    assert fix in info.value.message and "\n" not in info.value.message
    assert await store.load("w") == before
    # the fix works
    fixed = dataclasses.asdict(value) if isinstance(value, Summary) \
        else value.model_dump(mode="json")
    assert await w.step("s2", lambda s2: fixed, s2=V1["s2"]) == {"text": "4.1", "score": 0.9}


async def test_republishing_an_older_version_is_typed(store: outlive.Backend) -> None:
    ctl, _w = await started(store)
    await ctl.publish("w", "v2", V2)
    before = await store.load("w")
    with pytest.raises(E.InputConflict, match="older than the current version v2"):
        await ctl.publish("w", "v1", V1)
    assert await store.load("w") == before
    again = await ctl.publish("w", "v2", V2)      # a retry of the latest publish: the same answer
    assert again.version == "v2"


# -- clocks ------------------------------------------------------------------------------------
async def test_an_admit_dated_an_hour_ahead_is_dated_by_the_store(store: outlive.Backend) -> None:
    ctl = Controller(store, clock=lambda: _ms() + HOUR)     # a controller whose clock runs ahead
    await ctl.open_work("w")
    await ctl.publish("w", "v1", V1)
    att = await ctl.admit("w")
    now = _ms()
    assert att.admitted_at <= now and att.last_heartbeat <= now
    st = await store.load("w")
    assert st is not None and st.inputs[0].at <= now
    # the worker's own times too: its beats, its candidate, its intent
    w = Worker(store, att, V1, clock=lambda: _ms() + HOUR)
    await w.start()
    await w.step("s2", lambda s2: "r", s2=V1["s2"])
    cand = await w.candidate()
    with pytest.raises(E.EffectAmbiguous):
        await w.effect("op", {"m": 1}, _never)
    st = await store.load("w")
    now = _ms()
    assert st is not None
    assert st.attempts[0].last_heartbeat <= now and cand.at <= now
    assert st.effects[0].intended_at <= now


# -- waiting -----------------------------------------------------------------------------------
LEASE = outlive.Lease(heartbeat_interval=200, missed_beats=3, start_grace=1_000)
CONTRACT = outlive.Contract(name="c", version="1", assessor="t")


def _waits_then(fate: str) -> Any:
    """An attempt function: #1 records a wait and then ``fate`` ("hangs": it waits for ever, on
    a person who never answers); later ones do the work."""
    async def attempt(ctx: outlive.AttemptContext) -> None:
        w = ctx.worker
        if ctx.attempt.number == 1:
            await w.wait("approval by the editor")
            assert fate == "hangs"
            await asyncio.Event().wait()
        await w.step("s2", lambda s2: s2.split(".")[0], s2=ctx.inputs["s2"])
        await ctx.submit({"s2": w.result("s2")})
    return attempt


def _supervised(store: outlive.Backend, fate: str, clock: list[int],
                **lease: Any) -> outlive.Supervisor:
    definition = outlive.WorkDefinition(
        work_id="w", attempt=_waits_then(fate), contract=CONTRACT, inputs=lambda v: V1,
        lease=dataclasses.replace(LEASE, **lease))
    return outlive.Supervisor(store, definition, outlive.TaskDispatcher(store, clock=lambda: clock[0]),
                              clock=lambda: clock[0])


async def _until(predicate: Any, store: outlive.Backend) -> outlive.WorkState:
    for _ in range(500):
        st = await store.load("w")
        if st is not None and predicate(st):
            return st
        await asyncio.sleep(0.01)
    raise AssertionError(f"never reached: {await store.load('w')}")


async def test_a_waiting_attempt_whose_runner_died_is_suspected(store: outlive.Backend) -> None:
    clock = [_ms()]
    sup = _supervised(store, "hangs", clock)
    try:
        await sup.publish("v1", V1)
        await sup.tick()                                    # admits and dispatches #1
        await _until(lambda s: s.attempts[0].state is outlive.AttemptState.WAITING, store)
        task = sup.dispatcher.tasks[("w", 1)]               # type: ignore[attr-defined]
        task.cancel()                                       # the runner dies without a word
        with pytest.raises(asyncio.CancelledError):
            await task
        st = await store.load("w")
        assert st is not None and st.attempts[0].state is outlive.AttemptState.WAITING
        status = await sup.tick()                           # no time passed: no lease ran out
        assert "marked #1 unknown (silent)" in status.actions
        assert status.state.attempts[0].state is outlive.AttemptState.UNKNOWN
        assert [a.number for a in status.state.attempts] == [1, 2]
    finally:
        await sup.close()


async def test_a_wait_past_the_kinds_limit_is_suspected(store: outlive.Backend) -> None:
    clock = [_ms()]
    sup = _supervised(store, "hangs", clock, wait_limit=5_000)
    try:
        await sup.publish("v1", V1)
        await sup.tick()
        st = await _until(lambda s: s.attempts[0].state is outlive.AttemptState.WAITING, store)
        since = st.attempts[0].waiting_since
        assert since is not None
        assert L.suspect_at(st.attempts[0], timeout=LEASE.timeout, wait_limit=5_000) == \
            since + 5_001
        clock[0] = since + 5_000                            # at the limit: still a wait
        assert (await sup.tick()).actions == ()
        clock[0] = since + 5_001                            # past it: suspected
        status = await sup.tick()
        assert "marked #1 unknown (silent)" in status.actions
        assert L.suspicion(st.attempts[0], clock[0], timeout=LEASE.timeout,
                           wait_limit=5_000) == "wait limit"
        assert [a.number for a in status.state.attempts] == [1, 2]
    finally:
        await sup.close()


async def test_without_a_wait_limit_a_wait_is_never_suspected(store: outlive.Backend) -> None:
    clock = [_ms()]
    sup = _supervised(store, "hangs", clock)
    try:
        await sup.publish("v1", V1)
        await sup.tick()
        await _until(lambda s: s.attempts[0].state is outlive.AttemptState.WAITING, store)
        clock[0] += 100 * LEASE.timeout
        status = await sup.tick()
        assert status.actions == () and len(status.state.attempts) == 1
    finally:
        await sup.close()


async def test_an_exception_inside_waiting_leaves_the_attempt_running(
        store: outlive.Backend) -> None:
    _ctl, w = await started(store)
    with pytest.raises(KeyError):
        async with w.waiting("approval by the editor"):
            raise KeyError("the approval service answered garbage")
    st = await store.load("w")
    assert st is not None
    att = st.attempts[0]
    assert att.state is outlive.AttemptState.RUNNING
    assert att.waiting_for is None and att.waiting_since is None


async def test_on_postgresql_the_lease_clock_is_the_servers(
        pg: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host whose clock runs an hour ahead writes through postgresql://: the times recorded
    are the server's, not the host's."""
    url = pg.create_database(f"clock_{uuid.uuid4().hex[:8]}")
    real = time.time
    b = await outlive.open_backend(url)
    try:
        monkeypatch.setattr(time, "time", lambda: real() + HOUR / 1000)   # this host runs ahead
        ctl = Controller(b)                     # its clock: the host's (an hour ahead)
        await ctl.open_work("w")
        await ctl.publish("w", "v1", V1)
        att = await ctl.admit("w")
        w = Worker(b, att, V1)
        await w.start()
        await w.step("s2", lambda s2: "r", s2=V1["s2"])
        st = await b.load("w")
        monkeypatch.undo()
        now = _ms()
        assert st is not None
        assert now - 60_000 < att.admitted_at <= now
        assert st.attempts[0].last_heartbeat <= now and st.inputs[0].at <= now
    finally:
        monkeypatch.undo()
        await b.close()


async def test_on_postgresql_the_server_refuses_a_write_dated_ahead_of_its_clock(
        pg: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's reading of the server's clock is an hour ahead (its clock jumped; a VM was
    resumed) and so is the host's own clock: the server itself refuses the write's time, the
    host reads the server's clock again and the command lands on the server's time."""
    url = pg.create_database(f"ahead_{uuid.uuid4().hex[:8]}")
    real = time.time
    b = await outlive.open_backend(url)
    try:
        ctl = Controller(b)
        await ctl.open_work("w")
        await ctl.publish("w", "v1", V1)
        monkeypatch.setattr(time, "time", lambda: real() + HOUR / 1000)   # this host runs ahead
        b.ledger._server_ms += HOUR     # and so does its reading of the server's clock
        att = await ctl.admit("w")
        w = Worker(b, att, V1)
        await w.start()
        await w.step("s2", lambda s2: "r", s2=V1["s2"])
        monkeypatch.undo()
        st = await b.load("w")
        now = _ms()
        assert st is not None
        assert att.admitted_at <= now + 1_000
        assert st.attempts[0].last_heartbeat <= now + 1_000
        assert b.ledger.server_now() <= now + 1_000      # read again from the server
        # many works' commands at once go as one batch (group commit): guarded there too
        for i in range(8):
            await ctl.open_work(f"w{i}")
            await ctl.publish(f"w{i}", "v1", V1)
        b.ledger._server_ms += HOUR
        await asyncio.gather(*(ctl.admit(f"w{i}") for i in range(8)))
        now = _ms()
        for i in range(8):
            st = await b.load(f"w{i}")
            assert st is not None and st.attempts[0].admitted_at <= now + 1_000
    finally:
        monkeypatch.undo()
        await b.close()


async def test_under_the_runtime_a_wait_past_the_kinds_limit_is_taken_over(
        store: outlive.Backend) -> None:
    """The runtime asks the same rule: #1 waits on a person who never answers; past the kind's
    wait limit it is suspected and #2 completes the work."""
    kind = outlive.Kind(name="approval", attempt=_waits_then("hangs"), contract=CONTRACT,
                        inputs=lambda v: V1,
                        lease=dataclasses.replace(LEASE, heartbeat_interval=2_000,
                                                  wait_limit=300))
    async with outlive.Runtime(store, kinds=[kind], discover=None) as rt:
        h = await rt.start(kind, "w", "v1", V1)
        done = await asyncio.wait_for(h.result(), 30)
        st = (await h.state()).state
    assert done.acceptance.attempt == 2
    assert st.attempts[0].state is outlive.AttemptState.UNKNOWN
    assert st.attempts[0].waiting_for == "approval by the editor"


async def test_a_final_answer_that_is_a_steps_result_is_not_journaled_again(
        store: outlive.Backend) -> None:
    _ctl, w = await _on_v2(store)
    answer = await w.assemble(w.result("s2"))
    cand = await w.candidate(answer)
    assert [p.step for p in cand.parts] == ["s1", "s2"]
    st = await store.load("w")
    assert st is not None and [e.step for e in st.journal] == ["s1", "s2"]
