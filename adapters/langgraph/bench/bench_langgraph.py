"""``make bench-langgraph``: an outlive step on LangGraph against raw LangGraph, side by side.

The raw baseline runs under the saver a user writes (``AsyncSqliteSaver`` on its own file,
``AsyncPostgresSaver`` on its own connection, ``InMemorySaver``); outlive's side under the
backend's fenced saver. Same durability, same process, same trivial body. Each measure runs in
rounds that alternate raw and outlive, so load on a shared machine hits both alike; a row gives
the median of the rounds' ratios and their range (nine rounds by default: on a shared 2-core
machine a load spike of a few hundred milliseconds lands on one side of a round). Three shapes:

* **in one entrypoint**: N steps inside one ``@entrypoint`` invocation, raw ``@task`` vs
  ``outlive_task``. The per-step cost is the invocation's wall time over N: under
  ``durability="sync"`` LangGraph saves a task's result in the background (the raw ``@task``
  returns before anything is durable) and ``ainvoke`` returns once every one of those writes
  has committed, so only the whole invocation compares like with like. The per-call latency
  inside the invocation (what the body waits for between two calls: raw, no commit; outlive,
  its journal entry's commit) is given beside it, as its own row.
* **StateGraph node**: one node run N times (one superstep each), plain node vs
  ``outlive_node``; the per-step cost is the invocation's wall time over N.
* **one invocation per step**: ``Worker.step`` through ``Backend.run_step`` (what the
  conformance harness drives; an ``@entrypoint`` that runs the body) vs a raw ``ainvoke`` per
  step of an ``@entrypoint`` around one ``@task``, and of an ``@entrypoint`` that runs the
  body itself (the same shape as outlive's), each its own row.

On ``langgraph+sqlite``, ``langgraph+memory`` and ``langgraph+postgres`` (a throwaway server),
then the 864-run sweep on ``langgraph+sqlite``. Writes ``.bench/langgraph.json``::

    python adapters/langgraph/bench/bench_langgraph.py [--steps 200] [--rounds 9] [--no-sweep]
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
from pathlib import Path
from typing import Any, TypedDict

# The entrypoint measure's steps live in a module, as an application keeps its steps (a script's
# own functions are in ``__main__``, which LangGraph never looks tasks up in).
from _steps import outlive_step, raw_step  # type: ignore[import-not-found]
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.func import entrypoint, task
from langgraph.graph import END, START, StateGraph

from outlive import Controller, External, Worker, open_backend
from outlive_langgraph import Durability, LangGraphBackend, outlive_node, persist_for, run

Timed = list[float]


@asynccontextmanager
async def _attempt(url: str, work: str) -> AsyncIterator[tuple[LangGraphBackend, Worker]]:
    """A started attempt on a fresh work; the backend is closed even if the measure fails."""
    b = await open_backend(url)
    try:
        assert isinstance(b, LangGraphBackend)
        ctl = Controller(b, clock=lambda: 0)
        await ctl.open_work(work)
        await ctl.publish(work, "v1", {"doc": "x"})
        a = await ctl.admit(work)
        yield b, Worker(b, a, None, clock=lambda: 1)
    finally:
        await b.close()


@asynccontextmanager
async def _user_saver(b: LangGraphBackend, d: str,
                      name: str) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """The saver a LangGraph user writes themselves, for the raw baseline (its own database)."""
    url = b.url
    if url.startswith("langgraph+postgres"):
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        from outlive_langgraph.postgres import LangGraphPostgresBackend

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


def _summary(raw_name: str, raw: Timed, out_name: str, ours: Timed,
             ratios: list[float]) -> dict[str, Any]:
    """Per-step medians over all rounds, and the rounds' ratios (median, range, each)."""
    return {raw_name: {"median_ms": statistics.median(raw) * 1e3},
            out_name: {"median_ms": statistics.median(ours) * 1e3},
            "ratio": statistics.median(ratios), "ratio_min": min(ratios),
            "ratio_max": max(ratios), "ratios": [round(r, 3) for r in ratios]}


