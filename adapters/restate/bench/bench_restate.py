"""``make bench-restate``: a step in the user's handler against a raw ``ctx.run_typed`` step in the
same handler, and the takeover latency when Restate replaces a silent attempt.

One server, one deployment of ``bench_app`` (registered once). Each measure is one invocation in
which chunks of raw ``ctx.run_typed`` steps alternate with chunks of the same number of steps
done the measured way, so load on the shared machine hits both alike; the ratio is taken inside
each invocation, and the table gives its median, range and every run's value. Writes
``.bench/restate.json``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

import outlive
from outlive import Controller
from outlive.records import AttemptState
from outlive_restate import RestateBackend, attempt_headers
from outlive_restate.server import RestateServer

HERE = Path(__file__).parent
N = 200
CHUNK = 20
RUNS = 7
#: Issue 41's targets: a step in the owner shape and a held step in the handler shape cost at
#: most 1.10x a raw ctx.run_typed step; a paused attempt is taken over within lease + 1 s.
TARGET_RATIO = 1.10
TARGET_TAKEOVER_MS = 1000
RATIO_TARGETS: dict[str, float] = {
    "owner shape": TARGET_RATIO, "owner shape (renewed)": TARGET_RATIO,
    "handler shape (held)": TARGET_RATIO, "held, 3x the steps": TARGET_RATIO}


async def _admitted(backend: RestateBackend, work: str) -> Any:
    ctl = Controller(backend)
    await ctl.open_work(work)
    await ctl.publish(work, "v1", {"report": "bench"})
    return await ctl.admit(work, keyed=False)   # the headers carry the epoch, not a secret


async def _call(http: httpx.AsyncClient, url: str, body: Any,
                headers: dict[str, str] | None = None) -> dict[str, float]:
    r = await http.post(url, json=body, headers=headers or {})
    r.raise_for_status()
    got: dict[str, float] = r.json()
    return got


async def per_step(server: RestateServer, runs: int, n: int, chunk: int) -> dict[str, Any]:
    """Each run: one invocation per shape, raw and shaped steps alternating inside it."""
    shapes = ("owner shape", "owner shape (renewed)", "handler shape (held)",
              "held, 3x the steps", "floor (raw + call)", "outlive (send)", "outlive (call)")
    got: dict[str, list[dict[str, float]]] = {name: [] for name in shapes}
    async with await outlive.open_backend(server.url) as backend, \
            await outlive.open_backend(server.url + "&ledger=bench_desk") as desk, \
            httpx.AsyncClient(timeout=300) as http:
        assert isinstance(backend, RestateBackend) and isinstance(desk, RestateBackend)
        base = server.ingress
        arg = {"n": n, "chunk": chunk}
        held_n = max(n, 1024)
        await _call(http, f"{base}/bench/floor", {"n": 5, "chunk": 5, "key": "warm-up"})
        for _ in range(runs):
            work = f"bench/{uuid.uuid4().hex[:8]}"
            att = await _admitted(desk, work)
            got["owner shape"].append(await _call(
                http, f"{base}/bench_desk/{work.replace('/', '%2F')}/owned", arg,
                attempt_headers(work, att, "bench_desk")))
            # the owner shape as a dispatched attempt runs it: the renewal timer races each step
            work = f"bench/{uuid.uuid4().hex[:8]}"
            att = await _admitted(desk, work)
            got["owner shape (renewed)"].append(await _call(
                http, f"{base}/bench_desk/{work.replace('/', '%2F')}/owned", arg,
                attempt_headers(work, att, "bench_desk", renew_ms=20_000)))
            # the handler shape as a dispatched attempt runs it: renewed (a 60 s lease's
            # third), its step writes held back; more steps, so that writes of the held ones
            # (one per _HOLD_MAX steps, and the last with the settling) fall inside the timed
            # chunks
            work = f"bench/{uuid.uuid4().hex[:8]}"
            att = await _admitted(backend, work)
            got["handler shape (held)"].append(await _call(
                http, f"{base}/bench/outlive", {**arg, "n": held_n, "write": "held"},
                attempt_headers(work, att, renew_ms=20_000)))
            # the same three times as long: what the attempt pays once (its last held writes
            # stored, the beat that waits for them) spread over three times the steps
            work = f"bench/{uuid.uuid4().hex[:8]}"
            att = await _admitted(backend, work)
            got["held, 3x the steps"].append(await _call(
                http, f"{base}/bench/outlive", {**arg, "n": 3 * held_n, "write": "held"},
                attempt_headers(work, att, renew_ms=20_000)))
            got["floor (raw + call)"].append(await _call(
                http, f"{base}/bench/floor", {**arg, "key": uuid.uuid4().hex}))
            for write in ("send", "call"):
                work = f"bench/{uuid.uuid4().hex[:8]}"
                att = await _admitted(backend, work)
                got[f"outlive ({write})"].append(await _call(
                    http, f"{base}/bench/outlive", {**arg, "write": write},
                    attempt_headers(work, att)))
    out: dict[str, Any] = {"steps": n, "chunk": chunk, "runs": runs, "shapes": {}}
    for name, values in got.items():
        steps = {"handler shape (held)": held_n, "held, 3x the steps": 3 * held_n}.get(name, n)
        per_run = [v["other"] / v["raw"] for v in values]
        out["shapes"][name] = {
            "steps": steps,
            "ms_per_step": statistics.median(v["other"] for v in values) / steps,
            "raw_ms_per_step": statistics.median(v["raw"] for v in values) / steps,
            "settle_ms": statistics.median(v["settle"] for v in values),
            "ratio_median": statistics.median(per_run),
            "ratio_min": min(per_run), "ratio_max": max(per_run), "per_run": per_run}
    # The held step's cost with the attempt's one-off part taken out: the extra time of the
    # longer invocation over the extra raw time, run by run (the two ran one after the other)
    short, long_ = got["handler shape (held)"], got["held, 3x the steps"]
    marginal = [(b["other"] - a["other"]) / (b["raw"] - a["raw"])
                for a, b in zip(short, long_, strict=True)]
    out["held_marginal"] = {"ratio_median": statistics.median(marginal),
                            "ratio_min": min(marginal), "ratio_max": max(marginal),
                            "per_run": marginal}
    return out


async def takeover(server: RestateServer, leases_ms: tuple[int, ...], each: int) -> dict[str, Any]:
    """Last sign of life of a silent #1 -> #2's first step running, Restate driving it."""
    out: dict[str, Any] = {}
    async with await outlive.open_backend(server.url) as backend:
        assert isinstance(backend, RestateBackend)
        for lease in leases_ms:
            got: list[float] = []
            for _ in range(each):
                work = f"takeover/{uuid.uuid4().hex[:8]}"
                with tempfile.NamedTemporaryFile() as hold:
                    ctl = Controller(backend)
                    await ctl.open_work(work)
                    await ctl.publish(work, "v1", {"s1": "x"})
                    await backend.start_work(work, service="bench", handler="takeover",
                                             arg={"hold": hold.name},
                                             lease=timedelta(milliseconds=lease),
                                             renew=False)   # the held step stands for silence
                    deadline = time.monotonic() + 60
                    while True:
                        st = await backend.load(work)
                        assert st is not None
                        if any(a.number == 2 and a.state is AttemptState.FINISHED
                               for a in st.attempts):
                            break
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"{work}: no successor finished")
                        await asyncio.sleep(0.05)
                first = st.attempt(1)
                assert first is not None
                mine = [e for e in st.journal if e.attempt == 2]
                if len(mine) != 1:
                    raise AssertionError(f"{work}: {st.journal} {st.attempts}")
                entry = mine[0]
                got.append(float(entry.result) - first.last_heartbeat)
            out[str(lease)] = {"median_ms": statistics.median(got), "min_ms": min(got),
                               "max_ms": max(got), "n": len(got)}
    return out


