"""The core's CPU per command, in microseconds: what every backend pays in Python per step.

    .venv/bin/python bench/core_cpu.py [--blocks 10] [--size 200]

Prints, for each measure, the min and median over ``--blocks`` blocks of ``--size`` calls of
the process CPU time (``time.process_time``) per call:

- ``worker.step memory://``: ``Worker.step`` of a new step reading one part of the pinned
  version, trivial body, small dict result, persisted per step (the whole core path: keying,
  checks, copies, the ledger, memory://'s view, the observe hooks).
- ``ledger.apply RecordSteps``: ``apply`` of one step write to a work's state (no journal, as
  a store's view gives it), the command checked and copied by ``apply`` itself.
- ``checked+reads+apply``: the same through a store's path (``checked``, ``reads``, ``apply``).
- ``ledger.apply Heartbeat``: ``apply`` of the attempt's beat (not its claim) to the same state.
- ``apply RecordSteps @3,000``: ``apply`` of one new step write to the whole state of a work
  whose journal holds ``LONG`` (3,000) entries, each to the state the one before returned (what
  a backend that holds the whole state pays: the Temporal workflow's ledger). Each block starts
  again from the 3,000-entry state; a cost that grows with the journal shows against the row
  above.
- ``worker._prepare``: the worker keying one step (input hashes, input key, result id).
- ``codec.dumps entry+head``: what a SQL store encodes for a step (the new journal entry, and
  the work's head: the state with its collections emptied).
- ``codec.loads entry``: one journal entry decoded from its stored text (checked as it is
  decoded): what a store pays per entry when it reads a work, a Temporal workflow per command.

Not part of ``make test``: ``make bench-core-cpu`` runs it. Compare runs side by side on the
same machine at a similar load (``uptime``); the machine's other work shows in the median.

``--instructions`` prints instead the instructions per call of the same measures, counted by
valgrind's callgrind (deterministic, unmoved by the load): each measure runs ``--n`` and
``2 * --n`` calls in a process of its own, only the measured loop collected (the setup's
objects frozen out of the cyclic GC), and the difference is divided by ``--n``. Needs
``valgrind`` on PATH; runs with ``PYTHONHASHSEED=0``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace

from outlive import Controller, Worker, codec, open_backend
from outlive import ledger as L
from outlive.records import WorkState
from outlive.sqlstore import COLLECTIONS


def _blocks(run_block: Callable[[int], None], blocks: int, size: int) -> list[float]:
    """CPU µs per call of each block; the first block warms caches and is dropped."""
    out = []
    for b in range(blocks + 1):
        gc.collect()
        t0 = time.process_time()
        run_block(b)
        out.append((time.process_time() - t0) / size * 1e6)
    return out[1:]


def _show(name: str, per_call: list[float]) -> None:
    print(f"{name:28s} min {min(per_call):7.1f}  median {statistics.median(per_call):7.1f} µs/call")


async def _started_worker() -> Worker:
    """Attempt #1 of work ``w`` on memory://, claimed: what every measurement starts from."""
    backend = await open_backend("memory://")
    ctl = Controller(backend, clock=lambda: 0)
    await ctl.open_work("w")
    await ctl.publish("w", "v1", {"s1": "x", "s2": "y"})
    worker = Worker(backend, await ctl.admit("w"), {"s1": "x", "s2": "y"}, clock=lambda: 1)
    await worker.start()
    return worker


async def _worker_bench(blocks: int, size: int) -> tuple[list[float], Worker, WorkState]:
    worker = await _started_worker()
    backend = worker.backend
    counter = iter(range(10 ** 9))

    def body(s1: str) -> dict[str, str]:
        return {"r": s1}

    async def block() -> None:
        for _ in range(size):
            await worker.step(f"step-{next(counter)}", body, s1="x")

    out = []
    for _ in range(blocks + 1):           # the first block warms caches and is dropped
        gc.collect()
        t0 = time.process_time()
        await block()
        out.append((time.process_time() - t0) / size * 1e6)
    state = await backend.load("w")
    assert state is not None
    return out[1:], worker, state