async def in_entrypoint(url: str, n: int, rounds: int, durability: Durability,
                        d: str) -> dict[str, Any]:
    """N steps inside one ``@entrypoint`` invocation: raw ``@task`` vs ``outlive_task``."""
    async with _attempt(url, "bench-a") as (b, w):
        w.persist = persist_for(durability)
        await w.start()

        calls: Timed = []

        async def steps(first: int, call: Callable[[int], Awaitable[Any]]) -> int:
            for i in range(first, first + n):
                t0 = time.perf_counter()
                await call(i)
                calls.append(time.perf_counter() - t0)
            return n

        async with _user_saver(b, d, f"a-{durability}") as user_saver:
            @entrypoint(checkpointer=user_saver)
            async def raw_prog(first: int) -> int:
                return await steps(first, raw_step)

            @entrypoint(checkpointer=b.checkpointer)
            async def outlive_prog(first: int) -> int:
                return await steps(first, outlive_step)

            async def raw_round(r: int) -> float:
                t0 = time.perf_counter()
                await raw_prog.ainvoke(r * n, {"configurable": {"thread_id": f"raw-{r}"}},
                                       durability=durability)
                return (time.perf_counter() - t0) / n

            async def outlive_round(r: int) -> float:
                t0 = time.perf_counter()
                # Inputs differ per round: each round journals n new steps, none is restored.
                await run(outlive_prog, r * n, worker=w, durability=durability,
                          config={"configurable": {"thread_id": f"outlive-{r}"}})
                if durability == "exit":
                    # The end-of-attempt flush is part of the steps' cost (its own exit
                    # checkpoint is fenced; a finished attempt may write nothing more).
                    await w.finish()
                return (time.perf_counter() - t0) / n

            await raw_round(0)  # warm-up: the saver's tables, LangGraph's first compile
            raw_t, out_t, ratios = [], [], []
            raw_calls, out_calls, call_ratios = [], [], []
            for r in range(1, rounds + 1):
                calls.clear()
                raw_t.append(await raw_round(r))
                raw_c = statistics.median(calls)
                calls.clear()
                out_t.append(await outlive_round(r))
                out_c = statistics.median(calls)
                ratios.append(out_t[-1] / raw_t[-1])
                raw_calls.append(raw_c)
                out_calls.append(out_c)
                call_ratios.append(out_c / raw_c)
                if durability == "exit":
                    break  # the attempt is finished: one round
    return {"invocation": _summary("raw_task", raw_t, "outlive_task", out_t, ratios),
            "per_call": _summary("raw_task", raw_calls, "outlive_task", out_calls, call_ratios)}


class _Loop(TypedDict):
    i: int
    stop: int


async def node_loop(url: str, n: int, rounds: int, d: str) -> dict[str, Any]:
    """A StateGraph whose one node runs N times (one superstep each, ``durability="sync"``):
    the user's plain node vs the same node as ``outlive_node``."""
    async with _attempt(url, "bench-n") as (b, w):
        await w.start()

        async def body(state: _Loop) -> dict[str, int]:
            return {"i": state["i"] + 1}

        def graph(node: Any, saver: BaseCheckpointSaver[Any]) -> Any:
            g = StateGraph(_Loop)
            g.add_node("step", node)
            g.add_edge(START, "step")
            g.add_conditional_edges("step", lambda s: "step" if s["i"] < s["stop"] else END)
            return g.compile(checkpointer=saver)

        limit: RunnableConfig = {"recursion_limit": n + 10}
        async with _user_saver(b, d, "n") as user_saver:
            raw_graph = graph(body, user_saver)
            ours = graph(outlive_node(body, name="step", inputs=("i",), external=["i"]),
                         b.checkpointer)

            async def raw_round(r: int) -> float:
                t0 = time.perf_counter()
                await raw_graph.ainvoke({"i": r * n, "stop": (r + 1) * n},
                                        {**limit, "configurable": {"thread_id": f"raw-{r}"}},
                                        durability="sync")
                return (time.perf_counter() - t0) / n

            async def outlive_round(r: int) -> float:
                t0 = time.perf_counter()
                await run(ours, {"i": r * n, "stop": (r + 1) * n}, worker=w,
                          config={**limit, "configurable": {"thread_id": f"outlive-{r}"}})
                return (time.perf_counter() - t0) / n

            await raw_round(0)
            raw_t, out_t, ratios = [], [], []
            for r in range(1, rounds + 1):
                raw_t.append(await raw_round(r))
                out_t.append(await outlive_round(r))
                ratios.append(out_t[-1] / raw_t[-1])
    return _summary("raw_node", raw_t, "outlive_node", out_t, ratios)


