from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import outlive
from outlive import Contract, Controller, MemoryReceiver, SqliteReceiver, StrictCurrent, Worker
from outlive.errors import EffectAmbiguous, VersionMismatch
from outlive.records import EffectState, Receipt

V1 = {"s1": "Intro.", "s2": "Revenue was 4.1 million."}
C = Contract(name="form", version="1", assessor="test")


async def setup(b: outlive.Backend) -> tuple[Controller, Worker]:
    ctl = Controller(b, clock=lambda: 0)
    await ctl.open_work("w")
    await ctl.publish("w", "v1", V1)
    w = Worker(b, await ctl.admit("w"), V1)
    await w.start()
    return ctl, w


async def test_a_snapshot_that_is_not_the_pinned_version_is_refused(backend: outlive.Backend) -> None:
    ctl = Controller(backend, clock=lambda: 0)
    await ctl.open_work("w")
    await ctl.publish("w", "v1", V1)
    w = Worker(backend, await ctl.admit("w"), {**V1, "s2": "Revenue was 9 million."})
    with pytest.raises(VersionMismatch):
        await w.start()


async def test_end_of_attempt_persistence_writes_with_the_candidate(backend: outlive.Backend) -> None:
    ctl = Controller(backend, clock=lambda: 0)
    await ctl.open_work("w")
    await ctl.publish("w", "v1", V1)
    w = Worker(backend, await ctl.admit("w"), V1, persist="end")
    await w.start()
    for k, v in V1.items():
        await w.step(k, lambda **kw: "sum", **{k: v})
    st = await backend.load("w")
    assert st is not None and st.journal == ()
    cand = await w.candidate()
    st = await backend.load("w")
    assert st is not None and len(st.journal) == 2 and st.candidates[0].digest == cand.digest
    acc = await ctl.assess("w", cand.digest, C, lambda c, v: (True, "ok"))
    assert acc.version == "v1"
    dep = await ctl.dependable("w", StrictCurrent())
    assert dep is not None and dep.digest == cand.digest


async def test_a_result_changed_after_its_step_is_journaled_as_the_step_returned_it(
        backend: outlive.Backend) -> None:
    """A step's write held until the candidate (``persist="end"``) keeps the result as the step
    returned it: the caller changing the returned dict or list afterwards changes neither the
    journal nor what a successor restores."""
    ctl = Controller(backend, clock=lambda: 0)
    await ctl.open_work("w")
    await ctl.publish("w", "v1", V1)
    w = Worker(backend, await ctl.admit("w"), V1, persist="end")
    await w.start()
    got = await w.step("s1", lambda **kw: {"summary": "sum", "notes": ["a"]}, s1=V1["s1"])
    got["summary"] = "changed"
    got["notes"].append("b")
    await w.candidate(steps=["s1"])
    st = await backend.load("w")
    assert st is not None
    assert [e.result for e in st.journal] == [{"summary": "sum", "notes": ["a"]}]


async def test_no_answer_leaves_the_intent_open_and_a_resend_settles_it(
        backend: outlive.Backend) -> None:
    _ctl, w = await setup(backend)
    feed = MemoryReceiver()
    calls: list[str | None] = []

    def down(key: str | None, payload: Any) -> Receipt:
        calls.append(key)
        raise ConnectionResetError("feed went away")

    with pytest.raises(EffectAmbiguous):
        await w.effect("announce:w:d", {"m": 1}, down)
    st = await backend.load("w")
    assert st is not None and st.effects[0].state is EffectState.INTENDED

    def up(key: str | None, payload: Any) -> Receipt:
        return feed.receive(key, payload, lambda p: "P1")

    r = await w.effect("announce:w:d", {"m": 1}, up)
    assert r.effect_id == "P1" and calls == ["announce:w:d"]
    again = await w.effect("announce:w:d", {"m": 1}, up)   # confirmed: not sent again
    assert again == r and len(feed.applied) == 1


def test_receiver_keeps_keys_for_the_retention_window_and_says_when_it_forgot() -> None:
    now = [0]
    feed = MemoryReceiver(retention=10, clock=lambda: now[0])
    n = iter(range(1, 100))
    first = feed.receive("k", "x", lambda p: f"P{next(n)}")
    now[0] = 5
    assert feed.receive("k", "x", lambda p: f"P{next(n)}").duplicate
    now[0] = 30
    late = feed.receive("k", "x", lambda p: f"P{next(n)}")
    assert not late.duplicate and late.effect_id != first.effect_id and "expired" in late.note


