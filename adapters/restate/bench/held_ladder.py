"""Where a held step's cost over a raw ``ctx.run_typed`` step comes from, rung by rung.

    python adapters/restate/bench/held_ladder.py [RUNS]

One server, one deployment of ``bench_app``. Each rung (``bench_app.ladder``) is measured as
``make bench-restate`` measures the held row: raw steps alternating with the rung's steps in
chunks of 20 inside one invocation of 1,024 steps of each kind; the ratio is taken inside each
invocation. The rounds go through every rung in turn, so load on a shared machine hits all
alike. The difference between two rungs is what the second adds.

Beside each ratio: the deployment process's CPU per step (its raw and rung steps and the ledger
invocations it served, over the 2,048 steps of the invocation; steadier than the ratio on a
loaded machine, and what a rung adds shows as CPU first), and the rung's step time, median and
mean (the mean above the median: a few slow steps, those after a batch of writes leaves).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import uuid
from pathlib import Path

import httpx
from bench_restate import _admitted, _call

import outlive
from outlive_restate import RestateBackend, attempt_headers
from outlive_restate.server import RestateServer

HERE = Path(__file__).parent
RUNGS = ("plain", "run", "raced", "worker", "worker raced", "sink", "held")


async def main(runs: int) -> dict[str, list[dict[str, float]]]:
    got: dict[str, list[dict[str, float]]] = {rung: [] for rung in RUNGS}
    with RestateServer(app="bench_app:app", pythonpath=(str(HERE),)) as server:
        async with await outlive.open_backend(server.url) as backend, \
                httpx.AsyncClient(timeout=300) as http:
            assert isinstance(backend, RestateBackend)
            await _call(http, f"{server.ingress}/bench/floor",
                        {"n": 5, "chunk": 5, "key": "warm-up"})
            for _ in range(runs):
                for rung in RUNGS:
                    work = f"ladder/{uuid.uuid4().hex[:8]}"
                    att = await _admitted(backend, work)
                    v = await _call(http, f"{server.ingress}/bench/ladder",
                                    {"n": 1024, "chunk": 20, "rung": rung},
                                    attempt_headers(work, att, renew_ms=20_000))
                    got[rung].append({"ratio": v["other"] / v["raw"],
                                      "cpu_us": v["cpu_ms"] * 1000 / 2048,
                                      "median_us": v["median_us"], "mean_us": v["mean_us"]})
    return got


def _med(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


if __name__ == "__main__":
    res = asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 9))
    print(f"held step ladder, {len(res['held'])} runs (medians): ratio to raw in the same "
          "invocation [min-max] (vs the rung before); deployment CPU per step; the rung's step")
    prev = None
    for rung, runs in res.items():
        ratios = [r["ratio"] for r in runs]
        med = statistics.median(ratios)
        step = "        " if prev is None else f"({med - prev:+.3f})"
        print(f"  {rung:14s} {med:.3f} [{min(ratios):.3f}-{max(ratios):.3f}] {step}  "
              f"cpu {_med(runs, 'cpu_us'):4.0f} us  step median {_med(runs, 'median_us'):5.0f} us, "
              f"mean {_med(runs, 'mean_us'):5.0f} us")
        prev = med
