"""The app of ``step_cost.py``: ``bench_app``'s objects plus one-kind-only handlers, with the
SDK's state-machine calls counted (``counts`` answers them and starts again)."""

from __future__ import annotations

import cProfile
import gc
import os
import time
from collections import Counter
from typing import Any

import restate
from bench_app import _B, _body, _raw, bench, bench_desk, bench_sink
from restate.vm import VMWrapper

import outlive_restate
from outlive import External

COUNTS: Counter[str] = Counter()


def _counting(name: str) -> None:
    inner = getattr(VMWrapper, name)

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        got = inner(self, *args, **kwargs)
        if name == "take_output":
            if got:
                COUNTS["frames out"] += 1
                COUNTS["bytes out"] += len(got)
        elif name == "notify_input":
            COUNTS["frames in"] += 1
            COUNTS["bytes in"] += len(args[0])
        else:
            COUNTS[name] += 1
        return got

    setattr(VMWrapper, name, counted)


for _name in ("take_output", "notify_input", "sys_run", "propose_run_completion_success",
              "sys_get_state", "sys_set_state", "sys_clear_state", "sys_call", "sys_send",
              "sys_sleep", "do_progress", "take_notification"):
    _counting(_name)

cost = restate.Service("cost")


@cost.handler()
async def counts(ctx: restate.Context, arg: Any) -> dict[str, int]:
    """The calls counted since the last ``counts`` (read outside any measured invocation)."""
    del ctx, arg
    got = dict(COUNTS)
    COUNTS.clear()
    return got


@cost.handler()
async def raw_only(ctx: restate.Context, arg: dict[str, Any]) -> str:
    for i in range(int(arg["n"])):
        await _raw(ctx, i)
    return "done"


@bench_desk.handler()
async def owned_only(ctx: restate.ObjectContext, arg: dict[str, Any]) -> str:
    async with outlive_restate.attempt(ctx) as w:
        for i in range(int(arg["n"])):
            await w.step(f"s{i}", _body, i=External(i))
    return "done"


@cost.handler()
async def held_only(ctx: restate.Context, arg: dict[str, Any]) -> str:
    """The handler shape as a dispatched attempt runs it: step writes held, then written."""
    async with outlive_restate.attempt(ctx, write="held") as w:
        for i in range(int(arg["n"])):
            await w.step(f"s{i}", _body, i=External(i))
        await w.heartbeat()   # the writes still held are stored before the invocation ends
    return "done"


@bench_desk.handler()
async def raw_sets(ctx: restate.ObjectContext, arg: dict[str, Any]) -> str:
    """Raw steps and ``sets`` small state writes per step (what an index key costs), made
    after every step, or every ``every`` steps for those steps at once (as a flush does);
    ``size``: instead, one state write of ``size`` bytes per step, every ``every`` steps in
    one value (what an owner's batch of entries costs)."""
    sets, every, size = int(arg.get("sets", 1)), int(arg.get("every", 1)), int(arg.get("size", 0))
    for i in range(int(arg["n"])):
        await _raw(ctx, i)
        if (i + 1) % every == 0:
            if size:
                ctx.set(f"b/{i}", b"x" * (size * every), serde=_B)
                continue
            for j in range(i + 1 - every, i + 1):
                for k in range(sets):
                    ctx.set(f"r/{j:064d}/{k}", b"%d,%d" % (j, j), serde=_B)
    return "done"


