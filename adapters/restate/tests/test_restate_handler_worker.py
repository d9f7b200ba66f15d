"""The worker as a Restate handler: the unchanged core Worker inside an invocation, its steps as
that invocation's ``ctx.run_typed`` entries, its records as durable calls to the ledger object."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import restate

import outlive
from outlive import Contract, Controller, Worker
from outlive import ledger as L
from outlive.errors import OutliveError
from outlive_restate import RestateBackend
from outlive_restate.backend import _error, serve_in_process
from outlive_restate.handler import ContextBackend, terminal

pytestmark = pytest.mark.asyncio(loop_scope="session")

V1 = {"s1": "Intro: a steady quarter.", "s2": "Revenue was 4.1 million.",
      "s3": "Costs fell by 3 percent.", "s4": "Outlook: cautious."}
V2 = {**V1, "s2": "Revenue was 4.7 million."}
CALLS: list[tuple[int, str]] = []
NAME = f"q3_worker_{uuid.uuid4().hex[:8]}"

svc = restate.Service(NAME)


@svc.handler()
async def summarise(ctx: restate.Context, req: dict[str, Any]) -> dict[str, Any]:
    """One attempt of the q3 work, run by Restate; a replay restores steps from its journal."""
    if "work_id" not in req:
        return {"ready": True}  # the readiness probe
    b = ContextBackend(ctx)
    try:
        st = await b.load(req["work_id"])
        assert st is not None
        att = st.attempt(int(req["attempt"]))
        assert att is not None
        wk = Worker(b, att, req["snapshot"], clock=lambda: int(req["at"]))
        await wk.start()

        def model(**kw: str) -> dict[str, Any]:
            (name, text), = kw.items()
            CALLS.append((att.number, name))
            return {"summary": text[:12], "by": att.number}

        for name, text in req["snapshot"].items():
            await wk.step(name, model, **{name: text})
        cand = await wk.candidate({"text": " / ".join(sorted(req["snapshot"]))})
    except OutliveError as exc:
        raise terminal(exc) from None
    return {"digest": cand.digest,
            "restored": sorted(k for k, s in wk.steps.items() if s.restored)}


@pytest.fixture(scope="module")
async def backend(restate_url: str) -> AsyncIterator[RestateBackend]:
    b = await outlive.open_backend(restate_url)
    assert isinstance(b, RestateBackend)
    http = httpx.AsyncClient(timeout=30)
    stop, task, _dep = await serve_in_process(http, b.admin, restate.app([svc]))
    try:
        for _ in range(200):  # registered is not callable yet
            r = await http.post(f"{b.ingress}/{NAME}/summarise", json={})
            if r.status_code == 200:
                break
            await asyncio.sleep(0.05)
        yield b
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
        await http.aclose()
        await b.close()


async def _attempt(b: RestateBackend, w: str, n: int, snap: dict[str, str],
                   at: int) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(f"{b.ingress}/{NAME}/summarise",
                               json={"work_id": w, "attempt": n, "snapshot": snap, "at": at})


async def test_handler_worker_restores_by_input_key_and_is_fenced(backend: RestateBackend) -> None:
    w = f"handler/{uuid.uuid4().hex[:8]}"
    ctl = Controller(backend, clock=lambda: 0)
    await ctl.open_work(w)
    await ctl.publish(w, "v1", V1)
    a1 = await ctl.admit(w)
    r = await _attempt(backend, w, a1.number, V1, 1)
    assert r.status_code == 200, r.text
    assert [c for c in CALLS if c[0] == 1] == [(1, "s1"), (1, "s2"), (1, "s3"), (1, "s4")]
    # the input changes; #1 is replaced; #2 restores what still matches and redoes s2 only
    await ctl.publish(w, "v2", V2)
    await backend.execute(w, L.MarkUnknown(attempt=a1.number, at=5))
    a2 = await ctl.admit(w)
    r2 = await _attempt(backend, w, a2.number, V2, 6)
    assert r2.status_code == 200, r2.text
    assert r2.json()["restored"] == ["s1", "s3", "s4"]
    assert [c for c in CALLS if c[0] == 2] == [(2, "s2")]
    # the replaced attempt run again by Restate: its candidate write is refused by the token,
    # and the typed error crosses the handler and the ingress intact
    before = await backend.load(w)
    stale = await _attempt(backend, w, a1.number, V1, 8)
    err = _error(stale)
    assert isinstance(err, outlive.StaleOwner), stale.text
    assert await backend.load(w) == before
    acc = await ctl.assess(w, r2.json()["digest"],
                           Contract(name="form", version="1", assessor="t"),
                           lambda c, v: (True, "ok"))
    assert acc.version == "v2"