def test_sqlite_receiver_applies_the_effect_and_the_key_atomically(tmp_path: Path) -> None:
    rx = SqliteReceiver(str(tmp_path / "feed.db"))
    rx._conn.execute("CREATE TABLE posts (id INTEGER PRIMARY KEY, body TEXT)")

    def post(conn: Any, body: Any) -> str:
        cur = conn.execute("INSERT INTO posts (body) VALUES (?)", (body,))
        if body == "boom":
            raise RuntimeError("failed after the insert")
        return f"P{cur.lastrowid}"

    assert rx.receive("k1", "hello", post).effect_id == "P1"
    assert rx.receive("k1", "hello", post).duplicate
    with pytest.raises(RuntimeError):
        rx.receive("k2", "boom", post)
    rows = rx._conn.execute("SELECT COUNT(*) FROM posts").fetchone()[0]
    keys = rx._conn.execute("SELECT COUNT(*) FROM outlive_receiver_keys").fetchone()[0]
    assert (rows, keys) == (1, 1)   # neither the key nor the effect of the failed one
    rx.close()


async def test_run_steps_restores_what_matches_and_runs_the_rest_once(
        backend: outlive.Backend) -> None:
    ctl, w = await setup(backend)
    calls: list[str] = []

    def summ(**kw: str) -> str:
        calls.append(next(iter(kw)))
        return next(iter(kw.values()))[:5]

    await w.step("s1", summ, s1=V1["s1"])
    out = await w.run_steps([(k, summ, {k: v}) for k, v in V1.items()])
    assert out == ["Intro", "Reven"] and calls == ["s1", "s2"]
    st = await backend.load("w")
    assert st is not None and [e.step for e in st.journal] == ["s1", "s2"]
    succ_att = None
    await backend.execute("w", ctl.stamp(outlive.ledger.MarkUnknown(attempt=1, at=9)))
    succ_att = await ctl.admit("w")
    w2 = Worker(backend, succ_att, V1)
    await w2.start()
    again = await w2.run_steps([(k, summ, {k: v}) for k, v in V1.items()])
    assert again == out and calls == ["s1", "s2"]   # everything restored
    with pytest.raises(outlive.StaleOwner):
        await w.run_steps([("s3", summ, {"s3": "late"})])


async def test_a_failed_batch_is_retried_without_rerunning_journaled_steps(
        backend: outlive.Backend) -> None:
    _ctl, w = await setup(backend)
    calls: list[str] = []
    fail = [True]

    def summ(**kw: str) -> str:
        name = next(iter(kw))
        calls.append(name)
        if name == "s2" and fail[0]:
            fail[0] = False
            raise RuntimeError("model timeout")
        return name

    plan = [(k, summ, {k: v}) for k, v in V1.items()]
    with pytest.raises(RuntimeError):
        await w.run_steps(plan)
    assert await w.run_steps(plan) == ["s1", "s2"]
    assert calls == ["s1", "s2", "s2"]


@pytest.mark.parametrize("pins", [True, False])
async def test_a_successor_restores_exactly_what_the_journal_lookup_finds(pins: bool) -> None:
    """The worker finds restorable steps through an index of the loaded journal; it must answer
    as ``WorkState.lookup`` does (the latest entry of a step and key; by name alone without
    pins) for steps journaled twice, under two keys, and never."""
    from outlive import Policy

    b = await outlive.open_backend("memory://")
    ctl = Controller(b, clock=lambda: 0)
    await ctl.open_work("w", policy=Policy(pins=pins))
    await ctl.publish("w", "v1", V1)
    texts = ["a", "b", "a", "c", "b"]
    for i, text in enumerate(texts):       # one attempt each: "s1" journaled under several keys
        w = Worker(b, await ctl.admit("w"), V1)
        await w.start()
        await w.step("s1", lambda i=i, **kw: f"r{i}", x=outlive.External(text))
        await w.step(f"only{i}", lambda i=i, **kw: i, x=outlive.External(text))
        await w.finish()
    w = Worker(b, await ctl.admit("w"), V1)
    st = await w.start()
    for name in ["s1", "only0", "only4", "never"]:
        for text in ["a", "b", "c", "z"]:
            sources = {"x": outlive.content_hash(text)}
            key = outlive.input_key(name, sources)
            want = st.lookup(name, key)
            assert w.can_restore(name, x=outlive.External(text)) is (want is not None)
            assert w._lookup(name, key) is want


def test_an_external_input_is_a_frozen_record_however_it_is_built() -> None:
    """``External`` fills its field directly (it is built on every adapter step): still the
    frozen record its dataclass declares, by position or keyword, equal by value."""
    import dataclasses

    from outlive import External

    e = External("terse")
    assert e == External(value="terse") and hash(e) == hash(External("terse"))
    assert repr(e) == "External(value='terse')" and e.value == "terse"
    assert dataclasses.replace(e, value="long") == External("long")
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.value = "long"  # type: ignore[misc]
    with pytest.raises(TypeError):
        External()  # type: ignore[call-arg]