async def replica_takeover(server: RestateServer, leases_ms: tuple[int, ...],
                           each: int) -> dict[str, Any]:
    """Two replicas behind the balancer: #1 renews its lease while its step runs, then the
    replica running it is paused (SIGSTOP). Its last sign of life -> #2's first step, which the
    lease's checks (on the other replica) admit and the balancer sends to the live one."""
    out: dict[str, Any] = {}
    async with await outlive.open_backend(server.url) as backend:
        assert isinstance(backend, RestateBackend)
        for lease in leases_ms:
            got: list[float] = []
            for _ in range(each):
                work = f"replicas/{uuid.uuid4().hex[:8]}"
                with tempfile.TemporaryDirectory() as tmp:
                    hold, pid = Path(tmp) / "hold", Path(tmp) / "pid"
                    hold.touch()
                    ctl = Controller(backend)
                    await ctl.open_work(work)
                    await ctl.publish(work, "v1", {"s1": "x"})
                    await backend.start_work(work, service="bench", handler="takeover",
                                             arg={"hold": str(hold), "pid": str(pid)},
                                             lease=timedelta(milliseconds=lease))
                    while not pid.exists() or not pid.read_text():
                        await asyncio.sleep(0.01)
                    await asyncio.sleep(lease / 1000)      # a renewal or two go by
                    (proc,) = [p for p in server.replicas if p.pid == int(pid.read_text())]
                    proc.send_signal(signal.SIGSTOP)
                    try:
                        st = await _second_finished(backend, work)
                    finally:
                        proc.send_signal(signal.SIGCONT)
                        hold.unlink()
                first = st.attempt(1)
                assert first is not None and first.heartbeats >= 1, st.attempts
                (entry,) = [e for e in st.journal if e.attempt == 2]
                got.append(float(entry.result) - first.last_heartbeat)
            out[str(lease)] = {"median_ms": statistics.median(got), "min_ms": min(got),
                               "max_ms": max(got), "n": len(got), "each": got}
    return out


