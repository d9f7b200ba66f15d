"""Where a run of ``make sweep-restate`` spends its CPU: a slice of the 864, process by process.

``python adapters/restate/bench/sweep_cpu.py [EVERY] [CONCURRENCY]`` runs every EVERY-th
combination (default 18: 48 runs) of the q3-report sweep with every attempt inside a handler
(``restate+handler://``) on one server and one deployment of outlive's objects, compares each run
with ``memory://`` field by field, and prints the CPU seconds per run of the restate-server
process, of the deployment that serves the ledger object, and of this process (the harness,
which also serves the attempts' handler), from ``/proc/<pid>/stat`` before and after, with the
ledger calls per run. The figures move with the machine's load: run it more than once.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from outlive import Backend, open_backend
from outlive import ledger as L
from outlive.backend import StepCall
from outlive.records import WorkState
from outlive_conformance.harness import RunSummary, run_scenario
from outlive_conformance.scenario import Switches, all_switches, q3_report
from outlive_restate._engine import HandlerBackend
from outlive_restate.server import RestateServer
from outlive_restate.testing import HandlerDrivenBackend


def cpu_seconds(pid: int) -> float:
    """CPU of one process so far (its children not included): the run time the scheduler
    counted for each of its threads (``/proc/<pid>/task/*/schedstat``, in ns), else its user
    plus system time from ``/proc/<pid>/stat`` (in clock ticks: 10 ms, coarse for a short run).
    The first counts live threads only: one that ended between two readings takes its time
    away; the restate-server's and a deployment's threads live as long as they do."""
    total, read = 0, False
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                    total += int(fh.read().split()[0])
                read = True
            except (OSError, ValueError, IndexError):
                pass   # a thread that ended between the listing and the read
    except OSError:
        pass
    if read:
        return total / 1e9
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Counted(HandlerDrivenBackend):
    """The handler-shape driver, counting the ledger calls a run makes."""

    calls: ClassVar[Counter[str]] = Counter()

    async def load(self, work_id: str) -> WorkState | None:
        self.calls["reads (ingress)"] += 1
        return await super().load(work_id)

    async def execute(self, work_id: str, command: L.Command) -> L.Outcome:
        if getattr(command, "token", None) is None:
            self.calls["controller writes (ingress)"] += 1
        return await super().execute(work_id, command)

    async def write(self, backend: HandlerBackend, work_id: str, command: L.Command) -> L.Outcome:
        self.calls["attempt writes (durable calls)"] += 1
        return await super().write(backend, work_id, command)

    async def run_step(self, call: StepCall, fn: Callable[[], Awaitable[Any]]) -> Any:
        self.calls["steps without record"] += 1
        return await super().run_step(call, fn)

    async def run_and_record(self, call: StepCall, fn: Callable[[], Awaitable[Any]],
                             record: Callable[[Any], L.Command]) -> tuple[Any, L.Outcome]:
        self.calls["steps"] += 1
        return await super().run_and_record(call, fn, record)


async def run_slice(backend: Backend, combos: list[Switches], concurrency: int,
                    namespace: str) -> dict[str, RunSummary]:
    """The combinations ``combos`` as the sweep runs them: each under its own work id."""
    sc, sem, runs = q3_report(), asyncio.Semaphore(concurrency), {}

    async def one(i: int, sw: Switches) -> None:
        async with sem:
            runs[sw.label] = await run_scenario(backend, sc, sw,
                                                work_id=f"{namespace}/{i:03d}/{sc.work_id}")

    async with asyncio.TaskGroup() as tg:
        for i, sw in enumerate(combos):
            tg.create_task(one(i, sw))
    return runs


async def measure(server: RestateServer, every: int, concurrency: int) -> int:
    combos = list(all_switches())[::every]
    backend = Counted(server.url.replace("restate://", "restate+handler://", 1))
    await backend.start()
    try:
        assert server.server is not None and server.deployment is not None
        pids = {"restate-server": server.server.pid, "deployment (ledger)": server.deployment.pid,
                "harness (attempts)": os.getpid()}
        before = {k: cpu_seconds(p) for k, p in pids.items()}
        load0, t0 = os.getloadavg()[0], time.perf_counter()
        got = await run_slice(backend, combos, concurrency, f"cpu-{os.getpid()}")
        took = time.perf_counter() - t0
        after = {k: cpu_seconds(p) for k, p in pids.items()}
    finally:
        await backend.close()
    ref = await run_slice(await open_backend("memory://"), combos, 8, f"cpu-{os.getpid()}")
    differ = [k for k, r in got.items() if r.comparable() != ref[k].comparable()]
    n = len(got)
    print(f"{n} runs (every {every}th of 864), {concurrency} at once: {took:.1f} s, "
          f"{n / took:.2f} runs/s, load average {load0:.1f} -> {os.getloadavg()[0]:.1f}; "
          f"{n - len(differ)}/{n} identical to memory://")
    total = 0.0
    for name in pids:
        spent = after[name] - before[name]
        total += spent
        print(f"  {name:22s} {1000 * spent / n:6.1f} ms CPU per run")
    print(f"  {'all three':22s} {1000 * total / n:6.1f} ms CPU per run")
    for name, count in sorted(Counted.calls.items()):
        print(f"  {name:32s} {count / n:5.1f} per run")
    return 1 if differ else 0


def main() -> int:
    every = int(sys.argv[1]) if len(sys.argv) > 1 else 18
    concurrency = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    with RestateServer() as server:
        return asyncio.run(measure(server, every, concurrency))


if __name__ == "__main__":
    sys.exit(main())
