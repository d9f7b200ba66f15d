"""The storage load run of ``make bench``: many works, worker processes, 10 % of attempts killed.

The parent opens ``works`` works and publishes their input, then runs ``procs`` worker processes,
each owning a slice of the works. A worker runs each work of its slice to the end: admit, four
steps, candidate, acceptance, an announcement sent to a shared receiver (keyed by operation),
finish. With probability ``kill`` an attempt picks a random one of its ledger commands and the
process SIGKILLs itself just before or just after it; the parent starts a new process for that
slice, which marks the dead attempt unknown, admits a successor, restores the journaled steps
and settles an open announcement by resending the same key. At the end every work must be
accepted once and announced once, as far as the receiver can tell.

Each process writes the latency of every ledger command it ran and its busy retries to a file;
the parent reports works/s, p50/p99 command latency and the retries.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import outlive
from outlive import Contract, Controller, Worker
from outlive import ledger as L

__all__ = ["load_run"]

SECTIONS = ("s1", "s2", "s3", "s4")
INPUT = {s: f"section {s}: revenue was 4.7 million for the quarter" for s in SECTIONS}
FORM = Contract(name="digest-form", version="1", assessor="load-bench")


def _work(i: int) -> str:
    return f"load/{i:04d}"


def _summarise(**section: str) -> str:
    (text,) = section.values()
    return text.split(":")[0]


async def _worker(url: str, receiver_path: str, slice_no: int, procs: int, works: int,
                  kill: float, seed: int, stats_path: str) -> None:
    rng = random.Random(seed)
    backend = await outlive.open_backend(url)
    receiver = outlive.SqliteReceiver(receiver_path)
    latencies: list[float] = []
    plan = {"kill_at": -1, "after": False, "count": 0}

    def flush() -> None:
        with open(stats_path, "a") as fh:
            fh.write(json.dumps({"lat": latencies,
                                 "busy": int(getattr(backend, "busy_retries", 0))}) + "\n")

    execute = backend.execute

    async def timed(work_id: str, command: L.Command) -> L.Outcome:
        plan["count"] += 1
        if plan["count"] == plan["kill_at"] and not plan["after"]:
            flush()
            os.kill(os.getpid(), signal.SIGKILL)
        t = time.perf_counter()
        out = await execute(work_id, command)
        latencies.append(time.perf_counter() - t)
        if plan["count"] == plan["kill_at"] and plan["after"]:
            flush()
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    backend.execute = timed  # type: ignore[method-assign]

    def post(conn: sqlite3.Connection, payload: Any) -> str:
        conn.execute("CREATE TABLE IF NOT EXISTS posts (work TEXT, body TEXT)")
        cur = conn.execute("INSERT INTO posts (work, body) VALUES (?, ?)",
                           (payload["work"], payload["digest"]))
        return f"post-{cur.lastrowid}"

    ctl = Controller(backend)
    for i in range(slice_no, works, procs):
        work = _work(i)
        st = await ctl.state(work)
        last = st.current_attempt
        if last is not None and last.state is outlive.AttemptState.FINISHED:
            continue
        if last is not None and L.is_leased(last):
            # Its process is dead (the parent starts this one only then): the controller's call.
            await ctl.mark_unknown(work, last.number)
        plan["count"] = 0
        plan["kill_at"] = rng.randint(1, 10) if rng.random() < kill else -1
        plan["after"] = rng.random() < 0.5
        att = await ctl.admit(work)
        w = Worker(backend, att, INPUT)
        await w.start()
        for name in SECTIONS:
            await w.step(name, _summarise, **{name: INPUT[name]})
        cand = await w.candidate()     # the sections' journaled results, by step
        acc = await ctl.assess(work, cand.digest, FORM, lambda c, v: (True, "well-formed"))
        payload = {"work": work, "digest": acc.digest}
        await w.effect(f"announce:{work}:{acc.digest}", payload,
                       lambda key, p: receiver.receive(key, p, post))
        await w.finish()
    flush()
    receiver.close()
    await backend.close()


def _percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _setup(url: str, works: int) -> None:
    backend = await outlive.open_backend(url)
    ctl = Controller(backend)
    for i in range(works):
        await ctl.open_work(_work(i))
        await ctl.publish(_work(i), "v1", INPUT)
    await backend.close()


async def _verify(url: str, works: int, receiver_path: str) -> dict[str, Any]:
    backend = await outlive.open_backend(url)
    accepted_once = announced_once = 0
    try:
        for i in range(works):
            st = await backend.load(_work(i))
            assert st is not None
            accepted_once += len(st.acceptances) == 1
            confirmed = [e for e in st.effects if e.state is outlive.EffectState.CONFIRMED]
            announced_once += len(confirmed) == 1 and len(st.effects) == 1
    finally:
        await backend.close()
    conn = sqlite3.connect(receiver_path)
    rows = conn.execute("SELECT work, count(*) FROM posts GROUP BY work").fetchall()
    conn.close()
    posts_once = sum(1 for _, n in rows if n == 1) if len(rows) == works else 0
    return {"accepted_once": accepted_once, "announced_once": announced_once,
            "received_once": posts_once}


def load_run(url: str, folder: Path, *, works: int = 1000, procs: int = 4,
             kill: float = 0.10, seed: int = 1) -> dict[str, Any]:
    """One load run on ``url`` (a fresh database); returns the measures and the verdicts."""
    folder.mkdir(parents=True, exist_ok=True)
    receiver = str(folder / "receiver.db")
    stats = folder / "stats.jsonl"
    asyncio.run(_setup(url, works))
    rng = random.Random(seed)
    started = time.perf_counter()

    def spawn(slice_no: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "outlive_conformance._load", url, receiver, str(slice_no),
             str(procs), str(works), str(kill), str(rng.randrange(1 << 30)), str(stats)])

    running = {k: spawn(k) for k in range(procs)}
    killed = 0
    while running:
        time.sleep(0.02)
        for k, proc in list(running.items()):
            code = proc.poll()
            if code is None:
                continue
            if code == -signal.SIGKILL:
                killed += 1
                running[k] = spawn(k)
            elif code != 0:
                for other in running.values():
                    other.kill()
                raise RuntimeError(f"load worker {k} failed with exit code {code}")
            else:
                del running[k]
    seconds = time.perf_counter() - started
    lat: list[float] = []
    busy = 0
    for line in stats.read_text().splitlines():
        rec = json.loads(line)
        lat.extend(rec["lat"])
        busy += rec["busy"]
    verdict = asyncio.run(_verify(url, works, receiver))
    return {
        "works": works, "procs": procs, "killed": killed, "seconds": round(seconds, 1),
        "works_per_s": round(works / seconds, 1), "commands": len(lat),
        "p50_ms": round(statistics.median(lat) * 1000, 2) if lat else None,
        "p99_ms": round(_percentile(lat, 0.99) * 1000, 2), "busy_retries": busy,
        **verdict, "all_once": all(v == works for v in verdict.values()),
    }


if __name__ == "__main__":
    (_url, _receiver, _slice, _procs, _works, _kill, _seed, _stats) = sys.argv[1:9]
    asyncio.run(_worker(_url, _receiver, int(_slice), int(_procs), int(_works), float(_kill),
                        int(_seed), _stats))
