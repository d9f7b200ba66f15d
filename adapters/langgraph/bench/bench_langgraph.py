"""``make bench-langgraph``: an outlive step on LangGraph against raw LangGraph, side by side.

The raw baseline runs under the saver a user writes (``AsyncSqliteSaver`` on its own file,
``AsyncPostgresSaver`` on its own connection, ``InMemorySaver``); outlive's side under the
backend's fenced saver. Same durability, same process, same trivial body. A round is one raw
and one outlive invocation of N steps each, run in alternating chunks of steps (``--chunk``,
20: raw, outlive, outlive, raw, ...; each side's time is the sum of its own turns, and a side
waits for its saver's writes in flight before it hands over), so a load spike lands on both
sides of a round alike. Python's cyclic garbage collector runs between rounds, untimed, not
inside them (see ``_rounds``: a full collection takes ~65 ms on a 2-core machine and used to
land on one side of one round). A row gives the median of the rounds' ratios (15 rounds by
default), their range, and the ratio of the two sides' medians; the waits for writes in flight
are in the JSON per side (``settled_ms``). ``--control`` adds the node shape raw against raw:
the harness's own bias and spread. Three shapes:

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

The entrypoint and node shapes run under ``durability="sync"`` and again under ``"async"``
(LangGraph's default), raw and outlive at the same mode each time; the row names it. Under
``"async"`` outlive's journal writes, like raw LangGraph's, may be in flight while the next step
runs; a side's turn ends once its writes in flight landed (journal writes included).

On ``langgraph+sqlite``, ``langgraph+memory`` and ``langgraph+postgres`` (a throwaway server),
then the 864-run sweep on ``langgraph+sqlite``. Writes ``.bench/langgraph.json``::

    python adapters/langgraph/bench/bench_langgraph.py [--steps 200] [--rounds 15] [--chunk 20]
        [--no-sweep] [--no-postgres] [--no-sqlite] [--control]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
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


class _Alternation:
    """Two invocations of one round, ``raw`` and ``outlive``, run in alternating chunks of steps.

    Each side is one whole invocation (its start, its N steps, its end), as when run alone; a
    side's body calls :meth:`pause` every ``chunk`` steps, which lets the other side run its
    next chunk, so a load spike of a few milliseconds lands on both sides of a round alike
    instead of on one. The order alternates chunk by chunk (raw, outlive, outlive, raw, ...),
    so neither side always goes first. A side's time is the sum of its own turns; before it
    hands over, it waits for its saver's writes still in flight (``settle``, charged to it):
    else a raw ``@task``'s background write would run in outlive's turn. That wait is counted
    (``settled_ms``): a raw step's write there cannot overlap its next step, which costs raw at
    most one commit a chunk.
    """

    def __init__(self, settle: dict[str, Callable[[], Awaitable[float]]]) -> None:
        self.settle = settle
        self.spent = dict.fromkeys(settle, 0.0)
        self.settled = dict.fromkeys(settle, 0.0)
        self._go = {side: asyncio.Event() for side in settle}
        self._done: set[str] = set()
        self._turns = 0
        self._t0 = 0.0

    def _next(self) -> None:
        live = [s for s in ("raw", "outlive") if s not in self._done]
        if not live:
            return
        # raw, outlive, outlive, raw, raw, outlive, ...: turn k goes to (k + 1) // 2 % 2
        side = ("raw", "outlive")[(self._turns + 1) // 2 % 2]
        self._turns += 1
        self._go[side if side in live else live[0]].set()

    async def _enter(self, side: str) -> None:
        await self._go[side].wait()
        self._go[side].clear()
        self._t0 = time.perf_counter()

    async def _leave(self, side: str) -> None:
        self.settled[side] += await self.settle[side]()
        self.spent[side] += time.perf_counter() - self._t0

    async def pause(self, side: str) -> None:
        """End this side's turn (after its writes in flight) and wait for its next one."""
        await self._leave(side)
        self._next()
        await self._enter(side)

    async def run(self, raw: Callable[[], Awaitable[Any]],
                  outlive: Callable[[], Awaitable[Any]]) -> dict[str, float]:
        """Both invocations, alternating; seconds each spent in its own turns."""
        async def side(name: str, invoke: Callable[[], Awaitable[Any]]) -> None:
            await self._enter(name)
            try:
                await invoke()
                await self._leave(name)
            finally:
                self._done.add(name)
                self._next()

        tasks = [asyncio.ensure_future(side("raw", raw)),
                 asyncio.ensure_future(side("outlive", outlive))]
        self._next()
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
        return self.spent


