"""The benchmark's Restate app: in one handler invocation, chunks of raw steps alternate with
chunks of the same steps done another way, so load on a shared machine hits both alike.

``outlive`` - inside ``outlive_restate.attempt`` (the handler shape): raw ``ctx.run_typed`` steps
              alternate with ``Worker.step`` (the body as ``ctx.run_typed`` plus the fenced
              journal write to the work's ledger object, ``write="send"`` or ``"call"``);
``owned``   - the same in the owner shape: an exclusive handler of the user's object that keeps
              the work's ledger (:func:`outlive_restate.keep_ledger`);
``floor``   - raw steps alternate with a raw step plus an awaited call to an empty exclusive
              handler of another object: what any per-step write to another key's state costs
              in Restate at least (the handler shape's step is that, with outlive's write);
``takeover``- a step that waits while ``hold`` exists (for the takeover latency); with ``pid``,
              #1 writes its process id there (the replica to pause).

Each answers ``{"raw": ms, "other": ms, "settle": ms}``: the time spent in each kind of chunk
(journaled, so a replay answers the same), and how much of ``other`` went to settling (part of
it). The attempt's start and finish are outside both.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import restate
from restate.serde import BytesSerde

import outlive_restate
from outlive import External, Worker

bench = restate.Service("bench")
bench_desk = outlive_restate.keep_ledger(restate.VirtualObject("bench_desk"))
bench_sink = restate.VirtualObject("bench_sink")
_B = BytesSerde()


async def _body(**kw: int) -> int:
    return next(iter(kw.values()))


async def _raw(ctx: restate.Context, i: int) -> bytes:
    async def action() -> bytes:
        return str(i).encode()

    got: bytes = await ctx.run_typed(f"r{i}", action, restate.RunOptions(max_attempts=1, serde=_B))
    return got


async def _alternate(ctx: restate.Context, n: int, chunk: int,
                     other: Callable[[int], Awaitable[Any]],
                     settle: Callable[[], Awaitable[Any]] | None = None,
                     settle_last: bool = False) -> dict[str, float]:
    """``n`` raw steps and ``n`` other steps, in alternating chunks; the ms spent in each.

    ``settle`` ends each chunk of other steps (charged to them): work they left running
    (``settle_last``: only the last chunk).
    """
    spent = {"raw": 0.0, "other": 0.0, "settle": 0.0}
    for start in range(0, n, chunk):
        idx = range(start, min(n, start + chunk))
        t0 = time.perf_counter()
        for i in idx:
            await _raw(ctx, i)
        t1 = time.perf_counter()
        for i in idx:
            await other(i)
        t2 = time.perf_counter()
        if settle is not None and (not settle_last or start + chunk >= n):
            await settle()
        spent["raw"] += (t1 - t0) * 1000
        spent["other"] += (time.perf_counter() - t1) * 1000
        spent["settle"] += (time.perf_counter() - t2) * 1000

    async def took() -> dict[str, float]:
        return spent

    got: dict[str, float] = await ctx.run_typed("elapsed", took)
    return got


@bench_sink.handler(input_serde=_B, output_serde=_B)
async def noop(ctx: restate.ObjectContext, req: bytes) -> bytes:
    return req


@bench.handler()
async def floor(ctx: restate.Context, arg: dict[str, Any]) -> dict[str, float]:
    async def step(i: int) -> None:
        raw = await _raw(ctx, i + 100_000)
        await ctx.generic_call("bench_sink", "noop", raw, key=str(arg["key"]))

    return await _alternate(ctx, int(arg["n"]), int(arg["chunk"]), step)


def _written(w: Worker) -> Callable[[], Awaitable[bool]]:
    """What ends a held attempt's last timed chunk: what is still held after the last step,
    and the held writes sent before, are stored inside the timed chunks too (a beat carries
    the ones still held, and queues behind the ones sent)."""
    backend = w.backend
    assert isinstance(backend, outlive_restate.HandlerBackend) and backend.hold > 0
    return w.heartbeat


@bench.handler()
async def outlive(ctx: restate.Context, arg: dict[str, Any]) -> dict[str, float]:
    write = arg.get("write", "send")
    # "held": the default a dispatched attempt gets (the renewal header is set by the caller):
    # step writes held back and written together
    async with outlive_restate.attempt(ctx, write=write) as w:
        async def step(i: int) -> None:
            await w.step(f"s{i}", _body, i=External(i))

        settle: Callable[[], Awaitable[Any]] | None = None
        if write == "send":
            # sent writes are applied by the ledger after the handler moved on: a call to the
            # same ledger key queues behind them, so the chunk pays for them (else the raw
            # chunk would)
            settle = w.heartbeat
        elif write == "held":
            settle = _written(w)
        return await _alternate(ctx, int(arg["n"]), int(arg["chunk"]), step, settle,
                                settle_last=write == "held")


@bench_desk.handler()
async def owned(ctx: restate.ObjectContext, arg: dict[str, Any]) -> dict[str, float]:
    async with outlive_restate.attempt(ctx) as w:
        async def step(i: int) -> None:
            await w.step(f"s{i}", _body, i=External(i))

        return await _alternate(ctx, int(arg["n"]), int(arg["chunk"]), step)


@bench.handler()
async def takeover(ctx: restate.Context, arg: dict[str, Any]) -> str:
    async with outlive_restate.attempt(ctx) as w:
        async def first(**kw: str) -> int:
            if w.attempt.number == 1 and arg.get("pid"):   # which replica runs #1's step
                with open(str(arg["pid"]), "w") as f:
                    f.write(str(os.getpid()))
            while w.attempt.number == 1 and os.path.exists(str(arg["hold"])):
                await asyncio.sleep(0.01)
            return int(time.time() * 1000)

        await w.step("s1", first, s1="x")
    return "done"


app = restate.app([bench, bench_desk, bench_sink, *outlive_restate.services()])


@bench.handler()
async def ladder(ctx: restate.Context, arg: dict[str, Any]) -> dict[str, float]:
    """Where a held step's cost comes from: raw steps alternate with one rung of the ladder
    from a raw step to the held step (``held_ladder.py``). A diagnostic: the rungs below
    ``held`` drop or redirect outlive's writes, which no attempt may do.

    ``plain``  - a raw ``ctx.run_typed`` step with the name and value size of outlive's;
    ``run``    - :meth:`HandlerBackend.run_step` (the journaled value and time), no renewal;
    ``raced``  - the same, raced against the renewal timer;
    ``worker`` - :meth:`Worker.step` with the held writes dropped, no renewal;
    ``worker raced`` - the same, raced against the renewal timer;
    ``sink``   - :meth:`Worker.step`, each batch sent to an empty handler instead of the ledger;
    ``held``   - :meth:`Worker.step` as a dispatched attempt runs it (the bench's held row).

    Besides the chunks' times, the answer has ``cpu_ms``: this deployment process's CPU time
    during the invocation (its raw and rung steps, and the ledger invocations it served
    meanwhile), and ``median_us``/``mean_us``: the rung's own steps, each timed (the mean
    minus the median is what a few slow steps, those after a batch leaves, add to each).
    """
    cpu = time.process_time()
    times: list[float] = []

    def timed(step: Callable[[int], Awaitable[None]]) -> Callable[[int], Awaitable[None]]:
        async def run(i: int) -> None:
            t0 = time.perf_counter()
            await step(i)
            times.append((time.perf_counter() - t0) * 1e6)
        return run

    got = await _ladder(ctx, str(arg["rung"]), int(arg["n"]), int(arg["chunk"]), timed)

    async def spent() -> dict[str, float]:
        return {"cpu_ms": (time.process_time() - cpu) * 1000,
                "median_us": statistics.median(times), "mean_us": statistics.fmean(times)}

    extra: dict[str, float] = await ctx.run_typed("cpu", spent)
    return {**got, **extra}


async def _ladder(ctx: restate.Context, rung: str, n: int, chunk: int,
                  timed: Callable[[Callable[[int], Awaitable[None]]],
                                  Callable[[int], Awaitable[None]]]) -> dict[str, float]:
    from outlive.backend import StepCall
    from outlive_restate import _errors

    if rung == "plain":
        async def plain(i: int) -> None:
            async def action() -> bytes:
                return b'{"v":%d,"t":%d}' % (i, int(time.time() * 1000))
            await ctx.run_typed(f"step:s{i}#1", action, restate.RunOptions(max_attempts=1, serde=_B))
        return await _alternate(ctx, n, chunk, timed(plain))
    async with outlive_restate.attempt(ctx, write="held") as w:
        backend = w.backend
        assert isinstance(backend, outlive_restate.HandlerBackend) and backend.hold > 0
        if rung in ("run", "worker"):
            backend.renew_ms = None
        if rung in ("run", "raced", "worker", "worker raced"):
            backend.send_held = backend._held_command   # type: ignore[assignment,method-assign]
        elif rung == "sink":
            def sink() -> None:
                held = backend._held_command()
                if held is not None:
                    ctx.generic_send("bench_sink", "noop", _errors.dumps(held[1]), key=held[0])
            backend.send_held = sink   # type: ignore[method-assign]

        async def step(i: int) -> None:
            if rung in ("run", "raced"):
                async def body() -> int:
                    return i
                call = StepCall(work_id=w.work_id, attempt=w.attempt.number, token=w.token,
                                step=f"s{i}", input_key="k", persist="step")
                await backend.run_step(call, body)
                return
            await w.step(f"s{i}", _body, i=External(i))

        return await _alternate(ctx, n, chunk, timed(step), _written(w), settle_last=True)
