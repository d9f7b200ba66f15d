"""Per-step cost of outlive's client-driven shape on Temporal (``temporal://``), against raw
Temporal doing the same thing in the same shape.

In this shape the user's code runs in a client process; each step's body runs as an activity on
a task queue of that process (the process that holds the body), and the work's ledger lives in a
workflow. Both sides run on one dev server with the history poll-rate cap raised (by default the
dev server allows one workflow about 20 activity steps/s once the first ~20 are done), in one
process, with the same step body (a tiny summariser) and the same activity options. The rows with
a target (<= 1.10x) compare like with like, side by side:

* ``Worker.step`` (per-step persistence: the activity and the journal entry in one update) against
  a raw workflow whose update handler runs the activity on a worker-specific queue, the client
  sending one update a step (``BenchRawUpdates``): chunks of 20 steps alternate (raw, outlive,
  outlive, raw, ...), 3 rounds, the median of the rounds' ratios;
* ``Worker.run_steps`` (one ``steps`` update; the ledger workflow runs the activities back to back
  and journals each result, fenced, before scheduling the next) against a raw workflow running
  the same activities on a worker-specific queue (``BenchRawRouted``): whole runs alternating,
  4 pairs, the median of the pairs' ratios;
* ``Worker.run_steps`` with ``?eager=1`` (step activities on the ledger's own queue, so Temporal
  hands each back in the workflow-task response, single-process deployments only) against the
  raw loop on the workflow's own queue (``BenchRawSteps``), paired the same way.

Informational rows: ``Worker.step`` and ``Worker.run_steps`` against the raw loop on the
workflow's own queue. That is not the same shape: a client-driven step pays a second workflow
task (the update's, then the activity's result) and the client's round trip, which Temporal
charges any client that drives a workflow step by step; the like-for-like row shows outlive's own
share. Also measured: ``unfused`` (the activity update, then a ``RecordSteps`` update: the core's
default ``run_step`` + ``execute`` path) and ``eager`` per step.

Everything runs twice: on a dev server with one matching partition per task queue (the
:class:`DevServer` default) and, under ``default_partitions``, with Temporal's default four.

``python adapters/temporal/bench/bench_temporal.py [--steps N] [--out FILE]`` prints and writes JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.worker import Worker as TWorker

from outlive import Backend, Controller, Worker
from outlive import ledger as L
from outlive_temporal import TemporalBackend
from outlive_temporal.devserver import DevServer

__all__ = ["main", "run_bench"]


class _Unfused(TemporalBackend):
    """The core's default path: run the step, then send the journal write separately."""

    async def run_and_record(self, call: Any, fn: Any, record: Any) -> tuple[Any, L.Outcome]:
        return await Backend.run_and_record(self, call, fn, record)


@activity.defn(name="bench_summarise")
async def bench_summarise(text: str) -> dict[str, str]:
    return {"summary": text[:12]}


@workflow.defn(name="BenchRawSteps", sandboxed=False)
class BenchRawSteps:
    @workflow.run
    async def run(self, n: int) -> int:
        for i in range(n):
            await workflow.execute_activity(
                bench_summarise, f"section {i}", start_to_close_timeout=timedelta(seconds=60),
                heartbeat_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_attempts=1))
        return n


@workflow.defn(name="BenchRawRouted", sandboxed=False)
class BenchRawRouted:
    """The raw loop with its activities on a task queue of their own: how a Temporal user sends
    an activity to one worker (a worker-specific task queue), as outlive sends a step to the
    process that holds its body. No eager dispatch: the activity is not on the workflow's queue."""

    @workflow.run
    async def run(self, n: int, queue: str) -> int:
        for i in range(n):
            await workflow.execute_activity(
                bench_summarise, f"section {i}", task_queue=queue,
                start_to_close_timeout=timedelta(seconds=60),
                heartbeat_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_attempts=1))
        return n


@workflow.defn(name="BenchRawUpdates", sandboxed=False)
class BenchRawUpdates:
    """A client drives the steps: one update a step, whose handler runs the activity (on a
    worker-specific queue) and answers its result, as outlive's client-driven ``Worker.step``."""

    def __init__(self) -> None:
        self._done = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self._done)

    @workflow.update
    async def step(self, text: str, queue: str) -> dict[str, str]:
        result: dict[str, str] = await workflow.execute_activity(
            bench_summarise, text, task_queue=queue,
            start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(maximum_attempts=1))
        return result

    @workflow.signal
    def done(self) -> None:
        self._done = True


