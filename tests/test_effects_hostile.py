"""Effects against careless senders and receivers: the intent keeps its payload, a reused key is
a typed conflict, a forgotten key is typed as possibly duplicated, and any transport failure
leaves the intent open and typed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import outlive
from outlive import Controller, MemoryReceiver, SqliteReceiver, Worker
from outlive import errors as E
from outlive import ledger as L
from outlive.records import EffectState, Receipt

V1 = {"s1": "Intro.", "s2": "Revenue was 4.1 million."}


async def started(b: outlive.Backend) -> tuple[Controller, Worker]:
    ctl = Controller(b, clock=lambda: 0)
    await ctl.open_work("w")
    await ctl.publish("w", "v1", V1)
    w = Worker(b, await ctl.admit("w"), V1, clock=lambda: 0)
    await w.start()
    return ctl, w


async def test_a_successor_resends_the_payload_that_was_intended(backend: outlive.Backend) -> None:
    ctl, w1 = await started(backend)
    feed = MemoryReceiver()

    def dies(key: str | None, payload: Any) -> Receipt:
        raise ConnectionResetError("gone")

    with pytest.raises(E.EffectAmbiguous):
        await w1.effect("announce:x", {"digest": "abc", "n": 1}, dies)
    await backend.execute("w", ctl.stamp(L.MarkUnknown(attempt=1, at=5)))
    w2 = Worker(backend, await ctl.admit("w"), V1, clock=lambda: 6)
    await w2.start()
    (open_,) = w2.open_effects()
    assert open_.payload == {"digest": "abc", "n": 1}
    got: list[Any] = []

    def send(key: str | None, payload: Any) -> Receipt:
        got.append(payload)
        return feed.receive(key, payload, lambda p: "P1")

    receipt = await w2.resend("announce:x", send)
    assert got == [{"digest": "abc", "n": 1}] and receipt.effect_id == "P1"
    st = await backend.load("w")
    # intended twice, answered "new": the first send may have landed at a receiver that forgot
    # its key, and the ledger cannot tell, so it says so
    assert st is not None and st.effects[0].state is EffectState.POSSIBLY_DUPLICATED
    assert st.effects[0].sends == 2


async def test_a_payload_that_is_not_its_digest_is_refused(backend: outlive.Backend) -> None:
    _ctl, w = await started(backend)
    before = await backend.load("w")
    with pytest.raises(E.InvalidRecord):
        await backend.execute("w", L.RecordIntent(
            attempt=1, token=w.token, secret=w.attempt.secret, op_key="k", payload={"a": 1},
            payload_digest=outlive.content_hash({"a": 2}), sent_key="k", at=1))
    assert await backend.load("w") == before


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_known_key_with_another_payload_is_a_typed_conflict(kind: str, tmp_path: Path) -> None:
    rx: Any = MemoryReceiver() if kind == "memory" else SqliteReceiver(str(tmp_path / "rx.db"))
    first = rx.receive("k", {"v": 1}, lambda *a: "P1")
    assert rx.receive("k", {"v": 1}, lambda *a: "P2").duplicate
    with pytest.raises(E.EffectConflict):
        rx.receive("k", {"v": 2}, lambda *a: "P3")
    assert first.effect_id == "P1"


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_retry_after_retention_is_typed_possibly_duplicated(
        kind: str, tmp_path: Path) -> None:
    clock = [0]
    rx: Any = (MemoryReceiver(retention=10, clock=lambda: clock[0]) if kind == "memory"
               else SqliteReceiver(str(tmp_path / "rx.db"), retention=10, clock=lambda: clock[0]))
    b = await outlive.open_backend("memory://")
    _ctl, w = await started(b)
    first = rx.receive("announce:x", {"d": 1}, lambda *a: "P1")
    assert not first.possibly_duplicated
    clock[0] = 100
    receipt = await w.effect("announce:x", {"d": 1},
                             lambda key, payload: rx.receive(key, payload, lambda *a: "P2"))
    assert receipt.possibly_duplicated and not receipt.duplicate
    st = await b.load("w")
    assert st is not None and st.effects[0].state is EffectState.POSSIBLY_DUPLICATED
    # settled: a later effect() on the key answers from the ledger, never resends
    again = await w.effect("announce:x", {"d": 1}, lambda key, payload: pytest.fail("resent"))
    assert again == receipt


@pytest.mark.parametrize("answer", [None, "ok", {"effect_id": "P1"}])
async def test_a_sender_that_returns_no_receipt_leaves_the_intent_open(
        backend: outlive.Backend, answer: Any) -> None:
    _ctl, w = await started(backend)
    with pytest.raises(E.EffectAmbiguous):
        await w.effect("announce:x", {"d": 1}, lambda key, payload: answer)
    st = await backend.load("w")
    assert st is not None and st.effects[0].state is EffectState.INTENDED
    feed = MemoryReceiver()
    receipt = await w.effect("announce:x", {"d": 1},
                             lambda key, payload: feed.receive(key, payload, lambda p: "P1"))
    assert receipt.effect_id == "P1"


@pytest.mark.parametrize("exc", [ValueError("bad json"), RuntimeError("tls"), KeyError("x")])
async def test_any_transport_failure_is_ambiguous_and_typed(
        backend: outlive.Backend, exc: Exception) -> None:
    _ctl, w = await started(backend)

    def send(key: str | None, payload: Any) -> Receipt:
        raise exc

    with pytest.raises(E.EffectAmbiguous):
        await w.effect("announce:x", {"d": 1}, send)
    st = await backend.load("w")
    assert st is not None and st.effects[0].state is EffectState.INTENDED


async def test_a_receivers_conflict_propagates_typed_and_the_intent_stays_open(
        backend: outlive.Backend) -> None:
    _ctl, w = await started(backend)
    feed = MemoryReceiver()
    feed.receive("announce:x", {"someone": "else"}, lambda p: "P0")
    with pytest.raises(E.EffectConflict):
        await w.effect("announce:x", {"d": 1},
                       lambda key, payload: feed.receive(key, payload, lambda p: "P1"))
    st = await backend.load("w")
    assert st is not None and st.effects[0].state is EffectState.INTENDED
