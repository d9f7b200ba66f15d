"""``make bench`` (supervision): takeover latency and a load run, attempts as real processes.

Takeover: last sign of life of attempt #1 (its last heartbeat in the ledger) -> the successor's
first step running (the step body's own clock), over >= 20 takeovers each for a SIGKILLed
attempt (the dispatcher sees the process exit) and a SIGSTOPped one (the lease runs out). Target:
<= 2 heartbeat intervals + 50 ms. Each row also says where the time went (median and worst of
each part): last sign of life -> #1 signalled (random within a beat, plus any stall of #1's
renewals), -> successor admitted (exit seen or lease run out, the supervisor's pass), -> the
attempt function entered in its process (dispatch, the spare's hand-off, its claim and first
beat), -> the first step's body running.

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


async def takeovers(folder: Path, *, n: int, sig: str, interval: int,
                    warm: bool) -> list[dict[str, float]]:
    backend = await outlive.open_backend(f"sqlite:///{folder / f'takeover-{sig}-{warm}.db'}")
    # two spares: each takeover uses two processes (#1 and its successor), so a spare gets a
    # whole takeover's time to start before it is needed
    dispatcher = SubprocessDispatcher(env={**_env(folder), "BENCH_SIGNAL": sig},
                                      log_dir=folder / "logs", warm=2 if warm else 0,
                                      stop_signal=None)
    lease = Lease(heartbeat_interval=interval, missed_beats=2)
    out: list[dict[str, float]] = []
    try:
        for i in range(n):
            d = WorkDefinition(work_id=f"takeover/{sig}{'' if warm else '-cold'}/{i}",
                               attempt="supervision_work:hold",
                               inputs="supervision_work:inputs", contract=CONTRACT, lease=lease)
            sup = Supervisor(backend, d, dispatcher, poll=interval / 20_000)
            await sup.publish("v1", {"s1": "Revenue was 4.7 million.", "s2": "Costs fell 3 percent."})
            run = asyncio.create_task(sup.run())
            try:
                out.append(await asyncio.wait_for(_one_takeover(sup, d, run, folder), 120))
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


async def _one_takeover(sup: Supervisor, d: WorkDefinition, run: asyncio.Task[Any],
                        folder: Path) -> dict[str, float]:
    """#1 signals itself (see supervision_work.hold); wait for the successor's first step.

    Returns the takeover (last sign of life -> first step running) and where it went: ``signal``
    (last sign of life -> #1 signalled: chosen at random within a beat), ``admit`` (-> the
    successor admitted: the lease running out, or the exit seen, and the supervisor's pass),
    ``start`` (-> the attempt function entered in its process: dispatch, the spare's hand-off,
    the claim), ``step`` (-> the first step's body running).
    """
    while True:
        st = await sup.controller.state(d.work_id)
        entry = next((e for e in st.journal if e.step == "first"), None)
        if entry is not None:
            break
        if run.done():
            run.result()
        await asyncio.sleep(0.005)
    by = entry.attempt
    times = {}
    for line in (folder / "takeover-times.log").read_text().splitlines():
        rec = json.loads(line)
        if rec["work"] == d.work_id and rec["attempt"] in (1, by):
            times[rec["event"]] = rec["t"]
    last = st.attempts[0].last_heartbeat
    first = float(entry.result)
    admitted = st.attempt(by).admitted_at      # type: ignore[union-attr]
    out = {"total": first - last, "start": times["entry"] - admitted, "step": first - times["entry"],
           "successor": float(by)}
    if "signal" in times and by == 2:
        out.update(signal=times["signal"] - last, admit=admitted - times["signal"])
    return out


async def load(folder: Path, *, works: int, concurrency: int, kill_rate: float) -> dict[str, Any]:
    url = f"sqlite:///{folder / 'load.db'}"
    backend = await outlive.open_backend(url)
    env = {**_env(folder), "KILL_RATE": str(kill_rate)}
    # a spare per lane: the lanes dispatch at about the same time
    dispatcher = SubprocessDispatcher(env=env, log_dir=folder / "load-logs", warm=concurrency)
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
            runs = await takeovers(folder, n=args.takeovers, sig=sig, interval=args.interval,
                                   warm=warm)
            xs = [r["total"] for r in runs]
            row: dict[str, Any] = {"n": len(xs), "p50_ms": round(statistics.median(xs), 1),
                                   "p99_ms": round(_pct(xs, 99), 1), "max_ms": round(max(xs), 1)}
            # where it went: the median and the worst of each part
            row["parts_ms"] = {k: {"p50": round(statistics.median(r[k] for r in runs if k in r), 1),
                                   "max": round(max(r[k] for r in runs if k in r), 1)}
                               for k in ("signal", "admit", "start", "step")
                               if any(k in r for r in runs)}
            # a live attempt #1 starved past its lease before it signalled itself (or #2 was):
            # the supervisor took over a live attempt, as a lease must under such a stall
            row["early"] = sum(1 for r in runs if "signal" not in r or r["successor"] != 2)
            name = f"{sig.lower()}{'' if warm else '-cold'}"
            result[f"takeover_{name}"] = row
            hit = row["p99_ms"] <= 2 * args.interval + 50
            if warm:
                ok = ok and hit
            print(f"  SIG{sig:<4} {'warm spare' if warm else 'cold start':<10}  p50 {row['p50_ms']:7.1f} ms"
                  f"  p99 {row['p99_ms']:7.1f} ms  ({row['n']} takeovers)"
                  f"{'' if warm else '  (a fresh interpreter per successor; not the target row)'}")
            print("           parts, p50/max ms: " + ", ".join(
                f"{k} {v['p50']:.0f}/{v['max']:.0f}" for k, v in row["parts_ms"].items())
                + (f"; {row['early']} taken over before the signal (starved past the lease)"
                   if row["early"] else ""))
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
