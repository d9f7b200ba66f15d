"""``make bench`` (supervision): takeover latency and a load run, attempts as real processes.

Takeover: last sign of life of attempt #1 (its last heartbeat in the ledger) -> the successor's
first step running (the step body's own clock), over >= 20 takeovers each for a SIGKILLed
attempt (the dispatcher sees the process exit) and a SIGSTOPped one (the lease runs out). Target:
<= 2 heartbeat intervals + 50 ms.

Load: N works supervised at once, one ``outlive worker`` process per attempt, one attempt in ten
SIGKILLing itself at a random boundary: every work accepted and announced exactly once; works/s.

Writes ``.bench/supervision.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import outlive
from outlive import Contract, Lease, SubprocessDispatcher, Supervisor, WorkDefinition

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import supervision_work  # noqa: E402  (the attempt functions, imported by name in each worker)

CONTRACT = Contract(name="digest-form", version="1", assessor="bench")


def _env(folder: Path) -> dict[str, str]:
    return {"OUTLIVE_BENCH_DIR": str(folder),
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


async def takeovers(folder: Path, *, n: int, sig: str, interval: int, warm: bool) -> list[float]:
    backend = await outlive.open_backend(f"sqlite:///{folder / f'takeover-{sig}-{warm}.db'}")
    dispatcher = SubprocessDispatcher(env={**_env(folder), "BENCH_SIGNAL": sig},
                                      log_dir=folder / "logs", warm=warm, stop_signal=None)
    lease = Lease(heartbeat_interval=interval, missed_beats=2)
    out: list[float] = []
    try:
        for i in range(n):
            d = WorkDefinition(work_id=f"takeover/{sig}/{i}", attempt="supervision_work:hold",
                               inputs="supervision_work:inputs", contract=CONTRACT, lease=lease)
            sup = Supervisor(backend, d, dispatcher, poll=interval / 20_000)
            await sup.publish("v1", {"s1": "Revenue was 4.7 million.", "s2": "Costs fell 3 percent."})
            run = asyncio.create_task(sup.run())
            try:
                out.append(await asyncio.wait_for(
                    _one_takeover(sup, d, run), 120))
            finally:
                run.cancel()
                with contextlib.suppress(BaseException):
                    await run
                st = await sup.controller.state(d.work_id)
                for a in st.attempts:                     # this takeover's processes, by id
                    p = dispatcher.pid(outlive.Assignment.of(backend, d, a))
                    if p is not None:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(p, signal.SIGKILL)
    finally:
        await dispatcher.close()
        await backend.close()
    return out


async def _one_takeover(sup: Supervisor, d: WorkDefinition, run: asyncio.Task[Any]) -> float:
    """#1 signals itself (see supervision_work.hold); wait for the successor's first step."""
    while True:
        st = await sup.controller.state(d.work_id)
        entry = next((e for e in st.journal if e.step == "first"), None)
        if entry is not None:
            return float(entry.result) - st.attempts[0].last_heartbeat
        if run.done():
            run.result()
        await asyncio.sleep(0.005)


