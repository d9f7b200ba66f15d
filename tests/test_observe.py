"""What a person sees while work runs: a log record per ledger write and rejection, and spans.

The article's main run (the demo's story) on memory://, watched through stdlib logging and through
OpenTelemetry's in-memory exporter. The trace shown in docs/observability.md is this run's.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import outlive
from outlive._demo import main_run

DOC = Path(__file__).resolve().parent.parent / "docs" / "observability.md"
_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


async def _main_run() -> None:
    async with await outlive.open_backend("memory://") as backend:
        result = await main_run(backend)
    assert result.clean


async def test_every_record_write_and_rejection_is_logged_with_its_fields(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="outlive.ledger"):
        await _main_run()
    records = [r for r in caplog.records if r.name == "outlive.ledger"]
    fields = [r.outlive for r in records]  # type: ignore[attr-defined]
    assert all(f["work_id"] == "digest/q3-report" for f in fields)
    written = {f["command"] for f in fields if "outcome" in f}
    assert written >= {"OpenWork", "PublishInput", "Admit", "Heartbeat", "MarkUnknown",
                       "RecordSteps", "SubmitCandidate", "Accept", "RecordIntent",
                       "ConfirmEffect", "Finish"}
    refused = [(r.levelno, r.outlive) for r in records  # type: ignore[attr-defined]
               if "rejected" in r.outlive]  # type: ignore[attr-defined]
    assert refused == [(logging.WARNING, {
        "work_id": "digest/q3-report", "command": "RecordSteps", "attempt": 1, "token": 41,
        "step": "s3", "rejected": "StaleOwner",
        "error": "attempt #1 holds token 41, but the epoch is 42"})]
    steps = [(f["attempt"], f["step"]) for f in fields
             if f["command"] == "RecordSteps" and "outcome" in f]
    assert steps == [(1, "s1"), (1, "s2"), (2, "s2"), (2, "s3"), (2, "s4")]
    admits = [(f["attempt"], f["token"]) for f in fields if f["command"] == "Admit"]
    assert admits == [(1, 41), (2, 42), (3, 43)]


def test_a_program_that_configured_no_logging_sees_no_log_lines() -> None:
    """The main run refuses a stale write (a WARNING); a library leaves its logs to the
    application, so a program that never configured logging must not get it on stderr."""
    code = ("import asyncio, outlive\n"
            "from outlive._demo import main_run\n"
            "async def go():\n"
            "    async with await outlive.open_backend('memory://') as b:\n"
            "        assert (await main_run(b)).clean\n"
            "asyncio.run(go())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "StaleOwner" not in done.stderr and done.stderr.strip() == "", done.stderr


def render(finished: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> str:
    """One line per span (start order): name, the attributes that tell the story, the status,
    and the records written or refused inside it."""
    keep = ("attempt", "token", "step", "restored", "version", "digest", "contract", "op_key",
            "effect_id", "duplicate")
    lines = []
    for s in sorted(finished, key=lambda s: s.start_time or 0):
        attrs: dict[str, Any] = dict(s.attributes or {})
        shown = " ".join(f"{k}={attrs[f'outlive.{k}']}" for k in keep if f"outlive.{k}" in attrs)
        status = "" if s.status.is_ok or s.status.status_code.name == "UNSET" else \
            f"  [{s.status.status_code.name}]"
        events = [f"{e.name.removeprefix('outlive.')} {(e.attributes or {}).get('outlive.command')}"
                  + (f" {(e.attributes or {}).get('outlive.rejected')}"
                     if e.name == "outlive.rejected" else "")
                  for e in s.events if e.name.startswith("outlive.")]
        lines.append(f"{s.name:<18} {shown}{status}"
                     + (f"\n{'':<18}   {'; '.join(events)}" if events else ""))
    text = "\n".join(lines)
    return re.sub(r"(digest=[0-9a-f]{8})[0-9a-f]+", r"\1", text)


async def test_spans_for_admit_step_candidate_acceptance_and_effect(
        spans: InMemorySpanExporter) -> None:
    await _main_run()
    finished = spans.get_finished_spans()
    names = [s.name for s in finished]
    assert names.count("outlive.admit") == 3 and names.count("outlive.candidate") == 1
    assert names.count("outlive.acceptance") == 1 and names.count("outlive.effect") == 2
    steps = [(s.attributes or {}) for s in finished if s.name == "outlive.step"]
    restored = sorted((a["outlive.attempt"], a["outlive.step"]) for a in steps
                      if a.get("outlive.restored"))
    assert restored == [(2, "s1"), (3, "s1"), (3, "s2"), (3, "s3"), (3, "s4")]
    late = [s for s in finished if s.name == "outlive.step" and not s.status.is_ok]
    assert len(late) == 1 and (late[0].attributes or {})["outlive.attempt"] == 1
    assert [e.name for e in late[0].events if e.name.startswith("outlive.")] == ["outlive.rejected"]
    acc = next(s for s in finished if s.name == "outlive.acceptance")
    assert (acc.attributes or {})["outlive.version"] == "v2"
    # the docs page shows exactly this trace
    block = re.search(r"```text\n(.*?)```", DOC.read_text(), re.S)
    assert block is not None
    assert block.group(1).strip() == render(finished), render(finished)