def _apply_bench(state: WorkState, worker: Worker, blocks: int,
                 size: int) -> tuple[list[float], list[float], list[float]]:
    view = replace(state, journal=())   # what a store's view holds for a new step's write
    att = worker.attempt

    def commands(b: int) -> list[L.RecordSteps]:
        out = []
        for i in range(size):
            p = worker._prepare(f"apply-{b}-{i}", lambda s1: s1, {"s1": "x"})
            out.append(L.RecordSteps(attempt=att.number, token=att.token, entries=(p.write({"r": "x"}),),
                                     at=1, secret=att.secret))
        return out

    plain_cmds = [commands(b) for b in range(blocks + 1)]
    store_cmds = [commands(b) for b in range(blocks + 1)]

    def plain(b: int) -> None:
        for cmd in plain_cmds[b]:
            L.apply(view, cmd, work_id="w", now=2)

    def store(b: int) -> None:
        for cmd in store_cmds[b]:
            c = L.checked(cmd)
            L.reads(view, c)
            L.apply(view, c, work_id="w", now=2)

    beats = [L.Heartbeat(attempt=att.number, token=att.token, at=1, secret=att.secret)
             for _ in range(size)]

    def beat(b: int) -> None:
        for cmd in beats:
            L.apply(view, cmd, work_id="w", now=2)

    return _blocks(plain, blocks, size), _blocks(store, blocks, size), _blocks(beat, blocks, size)


#: The journal length of the long-journal measure.
LONG = 3000


async def _long_state(worker: Worker, n: int = LONG) -> WorkState:
    """The whole state of ``worker``'s work once its journal holds ``n`` entries."""
    backend = worker.backend
    state = await backend.load("w")
    assert state is not None

    def body(s1: str) -> dict[str, str]:
        return {"r": s1}

    for i in range(n - len(state.journal)):
        await worker.step(f"long-{i}", body, s1="x")
    state = await backend.load("w")
    assert state is not None and len(state.journal) == n
    return state


def _step_commands(worker: Worker, prefix: str, count: int) -> list[L.RecordSteps]:
    """``count`` new step writes of ``worker``'s attempt, one entry each."""
    att = worker.attempt
    out = []
    for i in range(count):
        p = worker._prepare(f"{prefix}-{i}", _identity, {"s1": "x"})
        out.append(L.RecordSteps(attempt=att.number, token=att.token, entries=(p.write({"r": "x"}),),
                                 at=1, secret=att.secret))
    return out


def _long_bench(state: WorkState, worker: Worker, blocks: int, size: int) -> list[float]:
    cmds = [_step_commands(worker, f"chain-{b}", size) for b in range(blocks + 1)]

    def chain(b: int) -> None:
        s = state
        for cmd in cmds[b]:
            s, _ = L.apply(s, cmd, work_id="w", now=2)

    return _blocks(chain, blocks, size)


def _prepare_bench(worker: Worker, blocks: int, size: int) -> list[float]:
    def run(b: int) -> None:
        for i in range(size):
            worker._prepare(f"prep-{b}-{i}", _identity, {"s1": "x"})

    return _blocks(run, blocks, size)


def _identity(s1: str) -> str:
    return s1


# -- instructions (callgrind) ---------------------------------------------------------------------
MEASURES = ("worker.step memory://", "ledger.apply RecordSteps", "checked+reads+apply",
            "ledger.apply Heartbeat", f"apply RecordSteps @{LONG:,}", "worker._prepare",
            "codec.dumps entry+head", "codec.loads entry")


def _codec_runs(state: WorkState, n: int) -> tuple[Callable[[], None], Callable[[], None]]:
    """``n`` encodings of ``state``'s last entry and head, and ``n`` decodings of the entry."""
    entry = state.journal[-1]
    head = replace(state, journal=())
    text = codec.dumps(entry)

    def dumps() -> None:
        for _ in range(n):
            codec.dumps(entry)
            codec.dumps_blank(head, COLLECTIONS)

    def loads() -> None:
        for _ in range(n):
            codec.loads(text)

    return dumps, loads


def _measured(run: Callable[[], None]) -> None:
    """Run ``run`` through ``functools.partial``: callgrind collects only inside
    ``partial_vectorcall`` (nothing else in these loops calls a partial).

    The objects made before (modules, the setup) are frozen out of the cyclic GC first: its
    passes over them cost in proportion to what the process imported, not to the code measured
    (about 13 K instructions per step with this script's imports)."""
    gc.collect()
    gc.freeze()
    functools.partial(run)()


