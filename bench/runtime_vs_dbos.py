"""The runtime beside DBOS, side by side on one machine: latency, throughput, idle works.

The work is the same on both sides: four steps (a summary per section), a judgement, one
announcement. On outlive that is four journaled steps, a candidate, its acceptance by the
runtime, an operation-keyed effect (intent, send, confirmation) and the attempt's finish; on
DBOS a workflow of six steps (four summaries, the judgement, the post). Each side runs in its own
process (DBOS is a process-wide singleton with threads of its own), the sides alternate, and
each ratio is outlive's figure over DBOS's from the same round.

    python bench/runtime_vs_dbos.py                 # SQLite and PostgreSQL, 3 rounds
    python bench/runtime_vs_dbos.py --only sqlite --rounds 5 --out .bench/runtime.json

Targets: latency p50 <= 1.0x DBOS's, throughput (1,000 works, 50 in flight) >= 1.5x DBOS's;
idle: 10,000 open works waiting on a person use < 2 % of a core and < 300 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SECTIONS = ("revenue", "costs", "outlook", "risks")


def _parts(i: int) -> dict[str, str]:
    return {s: f"{s} text of report {i}" for s in SECTIONS}


def summarise(**inputs: Any) -> str:
    (_name, text), = inputs.items()
    return f"summary of {text}"


# -- outlive ---------------------------------------------------------------------------------
async def _outlive(url: str, mode: str, n: int, in_flight: int) -> dict[str, Any]:
    import outlive
    from outlive import Contract, Kind, Lease, MemoryReceiver

    receiver = MemoryReceiver()

    def post(key: str | None, payload: Any) -> outlive.Receipt:
        return receiver.receive(key, payload, lambda p: f"post-{len(receiver.applied) + 1}")

    async def attempt(ctx: outlive.AttemptContext) -> None:
        w = ctx.worker
        for part in SECTIONS:
            await w.step(part, summarise, **{part: ctx.inputs[part]})
        acc = await ctx.submit({p: w.result(p) for p in SECTIONS})
        await w.effect(f"announce:{w.work_id}:{acc.digest[:8]}", {"digest": acc.digest},
                       send=post)

    kind = Kind(name="small", attempt=attempt, contract=Contract(name="f", version="1",
                                                                 assessor="r"),
                lease=Lease(heartbeat_interval=2_000), concurrency=None)
    async with outlive.Runtime(url, [kind], discover=None, report_errors=False) as rt:
        if mode == "latency":
            times = []
            for i in range(n):
                t0 = time.perf_counter()
                h = await rt.start(kind, f"lat/{i}", "v1", _parts(i))
                await h.result()
                times.append((time.perf_counter() - t0) * 1000)
            return {"p50_ms": statistics.median(times),
                    "p90_ms": statistics.quantiles(times, n=10)[-1]}
        if mode == "throughput":
            sem = asyncio.Semaphore(in_flight)

            async def one(i: int) -> None:
                async with sem:
                    h = await rt.start(kind, f"tp/{i}", "v1", _parts(i))
                    await h.result()
            t0 = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(n)))
            return {"works_per_s": n / (time.perf_counter() - t0)}
        raise SystemExit(f"unknown mode {mode}")


async def _outlive_idle(url: str, n: int) -> dict[str, Any]:
    """``n`` open works whose attempts wait on a person: what the runtime costs while they wait."""
    import outlive
    from outlive import Contract, Kind

    release = asyncio.Event()

    async def attempt(ctx: outlive.AttemptContext) -> None:
        async with ctx.worker.waiting("approval"):
            await release.wait()

    kind = Kind(name="idle", attempt=attempt, contract=Contract(name="f", version="1",
                                                                assessor="r"))
    async with outlive.Runtime(url, [kind], discover=None, report_errors=False) as rt:
        for i in range(n):
            await rt.start(kind, f"idle/{i}", "v1", {"ticket": f"ticket {i}"})
        while True:   # every attempt admitted and waiting
            await asyncio.sleep(0.5)
            if not (rt._todo_ids or rt._urgent) and all(w.task is not None
                                                        for w in rt._works.values()):
                break
        await asyncio.sleep(2)
        c0, t0 = time.process_time(), time.perf_counter()
        await asyncio.sleep(10)
        cpu = (time.process_time() - c0) / (time.perf_counter() - t0)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        release.set()
        return {"works": n, "cpu_share": cpu, "max_rss_mb": rss}


# -- recovery: a serving runtime SIGKILLed with works in flight -----------------------------
#: The kind ``outlive serve runtime_vs_dbos:RECOVERING`` runs (a few ms per step, so a kill
#: finds works in flight); its feed is a SQLite receiver shared by every process.
def _recovering_kind() -> Any:
    import outlive
    from outlive import Contract, Kind, Lease

    feed_path = os.environ.get("OUTLIVE_BENCH_FEED", "")

    def post(key: str | None, payload: Any) -> outlive.Receipt:
        feed = _FEED.get("feed")
        if feed is None:
            feed = _FEED["feed"] = outlive.SqliteReceiver(feed_path)

        def apply(conn: Any, body: Any) -> str:
            conn.execute("CREATE TABLE IF NOT EXISTS posts (op_key TEXT)")
            conn.execute("INSERT INTO posts VALUES (?)", (key,))
            return f"post:{key}"
        return feed.receive(key, payload, apply)

    async def attempt(ctx: outlive.AttemptContext) -> None:
        w = ctx.worker

        async def summarise_slowly(**inputs: Any) -> str:
            await asyncio.sleep(0.005)
            return summarise(**inputs)
        for part in SECTIONS:
            await w.step(part, summarise_slowly, **{part: ctx.inputs[part]})
        acc = await ctx.submit({p: w.result(p) for p in SECTIONS})
        await w.effect(f"announce:{w.work_id}:{acc.digest[:8]}", {"digest": acc.digest},
                       send=post)

    return Kind(name="recovering", attempt=attempt,
                contract=Contract(name="f", version="1", assessor="r"),
                inputs=lambda version: _parts(int(version.split("-")[1])),
                lease=Lease(heartbeat_interval=1_000, missed_beats=2, start_grace=2_000),
                concurrency=None)


_FEED: dict[str, Any] = {}
RECOVERING = _recovering_kind() if os.environ.get("OUTLIVE_BENCH_FEED") else None


def _serve(url: str, feed: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "OUTLIVE_BENCH_FEED": str(feed),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent),
                                          os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "outlive.cli", "serve",
                             "runtime_vs_dbos:RECOVERING", "--backend", url, "--quiet",
                             "--discover", "0.2"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _posted(feed: Path) -> int:
    """Announcements the receiver holds (0 before its table exists)."""
    import sqlite3
    try:
        with sqlite3.connect(feed, timeout=30) as conn:
            return int(conn.execute("SELECT count(DISTINCT op_key) FROM posts").fetchone()[0])
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return 0
        raise


async def _recovery(url: str, feed: Path, n: int, runtimes: int) -> dict[str, Any]:
    """``runtimes`` serving processes, ``n`` works; SIGKILL one with works in flight (and start
    it again when it was the only one): how long until every work completes, each once."""
    import signal

    import outlive
    procs = [_serve(url, feed) for _ in range(runtimes)]
    try:
        async with outlive.Runtime(url, [], supervise=False, report_errors=False) as client:
            await asyncio.sleep(1.5)
            for b in range(0, n, 100):   # started side by side: the runtime is not idle meanwhile
                await asyncio.gather(*(client.start("recovering", f"rec/{i}", f"v-{i}", _parts(i))
                                       for i in range(b, min(n, b + 100))))
            pending = {f"rec/{i}" for i in range(n)}
            states: dict[str, Any] = {}

            async def sweep() -> None:   # reads the works not yet seen complete, side by side
                async def one(wid: str) -> None:
                    st = await client.handle(wid).state()
                    if st.status == "completed":
                        pending.discard(wid)
                        states[wid] = st.state
                for b in range(0, len(pending), 50):
                    await asyncio.gather(*(one(w) for w in sorted(pending)[b:b + 50]))
            first = client.handle("rec/0")
            while (await first.state()).status != "completed":   # then the rest are in flight
                await asyncio.sleep(0.01)
            procs[0].send_signal(signal.SIGKILL)
            procs[0].wait()
            if runtimes == 1:   # at once: the time counts from here
                procs[0] = _serve(url, feed)
            t0 = time.perf_counter()
            in_flight = n - _posted(feed)
            # Announcements are counted in the receiver's own file (one cheap read, no load on
            # the ledger); then every work is read until each is seen complete.
            while _posted(feed) < n:
                await asyncio.sleep(0.02)
            announced = time.perf_counter() - t0
            while pending:
                await sweep()
            took = time.perf_counter() - t0
            accepted_once = all(len(st.acceptances) == 1 for st in states.values())
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
    import sqlite3
    with sqlite3.connect(feed) as conn:
        keys = [k for (k,) in conn.execute("SELECT op_key FROM posts")]
    return {"works": n, "in_flight_at_kill": in_flight, "last_done_after_s": took,
            "last_announced_after_s": announced,
            "accepted_once": accepted_once, "announced_once": len(keys) == n == len(set(keys)),
            "lease_s": 2.0}


# -- takeover: a serving runtime paused while its attempt runs --------------------------------
async def _takeover(url: str, feed: Path, rounds: int) -> dict[str, Any]:
    """A runtime in another process runs a work's attempt and is SIGSTOPped mid-step; this
    process's runtime takes the attempt over. The lag is how long after its lease ran out (the
    attempt's last sign of life + 2 heartbeats) the successor was admitted."""
    import signal

    import outlive
    os.environ["OUTLIVE_BENCH_FEED"] = str(feed)
    kind = _recovering_kind()
    lags = []
    repaused = 0
    for r in range(rounds):
        paused = _serve(url, feed)
        try:
            async with outlive.Runtime(url, [], supervise=False, report_errors=False) as client:
                await asyncio.sleep(1.5)
                wid = f"take/{r}"
                await client.start("recovering", wid, f"v-{r}", _parts(r))
                while True:   # until the other process's attempt is running
                    st = (await client.handle(wid).state()).state
                    cur = st.current_attempt
                    if cur is not None and cur.state is outlive.AttemptState.RUNNING:
                        break
                    await asyncio.sleep(0.005)
            repaused += _pause_outside_the_write_lock(paused, url)
            async with outlive.Runtime(url, [kind], discover=None, report_errors=False) as rt:
                done = await rt.handle(wid).result()
        finally:
            paused.send_signal(signal.SIGKILL)
            paused.wait()
        first, second = done.attempts[0], done.attempts[1]
        lease = kind.lease.timeout
        lags.append(second.admitted_at - (first.last_heartbeat + lease))
    return {"lag_ms": lags, "lease_ms": kind.lease.timeout, "repaused": repaused}