def _summ(**kw: Any) -> dict[str, str]:
    (text,) = kw.values()
    return {"summary": str(text)[:12]}


async def _raw(backend: TemporalBackend, n: int) -> float:
    client = backend._c()
    q = f"bench-raw-{uuid.uuid4().hex[:8]}"
    async with TWorker(client, task_queue=q, workflows=[BenchRawSteps],
                       activities=[bench_summarise]):
        await client.execute_workflow(BenchRawSteps.run, 5, id=f"warm-{q}", task_queue=q)
        t0 = time.perf_counter()
        await client.execute_workflow(BenchRawSteps.run, n, id=f"raw-{q}", task_queue=q)
        return (time.perf_counter() - t0) * 1000 / n


async def _paired_batch(backend: TemporalBackend, n: int, routed: bool,
                        rounds: int = 4) -> dict[str, Any]:
    """The raw loop (its activities on a queue of their own when ``routed``, else on the
    workflow's queue) and outlive's ``Worker.run_steps``, side by side: ``rounds`` pairs of whole
    runs of ``n`` steps, the order alternating (raw, outlive, outlive, raw, ...). The median of
    the pairs' ratios, and each side's per-step median."""
    client = backend._c()
    q = f"bench-batch-{uuid.uuid4().hex[:8]}"
    steps_q = f"{q}-steps" if routed else q
    wf: Any = BenchRawRouted if routed else BenchRawSteps
    raw_t: list[float] = []
    out_t: list[float] = []
    ratios: list[float] = []
    async with TWorker(client, task_queue=q, workflows=[wf],
                       activities=[] if routed else [bench_summarise]), \
            TWorker(client, task_queue=f"{q}-steps", activities=[bench_summarise]):

        async def raw_run(r: int) -> float:
            args: list[Any] = [n, steps_q] if routed else [n]
            t0 = time.perf_counter()
            await client.execute_workflow(wf.run, args=args, id=f"{q}-{r}", task_queue=q)
            return (time.perf_counter() - t0) * 1000 / n

        await raw_run(-1)   # warm-up
        for r in range(rounds):
            if r % 2 == 0:
                raw_ms, out_ms = await raw_run(r), await _batch(backend, n)
            else:
                out_ms = await _batch(backend, n)
                raw_ms = await raw_run(r)
            raw_t.append(raw_ms)
            out_t.append(out_ms)
            ratios.append(out_ms / raw_ms)
    return {"raw_ms": round(statistics.median(raw_t), 2),
            "outlive_ms": round(statistics.median(out_t), 2),
            "ratio": round(statistics.median(ratios), 3),
            "rounds": [round(x, 3) for x in ratios]}


async def _paired_round(backend: TemporalBackend, q: str, r: int, n: int,
                        chunk: int) -> tuple[float, float]:
    """One round of :func:`_paired_updates`: per-step ms of each side (raw, outlive)."""
    client = backend._c()
    handle = await client.start_workflow(BenchRawUpdates.run, id=f"paired-{q}-{r}", task_queue=q)
    work, parts, w = await _started(backend, n + 5)
    items = list(parts.items())
    for i in range(5):   # warm-up, both sides
        await handle.execute_update(BenchRawUpdates.step, args=[f"warm {i}", f"{q}-steps"])
        name, text = items[n + i]
        await w.step(name, _summ, **{name: text})
    spent = {"raw": 0.0, "outlive": 0.0}

    async def raw_chunk(first: int) -> None:
        t0 = time.perf_counter()
        for i in range(first, first + chunk):
            await handle.execute_update(BenchRawUpdates.step, args=[f"section {i}", f"{q}-steps"])
        spent["raw"] += time.perf_counter() - t0

    async def outlive_chunk(first: int) -> None:
        t0 = time.perf_counter()
        for name, text in items[first:first + chunk]:
            await w.step(name, _summ, **{name: text})
        spent["outlive"] += time.perf_counter() - t0

    for k, first in enumerate(range(0, n, chunk)):
        for side in ((raw_chunk, outlive_chunk) if k % 2 == 0 else (outlive_chunk, raw_chunk)):
            await side(first)
    await handle.signal(BenchRawUpdates.done)
    await handle.result()
    st = await backend.load(work)
    assert st is not None and len(st.journal) == n + 5, "every step must be journaled"
    return spent["raw"] * 1000 / n, spent["outlive"] * 1000 / n


