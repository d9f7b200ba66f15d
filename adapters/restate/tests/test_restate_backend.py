"""The backend's contract on a real Restate server, through outlive's Controller and Worker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx
import pytest

import outlive
from outlive import Contract, Controller, MemoryReceiver, StrictCurrent, Worker
from outlive import ledger as L
from outlive.backend import StepCall
from outlive.hashing import content_hash
from outlive_restate import RestateBackend
from outlive_restate.server import RestateServer

pytestmark = pytest.mark.asyncio(loop_scope="session")

V1 = {"s1": "Intro: a steady quarter.", "s2": "Revenue was 4.1 million.",
      "s3": "Costs fell by 3 percent.", "s4": "Outlook: cautious."}
V2 = {**V1, "s2": "Revenue was 4.7 million."}
CONTRACT = Contract(name="form", version="1", assessor="test")


def ok(_c: Any, _v: Any) -> tuple[bool, str]:
    return True, "complete"


def wid() -> str:
    return f"test/{uuid.uuid4().hex[:10]}/digest/q3-report"


@pytest.fixture(scope="module")
async def backend(restate_url: str) -> AsyncIterator[outlive.Backend]:
    b = await outlive.open_backend(restate_url)
    try:
        yield b
    finally:
        await b.close()


async def _open(b: outlive.Backend, w: str) -> Controller:
    ctl = Controller(b, clock=lambda: 0)
    await ctl.open_work(w)
    await ctl.publish(w, "v1", V1)
    return ctl


async def test_url_resolves_through_entry_points(backend: outlive.Backend) -> None:
    assert isinstance(backend, RestateBackend)
    assert backend.ingress.startswith("http://127.0.0.1:")


async def test_fencing_restore_accept_effect(backend: outlive.Backend) -> None:
    w = wid()
    ctl = await _open(backend, w)
    calls: list[tuple[int, str]] = []

    def model(attempt: int) -> Any:
        def f(**kw: str) -> dict[str, Any]:
            (name, text), = kw.items()
            calls.append((attempt, name))
            return {"summary": text[:12], "by": attempt}
        return f

    a1 = await ctl.admit(w)
    w1 = Worker(backend, a1, V1, clock=lambda: 1)
    await w1.start()
    for k in ("s1", "s2"):
        await w1.step(k, model(1), **{k: V1[k]})
    # input changes, #1 goes silent, #2 admitted on v2
    await ctl.publish(w, "v2", V2)
    await backend.execute(w, Controller(backend).stamp(L.MarkUnknown(attempt=a1.number, at=5)))
    a2 = await ctl.admit(w)
    assert a2.token == a1.token + 1 and a2.pinned_version == "v2"
    before = await backend.load(w)
    assert before is not None
    with pytest.raises(outlive.StaleOwner):
        await w1.step("s3", model(1), s3=V1["s3"])
    after = await backend.load(w)
    assert after == before, "a rejected write changed the ledger"
    w2 = Worker(backend, a2, V2, clock=lambda: 6)
    await w2.start()
    for k in V2:
        await w2.step(k, model(2), **{k: V2[k]})
    assert w2.steps["s1"].restored and not w2.steps["s2"].restored
    assert [c for c in calls if c[0] == 2] == [(2, "s2"), (2, "s3"), (2, "s4")]
    cand = await w2.candidate()
    acc = await ctl.assess(w, cand.digest, CONTRACT, ok)
    assert acc.version == "v2"
    feed = MemoryReceiver()
    key = f"announce:{w}:{cand.digest}"
    r1 = await w2.effect(key, {"msg": "hi"}, lambda k, p: feed.receive(k, p, lambda _p: "P1"))
    r2 = await w2.effect(key, {"msg": "hi"}, lambda k, p: feed.receive(k, p, lambda _p: "P2"))
    assert r1.effect_id == r2.effect_id == "P1" and len(feed.applied) == 1
    dep = await ctl.dependable(w, StrictCurrent())
    assert dep is not None and dep.version == "v2"
    assert w in await backend.works()


async def test_forged_token_wrong_version_oversized_write_nothing(backend: outlive.Backend) -> None:
    w = wid()
    ctl = await _open(backend, w)
    a1 = await ctl.admit(w)
    st0 = await backend.load(w)
    with pytest.raises(outlive.UnknownToken):
        await backend.execute(w, L.Heartbeat(attempt=a1.number, token=a1.token + 7, at=1))
    big = "x" * (L.MAX_PAYLOAD_BYTES + 10)
    src = {"s1": content_hash(V1["s1"])}
    from outlive.hashing import input_key
    write = L.StepWrite(step="s1", sources=src, input_key=input_key("s1", src), result=big,
                        result_id="r1")
    with pytest.raises(outlive.errors.PayloadTooLarge):
        await backend.execute(w, L.RecordSteps(attempt=1, token=a1.token, entries=(write,), at=1,
                                               secret=a1.secret))
    # a step that read v2's section while pinned to v1
    src2 = {"s2": content_hash(V2["s2"])}
    w2 = L.StepWrite(step="s2", sources=src2, input_key=input_key("s2", src2), result="r",
                     result_id="r2")
    with pytest.raises(outlive.VersionMismatch):
        await backend.execute(w, L.RecordSteps(attempt=1, token=a1.token, entries=(w2,), at=1,
                                               secret=a1.secret))
    assert await backend.load(w) == st0, "a rejected command wrote something"
    # a candidate built for v1 once v2 is current: refused at acceptance, nothing written
    wk = Worker(backend, a1, V1, clock=lambda: 2)
    await wk.start()
    await wk.step("s1", lambda s1: {"s": s1[:5]}, s1=V1["s1"])
    cand = await wk.candidate()
    await ctl.publish(w, "v2", V2)
    st1 = await backend.load(w)
    with pytest.raises(outlive.VersionMismatch):
        await ctl.assess(w, cand.digest, CONTRACT, ok)
    with pytest.raises(outlive.VersionMismatch):  # even bypassing the controller's pre-check
        await backend.execute(w, ctl.stamp(L.Accept(digest=cand.digest, contract=CONTRACT,
                                                     verdict=True, at=3)))
    assert await backend.load(w) == st1


async def test_every_rejection_keeps_its_class(backend: outlive.Backend) -> None:
    w = wid()
    with pytest.raises(outlive.errors.NotFound):
        await backend.execute(w, Controller(backend).stamp(L.Admit(at=0)))
    ctl = await _open(backend, w)
    with pytest.raises(outlive.errors.InputConflict):
        await ctl.publish(w, "v1", V2)
    with pytest.raises(outlive.errors.WorkExists):
        await backend.execute(w, L.OpenWork(policy=outlive.Policy(fencing=False)))
    a = await ctl.admit(w)
    with pytest.raises(outlive.errors.AttemptActive):
        await ctl.admit(w)
    assert await backend.load(f"{w}/never-opened") is None
    src = {"s1": content_hash(V1["s1"])}
    lie = L.StepWrite(step="s1", sources=src, input_key="not-the-hash", result="r",
                      result_id="r1")
    with pytest.raises(outlive.errors.UndeclaredInput):
        await backend.execute(w, L.RecordSteps(attempt=a.number, token=a.token, entries=(lie,),
                                               at=1, secret=a.secret))
    wk = Worker(backend, a, V1, clock=lambda: 2)
    await wk.start()
    await wk.step("s1", lambda s1: {"s": s1[:5]}, s1=V1["s1"])
    cand = await wk.candidate()
    before = await backend.load(w)
    assert before is not None
    with pytest.raises(outlive.ContractFailed):
        await ctl.assess(w, cand.digest, CONTRACT, lambda c, v: (False, "too short"))
    after = await backend.load(w)   # the refusal is a record (in its own key), nothing else moved
    assert after is not None
    assert [(r.digest, r.contract) for r in after.refusals] == [(cand.digest, CONTRACT)]
    assert replace(after, refusals=(), seq=before.seq, attempts=before.attempts) == before


async def test_garbage_on_the_wire_is_invalid_record(backend: outlive.Backend,
                                                     restate_server: RestateServer) -> None:
    w = wid()
    async with httpx.AsyncClient() as http:
        r = await http.post(f"{restate_server.ingress}/outlive_ledger/{w.replace('/', '%2F')}"
                            f"/outlive_execute", content=b'{"@t":"Nope","v":{}}',
                            headers={"content-type": "application/json"})
    assert r.status_code == 400 and "InvalidRecord" in r.text
    assert await backend.load(w) is None


async def test_concurrent_commands_on_one_work_are_serialised(backend: outlive.Backend) -> None:
    w = wid()
    ctl = await _open(backend, w)
    a = await ctl.admit(w)
    await asyncio.gather(*(backend.execute(w, L.Heartbeat(attempt=a.number, token=a.token, at=i,
                                                          secret=a.secret))
                           for i in range(40)))
    st = await backend.load(w)
    assert st is not None
    att = st.attempt(a.number)
    assert att is not None and att.heartbeats == 40, "lost updates: exclusive handler broken?"


async def test_step_runs_once_and_body_errors_keep_their_type(backend: outlive.Backend) -> None:
    runs = 0

    async def body() -> dict[str, int]:
        nonlocal runs
        runs += 1
        await asyncio.sleep(0.3)  # held: longer than a round trip
        return {"n": runs}

    call = StepCall(work_id=wid(), attempt=1, token=1, step="s1", input_key="k")
    assert await backend.run_step(call, body) == {"n": 1}
    assert runs == 1

    class Boom(Exception):
        pass

    async def bad() -> None:
        raise Boom("model down")

    with pytest.raises(Boom):
        await backend.run_step(call, bad)


async def test_unreachable_server_is_backend_unavailable() -> None:
    from outlive_restate.server import free_port
    url = f"restate://127.0.0.1:{free_port()}?admin={free_port()}"
    with pytest.raises(outlive.errors.BackendUnavailable, match="unreachable"):
        await outlive.open_backend(url)


async def test_bad_url_is_config_error() -> None:
    with pytest.raises(outlive.errors.ConfigError):
        RestateBackend("restate://?admin=x")


async def test_effect_to_a_restate_handler_uses_the_operation_key(
        backend: outlive.Backend, restate_server: RestateServer) -> None:
    from outlive_restate import http_sender, restate_sender
    feed = f"feed-{uuid.uuid4().hex[:8]}"
    send = restate_sender(restate_server.ingress, "feed", "post", key=feed)
    op = f"announce:digest/q3-report:{uuid.uuid4().hex}"
    r1 = await send(op, {"msg": "digest"})
    r2 = await send(op, {"msg": "digest"})  # the resend of an unconfirmed post
    assert r1.effect_id == r2.effect_id == "P1" and not r1.duplicate and r2.duplicate
    r3 = await send(f"{op}:attempt-2", {"msg": "digest"})  # a per-attempt key: posted twice
    assert r3.effect_id == "P2" and not r3.duplicate
    hs = http_sender(f"{restate_server.ingress}/feed/{feed}/post")
    h1 = await hs("other-op", {"msg": "x"})
    h2 = await hs("other-op", {"msg": "x"})  # the Idempotency-Key header, honoured by Restate
    assert h1.effect_id == h2.effect_id == "P3"
    async with httpx.AsyncClient() as http:
        posts = (await http.post(f"{restate_server.ingress}/feed/{feed}/posts")).json()
    assert [p["effect_id"] for p in posts] == ["P1", "P2", "P3"]
    # through the worker: intent, send with the key, confirmation
    w = wid()
    ctl = await _open(backend, w)
    a = await ctl.admit(w)
    wk = Worker(backend, a, V1, clock=lambda: 1)
    await wk.start()
    rec = await wk.effect(f"announce:{w}:d", {"msg": "hi"}, send)
    st = await backend.load(w)
    assert st is not None and st.effects[0].receipt == rec and rec.key == f"announce:{w}:d"


async def test_deployments_use_the_bidirectional_protocol(backend: outlive.Backend,
                                                          restate_server: RestateServer) -> None:
    async with httpx.AsyncClient() as http:
        deps = (await http.get(f"{restate_server.admin}/deployments")).json()["deployments"]
    by_service = {s["name"]: d for d in deps for s in d["services"]}
    for name in ("outlive_ledger", "outlive_lease", "reports"):
        assert by_service[name]["protocol_type"] == "BidiStream", by_service[name]
        assert by_service[name]["http_version"] == "HTTP/2.0"


async def test_oversized_step_result_through_the_engine_is_refused(
        backend: outlive.Backend) -> None:
    w = wid()
    ctl = await _open(backend, w)
    a = await ctl.admit(w)
    wk = Worker(backend, a, V1, clock=lambda: 1)
    await wk.start()
    before = await backend.load(w)

    async def huge(**_kw: str) -> str:
        return "x" * (2 * 1024 * 1024)  # 2 MB travels through ctx.run_typed, then the ledger

    with pytest.raises(outlive.errors.PayloadTooLarge):
        await wk.step("s1", huge, s1=V1["s1"])
    assert await backend.load(w) == before


async def test_storage_layout_covers_every_collection_of_the_state() -> None:
    """A record kind added to WorkState must get its own key, or the Restate store drops it."""
    from dataclasses import fields

    from outlive.records import WorkState
    from outlive_restate._ledger import _COLLECTIONS

    tuples = {f.name for f in fields(WorkState) if f.default == ()}
    assert tuples - {"journal", "attempts"} == set(_COLLECTIONS)


class _Capture(outlive.Backend):
    """Keeps a worker's step writes instead of sending them (to send them by hand)."""

    def __init__(self, inner: outlive.Backend) -> None:
        super().__init__("capture://")
        self.inner = inner
        self.steps: list[L.RecordSteps] = []

    async def execute(self, work_id: str, command: L.Command) -> L.Outcome:
        if isinstance(command, L.RecordSteps):
            self.steps.append(command)
            return L.Outcome(kind="held")
        return await self.inner.execute(work_id, command)

    async def load(self, work_id: str) -> Any:
        return await self.inner.load(work_id)


