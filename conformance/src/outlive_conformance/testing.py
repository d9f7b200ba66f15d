"""Small helpers for backend tests: a work opened, published and admitted in one call."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import pytest
import pytest_asyncio

from outlive import Attempt, Backend, Contract, Controller, Policy, Worker, open_backend

from .requirements import Requirements

__all__ = ["FORM", "V1", "V2", "BackendFixture", "OpenedWork", "open_work", "summarise",
           "unique_work_id"]

V1 = {"s1": "Q3 overview.", "s2": "Revenue was 4.1 million for the quarter."}
V2 = {"s1": "Q3 overview.", "s2": "Revenue was 4.7 million for the quarter."}
FORM = Contract(name="digest-form", version="1", assessor="contract-suite")


def summarise(**section: str) -> dict[str, str]:
    """A deterministic stand-in for a model call."""
    (text,) = section.values()
    return {"summary": text.split(" for ")[0]}


def unique_work_id(prefix: str = "contract") -> str:
    return f"{prefix}/{uuid.uuid4().hex[:12]}/digest"


@dataclass
class OpenedWork:
    work_id: str
    ctl: Controller
    attempt: Attempt
    worker: Worker
    clock: list[int]

    async def steps(self, version: Mapping[str, str]) -> None:
        for part, text in version.items():
            await self.worker.step(part, summarise, **{part: text})

    async def successor(self, snapshot: Mapping[str, str]) -> Worker:
        """Silence the current owner, admit the next attempt, start its worker."""
        self.clock[0] += 100
        await self.ctl.observe(self.work_id)
        att = await self.ctl.admit(self.work_id)
        w = Worker(self.ctl.backend, att, snapshot, clock=lambda: self.clock[0])
        await w.start()
        return w


async def open_work(backend: Backend, *, versions: Mapping[str, Mapping[str, str]] | None = None,
                    policy: Policy | None = None, work_id: str | None = None) -> OpenedWork:
    """Open a work, publish ``versions`` (first one current), admit #1 and start its worker."""
    clock = [0]
    work = work_id or unique_work_id()
    ctl = Controller(backend, clock=lambda: clock[0], heartbeat_interval=1, missed_beats=2)
    await ctl.open_work(work, policy)
    vs = dict(versions or {"v1": V1})
    first = next(iter(vs))
    await ctl.publish(work, first, vs[first])
    att = await ctl.admit(work)
    w = Worker(backend, att, vs[first], clock=lambda: clock[0])
    await w.start()
    return OpenedWork(work_id=work, ctl=ctl, attempt=att, worker=w, clock=clock)


class BackendFixture:
    """Base for suites: one backend per test class, opened from the subclass's ``backend_url``.

    The fixtures say their event-loop scope themselves, so the suites run the same under any
    caller's pytest configuration (``asyncio_mode`` strict or auto).
    """

    @pytest_asyncio.fixture(scope="class", loop_scope="session")
    @classmethod
    async def outlive_backend(cls, backend_url: str) -> AsyncIterator[Backend]:
        backend = await open_backend(backend_url)
        try:
            yield backend
        finally:
            await backend.close()

    @pytest_asyncio.fixture(scope="class", loop_scope="session")
    @classmethod
    async def outlive_requirements(cls, backend_url: str) -> Requirements:
        """The backend's features, from its declared ``capabilities``; override to narrow them."""
        backend = await open_backend(backend_url)
        try:
            return Requirements.of(backend.capabilities)
        finally:
            await backend.close()

    @pytest.fixture(autouse=True)
    def _outlive_skip_unmet(self, request: pytest.FixtureRequest,
                            outlive_requirements: Requirements) -> None:
        marker = request.node.get_closest_marker("outlive_requires")
        if marker is None:
            return
        missing = outlive_requirements.missing(marker.args)
        if missing:
            pytest.skip(f"backend lacks {', '.join(missing)} (from its capabilities)")