async def _paired_updates(backend: TemporalBackend, n: int, chunk: int = 20,
                          rounds: int = 3) -> dict[str, Any]:
    """A raw update a step and outlive's ``Worker.step``, side by side: each round runs ``n``
    steps of each, alternating in chunks of ``chunk`` (raw, outlive, outlive, raw, ...), so a
    load spike lands on both sides alike. The median of the rounds' ratios, and each side's
    per-step median over the rounds."""
    q = f"bench-paired-{uuid.uuid4().hex[:8]}"
    raw_t: list[float] = []
    out_t: list[float] = []
    async with TWorker(backend._c(), task_queue=q, workflows=[BenchRawUpdates]), \
            TWorker(backend._c(), task_queue=f"{q}-steps", activities=[bench_summarise]):
        for r in range(rounds):
            raw_ms, out_ms = await _paired_round(backend, q, r, n, chunk)
            raw_t.append(raw_ms)
            out_t.append(out_ms)
    ratios = [o / r for o, r in zip(out_t, raw_t, strict=True)]
    return {"raw_update_step_ms": round(statistics.median(raw_t), 2),
            "outlive_paired_step_ms": round(statistics.median(out_t), 2),
            "ratio_outlive_vs_raw_update": round(statistics.median(ratios), 3),
            "ratio_outlive_vs_raw_update_rounds": [round(x, 3) for x in ratios]}


async def _started(backend: TemporalBackend, n: int) -> tuple[str, dict[str, str], Worker]:
    """A fresh work of ``n`` parts (published as v1) and its first attempt's started Worker."""
    work = f"bench/{uuid.uuid4().hex[:8]}"
    tick = iter(range(1, 10**9))
    ctl = Controller(backend, clock=lambda: next(tick))
    await ctl.open_work(work)
    parts = {f"s{i}": f"section {i}" for i in range(n)}
    await ctl.publish(work, "v1", parts)
    att = await ctl.admit(work)
    w = Worker(backend, att, parts, clock=lambda: next(tick))
    await w.start()
    return work, parts, w


async def _outlive(backend: TemporalBackend, n: int) -> tuple[float, float]:
    work, parts, w = await _started(backend, n)
    times: list[float] = []
    t0 = time.perf_counter()
    for name, text in parts.items():
        s = time.perf_counter()
        await w.step(name, _summ, **{name: text})
        times.append((time.perf_counter() - s) * 1000)
    total = (time.perf_counter() - t0) * 1000 / n
    st = await backend.load(work)
    assert st is not None and len(st.journal) == n, "every step must be journaled"
    return total, statistics.median(times)


async def _batch(backend: TemporalBackend, n: int) -> float:
    work, parts, w = await _started(backend, n)
    plan = [(name, _summ, {name: text}) for name, text in parts.items()]
    t0 = time.perf_counter()
    await w.run_steps(plan)
    total = (time.perf_counter() - t0) * 1000 / n
    st = await backend.load(work)
    assert st is not None and len(st.journal) == n, "every step must be journaled"
    return total