async def test_steps_carried_by_a_command_are_applied_first_and_refused_alone(
        backend: outlive.Backend, restate_server: RestateServer) -> None:
    """A held attempt's steps travel with its next command (one invocation of the ledger): they
    are applied just before it; their refusal (a stale token) writes nothing and is dropped, as
    a sent write's would be, and the command after them meets the same fence. A pair is only
    a RecordSteps and a command, never with the state answer asked for."""
    from outlive_restate import _errors
    from outlive_restate._ledger import ANSWER

    w = wid()
    ctl = await _open(backend, w)
    a1 = await ctl.admit(w)
    cap = _Capture(backend)
    wk = Worker(cap, a1, V1, clock=lambda: 1)
    await wk.start()
    await wk.step("s1", lambda s1: {"s": s1[:5]}, s1=V1["s1"])
    await wk.step("s2", lambda s2: {"s": s2[:5]}, s2=V1["s2"])
    s1, s2 = cap.steps
    url = f"{restate_server.ingress}/outlive_ledger/{w.replace('/', '%2F')}/outlive_execute"

    def beat(a: Any, at: int) -> L.Heartbeat:
        return L.Heartbeat(attempt=a.number, token=a.token, at=at, secret=a.secret)

    async with httpx.AsyncClient(headers={"content-type": "application/json"}) as http:
        r = await http.post(url, content=_errors.dumps((s1, beat(a1, 2))))
        assert r.status_code == 200, r.text
        assert _errors.loads(r.content).kind == "beat"
        st = await backend.load(w)
        assert st is not None and [e.step for e in st.journal] == ["s1"]
        att = st.attempt(1)
        assert att is not None and att.heartbeats == 1
        # a pair asking for the state answer, or not a RecordSteps and a command: refused whole
        for body, headers in (((s2, beat(a1, 3)), {ANSWER: "state"}),
                              ((s2, "not a command"), {}), ((beat(a1, 3), beat(a1, 3)), {})):
            r = await http.post(url, content=_errors.dumps(body), headers=headers)
            assert r.status_code == 400 and "InvalidRecord" in r.text, r.text
        assert await backend.load(w) == st
        # #1 replaced: its carried steps are refused and write nothing, its beat says so
        await backend.execute(w, Controller(backend).stamp(L.MarkUnknown(attempt=1, at=4)))
        await ctl.admit(w)
        r = await http.post(url, content=_errors.dumps((s2, beat(a1, 5))))
        assert r.status_code == 200, r.text
        assert _errors.loads(r.content).kind == "superseded"
    st = await backend.load(w)
    assert st is not None and [e.step for e in st.journal] == ["s1"]
    assert st.stale_writes_applied == 0