def _track(saver: BaseCheckpointSaver[Any]) -> Callable[[], Awaitable[float]]:
    """Count the saver's writes in flight; the returned ``settle()`` waits until none is (the
    seconds it waited). The same thin wrapper on both sides' savers."""
    pending: set[asyncio.Future[None]] = set()
    for name in ("aput", "aput_writes"):
        orig = getattr(saver, name)

        def tracked(*args: Any, _orig: Any = orig, **kwargs: Any) -> Awaitable[Any]:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            pending.add(done)   # at once: LangGraph creates the call's coroutine when it submits

            async def call() -> Any:
                try:
                    return await _orig(*args, **kwargs)
                finally:
                    pending.discard(done)
                    done.set_result(None)

            return call()

        functools.update_wrapper(tracked, orig)   # LangGraph inspects aput_writes' signature
        setattr(saver, name, tracked)

    # outlive's steps whose journal write is in flight (``durability="async"``) count as the
    # saver's writes in flight: they land in their own side's turn.
    flying: dict[str, Any] = getattr(saver, "flying", {})

    async def settle() -> float:
        if not pending and not flying:
            return 0.0
        t0 = time.perf_counter()
        while pending or flying:
            await asyncio.wait([*pending, *(t for tasks in flying.values() for t in tasks)])
        return time.perf_counter() - t0

    return settle


def _summary(raw_name: str, raw: Timed, out_name: str, ours: Timed,
             ratios: list[float], settled: dict[str, float] | None = None) -> dict[str, Any]:
    """Per-step medians over all rounds, the rounds' ratios (median, range, each) and the ratio
    of the two medians (a check on the median of the ratios: they should agree)."""
    out = {raw_name: {"median_ms": statistics.median(raw) * 1e3},
           out_name: {"median_ms": statistics.median(ours) * 1e3},
           "ratio": statistics.median(ratios), "ratio_min": min(ratios),
           "ratio_max": max(ratios), "ratios": [round(r, 3) for r in ratios],
           "ratio_of_medians": statistics.median(ours) / statistics.median(raw)}
    if settled is not None:
        out["settled_ms"] = {k: round(v * 1e3, 3) for k, v in settled.items()}
    return out


async def _rounds(rounds: int, n: int, chunk: int,
                  settle: dict[str, Callable[[], Awaitable[float]]],
                  round_: Callable[[int, _Alternation], tuple[Callable[[], Awaitable[Any]],
                                                              Callable[[], Awaitable[Any]]]],
                  first: int = 1) -> tuple[Timed, Timed, list[float], dict[str, float]]:
    """``rounds`` rounds of one raw and one outlive invocation of ``n`` steps each, run in
    alternating chunks (:class:`_Alternation`); per-step seconds of each side, each round's
    ratio, and the seconds waited for writes in flight over all rounds."""
    raw_t: Timed = []
    out_t: Timed = []
    ratios: list[float] = []
    settled = {"raw": 0.0, "outlive": 0.0}
    for r in range(first, first + rounds):
        alt = _Alternation(settle)
        # The cyclic garbage collector runs between rounds, untimed, not inside them: a full
        # collection of the bench process's ~110,000 objects takes ~65 ms on the 2-core machine
        # and landed on one side of one round (0.3 ms a step: the largest part of the rounds'
        # spread), and with the two invocations interleaved, the side that allocates more
        # triggers more collections that walk both sides' live objects (InMemorySaver, 15
        # rounds: 1.15-1.18x interleaved with the collector on, 1.06x whole invocations with
        # it on, 1.08-1.09x either way with it off; callgrind's instruction ratio was 1.08x).
        # Run whole and collector on, each side's own collections cost about the same per
        # step (0.013-0.018 ms), so leaving them out flatters neither side.
        gc.collect()
        gc.freeze()
        gc.disable()
        try:
            spent = await alt.run(*round_(r, alt))
        finally:
            gc.enable()
            gc.unfreeze()
        raw_t.append(spent["raw"] / n)
        out_t.append(spent["outlive"] / n)
        ratios.append(out_t[-1] / raw_t[-1])
        for k, v in alt.settled.items():
            settled[k] += v
    return raw_t, out_t, ratios, settled