async def _second_finished(backend: RestateBackend, work: str) -> Any:
    deadline = time.monotonic() + 60
    while True:
        st = await backend.load(work)
        assert st is not None
        if any(a.number == 2 and a.state is AttemptState.FINISHED for a in st.attempts):
            return st
        if time.monotonic() > deadline:
            raise TimeoutError(f"{work}: no successor finished")
        await asyncio.sleep(0.05)


async def main() -> dict[str, Any]:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else RUNS
    with RestateServer(app="bench_app:app", pythonpath=(str(HERE),)) as server:
        steps = await per_step(server, runs, N, CHUNK)
        latency = await takeover(server, (500, 1000, 2000), 5)
    with RestateServer(app="bench_app:app", pythonpath=(str(HERE),), replicas=2) as server:
        replicas = await replica_takeover(server, (1000, 2000), 5)
    return {"per_step": steps, "takeover": latency, "replica_takeover": replicas,
            "targets": {"ratio": TARGET_RATIO, "takeover_over_lease_ms": TARGET_TAKEOVER_MS}}


def _against(value: float, target: float | None, fmt: str = "{:.3f}x") -> str:
    """``value`` against its target, so a regression shows in the output."""
    if target is None:
        return "(no target)"
    return f"target <= {fmt.format(target)}: {'met' if value <= target else 'MISSED'}"


def report(res: dict[str, Any]) -> None:
    s = res["per_step"]
    print(f"Restate, {s['steps']} steps of each kind per invocation, raw ctx.run_typed steps "
          f"alternating with the shape's in chunks of {s['chunk']}, {s['runs']} runs:")
    print("  shape                 ms/step  raw ms/step  ratio to raw in the same invocation "
          "(median [min-max]; every run)")
    for name, v in s["shapes"].items():
        per = ", ".join(f"{x:.3f}" for x in v["per_run"])
        print(f"  {name:21s} {v['ms_per_step']:7.3f}  {v['raw_ms_per_step']:11.3f}  "
              f"{v['ratio_median']:.3f}x [{v['ratio_min']:.3f}-{v['ratio_max']:.3f}] "
              f"{_against(v['ratio_median'], RATIO_TARGETS.get(name))} ({per})")
    m = s["held_marginal"]
    held = s["shapes"]["handler shape (held)"]
    print(f"  held, per extra step  {m['ratio_median']:.3f}x [{m['ratio_min']:.3f}-"
          f"{m['ratio_max']:.3f}] {_against(m['ratio_median'], TARGET_RATIO)} "
          f"({', '.join(f'{x:.3f}' for x in m['per_run'])}): the 3x row's extra time over its "
          f"extra raw time; the last settling took {held['settle_ms']:.0f} ms of the held row")
    for title, rows in (("a silent attempt, one deployment process", res["takeover"]),
                        ("a paused replica, two behind the balancer",
                         res.get("replica_takeover", {}))):
        print(f"takeover of {title}: last sign of life of #1 -> #2's first step (ms):")
        for lease, v in rows.items():
            limit = int(lease) + TARGET_TAKEOVER_MS
            print(f"  lease {lease:>5} ms: median {v['median_ms']:.0f} "
                  f"[{v['min_ms']:.0f}-{v['max_ms']:.0f}] over {v['n']}  "
                  f"{_against(v['max_ms'], limit, '{:.0f} ms (lease + 1 s), slowest')}")


if __name__ == "__main__":
    result = asyncio.run(main())
    report(result)
    Path(".bench").mkdir(exist_ok=True)
    Path(".bench/restate.json").write_text(json.dumps(result, indent=2))
