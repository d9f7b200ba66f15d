"""The five records on a real Temporal server, driven through the public Controller/Worker API."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType

from outlive import Contract, Controller, MemoryReceiver, Worker
from outlive import ledger as L
from outlive.errors import (
    BackendUnavailable,
    NotFound,
    PayloadTooLarge,
    StaleOwner,
    UnknownToken,
    VersionMismatch,
)
from outlive.hashing import content_hash, input_key
from outlive_conformance.testing import open_work
from outlive_temporal import TemporalBackend, _backend, workflow_id
from outlive_temporal._workflow import STEP_ACTIVITY
from outlive_temporal.backend import parse_url, work_id_of

V1 = {"s1": "Intro.", "s2": "Revenue was 4.1 million."}
V2 = {"s1": "Intro.", "s2": "Revenue was 4.7 million."}
FORM = Contract(name="form", version="1", assessor="test")


def wid(name: str) -> str:
    return f"test/{uuid.uuid4().hex[:8]}/{name}#1 ü"


def summarise(**kw: Any) -> dict[str, str]:
    (text,) = kw.values()
    return {"summary": str(text)[:12]}


async def accepted_updates(backend: TemporalBackend, work_id: str) -> int:
    assert backend._client is not None
    handle = backend._client.get_workflow_handle(workflow_id(work_id))
    n = 0
    async for ev in handle.fetch_history_events():
        if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            n += 1
    return n


def test_workflow_ids_are_safe_and_injective() -> None:
    ids = ["a/b", "a%2Fb", "a#b", "digest/q3-report", "x" * 2000, "x" * 2001, "ü /?&"]
    wids = [workflow_id(i) for i in ids]
    assert len(set(wids)) == len(ids)
    assert all(len(w) <= 1000 and "/" not in w and "#" not in w for w in wids)
    assert work_id_of(workflow_id("digest/q3-report#2")) == "digest/q3-report#2"
    assert work_id_of(workflow_id("x" * 2000)) is None


def test_url_parsing() -> None:
    cfg = parse_url("temporal://127.0.0.1:7233/ns1?heartbeat_ms=500&can_after=5")
    assert (cfg.target, cfg.namespace, cfg.heartbeat_ms, cfg.can_after) == (
        "127.0.0.1:7233", "ns1", 500, 5)
    assert parse_url("temporal://localhost:1").namespace == "default"
    from outlive.errors import ConfigError
    for bad in ("temporal://host", "temporal://h:1/a/b", "temporal://h:1?nope=1", "restate://h:1"):
        with pytest.raises(ConfigError):
            parse_url(bad)


async def test_full_run_fencing_restore_and_effects(backend: TemporalBackend) -> None:
    work = wid("digest")
    clock = iter(range(1000))
    ctl = Controller(backend, clock=lambda: next(clock))
    await ctl.open_work(work)
    await ctl.publish(work, "v1", V1)
    a1 = await ctl.admit(work)
    w1 = Worker(backend, a1, V1, clock=lambda: next(clock))
    await w1.start()
    await w1.step("s1", summarise, s1=V1["s1"])
    await w1.step("s2", summarise, s2=V1["s2"])
    # silence, a new version, a successor with a larger token
    await ctl.publish(work, "v2", V2)
    await backend.execute(work, Controller(backend).stamp(L.MarkUnknown(attempt=a1.number, at=next(clock))))
    a2 = await ctl.admit(work)
    assert a2.token == a1.token + 1 and a2.pinned_version == "v2"
    # the stale worker's late journal write is refused by outlive's fencing
    before = await backend.load(work)
    with pytest.raises(StaleOwner):
        await w1.step("s3", summarise, s3="late")
    assert (await backend.load(work)) == before
    w2 = Worker(backend, a2, V2, clock=lambda: next(clock))
    await w2.start()
    calls: list[str] = []

    def counted(**kw: Any) -> dict[str, str]:
        calls.append(next(iter(kw)))
        return summarise(**kw)

    await w2.step("s1", counted, s1=V2["s1"])
    await w2.step("s2", counted, s2=V2["s2"])
    assert calls == ["s2"], "s1 restored by input key, s2 redone"
    assert w2.steps["s1"].restored and not w2.steps["s2"].restored
    cand = await w2.candidate()
    acc = await ctl.assess(work, cand.digest, FORM, lambda c, v: (True, "ok"))
    assert acc.version == "v2"
    feed = MemoryReceiver()
    op = f"announce:{work}:{cand.digest}"
    r1 = await w2.effect(op, {"msg": "hi"}, lambda k, p: feed.receive(k, p, lambda p: "P1"))
    assert r1.effect_id == "P1"
    st = await backend.load(work)
    assert st is not None and st.effect(op) is not None
    assert st.stale_writes_applied == 0
    assert work in await _eventually_listed(backend, work)


async def _eventually_listed(backend: TemporalBackend, work: str) -> list[str]:
    for _ in range(100):
        got = await backend.works()
        if work in got:
            return got
        await asyncio.sleep(0.1)
    return await backend.works()


async def test_rejections_are_typed_and_write_nothing(backend: TemporalBackend) -> None:
    opened = await open_work(backend, versions={"v1": V1}, work_id=wid("bad"))
    work, a1 = opened.work_id, opened.attempt
    st0 = await backend.load(work)
    n0 = await accepted_updates(backend, work)
    sources = {"s1": content_hash(V1["s1"])}
    write = L.StepWrite(step="s1", sources=sources, input_key=input_key("s1", sources),
                        result={"x": 1}, result_id="r")
    # a forged token
    with pytest.raises(UnknownToken):
        await backend.execute(work, L.RecordSteps(attempt=a1.number, token=a1.token + 7,
                                                  entries=(write,), at=2))
    # an oversized result (the core's limit) and an oversized command (Temporal's 2 MB limit)
    big = dict(write.__dict__, result="x" * 300_000)
    with pytest.raises(PayloadTooLarge):
        await backend.execute(work, L.RecordSteps(attempt=a1.number, token=a1.token,
                                                  secret=a1.secret,
                                                  entries=(L.StepWrite(**big),), at=2))
    huge = tuple(L.StepWrite(**dict(write.__dict__, result="y" * 200_000, result_id=f"r{i}"))
                 for i in range(12))
    with pytest.raises(PayloadTooLarge):
        await backend.execute(work, L.RecordSteps(attempt=a1.number, token=a1.token,
                                                  secret=a1.secret, entries=huge, at=2))
    # a step that claims to have read another version's part
    bad_sources = {"s2": content_hash(V2["s2"])}
    with pytest.raises(VersionMismatch):
        await backend.execute(work, L.RecordSteps(
            attempt=a1.number, token=a1.token, at=2, secret=a1.secret,
            entries=(L.StepWrite(step="s2", sources=bad_sources,
                                 input_key=input_key("s2", bad_sources), result=1,
                                 result_id="q"),)))
    # a command on a work that was never opened
    with pytest.raises(NotFound):
        await backend.execute(wid("nope"), L.Heartbeat(attempt=1, token=1, at=1))
    assert await backend.load(wid("nope")) is None
    assert await backend.load(work) == st0
    assert await accepted_updates(backend, work) == n0, "a rejected update left history"


async def test_candidate_for_another_version_is_refused(backend: TemporalBackend) -> None:
    opened = await open_work(backend, versions={"v1": V1}, work_id=wid("pins"))
    work, ctl = opened.work_id, opened.ctl
    w1 = opened.worker
    for k, v in V1.items():
        await w1.step(k, summarise, **{k: v})
    cand = await w1.candidate()
    await ctl.publish(work, "v2", V2)
    st = await backend.load(work)
    with pytest.raises(VersionMismatch):
        await ctl.assess(work, cand.digest, FORM, lambda c, v: (True, "ok"))
    with pytest.raises(VersionMismatch):
        await backend.execute(work, ctl.stamp(L.Accept(digest=cand.digest, contract=FORM,
                                                       verdict=True, at=3)))
    assert await backend.load(work) == st


async def test_continue_as_new_carries_the_ledger(backend_url: str) -> None:
    b = TemporalBackend(backend_url + "?can_after=4")
    await b.start()
    try:
        opened = await open_work(b, versions={"v1": V1}, work_id=wid("can"))
        work = opened.work_id
        w1 = opened.worker
        for i in range(10):
            await w1.heartbeat()
            if i == 5:
                await w1.step("s1", summarise, s1=V1["s1"])
        st = await b.load(work)
        assert st is not None and st.epoch == 1 and len(st.journal) == 1
        assert st.attempts[0].heartbeats == 10
        assert await b.generation(work) >= 3
        with pytest.raises(UnknownToken):
            await b.execute(work, L.Heartbeat(attempt=1, token=99, at=3))
    finally:
        await b.close()


async def test_concurrent_works(backend: TemporalBackend) -> None:
    async def one(i: int) -> int:
        work = wid(f"c{i}")
        ctl = Controller(backend, clock=lambda: 1)
        await ctl.open_work(work)
        await ctl.publish(work, "v1", V1)
        a = await ctl.admit(work)
        w = Worker(backend, a, V1, clock=lambda: 2)
        await w.start()
        for k, v in V1.items():
            await w.step(k, summarise, **{k: v})
        st = await backend.load(work)
        assert st is not None
        return len(st.journal)

    assert await asyncio.gather(*(one(i) for i in range(20))) == [2] * 20


async def test_run_step_runs_the_body_once_as_an_activity(backend: TemporalBackend) -> None:
    opened = await open_work(backend, versions={"v1": V1}, work_id=wid("once"))
    w = opened.worker
    n = 0

    def boom(**kw: Any) -> None:
        nonlocal n
        n += 1
        raise ValueError("model said no")

    with pytest.raises(ValueError, match="model said no"):
        await w.step("s1", boom, s1=V1["s1"])
    assert n == 1, "Temporal must not retry the step"
    assert backend.stats.reports[-1].status == "failed"
    # a caller that is cancelled (a crashed worker) abandons its body
    started = asyncio.Event()
    never = asyncio.Event()

    async def held(**kw: Any) -> None:
        started.set()
        await never.wait()

    task = asyncio.create_task(w.step("s2", held, s2=V1["s2"]))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not backend._pending


@pytest.mark.parametrize("params", ["?sandbox=1", "?eager=1&task_queue=outlive-eager-test"])
async def test_options_run_the_same_work(backend_url: str, params: str) -> None:
    b = TemporalBackend(backend_url + params)
    await b.start()
    try:
        opened = await open_work(b, versions={"v1": V1}, work_id=wid("opts"))
        work, ctl = opened.work_id, opened.ctl
        w = opened.worker
        for k, v in V1.items():
            await w.step(k, summarise, **{k: v})
        cand = await w.candidate()
        acc = await ctl.assess(work, cand.digest, FORM, lambda c, v: (True, "ok"))
        assert acc.version == "v1"
        assert all(r.status == "completed" and r.inline for r in b.stats.reports)
    finally:
        await b.close()


async def test_the_ledger_workflow_applies_commands_on_the_engines_clock(
        backend: TemporalBackend) -> None:
    """The client-driven ledger passes ``workflow.now()`` as the ledger's ``now``, as the
    memory and SQL stores pass their own clock: a worker's timestamp from the future is clamped."""
    w = await open_work(backend, work_id=wid("clock"))
    ahead = int(time.time() * 1000) + 3_600_000
    await backend.execute(w.work_id, L.Heartbeat(attempt=w.attempt.number, token=w.attempt.token,
                                                 secret=w.attempt.secret, at=ahead))
    st = await backend.load(w.work_id)
    assert st is not None
    att = st.attempt(w.attempt.number)
    assert att is not None
    assert att.last_heartbeat < ahead - 3_000_000, "the worker's clock renewed the lease"


