"""The benchmark's Restate app: one user handler, two ways to run N steps in it.

``raw``     - N bare ``ctx.run_typed`` steps, the floor a Restate user writes;
``outlive`` - the same N steps as ``Worker.step`` of the attempt this invocation runs
              (``outlive_restate.attempt``): the body as ``ctx.run_typed`` plus the fenced journal
              write to the work's ledger (``write="send"`` or ``"call"``);
``owned``   - the same in the owner shape: an exclusive handler of the user's object that keeps
              the work's ledger (:func:`outlive_restate.keep_ledger`);
``floor``   - the raw step plus an awaited call to an empty exclusive handler of another object:
              what any per-step write to another key's state costs in Restate at least (the
              handler shape's step is that, with outlive's write in the handler);
``takeover``- a step that waits while ``hold`` exists (for the takeover latency).

Each answers the milliseconds spent in its step loop (journaled, so a replay answers the same).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import restate
from restate.serde import BytesSerde

import outlive_restate

bench = restate.Service("bench")
bench_desk = outlive_restate.keep_ledger(restate.VirtualObject("bench_desk"))
bench_sink = restate.VirtualObject("bench_sink")
_B = BytesSerde()


async def _body(**kw: int) -> int:
    return next(iter(kw.values()))


async def _elapsed(ctx: restate.Context, t0: float) -> float:
    async def took() -> float:
        return (time.perf_counter() - t0) * 1000

    got: float = await ctx.run_typed("elapsed", took)
    return got


@bench.handler()
async def raw(ctx: restate.Context, n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        async def action(i: int = i) -> bytes:
            return str(i).encode()

        await ctx.run_typed(f"s{i}", action, restate.RunOptions(max_attempts=1, serde=_B))
    return await _elapsed(ctx, t0)


@bench_sink.handler(input_serde=_B, output_serde=_B)
async def noop(ctx: restate.ObjectContext, req: bytes) -> bytes:
    return req


@bench.handler()
async def floor(ctx: restate.Context, arg: dict[str, Any]) -> float:
    t0 = time.perf_counter()
    for i in range(int(arg["n"])):
        async def action(i: int = i) -> bytes:
            return str(i).encode()

        raw = await ctx.run_typed(f"s{i}", action, restate.RunOptions(max_attempts=1, serde=_B))
        await ctx.generic_call("bench_sink", "noop", raw, key=str(arg["key"]))
    return await _elapsed(ctx, t0)


@bench.handler()
async def outlive(ctx: restate.Context, arg: dict[str, Any]) -> float:
    t0 = time.perf_counter()
    async with outlive_restate.attempt(ctx, write=arg.get("write", "send")) as w:
        for i in range(int(arg["n"])):
            await w.step(f"s{i}", _body, i=i)
    return await _elapsed(ctx, t0)


@bench_desk.handler()
async def owned(ctx: restate.ObjectContext, arg: dict[str, Any]) -> float:
    t0 = time.perf_counter()
    async with outlive_restate.attempt(ctx) as w:
        for i in range(int(arg["n"])):
            await w.step(f"s{i}", _body, i=i)
    return await _elapsed(ctx, t0)


@bench.handler()
async def takeover(ctx: restate.Context, arg: dict[str, Any]) -> str:
    async with outlive_restate.attempt(ctx) as w:
        async def first(**kw: str) -> int:
            while w.attempt.number == 1 and os.path.exists(str(arg["hold"])):
                await asyncio.sleep(0.01)
            return int(time.time() * 1000)

        await w.step("s1", first, s1="x")
    return "done"


app = restate.app([bench, bench_desk, bench_sink, *outlive_restate.services()])
