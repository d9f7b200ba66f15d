"""Attempt functions for the supervision benchmarks (imported by name in each worker process)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import outlive
from outlive.supervisor import AttemptContext

SECTIONS = {"s1": "Revenue was 4.7 million.", "s2": "Costs fell 3 percent."}
BOUNDARIES = ("before-s1", "after-s1", "after-s2", "after-candidate", "after-intent", "after-send",
              "after-confirm")


def run_dir() -> Path:
    return Path(os.environ["OUTLIVE_BENCH_DIR"])


def inputs(version: str) -> dict[str, str]:
    return SECTIONS


def started(**section: str) -> int:
    """The takeover bench's first step: when did the successor's first step start running."""
    return int(time.time() * 1000)


def mark(ctx: AttemptContext, event: str) -> None:
    """A moment of a takeover, for the bench's breakdown (one JSON line, this process's clock)."""
    with open(run_dir() / "takeover-times.log", "a") as fh:
        fh.write(json.dumps({"work": ctx.attempt.work_id, "attempt": ctx.attempt.number,
                             "event": event, "t": time.time() * 1000}) + "\n")


async def hold(ctx: AttemptContext) -> None:
    """Takeover: #1 works (renewing its lease), then kills or pauses itself at a random moment of
    a beat period — from the event loop, so never inside a database transaction; the successor
    runs its first step and then holds too, until the bench has read the time."""
    if ctx.attempt.number == 1:
        interval = ctx.definition.lease.heartbeat_interval / 1000
        await asyncio.sleep(3 * interval + random.uniform(0, interval))
        # sqlite:// writes on a thread of its own: let a lease renewal in flight finish first,
        # or a pause would land inside it and keep the file's write lock.
        getattr(ctx.worker.backend, "quiesce", lambda: None)()
        mark(ctx, "signal")
        os.kill(os.getpid(), getattr(signal, f"SIG{os.environ['BENCH_SIGNAL']}"))
    else:
        mark(ctx, "entry")
        await ctx.worker.step("first", started, s1=ctx.inputs["s1"])
    await asyncio.Event().wait()


def _feed() -> sqlite3.Connection:
    conn = sqlite3.connect(run_dir() / "feed.db", isolation_level=None, timeout=60)
    conn.execute("CREATE TABLE IF NOT EXISTS posts (key TEXT PRIMARY KEY, body TEXT)")
    return conn


def post(key: str | None, body: Any) -> outlive.Receipt:
    conn = _feed()
    try:
        conn.execute("BEGIN IMMEDIATE")
        dup = conn.execute("SELECT 1 FROM posts WHERE key = ?", (key,)).fetchone() is not None
        if not dup:
            conn.execute("INSERT INTO posts VALUES (?, ?)", (key, json.dumps(body)))
        conn.execute("COMMIT")
    finally:
        conn.close()
    return outlive.Receipt(effect_id=f"P:{key}", duplicate=dup, key=key)


async def digest(ctx: AttemptContext) -> None:
    """Load: two steps, a candidate, one announcement; one attempt in ten kills itself at a
    random boundary."""
    rnd = random.Random(f"{ctx.attempt.work_id}#{ctx.attempt.number}")
    die = rnd.choice(BOUNDARIES) if rnd.random() < float(os.environ.get("KILL_RATE", "0.1")) else ""

    def point(name: str) -> None:
        if name == die:
            with open(run_dir() / "kills.log", "a") as fh:
                fh.write(f"{ctx.attempt.work_id} #{ctx.attempt.number} {name}\n")
            os.kill(os.getpid(), signal.SIGKILL)

    w = ctx.worker
    st = await w.backend.load(w.work_id)
    assert st is not None
    for e in w.open_effects():   # settle a predecessor's announcement with the same key
        acc0 = next(a for a in st.acceptances if e.op_key.endswith(a.digest[:8]))
        await w.effect(e.op_key, {"digest": acc0.digest[:8]}, post)
    point("before-s1")
    await w.step("s1", lambda **s: next(iter(s.values()))[:10], s1=ctx.inputs["s1"])
    point("after-s1")
    await w.step("s2", lambda **s: next(iter(s.values()))[:10], s2=ctx.inputs["s2"])
    point("after-s2")
    cand = await w.candidate({s: w.result(s) for s in SECTIONS})
    point("after-candidate")
    acc = await ctx.judged(cand)

    def send(key: str | None, body: Any) -> outlive.Receipt:
        point("after-intent")
        receipt = post(key, body)
        point("after-send")
        return receipt

    await w.effect(f"announce:{w.work_id}:{acc.digest[:8]}", {"digest": acc.digest[:8]}, send)
    point("after-confirm")


def announced(st: outlive.WorkState) -> bool:
    acc = st.latest_acceptance
    if acc is None or acc.version != st.current_version:
        return False
    eff = st.effect(f"announce:{st.work_id}:{acc.digest[:8]}")
    return eff is not None and all(e.state is outlive.EffectState.CONFIRMED for e in st.effects)
