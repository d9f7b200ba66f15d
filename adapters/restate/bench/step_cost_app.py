"""The app of ``step_cost.py``: ``bench_app``'s objects plus one-kind-only handlers, with the
SDK's state-machine calls counted (``counts`` answers them and starts again)."""

from __future__ import annotations

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


app = restate.app([bench, bench_desk, bench_sink, cost, *outlive_restate.services()])
