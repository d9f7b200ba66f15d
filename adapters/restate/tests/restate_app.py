"""A user's Restate app for the tests: their own service and object, with outlive inside.

Served by a separate deployment process (``RestateServer(app="restate_app:app")``) and
registered once, as any app. Each model call appends ``attempt:step`` to the file named in the
argument (so a test counts calls across process deaths), and waits while ``<log>.hold-<attempt>-
<step>`` exists (a paused worker, held as long as the test wants).
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import restate
from restate.serde import BytesSerde

import outlive_restate
from outlive import External, Worker
from outlive.records import Candidate, InputVersion
from outlive_restate import _engine, _futures, _ledger

_EXAMPLE = str(Path(__file__).resolve().parents[3] / "examples" / "restate_owner")
if _EXAMPLE not in sys.path:
    sys.path.append(_EXAMPLE)
from restate_feed import feed_object  # noqa: E402  (the owner example's feed, one copy)

reports = restate.Service("reports")
#: The owner shape: the user's object keeps each work's ledger under the work id.
desk = outlive_restate.keep_ledger(restate.VirtualObject("desk"))


def _model(worker: Worker, log: str) -> Any:
    async def summarise(**kw: str) -> dict[str, str]:
        (name, text), = kw.items()
        with open(log, "a") as f:
            f.write(f"{worker.attempt.number}:{name}\n")
        with open(f"{log}.pids", "a") as f:    # which deployment process ran it
            f.write(f"{worker.attempt.number}:{name}:{os.getpid()}\n")
        held = f"{log}.hold-{worker.attempt.number}-{name}"
        while os.path.exists(held):
            await asyncio.sleep(0.05)
        with open(log, "a") as f:
            f.write(f"{worker.attempt.number}:{name}:returned\n")
        return {"summary": text.split(".")[0][:40]}

    return summarise


async def _work(w: Worker, arg: dict[str, Any]) -> dict[str, Any]:
    sections: dict[str, str] = dict(w.snapshot) if w.snapshot else arg["sections"]
    model = _model(w, str(arg["log"]))
    for name, text in sections.items():
        await w.step(name, model, **{name: text})
    cand = await w.candidate()      # the digest: the sections' journaled summaries, by step
    return {"digest": cand.digest, "attempt": w.attempt.number,
            "restored": [s.step for s in w.steps.values() if s.restored]}


def assess(cand: Candidate, version: InputVersion | None) -> tuple[bool, str]:
    """The tests' assessor (run by the lease, inside Restate): every section summarised."""
    sums = cand.content
    ok = version is not None and sorted(sums) == sorted(version.parts) and all(
        s.get("summary") for s in sums.values())
    return ok, "every section summarised" if ok else "a section is missing"


@reports.handler()
async def summarise(ctx: restate.Context, arg: dict[str, Any]) -> dict[str, Any]:
    """The user's own handler: the attempt's worker comes from ctx."""
    versions: dict[str, dict[str, str]] | None = arg.get("versions")
    async with outlive_restate.attempt(
            ctx, snapshot=(lambda pin: versions[pin or "v1"]) if versions else arg["sections"],
            write=arg.get("write")) as w:
        return await _work(w, arg)


async def _echo(i: int) -> int:
    return i


async def _boxed(i: int) -> dict[str, Any]:
    return {"i": i, "seen": [i]}


@reports.handler()
async def many(ctx: restate.Context, arg: dict[str, Any]) -> dict[str, Any]:
    """Quick steps, as many as asked (external inputs): what held step writes are for."""
    async with outlive_restate.attempt(ctx, write=arg.get("write")) as w:
        for i in range(int(arg["n"])):
            if i == arg.get("give_up_at"):
                raise restate.TerminalError("the handler gives up")   # the user's own
            if i == arg.get("too_large_at"):   # a result over the payload limit: refused
                await w.step(f"q{i}", _echo, i=External("x" * (300 * 1024)))
            if arg.get("dicts"):   # a result the handler changes after its step
                got = await w.step(f"q{i}", _boxed, i=External(i))
                got["i"] = -1
                got["seen"].append("changed")
                continue
            await w.step(f"q{i}", _echo, i=External(i))
        return {"steps": len(w.steps)}