async def per_invocation(url: str, n: int, rounds: int, durability: Durability,
                         d: str) -> dict[str, dict[str, Any]]:
    """``Worker.step`` (one invocation of the backend's one-task program: an ``@entrypoint``
    that runs the body) vs a raw ``ainvoke`` per step under the user's own saver, two raw
    shapes: an ``@entrypoint`` around one ``@task`` (the step as a Functional API task), and
    an ``@entrypoint`` that runs the body itself (the program's own shape). Ratio of medians
    per round."""
    async with _attempt(url, "bench-b") as (b, w):
        await w.start()

        @task
        async def one(i: int) -> dict[str, int]:
            return {"i": i}

        async with _user_saver(b, d, f"b-{durability}") as user_saver:
            @entrypoint(checkpointer=user_saver)
            async def raw_prog(i: int) -> dict[str, int]:
                return await one(i)

            @entrypoint(checkpointer=user_saver)
            async def raw_entry(i: int) -> dict[str, int]:
                return {"i": i}

            cfg: RunnableConfig = {"configurable": {"thread_id": "bench-raw-inv"}}
            cfg_entry: RunnableConfig = {"configurable": {"thread_id": "bench-raw-entry"}}
            await raw_prog.ainvoke(-1, cfg, durability=durability)
            await raw_entry.ainvoke(-1, cfg_entry, durability=durability)
            raw_all, entry_all, out_all, ratios, entry_ratios = [], [], [], [], []
            for r in range(rounds):
                raw_t: Timed = []
                entry_t: Timed = []
                out_t: Timed = []
                for i in range(r * n, (r + 1) * n):
                    t0 = time.perf_counter()
                    await raw_prog.ainvoke(i, cfg, durability=durability)
                    raw_t.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    await raw_entry.ainvoke(i, cfg_entry, durability=durability)
                    entry_t.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    await w.step(f"s{i}", lambda i: {"i": i}, i=External(i))
                    out_t.append(time.perf_counter() - t0)
                raw_all += raw_t
                entry_all += entry_t
                out_all += out_t
                ratios.append(statistics.median(out_t) / statistics.median(raw_t))
                entry_ratios.append(statistics.median(out_t) / statistics.median(entry_t))
    return {"task": _summary("raw_invoke", raw_all, "outlive_worker_step", out_all, ratios),
            "entry": _summary("raw_entrypoint_invoke", entry_all, "outlive_worker_step", out_all,
                              entry_ratios)}


async def sweep_time(url: str) -> dict[str, Any]:
    from outlive_conformance.scenario import q3_report
    from outlive_conformance.sweep import sweep

    b = await open_backend(url)
    try:
        res = await sweep(b, q3_report(), concurrency=8)
    finally:
        await b.close()
    return {"runs": len(res.runs), "seconds": res.seconds}


async def _shapes(url: Callable[[str], str], name: str, n: int, rounds: int, d: str,
                  report: dict[str, Any]) -> None:
    """The three shapes under ``sync`` on one backend (``url(part)``: a fresh database each)."""
    entry = await in_entrypoint(url("a"), n, rounds, "sync", d)
    report[f"in_entrypoint/{name}/sync"] = entry["invocation"]
    report[f"in_entrypoint_per_call/{name}/sync"] = entry["per_call"]
    report[f"node/{name}/sync"] = await node_loop(url("n"), n, rounds, d)
    # One invocation per step costs a few commits each: a quarter of the steps per round.
    inv = await per_invocation(url("b"), n // 4, rounds, "sync", d)
    report[f"per_invocation/{name}/sync"] = inv["task"]
    report[f"per_invocation_vs_entry/{name}/sync"] = inv["entry"]


async def _main(n: int, rounds: int, out: Path | None, do_sweep: bool,
                pg: bool) -> dict[str, Any]:
    report: dict[str, Any] = {"steps": n, "rounds": rounds}
    with tempfile.TemporaryDirectory() as d:
        await _shapes(lambda part: f"langgraph+sqlite:///{d}/{part}.db", "sqlite", n, rounds, d,
                      report)
        entry = await in_entrypoint("langgraph+memory://", n, rounds, "sync", d)
        report["in_entrypoint/memory/sync"] = entry["invocation"]
        entry = await in_entrypoint(f"langgraph+sqlite:///{d}/e.db", n, rounds, "exit", d)
        report["in_entrypoint/sqlite/exit"] = entry["invocation"]
        if pg:
            from outlive_langgraph.testing import PostgresServer

            with PostgresServer() as server:
                await _shapes(lambda part: server.create_database(f"bench_{part}"), "postgres",
                              n, rounds, d, report)
        if do_sweep:
            report["sweep/sqlite"] = await sweep_time(f"langgraph+sqlite:///{d}/sweep.db")
    print(f"outlive on LangGraph: per-step cost, {n} steps x {rounds} rounds, raw and outlive "
          f"alternating, same durability (ratio: median of the rounds [min-max])")
    print(f"{'shape/saver/durability':38} {'raw median':>11} {'outlive median':>15} {'ratio':>7} "
          f"{'range':>13}")
    for key, val in report.items():
        if not isinstance(val, dict) or "ratio" not in val:
            continue
        raw, ours = (v for k, v in val.items() if isinstance(v, dict))
        print(f"{key:38} {raw['median_ms']:9.3f}ms {ours['median_ms']:13.3f}ms "
              f"{val['ratio']:6.2f}x {val['ratio_min']:5.2f}-{val['ratio_max']:.2f}x")
    if "sweep/sqlite" in report:
        s = report["sweep/sqlite"]
        print(f"full sweep on langgraph+sqlite: {s['runs']} runs in {s['seconds']:.1f} s")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2))
    return report


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python adapters/langgraph/bench/bench_langgraph.py")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--no-sweep", action="store_true")
    p.add_argument("--no-postgres", action="store_true")
    args = p.parse_args(argv)
    asyncio.run(_main(args.steps, args.rounds, args.out, not args.no_sweep, not args.no_postgres))


if __name__ == "__main__":
    main()
