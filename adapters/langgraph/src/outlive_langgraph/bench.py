"""``make bench-langgraph``: an outlive step on LangGraph against raw LangGraph, side by side.

The raw baseline runs under the saver a user writes (``AsyncSqliteSaver`` on its own file,
``AsyncPostgresSaver``, ``InMemorySaver``); outlive's side under the backend's fenced saver. Same
durability, same process, same trivial body. Three shapes, each against its own raw baseline:

* in-entrypoint: N steps inside one ``@entrypoint`` invocation — raw ``@task`` vs ``outlive_task``
  (outlive adds one task envelope, an input-key lookup, one fenced ledger write and the fence
  check inside LangGraph's own write);
* node: a ``StateGraph`` node run N times (one superstep each) — plain node vs ``outlive_node``;
* invocation-per-step: ``Worker.step`` through ``Backend.run_step`` (what the conformance harness
  drives) vs a raw one-task ``ainvoke`` per step.

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
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from itertools import pairwise
from pathlib import Path
from typing import Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.func import entrypoint, task
from langgraph.graph import END, START, StateGraph

from outlive import Controller, External, Worker, open_backend

from ._checkpoint import FencedAsyncSqliteSaver, FencedCheckpointer
from ._engine import outlive_node, outlive_task, persist_for, run
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


@asynccontextmanager
async def _user_saver(b: LangGraphBackend, d: str,
                      name: str) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """The saver a LangGraph user writes themselves, for the raw baseline (its own database)."""
    url = b.url
    if url.startswith("langgraph+postgres"):
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        from .postgres import LangGraphPostgresBackend

        assert isinstance(b, LangGraphPostgresBackend)
        async with AsyncPostgresSaver.from_conn_string(b.conninfo) as pg:
            await pg.setup()
            yield pg
    elif url.startswith("langgraph+memory"):
        yield InMemorySaver()
    else:
        async with AsyncSqliteSaver.from_conn_string(f"{d}/{name}-raw.db") as saver:
            await saver.conn.execute("PRAGMA synchronous=FULL")
            await saver.setup()
            yield saver


def _fenced(b: LangGraphBackend) -> BaseCheckpointSaver[Any]:
    """outlive's side: the backend's saver, fenced (the SQLite one is fenced already)."""
    saver = b.checkpointer
    if isinstance(saver, FencedAsyncSqliteSaver | FencedCheckpointer):
        return saver
    return b.fence(saver)


async def in_entrypoint(url: str, n: int, durability: Durability, d: str) -> dict[str, Any]:
    """N steps inside one ``@entrypoint`` invocation: raw ``@task`` vs ``outlive_task``."""
    b, w = await _fresh(url, "bench-a")
    w.persist = persist_for(durability)
    await w.start()
    raw_t: Timed = []
    out_t: Timed = []

    @task
    async def raw_step(i: int) -> dict[str, int]:
        return {"i": i}

    @outlive_task
    async def outlive_step(i: int) -> dict[str, int]:
        return {"i": i}

    async def timed(times: Timed, call: Callable[[int], Awaitable[Any]]) -> None:
        for i in range(n):
            t0 = time.perf_counter()
            await call(i)
            times.append(time.perf_counter() - t0)

    async with _user_saver(b, d, f"a-{durability}") as user_saver:
        @entrypoint(checkpointer=user_saver)
        async def raw_prog(_: int) -> int:
            await timed(raw_t, raw_step)
            return n

        @entrypoint(checkpointer=_fenced(b))
        async def outlive_prog(_: int) -> int:
            await timed(out_t, outlive_step)
            return n

        cfg: RunnableConfig = {"configurable": {"thread_id": "bench-raw"}}
        # interleave the two so that neither gets a warmer cache or a cooler disk
        await raw_prog.ainvoke(0, cfg, durability=durability)
        raw_t.clear()
        await run(outlive_prog, 0, worker=w, durability=durability,
                  config={"configurable": {"thread_id": "bench-outlive"}})
        if durability == "exit":
            # The end-of-attempt flush is part of the steps' cost. After the invocation: its
            # own exit checkpoint is fenced, and a finished attempt may write nothing more.
            t0 = time.perf_counter()
            await w.finish()
            out_t.append(time.perf_counter() - t0)
        await raw_prog.ainvoke(0, {"configurable": {"thread_id": "bench-raw-2"}},
                               durability=durability)
    await b.close()
    return _ratio("raw_task", raw_t, "outlive_task", out_t)


class _Loop(TypedDict):
    i: int


async def node_loop(url: str, n: int, d: str) -> dict[str, Any]:
    """A StateGraph whose one node runs N times (one superstep each, ``durability="sync"``):
    the user's plain node vs the same node as ``outlive_node``."""
    b, w = await _fresh(url, "bench-n")
    await w.start()
    raw_t: Timed = []
    out_t: Timed = []
    marks: list[float] = []

    async def body(state: _Loop) -> _Loop:
        marks.append(time.perf_counter())
        return {"i": state["i"] + 1}

    def graph(node: Any, saver: BaseCheckpointSaver[Any]) -> Any:
        g = StateGraph(_Loop)
        g.add_node("step", node)
        g.add_edge(START, "step")
        g.add_conditional_edges("step", lambda s: "step" if s["i"] < n else END)
        return g.compile(checkpointer=saver)

    def per_step(times: Timed) -> None:
        times.extend(later - earlier for earlier, later in pairwise(marks))
        marks.clear()

    async with _user_saver(b, d, "n") as user_saver:
        raw_graph = graph(body, user_saver)
        limit: RunnableConfig = {"recursion_limit": n + 10}
        await raw_graph.ainvoke({"i": 0}, {**limit, "configurable": {"thread_id": "raw-0"}},
                                durability="sync")
        marks.clear()
        await run(graph(outlive_node(body, name="step", inputs=("i",)), _fenced(b)), {"i": 0},
                  worker=w, config={**limit, "configurable": {"thread_id": "outlive"}})
        per_step(out_t)
        await raw_graph.ainvoke({"i": 0}, {**limit, "configurable": {"thread_id": "raw-1"}},
                                durability="sync")
        per_step(raw_t)
    await b.close()
    return _ratio("raw_node", raw_t, "outlive_node", out_t)


