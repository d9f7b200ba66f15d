"""Kinds the runtime tests run, importable by name (a runtime in another process imports them).

The small work of the benchmarks: four steps, a candidate, its acceptance and one effect.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import outlive
from outlive import Contract, Kind, Lease, RetryPolicy

CONTRACT = Contract(name="digest-form", version="1", assessor="reviewer")
SECTIONS = ("revenue", "costs", "outlook", "risks")
PARTS = {name: f"{name} text" for name in SECTIONS}

#: Counters the tests read (per process).
CALLS: dict[str, int] = {}
RECEIVER_PATH = os.environ.get("OUTLIVE_TEST_RECEIVER", "")


def summarise(**inputs: Any) -> str:
    (_name, text), = inputs.items()
    CALLS["summarise"] = CALLS.get("summarise", 0) + 1
    return f"summary of {text}"


def receiver() -> outlive.SqliteReceiver | outlive.MemoryReceiver:
    global _RECEIVER
    if _RECEIVER is None:
        _RECEIVER = (outlive.SqliteReceiver(RECEIVER_PATH) if RECEIVER_PATH
                     else outlive.MemoryReceiver())
    return _RECEIVER


_RECEIVER: Any = None


def post(key: str | None, payload: Any) -> outlive.Receipt:
    """The feed's sender: the receiver applies each operation key once (in a file shared by
    every process when ``OUTLIVE_TEST_RECEIVER`` names one)."""
    r = receiver()
    if isinstance(r, outlive.SqliteReceiver):
        def apply(conn: Any, body: Any) -> str:
            conn.execute("CREATE TABLE IF NOT EXISTS posts (id INTEGER PRIMARY KEY "
                         "AUTOINCREMENT, op_key TEXT, body TEXT)")
            cur = conn.execute("INSERT INTO posts (op_key, body) VALUES (?, ?)",
                               (key, json.dumps(body)))
            return f"post-{cur.lastrowid}"
        return r.receive(key, payload, apply)
    return r.receive(key, payload, lambda p: f"post-{len(r.applied) + 1}")


def parts_for(version: str) -> dict[str, str]:
    return {name: f"{name} text {version}" for name in SECTIONS}


async def small(ctx: outlive.AttemptContext) -> None:
    """Four steps, a candidate judged by the runtime, one announcement keyed by operation."""
    w = ctx.worker
    for part in SECTIONS:
        await w.step(part, summarise, **{part: ctx.inputs[part]})
    # the sections' journaled results by step: the candidate names those steps (an attempt may
    # have run others before)
    acc = await ctx.submit({p: w.result(p) for p in SECTIONS}, list(SECTIONS))
    await w.effect(f"announce:{w.work_id}:{acc.digest[:8]}", {"digest": acc.digest},
                   send=post)


# Leases short enough for quick tests, long enough for a loaded two-core machine.
SMALL = Kind(name="small", attempt=small, contract=CONTRACT, inputs=parts_for,
             lease=Lease(heartbeat_interval=400, missed_beats=3, start_grace=2_000),
             retry=RetryPolicy(maximum_attempts=3, initial_interval=0.01))

#: How many times each failing kind's attempt ran (per process).
RUNS: dict[str, int] = {}


class Flaky(Exception):
    """A transient error (a 503 from a model API, say)."""


async def flaky_then_ok(ctx: outlive.AttemptContext) -> None:
    RUNS["flaky"] = RUNS.get("flaky", 0) + 1
    if ctx.attempt.number < 3:
        raise Flaky(f"503 on attempt {ctx.attempt.number}")
    await small(ctx)


async def always_flaky(ctx: outlive.AttemptContext) -> None:
    RUNS["always"] = RUNS.get("always", 0) + 1
    raise Flaky("503 again")


async def wrong_signature(ctx: outlive.AttemptContext) -> None:
    RUNS["typo"] = RUNS.get("typo", 0) + 1

    def takes_nothing() -> str:
        return "x"
    await ctx.worker.step("revenue", takes_nothing, revenue=ctx.inputs["revenue"])


async def user_gives_up(ctx: outlive.AttemptContext) -> None:
    RUNS["nonretryable"] = RUNS.get("nonretryable", 0) + 1
    raise outlive.NonRetryable("the ticket was deleted")


async def declared_fatal(ctx: outlive.AttemptContext) -> None:
    RUNS["declared"] = RUNS.get("declared", 0) + 1
    raise KeyError("no such customer")


async def no_receipt(ctx: outlive.AttemptContext) -> None:
    RUNS["no_receipt"] = RUNS.get("no_receipt", 0) + 1
    w = ctx.worker
    for part in SECTIONS:
        await w.step(part, summarise, **{part: ctx.inputs[part]})
    acc = await ctx.submit({p: w.result(p) for p in SECTIONS})
    await w.effect(f"announce:{w.work_id}:{acc.digest[:8]}", {"digest": acc.digest},
                   send=lambda key, payload: {"ok": True})


async def slow(ctx: outlive.AttemptContext) -> None:
    """Longer than its lease (1.2 s): the renewal keeps it alive."""
    await asyncio.sleep(float(ctx.args[0]) if ctx.args else 2.0)
    await small(ctx)


def _kind(name: str, attempt: Any, **kw: Any) -> Kind:
    base: dict[str, Any] = dict(contract=CONTRACT, inputs=parts_for,
                                lease=Lease(heartbeat_interval=400, missed_beats=3,
                                            start_grace=2_000),
                                retry=RetryPolicy(maximum_attempts=4, initial_interval=0.01))
    base.update(kw)
    return Kind(name=name, attempt=attempt, **base)


FLAKY = _kind("flaky", flaky_then_ok)
ALWAYS = _kind("always", always_flaky)
TYPO = _kind("typo", wrong_signature)
NONRETRYABLE = _kind("nonretryable", user_gives_up)
DECLARED = _kind("declared", declared_fatal,
                 retry=RetryPolicy(maximum_attempts=4, initial_interval=0.01,
                                   non_retryable=(KeyError,)))
NO_RECEIPT = _kind("no_receipt", no_receipt)
SLOW = _kind("slow", slow)
QUEUED = _kind("queued", slow, concurrency=2)


async def paced(ctx: outlive.AttemptContext) -> None:
    """The small work with a few milliseconds per step, so a kill finds works in flight."""
    w = ctx.worker

    async def summarise_slowly(**inputs: Any) -> str:
        await asyncio.sleep(0.02)   # a model call's pace: a kill finds the rest in flight
        return summarise(**inputs)
    for i, part in enumerate(SECTIONS):
        await w.step(part, summarise_slowly, **{part: ctx.inputs[part]})
        if i == 0 and int(w.work_id.rsplit("/", 1)[1]) >= 10:
            # works past the tenth wait after their first step while the gate file exists
            while os.environ.get("OUTLIVE_TEST_GATE") and \
                    os.path.exists(os.environ["OUTLIVE_TEST_GATE"]):
                await asyncio.sleep(0.02)
    acc = await ctx.submit({p: w.result(p) for p in SECTIONS})
    await w.effect(f"announce:{w.work_id}:{acc.digest[:8]}", {"digest": acc.digest}, send=post)


# a lease a starved event loop on a loaded machine still renews (two runtimes share the CPU)
RECOVER = _kind("recover", paced, concurrency=50,
                lease=Lease(heartbeat_interval=700, missed_beats=3, start_grace=3_000))


GATE = os.environ.get("OUTLIVE_TEST_GATE", "")


async def gated(ctx: outlive.AttemptContext) -> None:
    """The small work, held at its start while the gate file exists (a kill finds it running)."""
    while GATE and os.path.exists(GATE):
        await asyncio.sleep(0.02)
    await small(ctx)


#: A lease far longer than the tests wait: a successor admitted sooner found its runner gone.
HELD = _kind("held", gated, lease=Lease(heartbeat_interval=10_000, missed_beats=6,
                                        start_grace=10_000))
HELD_SHORT = _kind("held_short", gated)
#: At most 40 running per runtime: two runtimes share 80 works between them.
HELD_SHARED = _kind("held_shared", gated, concurrency=40)


#: What the refusing assessor was asked to judge, by digest (per process).
JUDGED: dict[str, int] = {}


def refuse_first_version(cand: Any, version: Any) -> tuple[bool, str]:
    """Refuses every candidate built for v1 (the figures are wrong), accepts v2's."""
    JUDGED[cand.digest] = JUDGED.get(cand.digest, 0) + 1
    if cand.version == "v1":
        return False, "the v1 figures do not reconcile"
    return True, "reconciles"


REFUSING = _kind("refusing", small, assessor=refuse_first_version,
                 retry=RetryPolicy(maximum_attempts=2, initial_interval=0.01))


async def slow_inputs(version: str) -> dict[str, str]:
    """A loader slower than the kind's lease (1.2 s): fetching the report takes a while."""
    await asyncio.sleep(2.0)
    return parts_for(version)


SLOW_INPUTS = _kind("slow_inputs", small, inputs=slow_inputs)
