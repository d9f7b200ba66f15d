"""What one step costs, by kind, in counts and CPU.

    python adapters/restate/bench/step_cost.py [N] [ROUNDS]

One server, one deployment of ``step_cost_app``. Each round runs one invocation per kind, of
``N`` steps of that kind only:

``raw``        - ``ctx.run_typed`` steps (the baseline of ``make bench-restate``);
``raw + set``  - the same, each followed by one small ``ctx.set`` (what a state key per step costs);
``raw + sets/100`` - the same ``ctx.set`` per step, made in bursts every 100 steps (as a flush);
``owner``      - ``Worker.step`` in the owner shape (``bench_desk``, :func:`outlive_restate.attempt`);
``held``       - ``Worker.step`` in the handler shape as a dispatched attempt runs it (renewed,
                 step writes held and sent in batches to outlive's ledger object, whose
                 invocations run in the same deployment and are counted with it).

``python adapters/restate/bench/step_cost.py split [N] [ROUNDS]`` instead measures as ``make
bench-restate`` does: in one invocation per round and row (``owner``, ``renewed``), chunks of 20
raw steps alternate with chunks of 20 owner steps, and the deployment's and the server's CPU
(ns, from the kernel) and the wall time are summed by kind of chunk (``owned_split``): what an
owner step costs beyond a raw one, with no flush inside the timed chunks (as in the benchmark).

For each: the SDK state-machine calls and HTTP/2 frames per step (deterministic, counted in the
deployment), and the CPU per step of the restate-server and of the deployment process (from
``/proc``) and the wall time, medians over the rounds. Counts do not move with the machine's
load; CPU moves less than wall time but does move: run it more than once.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

import outlive
from outlive import Controller
from outlive_restate import RestateBackend, attempt_headers
from outlive_restate.server import RestateServer

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from sweep_cpu import cpu_seconds  # noqa: E402


async def main(n: int, rounds: int) -> dict[str, Any]:
    got: dict[str, list[dict[str, float]]] = {}
    with RestateServer(app="step_cost_app:app", pythonpath=(str(HERE),),
                       ledger="bench_desk") as server:
        assert server.server is not None and server.deployment is not None
        pids = {"server": server.server.pid, "deployment": server.deployment.pid}
        base = server.ingress
        async with await outlive.open_backend(server.url) as desk, \
                await outlive.open_backend(server.url.replace("&ledger=bench_desk", "")) as own, \
                httpx.AsyncClient(timeout=600) as http:
            assert isinstance(desk, RestateBackend)

            async def call(path: str, body: Any, headers: dict[str, str] | None = None) -> Any:
                r = await http.post(f"{base}/{path}", json=body, headers=headers or {})
                r.raise_for_status()
                return r.json()

            async def kinds() -> dict[str, tuple[str, Any, dict[str, str] | None]]:
                work = f"cost/{uuid.uuid4().hex[:8]}"
                ctl = Controller(desk)
                await ctl.open_work(work)
                await ctl.publish(work, "v1", {"report": "cost"})
                att = await ctl.admit(work, keyed=False)
                held = f"cost/{uuid.uuid4().hex[:8]}"
                own_ctl = Controller(own)   # on outlive's own ledger object
                await own_ctl.open_work(held)
                await own_ctl.publish(held, "v1", {"report": "cost"})
                held_att = await own_ctl.admit(held, keyed=False)
                return {
                    "raw": ("cost/raw_only", {"n": n}, None),
                    "raw + set": (f"bench_desk/{uuid.uuid4().hex[:8]}/raw_sets",
                                  {"n": n, "sets": 1}, None),
                    "raw + sets/100": (f"bench_desk/{uuid.uuid4().hex[:8]}/raw_sets",
                                       {"n": n, "sets": 1, "every": 100}, None),
                    "owner": (f"bench_desk/{work.replace('/', '%2F')}/owned_only", {"n": n},
                              attempt_headers(work, att, "bench_desk")),
                    "held": ("cost/held_only", {"n": n},
                             attempt_headers(held, held_att, renew_ms=20_000)),
                }

            await call("cost/raw_only", {"n": 20})
            for _ in range(rounds):
                for name, (path, body, headers) in (await kinds()).items():
                    await call("cost/counts", None)
                    cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
                    t0 = time.perf_counter()
                    await call(path, body, headers)
                    wall = time.perf_counter() - t0
                    cpu = {k: cpu_seconds(p) - cpu0[k] for k, p in pids.items()}
                    counts = await call("cost/counts", None)
                    row = {f"{k} per step": v / n for k, v in counts.items()}
                    row.update({f"{k} CPU ms/step": v * 1000 / n for k, v in cpu.items()})
                    row["wall ms/step"] = wall * 1000 / n
                    got.setdefault(name, []).append(row)
    return {name: {k: statistics.median(r.get(k, 0.0) for r in rows)
                   for k in sorted({k for r in rows for k in r})}
            for name, rows in got.items()}


async def split(n: int, rounds: int) -> dict[str, Any]:
    """Per row, the medians over ``rounds`` of ``owned_split``'s figures (us per step)."""
    got: dict[str, list[dict[str, float]]] = {}
    with RestateServer(app="step_cost_app:app", pythonpath=(str(HERE),),
                       ledger="bench_desk") as server:
        assert server.server is not None
        async with await outlive.open_backend(server.url) as desk, \
                httpx.AsyncClient(timeout=600) as http:
            for r in range(rounds + 1):   # the first round warms up, and is dropped
                for name, renew in (("owner", None), ("renewed", 20_000)):
                    work = f"cost/{uuid.uuid4().hex[:8]}"
                    ctl = Controller(desk)
                    await ctl.open_work(work)
                    await ctl.publish(work, "v1", {"report": "cost"})
                    att = await ctl.admit(work, keyed=False)
                    resp = await http.post(
                        f"{server.ingress}/bench_desk/{work.replace('/', '%2F')}/owned_split",
                        json={"n": n, "chunk": 20, "server": server.server.pid},
                        headers=attempt_headers(work, att, "bench_desk", renew_ms=renew))
                    resp.raise_for_status()
                    if r:
                        got.setdefault(name, []).append(resp.json())
    out: dict[str, Any] = {}
    for name, rows in got.items():
        med = {k: statistics.median(row.get(k, 0.0) for row in rows)
               for k in sorted({k for row in rows for k in row})}
        for k in ("dep", "srv", "wall"):
            med[f"extra {k}"] = statistics.median(row[f"owner {k}"] - row[f"raw {k}"]
                                                  for row in rows)
            med[f"ratio {k}"] = statistics.median(row[f"owner {k}"] / row[f"raw {k}"]
                                                  for row in rows)
        out[name] = med
    return out


def report(res: dict[str, Any], n: int, rounds: int) -> None:
    print(f"Restate, one invocation of {n} steps per kind, {rounds} rounds (medians):")
    keys = sorted({k for v in res.values() for k in v})
    print(f"  {'':40s}" + "".join(f"{name:>16s}" for name in res))
    for k in keys:
        print(f"  {k:40s}" + "".join(f"{v.get(k, 0.0):16.3f}" for v in res.values()))


if __name__ == "__main__":
    if sys.argv[1:2] == ["split"]:
        steps = int(sys.argv[2]) if len(sys.argv) > 2 else 200
        times = int(sys.argv[3]) if len(sys.argv) > 3 else 7
        res = asyncio.run(split(steps, times))
        print(f"Restate, owner steps alternating with raw ones in chunks of 20, {steps} of each "
              f"per invocation, {times} rounds (medians, us per step):")
        print(f"  {'':24s}" + "".join(f"{name:>12s}" for name in res))
        for k in sorted({k for v in res.values() for k in v}):
            print(f"  {k:24s}" + "".join(f"{v.get(k, 0.0):12.3f}" for v in res.values()))
        sys.exit(0)
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    times = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    report(asyncio.run(main(steps, times)), steps, times)
