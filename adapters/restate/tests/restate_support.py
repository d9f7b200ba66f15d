"""What the Restate tests that watch a work from outside share: the sections, waiting, reading
the model-call log, and "has an attempt finished"."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from outlive import Controller
from outlive.records import AttemptState, WorkState
from outlive_restate import RestateBackend

HERE = Path(__file__).parent
SECTIONS = {"s1": "Intro: a steady quarter.", "s2": "Revenue was 4.7 million."}


async def until(what: str, probe: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Poll ``probe`` (sync or async) until it gives something true; fail after ``timeout``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        got = probe()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return got
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def calls(log: Path) -> list[str]:
    """The model calls the app logged (``attempt:step``, ``attempt:step:returned``)."""
    return log.read_text().split() if log.exists() else []


async def finished(backend: RestateBackend, work: str) -> WorkState | None:
    """The work's state once one of its attempts finished, else None."""
    st = await backend.load(work)
    if st is not None and any(a.state is AttemptState.FINISHED for a in st.attempts):
        return st
    return None


def held(tmp_path: Path, attempt: int = 1, step: str = "s2") -> tuple[Path, Path]:
    """The model-call log, and the file that holds ``attempt``'s ``step`` while it exists."""
    log = tmp_path / "calls"
    hold = Path(f"{log}.hold-{attempt}-{step}")
    hold.touch()
    return log, hold


async def opened(backend: RestateBackend, work: str) -> Controller:
    """A controller of ``work``, opened with :data:`SECTIONS` published as v1."""
    ctl = Controller(backend)
    await ctl.open_work(work)
    await ctl.publish(work, "v1", SECTIONS)
    return ctl