def _ratio(raw_name: str, raw_t: Timed, out_name: str, out_t: Timed) -> dict[str, Any]:
    return {raw_name: _stats(raw_t), out_name: _stats(out_t),
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
        await w.step(f"s{i}", lambda i: {"i": i}, i=External(i))
        out_t.append(time.perf_counter() - t0)
    await b.close()
    return _ratio("raw_invoke", raw_t, "outlive_worker_step", out_t)


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
        sqlite = f"langgraph+sqlite:///{d}/%s.db"
        report["in_entrypoint/sqlite/sync"] = await in_entrypoint(sqlite % "a", n, "sync", d)
        report["node/sqlite/sync"] = await node_loop(sqlite % "n", n, d)
        report["per_invocation/sqlite/sync"] = await per_invocation(sqlite % "b", n, "sync")
        report["in_entrypoint/memory/sync"] = await in_entrypoint("langgraph+memory://", n,
                                                                  "sync", d)
        report["in_entrypoint/sqlite/exit"] = await in_entrypoint(sqlite % "e", n, "exit", d)
        report["per_invocation/sqlite/exit"] = await per_invocation(
            f"langgraph+sqlite:///{d}/f.db?durability=exit", n, "exit")
        if pg:
            from .pgserver import PostgresServer

            with PostgresServer() as server:
                report["in_entrypoint/postgres/sync"] = await in_entrypoint(
                    server.create_database("bench_a"), n, "sync", d)
                report["node/postgres/sync"] = await node_loop(
                    server.create_database("bench_n"), n, d)
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
