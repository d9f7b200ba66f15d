"""A long work inside the user's workflow: 10,000 steps in one attempt, with bounded state.

One ``Work`` runs ``--steps`` steps (small results) in one attempt, on a dev server, with a
``FileStore`` on the plugin. Temporal suggests continue-as-new as the history grows; each run
carries the ledger's head inline and the journal in chunks by reference. Reported against its
targets: the work completes with every step journaled once; the largest event any run starts
with (the carried input) stays small; the longest workflow task stays under Temporal's 2 s
deadlock timeout (each run restores the attempt's earlier steps before its first activity).

``python adapters/temporal/bench/bench_long_work.py [--steps N] [--out FILE]`` (``make
bench-temporal-long``; 16 minutes for 10,000 steps on a 2-core machine at load average 10).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import uuid
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

from outlive_temporal import Attempt, FileStore, OutlivePlugin, Work, WorkHandle
from outlive_temporal.devserver import DevServer

__all__ = ["main", "run_bench"]

#: The carried input of a run (user input + head + references) must stay under this.
FIRST_EVENT_TARGET = 64_000
#: Temporal fails a workflow task that holds its thread longer than 2 s.
TASK_TARGET_MS = 2_000


@activity.defn(name="bench_long_step")
async def bench_long_step(i: int) -> str:
    return f"result {i:06d}"


@workflow.defn(name="BenchLongWork")
class LongWork(Work):
    @workflow.run
    async def run(self, spec: dict[str, int]) -> dict[str, int]:
        return await self.drive(self.attempt, spec)

    async def attempt(self, a: Attempt, spec: dict[str, int]) -> dict[str, int]:
        for i in range(spec["n"]):
            await a.step(f"s{i}", bench_long_step, i, reads={"i": i}, external=["i"],
                         start_to_close_timeout=timedelta(seconds=60))
        return {"steps": spec["n"], "attempt": a.number, "generation": self.outlive.generation}


async def run_bench(address: str, n: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        client = await Client.connect(address, plugins=[OutlivePlugin(store=FileStore(tmp))])
        queue = f"bench-long-{uuid.uuid4().hex[:8]}"
        wid = f"bench/long/{uuid.uuid4().hex[:8]}"
        async with Worker(client, task_queue=queue, workflows=[LongWork],
                          activities=[bench_long_step]):
            t0 = time.perf_counter()
            res = await client.execute_workflow(LongWork.run, {"n": n}, id=wid, task_queue=queue)
            seconds = time.perf_counter() - t0
            handle = client.get_workflow_handle(wid)
            st = await WorkHandle(handle).ledger()
            first = 0
            longest = 0.0
            run_id: str | None = None
            runs = 0
            while True:   # walk the chain of runs back from the last
                h = client.get_workflow_handle(wid, run_id=run_id)
                events = [e async for e in h.fetch_history_events()]
                runs += 1
                first = max(first, events[0].ByteSize())
                started: dict[int, float] = {}
                for e in events:
                    if e.HasField("workflow_task_started_event_attributes"):
                        started[e.event_id] = e.event_time.ToDatetime().timestamp()
                    if e.HasField("workflow_task_completed_event_attributes"):
                        t = started.get(e.workflow_task_completed_event_attributes.started_event_id)
                        if t is not None:
                            longest = max(longest,
                                          (e.event_time.ToDatetime().timestamp() - t) * 1000)
                prev = events[0].workflow_execution_started_event_attributes
                if not prev.continued_execution_run_id:
                    break
                run_id = prev.continued_execution_run_id
    steps_once = len(st.journal) == n and len({e.step for e in st.journal}) == n
    return {"steps": n, "result": res, "seconds": round(seconds, 1), "runs": runs,
            "journaled_once": steps_once, "largest_first_event_bytes": first,
            "first_event_target_bytes": FIRST_EVENT_TARGET,
            "longest_workflow_task_ms": round(longest), "workflow_task_target_ms": TASK_TARGET_MS}


def rows(res: dict[str, Any]) -> list[str]:
    def verdict(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    return [
        f"{res['steps']} steps in one attempt: completed on attempt {res['result']['attempt']}, "
        f"every step journaled once: {res['journaled_once']}   target: yes   "
        f"{verdict(res['journaled_once'] and res['result']['steps'] == res['steps'])}",
        f"runs (continue-as-new): {res['runs']}; wall time {res['seconds']} s   (reported)",
        f"largest carried input (first event of a run): {res['largest_first_event_bytes']} B   "
        f"target < {res['first_event_target_bytes']} B   "
        f"{verdict(res['largest_first_event_bytes'] < res['first_event_target_bytes'])}",
        f"longest workflow task: {res['longest_workflow_task_ms']} ms   target < "
        f"{res['workflow_task_target_ms']} ms   "
        f"{verdict(res['longest_workflow_task_ms'] < res['workflow_task_target_ms'])}",
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python adapters/temporal/bench/bench_long_work.py")
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--out")
    args = p.parse_args(argv)
    with DevServer(poll_cap_raised=True) as srv:
        res = asyncio.run(run_bench(srv.address, args.steps))
    text = json.dumps(res, indent=2)
    print(text)
    for row in rows(res):
        print(row)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    # the workflow sandbox re-imports a workflow's module by name: run the importable copy
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_long_work

    raise SystemExit(bench_long_work.main())
