"""The suite's chapter on many works: the same :class:`outlive.Runtime` API on every backend.

Swapping backends behind one API covers starting and awaiting many works, not one: each backend
runs several works of one kind to completion through a runtime, starts one twice and gets the
same work, retries a transient error, and fails a work at once on a non-retryable one, naming it.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

import outlive
from outlive import Backend, Contract, Kind, Lease, RetryPolicy, Runtime

__all__ = ["RuntimeChapter"]

_SECTIONS = ("revenue", "outlook")


def _parts(version: str) -> dict[str, str]:
    return {s: f"{s} of the report, {version}" for s in _SECTIONS}


def _summarise(**section: str) -> str:
    (text,) = section.values()
    return text.upper()


class _Feed:
    """A receiver and its sender: one post per operation key."""

    def __init__(self) -> None:
        self.receiver = outlive.MemoryReceiver()

    def post(self, key: str | None, payload: Any) -> outlive.Receipt:
        return self.receiver.receive(key, payload,
                                     lambda p: f"post-{len(self.receiver.applied) + 1}")


class _Boom(Exception):
    """A transient error, as a model API's 503."""


def _kind(name: str, feed: _Feed, *, fail_first: int = 0, fatal: bool = False) -> Kind:
    runs: list[int] = []

    async def attempt(ctx: outlive.AttemptContext) -> None:
        runs.append(ctx.attempt.number)
        if fatal:
            raise outlive.NonRetryable("the ticket was deleted")
        if len(runs) <= fail_first:
            raise _Boom(f"503 on attempt {ctx.attempt.number}")
        w = ctx.worker
        for part in _SECTIONS:
            await w.step(part, _summarise, **{part: ctx.inputs[part]})
        acc = await ctx.submit({p: w.result(p) for p in _SECTIONS})
        await w.effect(f"announce:{w.work_id}:{acc.digest[:8]}", {"digest": acc.digest},
                       send=feed.post)

    return Kind(name=name, attempt=attempt,
                contract=Contract(name="digest-form", version="1", assessor="suite"),
                # No test here waits for a lease to run out; a long one keeps a loaded machine's
                # stalled beats from handing a live attempt to a second one.
                lease=Lease(heartbeat_interval=1_000, missed_beats=10, start_grace=10_000),
                retry=RetryPolicy(maximum_attempts=3, initial_interval=0.01))


@pytest.mark.asyncio(loop_scope="session")
class RuntimeChapter:
    """Many works through one runtime, on the suite's backend."""

    async def test_many_works_start_and_complete_each_announced_once(
            self, outlive_backend: Backend) -> None:
        feed = _Feed()
        kind = _kind(f"suite-{uuid.uuid4().hex[:6]}", feed)
        prefix = f"suite/{uuid.uuid4().hex[:8]}"
        async with Runtime(outlive_backend, [kind], discover=None, report_errors=False) as rt:
            handles = [await rt.start(kind, f"{prefix}/{i}", "v1", _parts("v1")) for i in range(4)]
            again = await rt.start(kind, f"{prefix}/0", "v1", _parts("v1"))
            done = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 240)
            assert (await again.result()).acceptance == done[0].acceptance
        assert [d.acceptance.version for d in done] == ["v1"] * 4
        assert len(feed.receiver.applied) == 4

    async def test_a_transient_error_is_retried_and_kept_with_its_attempt(
            self, outlive_backend: Backend) -> None:
        feed = _Feed()
        kind = _kind(f"suite-{uuid.uuid4().hex[:6]}", feed, fail_first=1)
        async with Runtime(outlive_backend, [kind], discover=None, report_errors=False) as rt:
            h = await rt.start(kind, f"suite/{uuid.uuid4().hex[:8]}", "v1", _parts("v1"))
            done = await asyncio.wait_for(h.result(), 240)
        first = done.attempts[0]
        assert first.state is outlive.AttemptState.FAILED
        assert first.error is not None and first.error.type == "_Boom"
        assert len(feed.receiver.applied) == 1

    async def test_a_non_retryable_error_fails_the_work_naming_it(
            self, outlive_backend: Backend) -> None:
        kind = _kind(f"suite-{uuid.uuid4().hex[:6]}", _Feed(), fatal=True)
        async with Runtime(outlive_backend, [kind], discover=None, report_errors=False) as rt:
            h = await rt.start(kind, f"suite/{uuid.uuid4().hex[:8]}", "v1", _parts("v1"))
            with pytest.raises(outlive.WorkFailed) as info:
                await asyncio.wait_for(h.result(), 240)
            status = await h.state()
        assert info.value.details["type"] == "NonRetryable"
        assert status.status == "failed" and len(status.state.attempts) == 1