async def in_entrypoint(url: str, n: int, rounds: int, durability: Durability,
                        d: str, chunk: int) -> dict[str, Any]:
    """N steps inside one ``@entrypoint`` invocation: raw ``@task`` vs ``outlive_task``."""
    async with _attempt(url, "bench-a") as (b, w):
        w.persist = persist_for(durability)
        await w.start()

        calls: dict[str, Timed] = {"raw": [], "outlive": []}
        alt: list[_Alternation] = []

        async def steps(side: str, first: int, call: Callable[[int], Awaitable[Any]]) -> int:
            timed = calls[side]
            for i in range(first, first + n):
                if i > first and (i - first) % chunk == 0 and alt:
                    await alt[0].pause(side)
                t0 = time.perf_counter()
                await call(i)
                timed.append(time.perf_counter() - t0)
            return n

        async with _user_saver(b, d, f"a-{durability}") as user_saver:
            settle = {"raw": _track(user_saver), "outlive": _track(b.checkpointer)}

            @entrypoint(checkpointer=user_saver)
            async def raw_prog(first: int) -> int:
                return await steps("raw", first, raw_step)

            @entrypoint(checkpointer=b.checkpointer)
            async def outlive_prog(first: int) -> int:
                return await steps("outlive", first, outlive_step)

            async def raw_round(r: int) -> None:
                await raw_prog.ainvoke(r * n, {"configurable": {"thread_id": f"raw-{r}"}},
                                       durability=durability)

            async def outlive_round(r: int) -> None:
                # Inputs differ per round: each round journals n new steps, none is restored.
                await run(outlive_prog, r * n, worker=w, durability=durability,
                          config={"configurable": {"thread_id": f"outlive-{r}"}})
                if durability == "exit":
                    # The end-of-attempt flush is part of the steps' cost (its own exit
                    # checkpoint is fenced; a finished attempt may write nothing more).
                    await w.finish()

            def round_(r: int, a: _Alternation) -> tuple[Callable[[], Awaitable[Any]],
                                                          Callable[[], Awaitable[Any]]]:
                alt[:] = [a]
                for c in calls.values():
                    c.clear()
                return (lambda: raw_round(r)), (lambda: outlive_round(r))

            await raw_round(0)  # warm-up: the saver's tables, LangGraph's first compile
            raw_calls: Timed = []
            out_calls: Timed = []
            call_ratios: list[float] = []

            raw_t: Timed = []
            out_t: Timed = []
            ratios: list[float] = []
            settled = {"raw": 0.0, "outlive": 0.0}
            # the exit durability's attempt is finished after its round: one round
            for r in range(1, 2 if durability == "exit" else rounds + 1):
                rt, ot, rr, st = await _rounds(1, n, chunk, settle, round_, first=r)
                raw_t += rt
                out_t += ot
                ratios += rr
                for k, v in st.items():
                    settled[k] += v
                raw_calls.append(statistics.median(calls["raw"]))
                out_calls.append(statistics.median(calls["outlive"]))
                call_ratios.append(out_calls[-1] / raw_calls[-1])
    return {"invocation": _summary("raw_task", raw_t, "outlive_task", out_t, ratios, settled),
            "per_call": _summary("raw_task", raw_calls, "outlive_task", out_calls, call_ratios)}


class _Loop(TypedDict):
    i: int
    stop: int


