"""Per-step cost: an outlive step on Temporal against a raw Temporal activity step.

Both run on one dev server with the history poll-rate cap raised (by default the dev server allows
one workflow about 20 activity steps/s once the first ~20 are done), in one process,
with the same step body (a tiny summariser) and the same activity options:

* ``raw``: a plain workflow that runs N activities in sequence (what a Temporal user writes);
* ``outlive``: ``Worker.step`` with per-step persistence. The backend's ``run_and_record`` runs
  the activity inside a ledger update and journals the result (fenced, by the core ledger) in the
  same workflow task: durable before the next step starts, one client round trip;
* ``batch``: ``Worker.run_steps`` with all N steps in one call. The backend's
  ``run_and_record_many`` sends one ``steps`` update; the ledger workflow runs the activities back
  to back and journals each result (fenced, by the core ledger) before scheduling the next — no
  client round trip between steps, like the raw workflow;
* ``unfused``: the same step as two round trips (the activity update, then a ``RecordSteps``
  update) — the core's default ``run_step`` + ``execute`` path, for comparison;
* ``eager``: ``?eager=1`` — step activities on the ledger's own task queue, so Temporal hands the
  activity back in the workflow-task response (eager activity dispatch, as the raw workflow
  gets); single-process deployments only.

Everything runs twice: on a dev server with one matching partition per task queue (the
:class:`DevServer` default) and, under ``default_partitions``, with Temporal's default four — the
non-eager activity dispatch (the outlive shapes' step queue) pays ~8 ms per step for the latter.

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
        "target_ratio": 1.25,
    }


def rows(res: dict[str, Any]) -> list[str]:
    """Each ratio against its target, so a regression shows in the output."""
    out = []
    for label, part in (("1 partition", res), ("4 partitions", res.get("default_partitions"))):
        if not part:
            continue
        target = part["target_ratio"]
        for name, key in (("Worker.run_steps (one update) / raw", "ratio_batch_vs_raw"),
                          ("Worker.step (one update a step) / raw", "ratio_outlive_vs_raw")):
            ratio = part[key]
            verdict = "ok" if ratio <= target else "OVER TARGET"
            out.append(f"client-driven {name}, {label}: {ratio:.2f}x   target <= "
                       f"{target:.2f}x   {verdict}")
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