def _server_cpu(pid: int) -> int:
    """CPU ns of every thread of process ``pid`` so far (``/proc/<pid>/task/*/schedstat``)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                total += int(fh.read().split()[0])
        except (OSError, ValueError):
            pass   # a thread that ended between the listing and the read
    return total


#: STEP_COST_TIMES=1: the sync pieces of an owner step, each timed (inclusive, ns), by name.
TIMES: Counter[str] = Counter()


def _timed(owner: Any, attr: str, label: str) -> None:
    inner = getattr(owner, attr)
    clock = time.thread_time_ns if os.environ.get("STEP_COST_TIMES") == "cpu" else time.perf_counter_ns

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = clock()
        try:
            return inner(*args, **kwargs)
        finally:
            TIMES[label] += clock() - t0
            TIMES[f"calls {label}"] += 1000   # reported per step

    setattr(owner, attr, timed)


if os.environ.get("STEP_COST_TIMES"):
    from outlive import codec as _codec
    from outlive import ledger as _L
    from outlive import worker as _worker
    from outlive_restate import _engine

    for _owner, _attr in ((_worker.Worker, "_prepare"), (_worker.Worker, "_restore"),
                          (_worker.Worker, "_remember"), (_worker._Prepared, "record"),
                          (_engine, "_envelope"), (_engine._Ahead, "__call__"),
                          (_engine.OwnedBackend, "_compute"), (_engine.OwnedBackend, "_commit"),
                          (_engine, "_after_send"), (_engine.HandlerBackend, "_run"),
                          (_codec, "dumps"), (_L, "checked"), (_L, "apply"), (_L, "reads"),
                          (_L, "changed")):
        _timed(_owner, _attr, f"{getattr(_owner, '__name__', _owner)}.{_attr}")


#: The garbage collector's passes during the chunks: by generation, how many and how long (ns).
_GC: dict[str, int] = {}
_GC_START = [0]


def _gc_pass(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _GC_START[0] = time.perf_counter_ns()
        return
    gen = info["generation"]
    _GC[f"gc{gen} passes"] = _GC.get(f"gc{gen} passes", 0) + 1
    _GC[f"gc{gen} ns"] = _GC.get(f"gc{gen} ns", 0) + time.perf_counter_ns() - _GC_START[0]


gc.callbacks.append(_gc_pass)


@bench_desk.handler()
async def owned_split(ctx: restate.ObjectContext, arg: dict[str, Any]) -> dict[str, float]:
    """As the benchmark's ``owned`` row: chunks of raw steps alternate with chunks of owner
    steps in one invocation; answers the CPU (ns) of this process and of the server
    (``arg["server"]``: its pid) and the wall time spent in each kind of chunk, and the
    steps of each kind. What the two reads cost is charged to neither."""
    n, chunk, server = int(arg["n"]), int(arg["chunk"]), int(arg["server"])
    spent = {f"{who} {k}": 0 for who in ("raw", "owner") for k in ("dep", "srv", "wall")}

    def sample() -> tuple[int, int, int]:
        d0 = time.process_time_ns()
        s = _server_cpu(server)
        return d0, s, time.process_time_ns()

    profile = os.environ.get("STEP_COST_PROFILE")
    profs = {k: cProfile.Profile() for k in ("raw", "owner")} if profile else {}
    async with outlive_restate.attempt(ctx, **arg.get("options", {})) as w:
        TIMES.clear()
        for start in range(0, n, chunk):
            for kind in ("raw", "owner"):
                if profs:
                    profs[kind].enable()
                _d0, s0, d1 = sample()
                _GC.clear()
                t0 = time.perf_counter_ns()
                for i in range(start, min(n, start + chunk)):
                    if kind == "raw":
                        await _raw(ctx, i)
                    else:
                        await w.step(f"s{i}", _body, i=External(i))
                t1 = time.perf_counter_ns()
                d2, s1, _d3 = sample()
                if profs:
                    profs[kind].disable()
                spent[f"{kind} dep"] += d2 - d1
                spent[f"{kind} srv"] += s1 - s0
                spent[f"{kind} wall"] += t1 - t0
                for k, v in _GC.items():   # per step: passes x1000, us
                    spent[f"{kind} {k}"] = spent.get(f"{kind} {k}", 0) + v * (
                        1000_000 if k.endswith("passes") else 1)

        for kind, prof in profs.items():   # STEP_COST_PROFILE=path: each kind's, for pstats
            prof.dump_stats(f"{profile}.{'renewed' if w.backend.renew_ms else 'owner'}.{kind}")

        async def took() -> dict[str, float]:
            return {k: v / n / 1000 for k, v in {**spent, **TIMES}.items()}   # us per step

        got: dict[str, float] = await ctx.run_typed("elapsed", took)
    return got


app = restate.app([bench, bench_desk, bench_sink, cost, *outlive_restate.services()])