async def node_loop(url: str, n: int, rounds: int, d: str, chunk: int,
                    control: bool = False, durability: Durability = "sync") -> dict[str, Any]:
    """A StateGraph whose one node runs N times (one superstep each, ``durability`` on both sides):
    the user's plain node vs the same node as ``outlive_node``. ``control``: the plain node on
    a second saver of the user's in outlive's place (raw against raw: the harness's own bias
    and spread, expected 1.00x)."""
    async with _attempt(url, "bench-n") as (b, w):
        await w.start()
        alt: list[_Alternation] = []

        def body(side: str) -> Callable[[_Loop], Awaitable[dict[str, int]]]:
            async def step(state: _Loop) -> dict[str, int]:
                # The same body both sides; at a chunk's end it lets the other side run first
                # (for outlive_node: before the step's journal entry is made).
                done = state["i"] % n
                if done and done % chunk == 0 and alt:
                    await alt[0].pause(side)
                return {"i": state["i"] + 1}

            return step

        def graph(node: Any, saver: BaseCheckpointSaver[Any]) -> Any:
            g = StateGraph(_Loop)
            g.add_node("step", node)
            g.add_edge(START, "step")
            g.add_conditional_edges("step", lambda s: "step" if s["i"] < s["stop"] else END)
            return g.compile(checkpointer=saver)

        limit: RunnableConfig = {"recursion_limit": n + 10}
        async with _user_saver(b, d, "n") as user_saver, \
                _user_saver(b, d, "n-control") as other_saver:
            theirs = other_saver if control else b.checkpointer
            settle = {"raw": _track(user_saver), "outlive": _track(theirs)}
            raw_graph = graph(body("raw"), user_saver)
            ours = graph(body("outlive") if control else
                         outlive_node(body("outlive"), name="step", inputs=("i",),
                                      external=["i"]), theirs)

            async def raw_round(r: int) -> None:
                await raw_graph.ainvoke({"i": r * n, "stop": (r + 1) * n},
                                        {**limit, "configurable": {"thread_id": f"raw-{r}"}},
                                        durability=durability)

            async def outlive_round(r: int) -> None:
                config: RunnableConfig = {**limit,
                                          "configurable": {"thread_id": f"outlive-{r}"}}
                if control:
                    await ours.ainvoke({"i": r * n, "stop": (r + 1) * n}, config,
                                       durability=durability)
                else:
                    await run(ours, {"i": r * n, "stop": (r + 1) * n}, worker=w, config=config,
                              durability=durability)

            def round_(r: int, a: _Alternation) -> tuple[Callable[[], Awaitable[Any]],
                                                          Callable[[], Awaitable[Any]]]:
                alt[:] = [a]
                return (lambda: raw_round(r)), (lambda: outlive_round(r))

            await raw_round(0)
            if control:
                await outlive_round(0)
            raw_t, out_t, ratios, settled = await _rounds(rounds, n, chunk, settle, round_)
    return _summary("raw_node", raw_t, "outlive_node", out_t, ratios, settled)


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


