"""``make bench-restate``: an outlive step against a raw ``ctx.run_typed`` step, one server.

Side by side on the same Restate server and the same in-process h2c deployment:

* raw step   - one ingress call to a handler that runs one ``ctx.run_typed`` (the natural
               "one durable step" a Restate user writes per unit of work);
* outlive step - ``Worker.step``: the body as a ``ctx.run_typed`` entry (one invocation) plus the
               fenced journal write (one exclusive ledger invocation: get, apply, set), sent
               as soon as Restate acknowledged the entry (``run_and_record``, "overlap");
* the same with ``step_record=inside`` (the step invocation calls the ledger itself) and as
               before the hook (two sequential client calls), for comparison;
* floor      - ``ctx.run_typed`` inside one already-running invocation (no ingress at all);
* outlive step in a handler - the core Worker inside one invocation (``ContextBackend``): the
               body as ``ctx.run_typed`` plus the journal write as a durable ``object_call``;
* ledger command alone, with and without an idempotency key.

Then the same for a request-response (HTTP/1.1) step service. Prints a table, writes
``.bench/restate.json``. Wall-clock numbers for this machine; medians of N sequential calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import restate

import outlive
from outlive import Attempt, Backend, Controller, Worker
from outlive import ledger as L

from .backend import RestateBackend, serve_in_process
from .handler import ContextBackend
from .owned import owner
from .server import RestateServer
from .services import ledger_app

__all__ = ["main", "measure"]

N = 200


async def _timed(n: int, fn: Callable[[int], Awaitable[Any]]) -> list[float]:
    out = []
    for i in range(n):
        t = time.perf_counter()
        await fn(i)
        out.append((time.perf_counter() - t) * 1000)
    return out


async def _summary(**kw: str) -> dict[str, str]:
    """The step body every outlive measure runs (a stand-in model call)."""
    return {"summary": next(iter(kw.values()))[:8]}


async def _admitted(ctl: Controller, parts: dict[str, str]) -> tuple[str, Attempt]:
    """A fresh work with ``parts`` published as v1, and its admitted first attempt."""
    w = f"bench/{uuid.uuid4().hex[:8]}"
    await ctl.open_work(w)
    await ctl.publish(w, "v1", parts)
    return w, await ctl.admit(w)


async def _worker_steps(b: Backend, ctl: Controller, parts: dict[str, str],
                        n: int) -> dict[str, float]:
    """``Worker.step`` one call at a time on a fresh work: 20 to warm up, then ``n`` timed."""
    _w, a = await _admitted(ctl, parts)
    wk = Worker(b, a, parts, clock=lambda: 1)
    await wk.start()

    async def step(i: int) -> None:
        name = f"s{i}"
        await wk.step(name, _summary, **{name: parts[name]})

    await _timed(20, lambda i: step(n + i))
    return _stats(await _timed(n, step))


_LOOP = f"outlive_bench_{uuid.uuid4().hex[:8]}"
_loop_svc = restate.Service(_LOOP)


@_loop_svc.handler()
async def steps(ctx: restate.Context, req: dict[str, Any]) -> int:
    """n outlive steps by the core Worker inside one invocation (mean cost per step)."""
    n = int(req["n"])
    if n == 0:
        return 0
    cb = ContextBackend(ctx)
    st = await cb.load(req["work_id"])
    assert st is not None
    att = st.attempt(int(req["attempt"]))
    assert att is not None
    wk = Worker(cb, att, req["parts"], clock=lambda: 1)
    await wk.start()
    for i in range(n):
        await wk.step(f"s{i}", _summary, **{f"s{i}": req["parts"][f"s{i}"]})
    return n


@owner("outlive_bench_owner")
async def _owner_steps(worker: Worker, arg: dict[str, Any]) -> int:
    """n outlive steps by the core Worker as the work's owner (``outlive_restate.owned``)."""
    snap = worker.snapshot or {}
    n = int(arg["n"])
    for i in range(n):
        await worker.step(f"s{i}", _summary, **{f"s{i}": snap[f"s{i}"]})
    return n


_RAW = f"outlive_bench_raw_{uuid.uuid4().hex[:8]}"
_raw_svc = restate.Service(_RAW)


@_raw_svc.handler()
async def raw_loop(ctx: restate.Context, req: dict[str, Any]) -> int:
    """n bare ``ctx.run_typed`` steps in one invocation, served beside the owner (the baseline)."""
    n = int(req["n"])

    async def action() -> dict[str, str]:
        return {"summary": "section "}

    for i in range(n):
        await ctx.run_typed(f"raw{i}", action, restate.RunOptions(max_attempts=1))
    return n


