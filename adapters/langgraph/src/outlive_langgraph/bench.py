"""``make bench-langgraph``: an outlive step on LangGraph against a raw ``@task``, side by side.

Same checkpointer (a SqliteSaver file, or InMemorySaver), same durability, same process, same
trivial body. Two shapes are measured, each against its own raw baseline:

* in-entrypoint: N steps inside one ``@entrypoint`` invocation — raw ``@task`` vs ``outlive_task``
  (the ported-workflow shape; outlive adds an input-key lookup and one fenced ledger write);
* invocation-per-step: ``Worker.step`` through ``Backend.run_step`` (what the conformance harness
  drives) vs a raw one-task ``ainvoke`` per step on the same thread.

Also on ``langgraph+postgres`` (a throwaway server). Then the full 864-run sweep on
``langgraph+sqlite``. Writes ``.bench/langgraph.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.func import entrypoint, task

from outlive import Controller, Worker, open_backend

from ._engine import outlive_task, persist_for, run
from .backend import Durability, LangGraphBackend

__all__ = ["main"]

Timed = list[float]


def _stats(xs: Timed) -> dict[str, float]:
    return {"median_ms": statistics.median(xs) * 1e3, "mean_ms": statistics.fmean(xs) * 1e3}


async def _fresh(url: str, work: str) -> tuple[LangGraphBackend, Worker]:
    b = await open_backend(url)
    assert isinstance(b, LangGraphBackend)
    ctl = Controller(b, clock=lambda: 0)
    await ctl.open_work(work)
    await ctl.publish(work, "v1", {"doc": "x"})
    a = await ctl.admit(work)
    return b, Worker(b, a, None, clock=lambda: 1)


async def in_entrypoint(url: str, n: int, durability: Durability) -> dict[str, Any]:
    b, w = await _fresh(url, "bench-a")
    w.persist = persist_for(durability)
    await w.start()
    raw_t: Timed = []
    out_t: Timed = []

    @task
    async def raw_step(i: int) -> dict[str, int]:
        return {"i": i}

    @outlive_task(step=lambda i: f"s{i}")
    async def outlive_step(i: int) -> dict[str, int]:
        return {"i": i}

    async def timed(times: Timed, call: Callable[[int], Awaitable[Any]]) -> None:
        for i in range(n):
            t0 = time.perf_counter()
            await call(i)
            times.append(time.perf_counter() - t0)

    @entrypoint(checkpointer=b.checkpointer)
    async def raw_prog(_: int) -> int:
        await timed(raw_t, raw_step)
        return n

    @entrypoint(checkpointer=b.checkpointer)
    async def outlive_prog(_: int) -> int:
        await timed(out_t, outlive_step)
        if durability == "exit":  # the end-of-attempt flush is part of the steps' cost
            t0 = time.perf_counter()
            await w.finish()
            out_t.append(time.perf_counter() - t0)
        return n

    cfg: RunnableConfig = {"configurable": {"thread_id": "bench-raw"}}
    # interleave the two so that neither gets a warmer cache or a cooler disk
    for _ in range(2):
        await raw_prog.ainvoke(0, cfg, durability=durability)
    await run(outlive_prog, 0, worker=w, durability=durability)
    await b.close()
    raw_t = raw_t[n:]  # the second, warm pass
    return {"raw_task": _stats(raw_t), "outlive_task": _stats(out_t),
            "ratio_median": statistics.median(out_t) / statistics.median(raw_t),
            "ratio_mean": statistics.fmean(out_t) / statistics.fmean(raw_t)}


async def per_invocation(url: str, n: int, durability: Durability) -> dict[str, Any]:
    b, w = await _fresh(url, "bench-b")
    await w.start()
    raw_t: Timed = []
    out_t: Timed = []

    @task
    async def one(i: int) -> dict[str, int]:
        return {"i": i}

    @entrypoint(checkpointer=b.checkpointer)
    async def raw_prog(i: int) -> dict[str, int]:
        return await one(i)

    cfg: RunnableConfig = {"configurable": {"thread_id": "bench-raw-inv"}}
    for i in range(n):
        t0 = time.perf_counter()
        await raw_prog.ainvoke(i, cfg, durability=durability)
        raw_t.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        await w.step(f"s{i}", lambda i: {"i": i}, i=i)
        out_t.append(time.perf_counter() - t0)
    await b.close()
    return {"raw_invoke": _stats(raw_t), "outlive_worker_step": _stats(out_t),
            "ratio_median": statistics.median(out_t) / statistics.median(raw_t),
            "ratio_mean": statistics.fmean(out_t) / statistics.fmean(raw_t)}


async def sweep_time(url: str) -> dict[str, Any]:
    from outlive_conformance.scenario import q3_report
    from outlive_conformance.sweep import sweep

    b = await open_backend(url)
    try:
        res = await sweep(b, q3_report(), concurrency=8)
    finally:
        await b.close()
    return {"runs": len(res.runs), "seconds": res.seconds}


async def _main(n: int, out: Path | None, do_sweep: bool, pg: bool) -> dict[str, Any]:
    report: dict[str, Any] = {"steps": n}
    with tempfile.TemporaryDirectory() as d:
        for durability in ("sync", "exit"):
            for name, url in (("sqlite", f"langgraph+sqlite:///{d}/{durability}-a.db"),
                              ("memory", "langgraph+memory://")):
                report[f"in_entrypoint/{name}/{durability}"] = await in_entrypoint(
                    url, n, durability)
            report[f"per_invocation/sqlite/{durability}"] = await per_invocation(
                f"langgraph+sqlite:///{d}/{durability}-b.db?durability={durability}", n,
                durability)
        if pg:
            from .pgserver import PostgresServer

            with PostgresServer() as server:
                report["in_entrypoint/postgres/sync"] = await in_entrypoint(
                    server.create_database("bench_a"), n, "sync")
                report["per_invocation/postgres/sync"] = await per_invocation(
                    server.create_database("bench_b"), n, "sync")
        if do_sweep:
            report["sweep/sqlite"] = await sweep_time(f"langgraph+sqlite:///{d}/sweep.db")
    print(f"outlive on LangGraph: per-step cost, {n} steps, same checkpointer and durability")
    print(f"{'shape/saver/durability':34} {'raw median':>11} {'outlive median':>15} "
          f"{'raw mean':>9} {'outlive mean':>13} {'ratio med/mean':>15}")
    for key, val in report.items():
        if not isinstance(val, dict) or "ratio_mean" not in val:
            continue
        raw, ours = [v for k, v in val.items() if not k.startswith("ratio")]
        print(f"{key:34} {raw['median_ms']:10.3f}ms {ours['median_ms']:14.3f}ms "
              f"{raw['mean_ms']:8.3f}ms {ours['mean_ms']:12.3f}ms "
              f"{val['ratio_median']:7.2f}x/{val['ratio_mean']:.2f}x")
    if "sweep/sqlite" in report:
        s = report["sweep/sqlite"]
        print(f"full sweep on langgraph+sqlite: {s['runs']} runs in {s['seconds']:.1f} s")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2))
    return report


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m outlive_langgraph.bench")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--no-sweep", action="store_true")
    p.add_argument("--no-postgres", action="store_true")
    args = p.parse_args(argv)
    asyncio.run(_main(args.steps, args.out, not args.no_sweep, not args.no_postgres))


if __name__ == "__main__":
    main()
