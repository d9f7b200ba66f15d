"""A user's workflows and activities, written the way the in-engine shape is meant to be used.

Imported by the in-process tests and by worker processes (``WorkerProcess(..., "temporal_engine_app")``).
The activities leave markers in ``$OUTLIVE_TEST_DIR`` so a test can see which process runs which
step and what a paused worker's late write met.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import timedelta
from typing import Any
from urllib.parse import unquote

from temporalio import activity, workflow
from temporalio.client import WorkflowUpdateFailedError

with workflow.unsafe.imports_passed_through():
    from outlive import codec
    from outlive import ledger as L
    from outlive.errors import OutliveError
    from outlive_temporal import Attempt, Work, current_attempt, typed_error
    from outlive_temporal._engine import COMMAND_UPDATE, PUBLISH_UPDATE
    from outlive_temporal.testing import go_silent

#: In-process control of ``held`` (tests running their worker in the test process).
HOLD: dict[str, asyncio.Event] = {}
CALLS: list[str] = []


def _mark(name: str) -> None:
    """``$OUTLIVE_TEST_DIR/<last part of the work id>.<name>`` gets this process's pid."""
    d = os.environ.get("OUTLIVE_TEST_DIR")
    if d:
        tag = unquote(activity.info().workflow_id or "").rsplit("/", 1)[-1]
        with open(os.path.join(d, f"{tag}.{name}"), "a") as f:
            f.write(f"{os.getpid()}\n")


@activity.defn
async def part(text: str) -> str:
    """A model call that takes ``slow:<seconds>:`` and heartbeats while it works."""
    info = current_attempt()
    _mark(f"started.{info.step}.{info.attempt}")
    seconds = float(text.split(":")[1]) if text.startswith("slow:") else 0.0
    last = time.monotonic()
    end = last + seconds
    paused = False
    try:
        while time.monotonic() < end:
            await asyncio.sleep(0.1)
            paused = paused or time.monotonic() - last > 1.5   # stopped between two beats
            last = time.monotonic()
            activity.heartbeat()
    except asyncio.CancelledError:
        # Temporal told the woken worker its activity is gone; a worker that saves what it has
        # on the way out still makes its ledger write - with the token it was started with.
        if paused or time.monotonic() - last > 1.5:
            await _late_write(info)
        raise
    if paused:
        await _late_write(info)
    return text.rsplit(":", 1)[-1].upper()


async def _late_write(info: Any) -> None:
    """The write a woken worker would make, to its end even if Temporal cancels the activity."""
    write = asyncio.ensure_future(_write(info))
    while not write.done():
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            continue


async def _write(info: Any) -> None:
    """An effect intent with the token the activity was started with."""
    try:
        await info.execute(L.RecordIntent(
            attempt=info.attempt, token=info.token, op_key=f"late:{info.step}",
            payload_digest="0" * 64, sent_key=None, at=int(time.time() * 1000)))
        _mark("late-write.applied")
    except OutliveError as exc:
        _mark(f"late-write.{type(exc).__name__}")
    _mark(f"late-return.{info.step}.{info.attempt}")


@activity.defn
async def held(text: str) -> str:
    """A model call the test can hold (no heartbeats while held: the worker went silent)."""
    CALLS.append(text)
    ev = HOLD.pop(text, None)   # only the first call is held
    if ev is not None:
        go_silent()             # held = its worker is paused: no heartbeat, not even outlive's
        await ev.wait()
    return text.upper()


@activity.defn
async def usurp(text: str) -> str:
    """A step whose activity tries the controller's commands on its own work, every way an
    activity can reach it: its attempt's handle, and the raw updates with no proof. Returns
    what each one met."""
    info = current_attempt()
    raw = activity.client().get_workflow_handle(info.workflow_id)
    met: list[str] = []

    async def attempt_(coro: Any) -> None:
        try:
            await coro
            met.append("applied")
        except OutliveError as exc:
            met.append(type(exc).__name__)
        except WorkflowUpdateFailedError as exc:
            err = typed_error(exc.cause)
            met.append(type(err).__name__ if err is not None else "failed")

    at = int(time.time() * 1000)
    await attempt_(info.execute(L.MarkUnknown(attempt=info.attempt, at=at)))
    await attempt_(info.execute(L.MarkStopped(attempt=info.attempt, at=at)))
    await attempt_(info.execute(L.Accept(digest="0" * 64, contract=Work.outlive_contract,
                                         verdict=True, reason="mine", at=at)))
    await attempt_(raw.execute_update(COMMAND_UPDATE, args=[codec.dumps(
        L.MarkUnknown(attempt=info.attempt, at=at))], result_type=str))
    await attempt_(raw.execute_update(PUBLISH_UPDATE, args=["v9", {"s1": "mine"}],
                                      result_type=str))
    return ",".join(met) + ":" + text