async def measure_owner(url: str, n: int = N, runs: int = 9) -> dict[str, Any]:
    """The owner shape against raw ``ctx.run_typed`` steps, both served by one in-process app.

    Each run is one invocation of ``n`` steps, alternating raw and outlive; the per-step cost
    is the whole invocation's wall time over ``n`` (start, state read and heartbeat included).
    The ledger object is served from this process for the measurement (registered over the
    server's deployment), so use a server of its own.
    """
    b = await outlive.open_backend(url)
    assert isinstance(b, RestateBackend)
    http = httpx.AsyncClient(timeout=120)
    hdr = {"content-type": "application/json"}
    stop, task, _dep = await serve_in_process(http, b.admin, ledger_app(),
                                              http11=False)
    stop2, task2, _dep2 = await serve_in_process(http, b.admin, restate.app([_raw_svc]))
    try:
        for _ in range(400):
            r = await http.post(f"{b.ingress}/{_RAW}/raw_loop", json={"n": 1}, headers=hdr)
            if r.status_code == 200:
                break
            await asyncio.sleep(0.05)
        parts = {f"s{i}": f"section {i}" for i in range(n)}
        ctl = Controller(b, clock=lambda: 0)
        raw_ms: list[float] = []
        own_ms: list[float] = []
        for k in range(runs + 1):  # the first pair warms up
            t = time.perf_counter()
            r = await http.post(f"{b.ingress}/{_RAW}/raw_loop", json={"n": n}, headers=hdr)
            assert r.status_code == 200, r.text
            raw = (time.perf_counter() - t) * 1000 / n
            w, a = await _admitted(ctl, parts)
            t = time.perf_counter()
            done = await b.run_owner(w, "outlive_bench_owner", a, {"n": n}, snapshot=parts,
                                     at=1)
            own = (time.perf_counter() - t) * 1000 / n
            assert done == n
            st = await b.load(w)
            assert st is not None and len(st.journal) == n
            if k:
                raw_ms.append(raw)
                own_ms.append(own)
    finally:
        stop.set()
        stop2.set()
        for t_ in (task, task2):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(t_, 5)
        await http.aclose()
        await b.close()
    raw_med, own_med = statistics.median(raw_ms), statistics.median(own_ms)
    return {"raw_run_typed_per_step": {"median_ms": round(raw_med, 3), "n": n * runs},
            "outlive_owner_per_step": {"median_ms": round(own_med, 3), "n": n * runs},
            "ratio_owner_vs_raw": round(own_med / raw_med, 2),
            "ratios_per_run": [round(o / r, 2) for o, r in zip(own_ms, raw_ms, strict=True)]}


def _stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"median_ms": round(statistics.median(xs), 3),
            "p95_ms": round(xs[int(len(xs) * 0.95) - 1], 3), "n": len(xs)}