class _LosingBackend(TemporalBackend):
    """Its step worker loses the first ``lose`` activity tasks it is handed: Temporal records
    them started, no body runs and no heartbeat comes - what the 864-run sweep met at
    concurrency 32 (a task the server recorded as started that never reached this process)."""

    lose = 1

    def _make_activity(self) -> Callable[[str], Awaitable[str]]:
        inner = super()._make_activity()

        @activity.defn(name=STEP_ACTIVITY)
        async def losing(key: str) -> str:
            if self.lose > 0:
                self.lose -= 1
                await asyncio.sleep(3600)
            return await inner(key)

        return losing


async def test_a_step_task_lost_before_its_body_ran_is_dispatched_again(backend_url: str) -> None:
    """A heartbeat timeout on a task whose body never started here means nothing happened: the
    backend dispatches the step again (one body run), instead of failing the caller with
    BackendUnavailable. Both paths: one step per update, and a batch of steps."""
    lose = 2
    b = _LosingBackend(backend_url + "?heartbeat_ms=300")
    b.lose = lose
    await b.start()
    try:
        opened = await open_work(b, versions={"v1": V1}, work_id=wid("lost"))
        runs: list[str] = []

        def body(**kw: str) -> dict[str, str]:
            runs.extend(kw)
            return summarise(**kw)

        got = await opened.worker.step("s1", body, s1=V1["s1"])
        assert got == summarise(s1=V1["s1"]) and runs == ["s1"]
        assert b.stats.lost == lose
        assert [r.status for r in b.stats.reports] == ["lost"] * lose + ["completed"]
        b.lose = lose
        await opened.worker.run_steps([("s2", body, {"s2": V1["s2"]})])
        assert runs == ["s1", "s2"] and b.stats.lost == 2 * lose
        st = await b.load(opened.work_id)
        assert st is not None and [e.step for e in st.journal] == ["s1", "s2"]
    finally:
        await b.close()


async def test_a_step_task_lost_every_time_is_unavailable(
        backend_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_backend, "LOST_TASK_TRIES", 2)
    b = _LosingBackend(backend_url + "?heartbeat_ms=300")
    b.lose = 2
    await b.start()
    try:
        opened = await open_work(b, versions={"v1": V1}, work_id=wid("lost-all"))
        with pytest.raises(BackendUnavailable, match="before the body ran"):
            await opened.worker.step("s1", summarise, s1=V1["s1"])
        assert b.stats.lost == 2
    finally:
        await b.close()
