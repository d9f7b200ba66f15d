"""Where a held step's cost over a raw ``ctx.run_typed`` step comes from, rung by rung.

    python adapters/restate/bench/held_ladder.py [RUNS]

One server, one deployment of ``bench_app``. Each rung (``bench_app.ladder``) is measured as
``make bench-restate`` measures the held row: raw steps alternating with the rung's steps in
chunks of 20 inside one invocation of 1,024 steps of each kind; the ratio is taken inside each
invocation. The rounds go through every rung in turn, so load on a shared machine hits all
alike. The difference between two rungs is what the second adds.
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


async def main(runs: int) -> dict[str, list[float]]:
    got: dict[str, list[float]] = {rung: [] for rung in RUNGS}
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
                    got[rung].append(v["other"] / v["raw"])
    return got


if __name__ == "__main__":
    res = asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 9))
    print(f"held step ladder, ratio to raw in the same invocation, {len(res['held'])} runs:")
    prev = None
    for rung, values in res.items():
        med = statistics.median(values)
        step = "" if prev is None else f"  ({med - prev:+.3f})"
        print(f"  {rung:14s} {med:.3f} [{min(values):.3f}-{max(values):.3f}]{step}")
        prev = med