async def load(folder: Path, *, works: int, concurrency: int, kill_rate: float) -> dict[str, Any]:
    url = f"sqlite:///{folder / 'load.db'}"
    backend = await outlive.open_backend(url)
    env = {**_env(folder), "KILL_RATE": str(kill_rate)}
    dispatcher = SubprocessDispatcher(env=env, log_dir=folder / "load-logs", warm=True)
    lease = Lease(heartbeat_interval=1_000, missed_beats=3, start_grace=60_000)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(works):
        queue.put_nowait(i)

    async def lane() -> None:
        while not queue.empty():
            i = queue.get_nowait()
            d = WorkDefinition(work_id=f"load/{i}", attempt="supervision_work:digest",
                               inputs="supervision_work:inputs", contract=CONTRACT, lease=lease,
                               max_attempts=10, complete=supervision_work.announced)
            sup = Supervisor(backend, d, dispatcher, poll=0.05)
            await sup.publish("v1", {"s1": "Revenue was 4.7 million.", "s2": "Costs fell 3 percent."})
            await sup.run()

    t0 = time.perf_counter()
    try:
        await asyncio.gather(*(lane() for _ in range(concurrency)))
    finally:
        await dispatcher.close()
    seconds = time.perf_counter() - t0
    attempts = 0
    accepted = 0
    for i in range(works):
        st = await backend.load(f"load/{i}")
        assert st is not None
        attempts += len(st.attempts)
        acc = st.latest_acceptance
        accepted += acc is not None and acc.version == "v1" and len(st.acceptances) == 1
    await backend.close()
    conn = sqlite3.connect(folder / "feed.db")
    keys = [k for (k,) in conn.execute("SELECT key FROM posts")]
    conn.close()
    kills = (folder / "kills.log").read_text().splitlines() if (folder / "kills.log").exists() else []
    per_work = {k.split(":")[1] for k in keys}
    return {"works": works, "concurrency": concurrency, "seconds": round(seconds, 1),
            "works_per_s": round(works / seconds, 2), "attempts": attempts, "killed": len(kills),
            "accepted_once": accepted, "posts": len(keys), "works_announced": len(per_work),
            "ok": accepted == works and len(keys) == works == len(per_work)}


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--takeovers", type=int, default=20)
    ap.add_argument("--interval", type=int, default=200, help="heartbeat interval, ms")
    ap.add_argument("--works", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--kill-rate", type=float, default=0.1)
    ap.add_argument("--out", default=".bench/supervision.json")
    ap.add_argument("--dir", help="keep the run's databases and worker logs here")
    args = ap.parse_args()
    result: dict[str, Any] = {"interval_ms": args.interval,
                              "target_ms": 2 * args.interval + 50}
    ok = True
    with tempfile.TemporaryDirectory(prefix="outlive-bench-sup-") as tmp:
        folder = Path(args.dir or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        print(f"takeover: last sign of life -> successor's first step running "
              f"(heartbeat {args.interval} ms, 2 missed beats; target <= {2 * args.interval + 50} ms)")
        for sig, warm in (("KILL", True), ("STOP", True), ("KILL", False))[:3 if args.takeovers else 0]:
            xs = await takeovers(folder, n=args.takeovers, sig=sig, interval=args.interval, warm=warm)
            row = {"n": len(xs), "p50_ms": round(statistics.median(xs), 1),
                   "p99_ms": round(_pct(xs, 99), 1), "max_ms": round(max(xs), 1)}
            name = f"{sig.lower()}{'' if warm else '-cold'}"
            result[f"takeover_{name}"] = row
            hit = row["p99_ms"] <= 2 * args.interval + 50
            if warm:
                ok = ok and hit
            print(f"  SIG{sig:<4} {'warm spare' if warm else 'cold start':<10}  p50 {row['p50_ms']:7.1f} ms"
                  f"  p99 {row['p99_ms']:7.1f} ms  ({row['n']} takeovers)"
                  f"{'' if warm else '  (a fresh interpreter per successor; not the target row)'}")
        if args.works:
            print(f"load: {args.works} works, {args.concurrency} at once, one attempt in "
                  f"{round(1 / args.kill_rate) if args.kill_rate else 0} SIGKILLed at a random point")
            res = await load(folder, works=args.works, concurrency=args.concurrency,
                             kill_rate=args.kill_rate)
            result["load"] = res
            ok = ok and res["ok"]
            print(f"  {res['works_per_s']} works/s ({res['seconds']} s); {res['attempts']} attempts, "
                  f"{res['killed']} killed; accepted once: {res['accepted_once']}/{res['works']}; "
                  f"posts: {res['posts']} for {res['works_announced']} works "
                  f"({'each exactly once' if res['ok'] else 'NOT exactly once'})")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
