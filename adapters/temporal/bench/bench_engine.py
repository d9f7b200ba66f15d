"""The in-engine shape measured: a step inside the user's workflow, and takeover latency.

* ``step``: a workflow that extends :class:`~outlive_temporal.Work` and runs N steps with
  ``Attempt.step`` (restore-or-run, a fenced journal write in workflow code per step) against a
  plain workflow running ``workflow.execute_activity`` of the same activity N times, with the same
  options (one try, the same heartbeat and start-to-close timeouts). Same server, same worker,
  same client, both in the workflow sandbox. Measured two ways, because a shared machine's load
  moves faster than one round lasts: *alternating* (A B B A ... one after the other) and *paired*
  (the two workflows run at the same time, so both see the same load); each reports the ratio per
  round and the median ratio.
* ``replay``: the workflow-side CPU of one step, without the server: each recorded history
  (raw and in-engine) replayed several times with Temporal's ``Replayer``; the difference per step
  is what ``Attempt.step`` adds inside the workflow task (hashing, the ledger's fenced write).
* ``takeover``: a step that heartbeats once and then goes silent; the time from that last
  heartbeat to the successor's first activity starting (heartbeat timeout 1 s), several times.

``python adapters/temporal/bench/bench_engine.py [--steps N] [--rounds R] [--out FILE]``.
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
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import Replayer, Worker

from outlive_temporal import Attempt, OutlivePlugin, Work
from outlive_temporal.devserver import DevServer
from outlive_temporal.testing import go_silent

__all__ = ["main", "run_bench"]

_OPTS: dict[str, Any] = {"start_to_close_timeout": timedelta(seconds=30),
                         "heartbeat_timeout": timedelta(seconds=10),
                         "retry_policy": RetryPolicy(maximum_attempts=1)}
#: Times the silent step recorded: its last heartbeat, and the successor's start.
_TAKEOVER: dict[str, float] = {}


@activity.defn(name="bench_engine_step")
async def bench_engine_step(text: str) -> str:
    return text[:12]


@activity.defn(name="bench_engine_silent")
async def bench_engine_silent(tag: str) -> str:
    if f"{tag}.beat" not in _TAKEOVER:
        activity.heartbeat()
        _TAKEOVER[f"{tag}.beat"] = time.time()
        go_silent()   # its worker plays paused: outlive's wrapper stops beating for it too
        await asyncio.sleep(3600)  # silent from now on; Temporal times it out
    _TAKEOVER[f"{tag}.successor"] = time.time()
    return tag


@workflow.defn(name="BenchRawLoop")
class RawLoop:
    @workflow.run
    async def run(self, n: int) -> int:
        for i in range(n):
            await workflow.execute_activity(bench_engine_step, f"text {i}", **_OPTS)
        return n


@workflow.defn(name="BenchEngineLoop")
class EngineLoop(Work):
    @workflow.run
    async def run(self, spec: dict[str, int]) -> int:
        return await self.drive(self.attempt, spec)

    async def attempt(self, a: Attempt, spec: dict[str, int]) -> int:
        for i in range(spec["n"]):
            await a.step(f"s{i}", bench_engine_step, f"text {i}", external=[f"s{i}"], **_OPTS)
        return spec["n"]


@workflow.defn(name="BenchTakeover")
class TakeoverWork(Work):
    outlive_heartbeat = timedelta(seconds=1)

    @workflow.run
    async def run(self, spec: dict[str, str]) -> str:
        return await self.drive(self.attempt, spec)

    async def attempt(self, a: Attempt, spec: dict[str, str]) -> str:
        out: str = await a.step("silent", bench_engine_silent, spec["tag"],
                                start_to_close_timeout=timedelta(seconds=60))
        return out


async def _timed(client: Client, queue: str, workflow_name: str, arg: Any, n: int,
                 ids: list[str] | None = None) -> float:
    wid = f"bench/{uuid.uuid4().hex}"
    if ids is not None:
        ids.append(wid)
    t0 = time.perf_counter()
    await client.execute_workflow(workflow_name, arg, id=wid, task_queue=queue)
    return (time.perf_counter() - t0) * 1000 / n


async def _replay_ms(client: Client, wid: str, workflows: list[type], times: int) -> float:
    """Median wall time of replaying one recorded history (workflow code only, no server)."""
    history = await client.get_workflow_handle(wid).fetch_history()
    replayer = Replayer(workflows=workflows, plugins=[OutlivePlugin()])
    out: list[float] = []
    for _ in range(times):
        t0 = time.perf_counter()
        await replayer.replay_workflow(history)
        out.append((time.perf_counter() - t0) * 1000)
    return statistics.median(out)


def _ratios(eng: list[float], raw: list[float]) -> dict[str, Any]:
    per = [e / r for e, r in zip(eng, raw, strict=True)]
    return {"raw_step_ms": [round(x, 2) for x in raw],
            "engine_step_ms": [round(x, 2) for x in eng],
            "ratio_per_round": [round(x, 3) for x in per],
            "median_ratio": round(statistics.median(per), 3),
            "ratio_of_medians": round(statistics.median(eng) / statistics.median(raw), 3)}


async def run_bench(address: str, n: int, rounds: int) -> dict[str, Any]:
    client = await Client.connect(address, plugins=[OutlivePlugin()])
    queue = f"bench-engine-{uuid.uuid4().hex[:8]}"
    workflows: list[type] = [RawLoop, EngineLoop, TakeoverWork]
    async with Worker(client, task_queue=queue, workflows=workflows,
                      activities=[bench_engine_step, bench_engine_silent]):
        await _timed(client, queue, "BenchRawLoop", 20, 20)          # warm up both paths
        await _timed(client, queue, "BenchEngineLoop", {"n": 20}, 20)
        raw: list[float] = []
        eng: list[float] = []
        raw_ids: list[str] = []
        eng_ids: list[str] = []
        for i in range(rounds):   # A B B A: neither side always goes first
            if i % 2 == 0:
                raw.append(await _timed(client, queue, "BenchRawLoop", n, n, raw_ids))
                eng.append(await _timed(client, queue, "BenchEngineLoop", {"n": n}, n, eng_ids))
            else:
                eng.append(await _timed(client, queue, "BenchEngineLoop", {"n": n}, n, eng_ids))
                raw.append(await _timed(client, queue, "BenchRawLoop", n, n, raw_ids))
        praw: list[float] = []
        peng: list[float] = []
        for _ in range(rounds):   # both at once: the same load on both
            r, e = await asyncio.gather(
                _timed(client, queue, "BenchRawLoop", n, n),
                _timed(client, queue, "BenchEngineLoop", {"n": n}, n))
            praw.append(r)
            peng.append(e)
        replay_raw = await _replay_ms(client, raw_ids[0], workflows, 5)
        replay_eng = await _replay_ms(client, eng_ids[0], workflows, 5)
        takeovers: list[float] = []
        for _ in range(5):
            tag = uuid.uuid4().hex[:8]
            await client.execute_workflow("BenchTakeover", {"tag": tag}, id=f"bench/t/{tag}",
                                          task_queue=queue)
            takeovers.append((_TAKEOVER[f"{tag}.successor"] - _TAKEOVER[f"{tag}.beat"]) * 1000)
    return {
        "steps": n,
        "rounds": rounds,
        "target_ratio": 1.10,
        "alternating": _ratios(eng, raw),
        "paired": _ratios(peng, praw),
        "replay_ms_per_step": {"raw": round(replay_raw / n, 3), "engine": round(replay_eng / n, 3),
                               "engine_minus_raw": round((replay_eng - replay_raw) / n, 3)},
        "takeover_heartbeat_timeout_ms": 1000,
        "takeover_ms": [round(x) for x in takeovers],
        "takeover_median_ms": round(statistics.median(takeovers)),
    }


def rows(res: dict[str, Any]) -> list[str]:
    """Each figure against its target, so a regression shows in the output."""
    out = []
    target = res["target_ratio"]
    for shape in ("alternating", "paired"):
        ratio = res[shape]["median_ratio"]
        verdict = "ok" if ratio <= target else "OVER TARGET"
        out.append(f"in-workflow step / raw activity step ({shape}, median of "
                   f"{res['rounds']} rounds of {res['steps']}): {ratio:.3f}x   target <= "
                   f"{target:.2f}x   {verdict}")
    out.append(f"takeover after the last heartbeat (timeout "
               f"{res['takeover_heartbeat_timeout_ms']} ms): median {res['takeover_median_ms']} ms"
               f"   (reported, no target)")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python adapters/temporal/bench/bench_engine.py")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--out")
    args = p.parse_args(argv)
    with DevServer(poll_cap_raised=True) as srv:
        res = asyncio.run(run_bench(srv.address, args.steps, args.rounds))
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
    import bench_engine

    raise SystemExit(bench_engine.main())
