"""Workflows for the failure model, attempt isolation and typed arguments (``test_engine_kinds``).

Activities count their calls in ``CALLS`` (the tests run the worker in their own process).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

    import outlive
    from outlive_temporal import Attempt, Work

CALLS: dict[str, int] = {}


def _count(key: str) -> int:
    CALLS[key] = CALLS.get(key, 0) + 1
    return CALLS[key]


@activity.defn
async def sleepy(text: str) -> str:
    """Longer than the lease, and never heartbeats: the user's code does not have to."""
    _count(text)
    await asyncio.sleep(3.0)
    return text.upper()


@activity.defn
def sleepy_sync(text: str) -> str:
    """The same as a sync activity (a thread of the worker's executor)."""
    _count(text)
    time.sleep(3.0)
    return text.upper()


@activity.defn
async def flaky(text: str) -> str:
    """``503:<n>:<text>`` fails with a transient error on its first ``n`` calls (``shape:...``
    with a ``TypeError`` raised inside the activity, which is transient too);
    ``400:<text>`` fails with a non-retryable ``ApplicationError`` every time, ``fatal:<text>``
    with ``outlive.NonRetryable``."""
    n = _count(text)
    if text.startswith(("503:", "shape:")):
        kind, times, _rest = text.split(":", 2)
        if n <= int(times):
            if kind == "shape":   # a TypeError from inside: an answer of an unexpected shape
                answer: Any = None
                return str(len(answer))
            raise RuntimeError(f"503 Service Unavailable (call {n})")
    if text.startswith("400:"):
        raise ApplicationError("400 Bad Request: the prompt is too long", type="BadRequest",
                               non_retryable=True)
    if text.startswith("fatal:"):
        raise outlive.NonRetryable("the model refused the prompt")
    return text.rsplit(":", 1)[-1].upper()


@activity.defn
async def draft(text: str) -> str:
    """A model call: ``slow:<seconds>:<text>``."""
    _count(text)
    if text.startswith("slow:"):
        await asyncio.sleep(float(text.split(":")[1]))
    return text.rsplit(":", 1)[-1].upper()


@workflow.defn
class LongStepWork(Work):
    """One step three times as long as the lease (1 s); ``sync`` picks the sync activity."""

    outlive_heartbeat = timedelta(seconds=1)

    @workflow.run
    async def run(self, report: dict[str, str]) -> dict[str, Any]:
        return await self.drive(self.attempt, report)

    async def attempt(self, a: Attempt, report: dict[str, str]) -> dict[str, Any]:
        act = sleepy_sync if report.get("sync") == "yes" else sleepy
        text = await a.step("s1", act, report["s1"])
        await a.accept({"digest": text})
        return {"attempt": a.number, "text": text}


@workflow.defn
class FlakyWork(Work):
    """Steps that may fail; retries are quick so a test takes a second, not a minute."""

    outlive_heartbeat = timedelta(seconds=2)
    outlive_retry = RetryPolicy(initial_interval=timedelta(milliseconds=50),
                                maximum_interval=timedelta(milliseconds=100), maximum_attempts=3)

    @workflow.run
    async def run(self, report: dict[str, str]) -> dict[str, Any]:
        return await self.drive(self.attempt, report)

    async def attempt(self, a: Attempt, report: dict[str, str]) -> dict[str, Any]:
        out = [await a.step(k, flaky, report[k]) for k in sorted(report)]
        await a.accept({"digest": " ".join(out)})
        return {"attempt": a.number, "text": " ".join(out)}


@workflow.defn
class ApprovedWork(Work):
    """A draft, an editor's approval by update, a final step: the approval belongs to the
    attempt that asked for it."""

    outlive_heartbeat = timedelta(seconds=2)

    def __init__(self) -> None:
        self.approved_by: str | None = None

    @workflow.update
    async def approve(self, editor: str) -> str:
        self.approved_by = editor
        return editor

    @workflow.run
    async def run(self, report: dict[str, str]) -> dict[str, Any]:
        return await self.drive(self.attempt, report)

    async def attempt(self, a: Attempt, report: dict[str, str]) -> dict[str, Any]:
        first = await a.step("s1", draft, report["s1"])
        async with a.waiting("approval by the editor"):
            await workflow.wait_condition(lambda: self.approved_by is not None)
        second = await a.step("s2", draft, report["s2"])
        await a.accept({"digest": f"{first} {second}", "approved_by": self.approved_by})
        return {"attempt": a.number, "version": a.version, "approved_by": self.approved_by}


@dataclass
class Section:
    heading: str
    text: str


@dataclass
class Report:
    title: str
    intro: Section
    body: Section


@dataclass
class Summary:
    heading: str
    line: str


@dataclass
class Digest:
    title: str
    lines: list[Summary]
    attempt: int


@dataclass
class HeadlineInput:
    report: Report
    intro: Summary


@activity.defn
async def headline(req: HeadlineInput) -> str:
    _count(f"headline:{req.report.body.text}")
    return f"{req.report.title}: {req.intro.line}"


@activity.defn
async def summarise(section: Section) -> Summary:
    _count(section.text)
    if section.text.startswith("slow:"):
        await asyncio.sleep(float(section.text.split(":")[1]))
    return Summary(heading=section.heading, line=section.text.rsplit(":", 1)[-1].upper())


@workflow.defn
class TypedWork(Work):
    """A workflow as a Temporal user writes it: ``run`` takes a dataclass and returns one; the
    activities take and return dataclasses. No ``reads=``, no ``asdict``."""

    outlive_heartbeat = timedelta(seconds=2)

    @workflow.run
    async def run(self, report: Report) -> Digest:
        return await self.drive(self.attempt, report)

    async def attempt(self, a: Attempt, report: Report) -> Digest:
        assert isinstance(report, Report) and isinstance(report.intro, Section)
        lines = [await a.step("intro", summarise, report.intro),
                 await a.step("body", summarise, report.body)]
        assert all(isinstance(s, Summary) for s in lines)
        # the whole input and an earlier step's result, in one dataclass: declared field by
        # field (every part, and a derived value), with no reads= or external=
        title = await a.step("headline", headline, HeadlineInput(report=report, intro=lines[0]))
        digest = Digest(title=title, lines=lines, attempt=a.number)
        await a.accept(digest)
        return digest


class Question(BaseModel):
    topic: str
    detail: str


class Answer(BaseModel):
    topic: str
    text: str
    attempt: int = 0


@activity.defn
async def answer(question: Question) -> Answer:
    _count(f"answer:{question.detail}")
    return Answer(topic=question.topic, text=question.detail.upper())


@workflow.defn
class ModelWork(Work):
    """``run`` takes a pydantic model and returns one (with ``pydantic_data_converter``)."""

    outlive_heartbeat = timedelta(seconds=2)

    @workflow.run
    async def run(self, question: Question) -> Answer:
        return await self.drive(self.attempt, question)

    async def attempt(self, a: Attempt, question: Question) -> Answer:
        assert isinstance(question, Question)
        out = await a.step("answer", answer, question)
        assert isinstance(out, Answer)
        out.attempt = a.number
        await a.accept(out)
        return out


WORKFLOWS = [LongStepWork, FlakyWork, ApprovedWork, TypedWork, ModelWork]
ACTIVITIES = [sleepy, sleepy_sync, flaky, draft, summarise, headline, answer]