async def run_bench(url: str, n: int) -> dict[str, Any]:
    backend = TemporalBackend(url + "?can_after=100000")
    unfused = _Unfused(url + "?can_after=100000&task_queue=outlive-bench-unfused")
    eager = TemporalBackend(url + "?can_after=100000&eager=1&task_queue=outlive-bench-eager")
    for b in (backend, unfused, eager):
        await b.start()
    try:
        for b in (backend, unfused, eager):
            await _outlive(b, 10)  # warm-up
        await _batch(backend, 10)
        raw = await _raw(backend, n)
        paired = await _paired_updates(backend, n)
        paired_batch = await _paired_batch(backend, n, routed=True)
        paired_eager = await _paired_batch(eager, n, routed=False)
        ba_ms = await _batch(backend, n)
        ol_mean, ol_med = await _outlive(backend, n)
        un_mean, un_med = await _outlive(unfused, n)
        ea_mean, ea_med = await _outlive(eager, n)
        raw2 = await _raw(backend, n)
        ol2_mean, ol2_med = await _outlive(backend, n)
        ba2_ms = await _batch(backend, n)
        bae_ms = await _batch(eager, n)
    finally:
        for b in (eager, unfused, backend):
            await b.close()
    raw_ms = min(raw, raw2)
    ol = min(ol_mean, ol2_mean)
    ba = min(ba_ms, ba2_ms)
    return {
        "steps": n,
        "raw_activity_step_ms": round(raw_ms, 2),
        "raw_runs_ms": [round(raw, 2), round(raw2, 2)],
        **paired,
        "paired_batch_routed": paired_batch,
        "paired_batch_eager": paired_eager,
        "ratio_batch_vs_raw_routed_paired": paired_batch["ratio"],
        "ratio_batch_eager_vs_raw_paired": paired_eager["ratio"],
        "outlive_step_ms": round(ol, 2),
        "outlive_runs_ms": [round(ol_mean, 2), round(ol2_mean, 2)],
        "outlive_step_median_ms": round(min(ol_med, ol2_med), 2),
        "unfused_step_ms": round(un_mean, 2),
        "unfused_step_median_ms": round(un_med, 2),
        "batch_step_ms": round(ba, 2),
        "batch_runs_ms": [round(ba_ms, 2), round(ba2_ms, 2)],
        "batch_eager_step_ms": round(bae_ms, 2),
        "eager_step_ms": round(ea_mean, 2),
        "eager_step_median_ms": round(ea_med, 2),
        "ratio_outlive_vs_raw": round(ol / raw_ms, 2),
        "ratio_batch_vs_raw": round(ba / raw_ms, 2),
        "ratio_batch_eager_vs_raw": round(bae_ms / raw_ms, 2),
        "ratio_eager_vs_raw": round(ea_mean / raw_ms, 2),
        "ratio_unfused_vs_raw": round(un_mean / raw_ms, 2),
        "target_ratio": 1.10,
    }


#: Each row: its name, its ratio's key, and whether it has the target (the same shape on both
#: sides) or is informational (outlive's client-driven shape against a workflow's own loop).
ROWS = (
    ("Worker.step (one update a step) / raw update a step", "ratio_outlive_vs_raw_update", True),
    ("Worker.run_steps (one update) / raw loop, routed activities",
     "ratio_batch_vs_raw_routed_paired", True),
    ("Worker.run_steps, eager=1 / raw loop", "ratio_batch_eager_vs_raw_paired", True),
    ("Worker.step / raw loop (not the same shape)", "ratio_outlive_vs_raw", False),
    ("Worker.run_steps / raw loop (not the same shape)", "ratio_batch_vs_raw", False),
)


def rows(res: dict[str, Any]) -> list[str]:
    """Each ratio against its target, so a regression shows in the output."""
    out = []
    for label, part in (("1 partition", res), ("4 partitions", res.get("default_partitions"))):
        if not part:
            continue
        target = part["target_ratio"]
        for name, key, targeted in ROWS:
            ratio = part[key]
            if targeted:
                verdict = "met" if ratio <= target else "MISSED"
                tail = f"target <= {target:.2f}x   {verdict}"
            else:
                tail = "(informational)"
            out.append(f"client-driven {name}, {label}: {ratio:.2f}x   {tail}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python adapters/temporal/bench/bench_temporal.py")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--out")
    args = p.parse_args(argv)
    with DevServer(poll_cap_raised=True) as srv:
        res = asyncio.run(run_bench(srv.url, args.steps))
    # the same on a server with Temporal's default 4 matching partitions per task queue
    with DevServer(poll_cap_raised=True, single_partition=False) as srv:
        res["default_partitions"] = asyncio.run(run_bench(srv.url, args.steps))
    text = json.dumps(res, indent=2)
    print(text)
    for row in rows(res):
        print(row)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