async def measure(url: str, n: int = N) -> dict[str, Any]:
    """Per-step costs on the server at ``url`` (already serving the outlive deployment)."""
    b = await outlive.open_backend(url)
    assert isinstance(b, RestateBackend)
    res: dict[str, Any] = {}
    try:
        await b._ensure_steps()
        http = httpx.AsyncClient(timeout=30)
        hdr = {"content-type": "application/json"}

        async def raw(i: int) -> None:
            r = await http.post(f"{b.ingress}/{b.step_service}/raw", content=b"1", headers=hdr)
            assert r.status_code == 200

        await _timed(20, raw)  # warm up
        res["raw_step"] = _stats(await _timed(n, raw))

        parts = {f"s{i}": f"section {i}" for i in range(n + 20)}
        ctl = Controller(b, clock=lambda: 0)
        res["outlive_step"] = await _worker_steps(b, ctl, parts, n)

        # the step invocation making the ledger call itself (one ingress call, one invocation
        # plus the ledger's): the design the run_and_record hook was added for
        b.step_record = "inside"
        res["outlive_step_one_invocation"] = await _worker_steps(b, ctl, parts, n)
        b.step_record = "overlap"

        # before the run_and_record hook: the step's invocation, then the journal write as a
        # second ingress call (the core's default run_and_record = run_step + execute)
        b.run_and_record = functools.partial(Backend.run_and_record, b)  # type: ignore[method-assign]
        try:
            res["outlive_step_two_invocations"] = await _worker_steps(b, ctl, parts, n)
        finally:
            delattr(b, "run_and_record")

        async def loop(_i: int) -> None:
            r = await http.post(f"{b.ingress}/{b.step_service}/raw_loop",
                                content=json.dumps({"n": n}).encode(), headers=hdr)
            assert r.status_code == 200

        whole = await _timed(3, loop)
        res["floor_run_typed_in_one_invocation"] = {"median_ms": round(
            statistics.median(whole) / n, 3), "n": n * 3}

        # the worker as a handler: n outlive steps inside one invocation (ContextBackend)
        stop, task, _dep = await serve_in_process(http, b.admin, restate.app([_loop_svc]))
        w3, a3 = await _admitted(ctl, parts)
        for _ in range(400):
            r = await http.post(f"{b.ingress}/{_LOOP}/steps", json={"n": 0}, headers=hdr)
            if r.status_code == 200:
                break
            await asyncio.sleep(0.05)
        t = time.perf_counter()
        r = await http.post(f"{b.ingress}/{_LOOP}/steps", json={
            "n": n, "work_id": w3, "attempt": a3.number, "parts": parts}, headers=hdr)
        assert r.status_code == 200, r.text
        res["outlive_step_in_handler"] = {
            "median_ms": round((time.perf_counter() - t) * 1000 / n, 3), "n": n}
        stop.set()
        await asyncio.wait_for(task, 5)

        w2, a2 = await _admitted(ctl, {"s": "x"})

        async def beat(i: int) -> None:
            await b.execute(w2, L.Heartbeat(attempt=a2.number, token=a2.token, at=i))

        res["ledger_command"] = _stats(await _timed(n, beat))
        res["ledger_command_no_idempotency_key"] = _stats(await _timed(n, lambda i: _plain(
            http, b, w2, a2.number, a2.token, i)))

        async def load(_i: int) -> None:
            await b.load(w2)

        res["ledger_read"] = _stats(await _timed(n, load))
        await http.aclose()
    finally:
        await b.close()
    res["ratio_outlive_vs_raw"] = round(
        res["outlive_step"]["median_ms"] / res["raw_step"]["median_ms"], 2)
    res["ratio_in_handler_vs_floor"] = round(
        res["outlive_step_in_handler"]["median_ms"]
        / res["floor_run_typed_in_one_invocation"]["median_ms"], 2)
    return res


async def _plain(http: httpx.AsyncClient, b: RestateBackend, w: str, att: int, tok: int,
                 i: int) -> None:
    from urllib.parse import quote

    from outlive import codec
    body = codec.dumps(L.Heartbeat(attempt=att, token=tok, at=i)).encode()
    r = await http.post(f"{b.ingress}/outlive_ledger/{quote(w, safe='')}/execute", content=body,
                        headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    n = int(argv[0]) if argv else N
    print(f"outlive on Restate: per-step cost, median of {n} sequential calls")
    report: dict[str, Any] = {}
    with RestateServer() as srv:
        report["bidi"] = asyncio.run(measure(srv.url, n))
        report["request_response"] = asyncio.run(
            measure(srv.url + "&steps_protocol=request_response", n))
    with RestateServer() as srv:  # its ledger is re-registered in-process by measure_owner
        report["owner"] = asyncio.run(measure_owner(srv.url, n))
    print(f"{'measure':42} {'bidi (h2c)':>14} {'request-resp.':>14}")
    for k, v in report["bidi"].items():
        if isinstance(v, dict):
            rr = report["request_response"][k]["median_ms"]
            print(f"{k:42} {v['median_ms']:>11.2f} ms {rr:>11.2f} ms")
    print(f"{'ratio outlive step / raw ctx.run_typed step':42} "
          f"{report['bidi']['ratio_outlive_vs_raw']:>13}x "
          f"{report['request_response']['ratio_outlive_vs_raw']:>13}x   (target <= 1.25x)")
    print(f"{'ratio in-handler outlive step / floor':42} "
          f"{report['bidi']['ratio_in_handler_vs_floor']:>13}x "
          f"{report['request_response']['ratio_in_handler_vs_floor']:>13}x")
    o = report["owner"]
    print(f"\nowner shape (the attempt is one invocation of the work's ledger object), "
          f"{n} steps per invocation, median of 9 runs:")
    print(f"{'raw ctx.run_typed step, in one invocation':42} "
          f"{o['raw_run_typed_per_step']['median_ms']:>11.3f} ms")
    print(f"{'outlive step as the owner, in one invocation':42} "
          f"{o['outlive_owner_per_step']['median_ms']:>11.3f} ms")
    print(f"{'ratio owner step / raw ctx.run_typed step':42} {o['ratio_owner_vs_raw']:>13}x"
          f"   (target <= 1.25x; per run: {o['ratios_per_run']})")
    out = Path(".bench")
    out.mkdir(exist_ok=True)
    (out / "restate.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