@activity.defn
async def blob(i: int, size: int) -> str:
    return (f"{i:06d}" * (size // 6 + 1))[:size]


@workflow.defn
class FleetWork(Work):
    outlive_heartbeat = timedelta(seconds=2)

    @workflow.run
    async def run(self, report: dict[str, str]) -> dict[str, Any]:
        return await self.drive(self.attempt, report)

    async def attempt(self, a: Attempt, report: dict[str, str]) -> dict[str, Any]:
        out = [await a.step(k, part, report[k]) for k in sorted(report)]
        acc = await a.accept({"digest": " ".join(out)})
        return {"digest": acc.digest, "attempt": a.number}


@workflow.defn
class HoldWork(Work):
    outlive_heartbeat = timedelta(seconds=1)

    @workflow.run
    async def run(self, report: dict[str, str]) -> dict[str, Any]:
        return await self.drive(self.attempt, report)

    async def attempt(self, a: Attempt, report: dict[str, str]) -> dict[str, Any]:
        out = [await a.step(k, held, report[k]) for k in sorted(report)]
        acc = await a.accept({"digest": " ".join(out)})
        return {"digest": acc.digest, "attempt": a.number, "text": " ".join(out)}


@workflow.defn
class ApprovalWork(Work):
    """Waits for an editor's approval (a signal) between its two steps."""

    outlive_heartbeat = timedelta(seconds=1)

    def __init__(self) -> None:
        super().__init__()
        self.approved = False

    @workflow.signal
    def approve(self) -> None:
        self.approved = True

    @workflow.run
    async def run(self, report: dict[str, str]) -> dict[str, Any]:
        return await self.drive(self.attempt, report)

    async def attempt(self, a: Attempt, report: dict[str, str]) -> dict[str, Any]:
        first = await a.step("s1", part, report["s1"])
        async with a.waiting("approval by the editor"):
            await workflow.wait_condition(lambda: self.approved)
        second = await a.step("s2", part, report["s2"])
        acc = await a.accept({"digest": f"{first} {second}"})
        return {"digest": acc.digest, "attempt": a.number}


@workflow.defn
class UsurpWork(Work):
    """One step whose activity tries to act as the controller."""

    @workflow.run
    async def run(self, report: dict[str, str]) -> dict[str, Any]:
        return await self.drive(self.attempt, report)

    async def attempt(self, a: Attempt, report: dict[str, str]) -> dict[str, Any]:
        met = await a.step("s1", usurp, report["s1"])
        acc = await a.accept({"met": met})
        return {"digest": acc.digest, "attempt": a.number, "met": met}


@workflow.defn
class BigWork(Work):
    """``n`` steps of ``size`` bytes each, continuing as new every 250 steps."""

    outlive_continue_after = 250

    @workflow.run
    async def run(self, spec: dict[str, int]) -> dict[str, Any]:
        return await self.drive(self.attempt, spec)

    async def attempt(self, a: Attempt, spec: dict[str, int]) -> dict[str, Any]:
        total = 0
        for i in range(spec["n"]):
            r = await a.step(f"s{i}", blob, i, spec["size"], reads={"i": i, "size": spec["size"]},
                             external=["i"], start_to_close_timeout=timedelta(seconds=30))
            assert r.startswith(f"{i:06d}")
            total += len(r)
        return {"bytes": total, "attempt": a.number,
                "generation": self.outlive.generation}


@workflow.defn
class CappedWork(BigWork):
    """A long work under a 60 KB cap on what continue-as-new carries inline (the 2 MB payload
    limit, scaled down so a test of hundreds of steps meets it), continuing every 100 steps."""

    outlive_max_state_bytes = 60_000
    outlive_continue_after = 100
    outlive_journal_chunk = 150

    @workflow.run
    async def run(self, spec: dict[str, int]) -> dict[str, Any]:
        return await self.drive(self.attempt, spec)


@workflow.defn(name="HoldWork")
class ChangedHoldWork(HoldWork):
    """HoldWork after a careless edit (the second section is no longer summarised): replaying a
    recorded HoldWork history against it must fail. Never registered on a worker."""

    @workflow.run
    async def run(self, report: dict[str, str]) -> dict[str, Any]:
        return await self.drive(self.attempt, report)

    async def attempt(self, a: Attempt, report: dict[str, str]) -> dict[str, Any]:
        out = [await a.step(k, held, report[k]) for k in sorted(report)[:1]]
        acc = await a.accept({"digest": " ".join(out)})
        return {"digest": acc.digest, "attempt": a.number, "text": " ".join(out)}


@workflow.defn
class SmallCanWork(BigWork):
    """The same, continuing as new every 3 steps (short histories to record and replay)."""

    outlive_continue_after = 3

    @workflow.run
    async def run(self, spec: dict[str, int]) -> dict[str, Any]:
        return await self.drive(self.attempt, spec)


# -- a work followed by outlive's Supervisor, its attempts run by the Temporal dispatcher ---------
SUPERVISED = {"s1": "slow:0:alpha", "s2": "slow:4:beta", "s3": "slow:0:gamma"}


def supervised_inputs(version: str) -> dict[str, str]:
    """The content of a published version (the ledger keeps only hashes)."""
    assert version == "v1"
    return dict(SUPERVISED)


async def _summarise(**section: str) -> str:
    ((name, text),) = section.items()
    info = activity.info()
    attempt = int(info.activity_id.split("-")[1])
    _mark(f"started.{name}.{attempt}")
    seconds = float(text.split(":")[1])
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        await asyncio.sleep(0.1)
    return text.rsplit(":", 1)[-1].upper()


async def supervised_attempt(ctx: Any) -> None:
    """An ordinary outlive attempt function (``outlive.supervisor``), nothing Temporal in it."""
    out = [await ctx.worker.step(k, _summarise, **{k: ctx.inputs[k]}) for k in sorted(ctx.inputs)]
    await ctx.submit(await ctx.worker.assemble({"digest": " ".join(out)}))


WORKFLOWS = [FleetWork, HoldWork, ApprovalWork, BigWork, SmallCanWork, CappedWork, UsurpWork]
ACTIVITIES = [part, held, blob, usurp]
