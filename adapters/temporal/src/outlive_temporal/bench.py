"""Per-step cost: an outlive step on Temporal against a raw Temporal activity step.

Both run on one dev server with the poll-rate cap raised (ENGINE-NOTES pitfall 1), in one process,
with the same step body (a tiny summariser) and the same activity options:

* ``raw``: a plain workflow that runs N activities in sequence (what a Temporal user writes);
* ``outlive``: ``Worker.step`` with per-step persistence = the step activity (run through the
  ledger workflow) + a ``RecordSteps`` update, each durable before the next step starts;
* ``fused``: ``TemporalBackend.run_step_journaled`` — the activity result and the journal entry in
  one update (what a core hook passing ``sources``/``at`` to the backend would give).

``python -m outlive_temporal.bench [--steps N] [--out FILE]`` prints and writes JSON.
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

from outlive import Controller, Worker
from outlive.backend import StepCall
from outlive.hashing import content_hash, input_key

from .backend import TemporalBackend
from .devserver import DevServer

__all__ = ["main", "run_bench"]


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


async def _outlive(backend: TemporalBackend, n: int, fused: bool) -> tuple[float, float]:
    work = f"bench/{uuid.uuid4().hex[:8]}"
    tick = iter(range(1, 10**9))
    ctl = Controller(backend, clock=lambda: next(tick))
    await ctl.open_work(work)
    parts = {f"s{i}": f"section {i}" for i in range(n)}
    await ctl.publish(work, "v1", parts)
    att = await ctl.admit(work)
    w = Worker(backend, att, parts, clock=lambda: next(tick))
    await w.start()
    times: list[float] = []
    t0 = time.perf_counter()
    for name, text in parts.items():
        s = time.perf_counter()
        if fused:
            sources = {name: content_hash(text)}
            call = StepCall(work_id=work, attempt=att.number, token=att.token, step=name,
                            input_key=input_key(name, sources))

            async def body(text: str = text) -> dict[str, str]:
                return {"summary": text[:12]}

            await backend.run_step_journaled(call, body, sources=sources, at=next(tick))
        else:
            await w.step(name, _summ, **{name: text})
        times.append((time.perf_counter() - s) * 1000)
    total = (time.perf_counter() - t0) * 1000 / n
    st = await backend.load(work)
    assert st is not None and len(st.journal) == n, "every step must be journaled"
    return total, statistics.median(times)


async def run_bench(url: str, n: int) -> dict[str, Any]:
    backend = TemporalBackend(url + "?can_after=100000")
    await backend.start()
    try:
        await _outlive(backend, 10, False)  # warm-up
        raw = await _raw(backend, n)
        ol_mean, ol_med = await _outlive(backend, n, False)
        fu_mean, fu_med = await _outlive(backend, n, True)
        raw2 = await _raw(backend, n)
    finally:
        await backend.close()
    raw_ms = min(raw, raw2)
    return {
        "steps": n,
        "raw_activity_step_ms": round(raw_ms, 2),
        "raw_runs_ms": [round(raw, 2), round(raw2, 2)],
        "outlive_step_ms": round(ol_mean, 2),
        "outlive_step_median_ms": round(ol_med, 2),
        "outlive_fused_step_ms": round(fu_mean, 2),
        "outlive_fused_step_median_ms": round(fu_med, 2),
        "ratio_outlive_vs_raw": round(ol_mean / raw_ms, 2),
        "ratio_fused_vs_raw": round(fu_mean / raw_ms, 2),
        "target_ratio": 1.25,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m outlive_temporal.bench")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--out")
    args = p.parse_args(argv)
    with DevServer(poll_cap_raised=True) as srv:
        res = asyncio.run(run_bench(srv.url, args.steps))
    text = json.dumps(res, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