def _until_stopped(pid: int) -> None:
    """Wait until ``pid`` is stopped: a signal is delivered after ``kill`` returns, so a check
    made at once can find the lock free just before the process, still running, takes it."""
    stat = Path(f"/proc/{pid}/stat")
    while stat.exists():
        # the state is the field after the command's closing parenthesis
        if stat.read_text().rsplit(")", 1)[1].split()[0] in ("T", "t"):
            return
        time.sleep(0.0005)


def _pause_outside_the_write_lock(proc: subprocess.Popen[bytes], url: str) -> int:
    """SIGSTOP ``proc`` where it holds no SQLite write lock (an embedded file cannot fence a
    process paused *inside* its write: every other writer waits for it, as the sqlite backend's
    docs say; on PostgreSQL the server cuts such a holder off). Returns the pauses retried."""
    import signal
    import sqlite3
    path = url.removeprefix("sqlite:///")
    retried = 0
    while True:
        proc.send_signal(signal.SIGSTOP)
        _until_stopped(proc.pid)
        if not url.startswith("sqlite:"):
            return retried
        conn = sqlite3.connect(path, timeout=0.05, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return retried
        except sqlite3.OperationalError:
            retried += 1
            proc.send_signal(signal.SIGCONT)
            time.sleep(0.002)
        finally:
            conn.close()


# -- DBOS ------------------------------------------------------------------------------------
async def _dbos(url: str, mode: str, n: int, in_flight: int) -> dict[str, Any]:
    from dbos import DBOS, DBOSConfig

    config: DBOSConfig = {"name": "bench", "system_database_url": url,
                          "log_level": "WARNING", "run_admin_server": False}  # type: ignore[typeddict-unknown-key]
    DBOS(config=config)
    posted: dict[str, int] = {}

    @DBOS.step()
    def summary_step(part: str, text: str) -> str:
        return summarise(**{part: text})

    @DBOS.step()
    def judge(sections: dict[str, str]) -> bool:
        return True

    @DBOS.step()
    def post(key: str, payload: dict[str, Any]) -> str:
        posted[key] = posted.get(key, 0) + 1
        return f"post-{len(posted)}"

    @DBOS.workflow()
    async def work(i: int, parts: dict[str, str]) -> str:
        sections = {}
        for part in SECTIONS:
            sections[part] = summary_step(part, parts[part])
        judge(sections)
        return post(f"announce:{i}", {"sections": sections})

    DBOS.launch()
    try:
        if mode == "latency":
            times = []
            for i in range(n):
                t0 = time.perf_counter()
                h = await DBOS.start_workflow_async(work, i, _parts(i))
                await h.get_result()
                times.append((time.perf_counter() - t0) * 1000)
            return {"p50_ms": statistics.median(times),
                    "p90_ms": statistics.quantiles(times, n=10)[-1]}
        if mode == "throughput":
            sem = asyncio.Semaphore(in_flight)

            async def one(i: int) -> None:
                async with sem:
                    h = await DBOS.start_workflow_async(work, i, _parts(i))
                    await h.get_result()
            t0 = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(n)))
            return {"works_per_s": n / (time.perf_counter() - t0)}
        raise SystemExit(f"unknown mode {mode}")
    finally:
        DBOS.destroy()