@reports.handler()
async def sent_taken(ctx: restate.Context, arg: Any) -> int:
    """How many commands this deployment's ledger took as sent (not decoded again)."""
    del ctx, arg
    return _ledger.taken


@reports.handler()
async def ahead_taken(ctx: restate.Context, arg: Any) -> int:
    """How many owner steps in this deployment took the write worked out ahead of the entry."""
    del ctx, arg
    return _engine.ahead_taken


@reports.handler()
async def ledger_writers(ctx: restate.Context, arg: Any) -> dict[str, int]:
    """How many invocations of each ledger writer this deployment ran (replays included)."""
    del ctx, arg
    return dict(_ledger.executed)


@reports.handler()
async def futures(ctx: restate.Context, arg: Any) -> dict[str, Any]:
    """What ``_futures.awaited`` does with this SDK's futures, inside a real invocation."""
    del arg
    once: restate.RunOptions[bytes] = restate.RunOptions(max_attempts=1, serde=BytesSerde())

    async def value() -> bytes:
        return b"v"

    async def refused() -> bytes:
        raise restate.TerminalError("no", 422)

    run = ctx.run_typed("value", value, once)
    direct = _futures.direct(run) is not None
    got = await _futures.awaited(run)
    try:
        await _futures.awaited(ctx.run_typed("refused", refused, once))
        error = None
    except restate.TerminalError as exc:
        error = exc.status_code
    plain = ctx.run_typed("plain", value, once)
    first = await plain                        # the SDK's own task now holds the value
    return {"direct": direct, "value": got.decode(), "error": error,
            "after_await": _futures.direct(plain) is None,
            "again": (await _futures.awaited(plain)).decode(), "first": first.decode()}


@reports.handler()
async def races(ctx: restate.Context, arg: Any) -> dict[str, Any]:
    """``_futures.first`` against ``restate.wait_completed`` on this SDK's futures, inside a
    real invocation: a quick step against a long timer, a slow step against a short one, then
    both completed (the step not yet taken, as when a held step's race returns)."""
    del arg
    once: restate.RunOptions[bytes] = restate.RunOptions(max_attempts=1, serde=BytesSerde())

    async def quick() -> bytes:
        return b"q"

    async def slow() -> bytes:
        await asyncio.sleep(0.4)
        return b"s"

    long_timer = ctx.sleep(timedelta(seconds=60))
    run = ctx.run_typed("quick", quick, once)
    direct = _futures.polls(run, long_timer) is not None
    quick_won = await _futures.first(run, long_timer)
    quick_sdk = run in (await restate.wait_completed(run, long_timer))[0]
    quick_value = await _futures.awaited(run)
    short_timer = ctx.sleep(timedelta(milliseconds=50))
    run = ctx.run_typed("slow", slow, once)
    slow_won = await _futures.first(run, short_timer)
    slow_sdk = run in (await restate.wait_completed(run, short_timer))[0]
    waited = await _futures.first(run, long_timer)     # the slow step ends before a minute
    both = await _futures.first(run, short_timer)      # both completed, neither taken
    both_sdk = run in (await restate.wait_completed(run, short_timer))[0]
    slow_value = await _futures.awaited(run)
    return {"direct": direct, "quick": [quick_won, quick_sdk, quick_value.decode()],
            "slow": [slow_won, slow_sdk, waited, slow_value.decode()], "both": [both, both_sdk]}


@desk.handler()
async def draft(ctx: restate.ObjectContext, arg: dict[str, Any]) -> dict[str, Any]:
    """The owner shape: an exclusive handler of the object that keeps the work's ledger."""
    async with outlive_restate.attempt(ctx, snapshot=arg["sections"]) as w:
        return await _work(w, arg)


#: The example's receiver, itself a Restate handler (one copy, in the owner example).
feed = feed_object("feed")

app = outlive_restate.app(reports, desk, feed)

#: The same handler in an app of its own, served by a second deployment process: a test pauses
#: that process (SIGSTOP) while outlive's objects, on the first one, keep checking the lease.
apart = restate.Service("reports_apart")


@apart.handler(name="summarise")
async def summarise_apart(ctx: restate.Context, arg: dict[str, Any]) -> dict[str, Any]:
    async with outlive_restate.attempt(ctx, snapshot=arg["sections"],
                                       renew_ms=arg.get("renew_ms")) as w:
        return await _work(w, arg)


apart_app = restate.app([apart])