async def _one(measure: str, n: int) -> None:
    """Set ``measure`` up, then run it ``n`` times inside :func:`_measured`."""
    worker = await _started_worker()
    backend, att = worker.backend, worker.attempt

    def body(s1: str) -> dict[str, str]:
        return {"r": s1}

    for i in range(20):
        await worker.step(f"warm-{i}", body, s1="x")
    names = [f"step-{i}" for i in range(n)]
    if measure == "worker.step memory://":
        async def steps() -> None:
            for name in names:
                await worker.step(name, body, s1="x")

        co = steps()

        def drive() -> None:   # memory:// never suspends: one send runs every step
            try:
                co.send(None)
            except StopIteration:
                return
            raise SystemExit("a step suspended")

        _measured(drive)
        return
    if measure == "worker._prepare":
        def prepare() -> None:
            for name in names:
                worker._prepare(name, body, {"s1": "x"})

        _measured(prepare)
        return
    if measure == MEASURES[4]:
        # chained from the 3,000-entry state: the journal grows to 3,000 + 2n in the longer run
        long = await _long_state(worker)
        chained = _step_commands(worker, "chain", n)

        def chain() -> None:
            s = long
            for cmd in chained:
                s, _ = L.apply(s, cmd, work_id="w", now=2)

        _measured(chain)
        return
    state = await backend.load("w")
    assert state is not None
    if measure in MEASURES[6:]:
        _measured(_codec_runs(state, n)[MEASURES.index(measure) - 6])
        return
    view = replace(state, journal=())
    cmds = []
    for name in names:
        p = worker._prepare(name, body, {"s1": "x"})
        cmds.append(L.RecordSteps(attempt=att.number, token=att.token, entries=(p.write({"r": "x"}),),
                                  at=1, secret=att.secret))
    if measure == "ledger.apply Heartbeat":
        beats = [L.Heartbeat(attempt=att.number, token=att.token, at=1, secret=att.secret)
                 for _ in names]

        def beat() -> None:
            for cmd in beats:
                L.apply(view, cmd, work_id="w", now=2)

        _measured(beat)
        return
    if measure == "ledger.apply RecordSteps":
        def plain() -> None:
            for cmd in cmds:
                L.apply(view, cmd, work_id="w", now=2)

        _measured(plain)
        return

    def store() -> None:
        for cmd in cmds:
            c = L.checked(cmd)
            L.reads(view, c)
            L.apply(view, c, work_id="w", now=2)

    _measured(store)


def _instructions(measure: str, n: int) -> int:
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("--instructions needs valgrind on PATH")
    out = subprocess.run(
        [valgrind, "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=partial_vectorcall",
         "--callgrind-out-file=/dev/null", sys.executable, __file__, "--one", measure, "--n", str(n)],
        capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"}, check=True)
    found = re.search(r"Collected : (\d+)", out.stderr)
    if found is None:
        raise SystemExit(f"callgrind said no count:\n{out.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--instructions", action="store_true",
                        help="instructions per call, counted by callgrind")
    parser.add_argument("--n", type=int, default=1000, help="calls per callgrind run")
    parser.add_argument("--one", choices=MEASURES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        asyncio.run(_one(args.one, args.n))
        return
    if args.instructions:
        print(f"instructions per call (callgrind, {2 * args.n} minus {args.n} calls)")
        for measure in MEASURES:
            per = (_instructions(measure, 2 * args.n) - _instructions(measure, args.n)) // args.n
            print(f"{measure:28s} {per / 1000:7.1f} K")
        return
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}; "
          f"{args.blocks} blocks of {args.size}")
    steps, worker, state = asyncio.run(_worker_bench(args.blocks, args.size))
    _show("worker.step memory://", steps)
    plain, store, beat = _apply_bench(state, worker, args.blocks, args.size)
    _show("ledger.apply RecordSteps", plain)
    _show("checked+reads+apply", store)
    _show("ledger.apply Heartbeat", beat)
    long = asyncio.run(_long_state(worker))
    _show(MEASURES[4], _long_bench(long, worker, args.blocks, args.size))
    _show("worker._prepare", _prepare_bench(worker, args.blocks, args.size))
    dumps, loads = _codec_runs(state, args.size)
    _show(MEASURES[6], _blocks(lambda b: dumps(), args.blocks, args.size))
    _show(MEASURES[7], _blocks(lambda b: loads(), args.blocks, args.size))


if __name__ == "__main__":
    main()