# -- one side in its own process -------------------------------------------------------------
def _side(args: argparse.Namespace) -> None:
    if args.side == "outlive":
        if args.mode == "idle":
            out = asyncio.run(_outlive_idle(args.url, args.n))
        else:
            out = asyncio.run(_outlive(args.url, args.mode, args.n, args.in_flight))
    else:
        out = asyncio.run(_dbos(args.url, args.mode, args.n, args.in_flight))
    print(json.dumps(out))


def _run(side: str, mode: str, url: str, n: int, in_flight: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--side", side, "--mode", mode, "--url", url,
           "--n", str(n), "--in-flight", str(in_flight)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{side} {mode} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _urls(store: str, tmp: Path, server: Any, label: str) -> tuple[str, str]:
    """A fresh store for each side of each run: neither reads the other's rows."""
    if store == "sqlite":
        o = tmp / f"outlive-{label}.db"
        d = tmp / f"dbos-{label}.db"
        return f"sqlite:///{o}", f"sqlite:///{d}"
    o = server.create_database(f"o_{label}")
    d = server.create_database(f"d_{label}")
    dbos_url = d.replace("postgresql://", "postgresql+psycopg://", 1)
    return o, dbos_url


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", choices=["outlive", "dbos"])
    ap.add_argument("--mode", choices=["latency", "throughput", "idle"])
    ap.add_argument("--url")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--in-flight", type=int, default=50)
    ap.add_argument("--only", choices=["sqlite", "postgresql"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-n", type=int, default=100)
    ap.add_argument("--throughput-n", type=int, default=1000)
    ap.add_argument("--idle-n", type=int, default=10_000)
    ap.add_argument("--recovery-n", type=int, default=1000)
    ap.add_argument("--skip-recovery", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.side:
        _side(args)
        return
    stores = [args.only] if args.only else ["sqlite", "postgresql"]
    report: dict[str, Any] = {"rounds": args.rounds, "rows": []}
    server = None
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        os.chmod(tmp, 0o755)
        try:
            for store in stores:
                if store == "postgresql":
                    from outlive._pgserver import PostgresServer
                    server = PostgresServer().start()
                for mode, n, target, better in (("latency", args.latency_n, 1.0, "lower"),
                                                ("throughput", args.throughput_n, 1.5, "higher")):
                    ratios = []
                    for r in range(args.rounds):
                        o_url, d_url = _urls(store, tmp, server, f"{mode[:3]}{r}")
                        o = _run("outlive", mode, o_url, n, args.in_flight)
                        d = _run("dbos", mode, d_url, n, args.in_flight)
                        key = "p50_ms" if mode == "latency" else "works_per_s"
                        ratio = o[key] / d[key]
                        ratios.append(ratio)
                        print(f"{store:10} {mode:10} round {r + 1}: outlive {o[key]:8.2f}  "
                              f"dbos {d[key]:8.2f}  ratio {ratio:.2f}x", flush=True)
                    ok = (max(ratios) <= target) if better == "lower" else (min(ratios) >= target)
                    row = {"store": store, "mode": mode, "n": n, "ratios": ratios,
                           "target": f"{'<=' if better == 'lower' else '>='} {target}x",
                           "meets": ok}
                    report["rows"].append(row)
                    print(f"{store:10} {mode:10} ratio {min(ratios):.2f}-{max(ratios):.2f}x  "
                          f"target {row['target']}  {'meets' if ok else 'MISSES'}", flush=True)
                if not args.skip_recovery:
                    o_url, _ = _urls(store, tmp, server, "rec")
                    kinds = [1] if store == "sqlite" else [1, 2]
                    for runtimes in kinds:
                        feed = tmp / f"feed-{store}-{runtimes}.db"
                        rec = asyncio.run(_recovery(o_url if runtimes == 1 else
                                                    _urls(store, tmp, server, "rec2")[0],
                                                    feed, args.recovery_n, runtimes))
                        ok = (rec["accepted_once"] and rec["announced_once"]
                              and rec["last_done_after_s"] <= rec["lease_s"] + 2)
                        how = "restarted" if runtimes == 1 else "one of two killed"
                        report["rows"].append({"store": store, "mode": f"recovery ({how})",
                                               **rec, "target": "all once, within lease + 2 s",
                                               "meets": ok})
                        print(f"{store:10} recovery   {how}: {rec['in_flight_at_kill']} of "
                              f"{rec['works']} in flight, all done {rec['last_done_after_s']:.2f} s "
                              f"later (lease {rec['lease_s']:.0f} s), accepted once "
                              f"{rec['accepted_once']}, announced once {rec['announced_once']}  "
                              f"{'meets' if ok else 'MISSES'}", flush=True)
                if store == "sqlite":
                    o_url, _ = _urls(store, tmp, server, "take")
                    take = asyncio.run(_takeover(o_url, tmp / "feed-take.db", 5))
                    ok = max(take["lag_ms"]) <= 50
                    report["rows"].append({"store": store, "mode": "takeover", **take,
                                           "target": "successor within 2 heartbeats + 50 ms",
                                           "meets": ok})
                    print(f"{store:10} takeover   successor admitted {min(take['lag_ms'])}-"
                          f"{max(take['lag_ms'])} ms after the lease ({take['lease_ms']} ms) ran "
                          f"out ({take['repaused']} pauses retried: they found the write lock "
                          f"held)  {'meets' if ok else 'MISSES'}", flush=True)
                    o_url, _ = _urls(store, tmp, server, "idle")
                    idle = _run("outlive", "idle", o_url, args.idle_n, 0)
                    ok = idle["cpu_share"] < 0.02 and idle["max_rss_mb"] < 300
                    report["rows"].append({"store": store, "mode": "idle", **idle,
                                           "target": "< 2 % of a core, < 300 MB", "meets": ok})
                    print(f"{store:10} idle       {idle['works']} works waiting: "
                          f"{idle['cpu_share'] * 100:.2f} % of a core, "
                          f"{idle['max_rss_mb']:.0f} MB  {'meets' if ok else 'MISSES'}", flush=True)
                if server is not None:
                    server.cleanup()
                    server = None
        finally:
            if server is not None:
                server.cleanup()
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