async def _shapes(url: Callable[[str], str], name: str, n: int, rounds: int, chunk: int, d: str,
                  report: dict[str, Any], control: bool) -> None:
    """The three shapes under ``sync`` on one backend (``url(part)``: a fresh database each),
    and the entrypoint and node under ``async`` (LangGraph's default)."""
    entry = await in_entrypoint(url("a"), n, rounds, "sync", d, chunk)
    report[f"in_entrypoint/{name}/sync"] = entry["invocation"]
    report[f"in_entrypoint_per_call/{name}/sync"] = entry["per_call"]
    entry = await in_entrypoint(url("aa"), n, rounds, "async", d, chunk)
    report[f"in_entrypoint/{name}/async"] = entry["invocation"]
    report[f"node/{name}/sync"] = await node_loop(url("n"), n, rounds, d, chunk)
    report[f"node/{name}/async"] = await node_loop(url("na"), n, rounds, d, chunk,
                                                  durability="async")
    if control:
        report[f"control_node_raw_vs_raw/{name}/sync"] = await node_loop(url("c"), n, rounds, d,
                                                                        chunk, control=True)
    # One invocation per step costs a few commits each: a quarter of the steps per round.
    inv = await per_invocation(url("b"), n // 4, rounds, "sync", d)
    report[f"per_invocation/{name}/sync"] = inv["task"]
    report[f"per_invocation_vs_entry/{name}/sync"] = inv["entry"]


async def _main(n: int, rounds: int, chunk: int, out: Path | None, do_sweep: bool,
                pg: bool, sqlite: bool, control: bool) -> dict[str, Any]:
    report: dict[str, Any] = {"steps": n, "rounds": rounds, "chunk": chunk}
    with tempfile.TemporaryDirectory() as d:
        if sqlite:
            await _shapes(lambda part: f"langgraph+sqlite:///{d}/{part}.db", "sqlite", n, rounds,
                          chunk, d, report, control)
            entry = await in_entrypoint("langgraph+memory://", n, rounds, "sync", d, chunk)
            report["in_entrypoint/memory/sync"] = entry["invocation"]
            entry = await in_entrypoint(f"langgraph+sqlite:///{d}/e.db", n, rounds, "exit", d,
                                        chunk)
            report["in_entrypoint/sqlite/exit"] = entry["invocation"]
        if pg:
            from outlive_langgraph.testing import PostgresServer

            with PostgresServer() as server:
                await _shapes(lambda part: server.create_database(f"bench_{part}"), "postgres",
                              n, rounds, chunk, d, report, control)
        if do_sweep:
            report["sweep/sqlite"] = await sweep_time(f"langgraph+sqlite:///{d}/sweep.db")
    print(f"outlive on LangGraph: per-step cost, {n} steps x {rounds} rounds, raw and outlive "
          f"alternating in chunks of {chunk} steps, same durability (ratio: median of the "
          f"rounds' ratios [min-max]; of medians: outlive median / raw median)")
    print(f"{'shape/saver/durability':38} {'raw median':>11} {'outlive median':>15} {'ratio':>7} "
          f"{'range':>13} {'of medians':>10}  target")
    for key, val in report.items():
        if not isinstance(val, dict) or "ratio" not in val:
            continue
        raw, ours = [v for k, v in val.items() if isinstance(v, dict) and "median_ms" in v]
        target = target_of(key)
        verdict = "" if target is None else (
            f"<= {target:.2f}x {'met' if val['ratio'] <= target else 'MISSED'}")
        val["target"] = target
        print(f"{key:38} {raw['median_ms']:9.3f}ms {ours['median_ms']:13.3f}ms "
              f"{val['ratio']:6.2f}x {val['ratio_min']:5.2f}-{val['ratio_max']:.2f}x "
              f"{val['ratio_of_medians']:9.2f}x  {verdict or '(informational)'}")
    if "sweep/sqlite" in report:
        s = report["sweep/sqlite"]
        print(f"full sweep on langgraph+sqlite: {s['runs']} runs in {s['seconds']:.1f} s")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2))
    return report


#: The target of every step-ratio row (outlive's step against raw LangGraph's, same saver and
#: durability). Rows without one are informational: the per-call latency inside an entrypoint
#: (raw's call returns before its write is durable, outlive's after its commit: not a like-for-
#: like cost) and the harness's own control (raw against raw).
STEP_TARGET = 1.10


def target_of(key: str) -> float | None:
    """The row's target, or None for an informational row."""
    if key.startswith(("in_entrypoint_per_call/", "control_")):
        return None
    return STEP_TARGET


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python adapters/langgraph/bench/bench_langgraph.py")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--chunk", type=int, default=20,
                   help="steps a side runs before the other side's turn (--steps: no alternation "
                        "inside a round)")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--no-sweep", action="store_true")
    p.add_argument("--no-postgres", action="store_true")
    p.add_argument("--no-sqlite", action="store_true",
                   help="skip the SQLite and InMemorySaver rows")
    p.add_argument("--control", action="store_true",
                   help="also the node shape raw against raw (the harness's bias: ~1.00x)")
    args = p.parse_args(argv)
    asyncio.run(_main(args.steps, args.rounds, args.chunk, args.out, not args.no_sweep,
                      not args.no_postgres, not args.no_sqlite, args.control))


if __name__ == "__main__":
    main()
