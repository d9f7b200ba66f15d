"""A worker process for the kill tests (run as a script: ``python _child.py MODE DB ARG``)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any, Literal

import outlive
from outlive import Contract, Controller, Worker
from outlive import ledger as L

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run as a script: its helpers
from _q3 import V1, first_attempt


def _url(db: str) -> str:
    """A database file, or a backend URL as it is (``langgraph+postgres://...``)."""
    return db if db.startswith("langgraph+") else f"langgraph+sqlite:///{db}"


def say(*words: str) -> None:
    print(*words, flush=True)


async def first(db: str, arg: str) -> None:
    """Attempt #1. ``arg`` = ``kill-after:sN`` (SIGKILL itself the instant step N is reported
    done) or ``hold:sN`` (block inside step N's body until the parent kills the process)."""
    mode, at = arg.split(":")
    b = await outlive.open_backend(_url(db))
    _ctl, w = await first_attempt(b, clock=lambda: 1)
    for k, text in V1.items():
        async def body(text: str, k: str = k) -> dict[str, Any]:
            if mode == "hold" and k == at:
                say("in", k)
                await asyncio.sleep(120)
            return {"summary": text, "by": 1}

        await w.step(k, body, text=text)
        say("done", k)
        if mode == "kill-after" and k == at:
            os.kill(os.getpid(), signal.SIGKILL)


async def program(db: str, at: str, durability: Literal["sync", "async"] = "sync") -> None:
    """Attempt #1 as an ``@entrypoint`` of ``outlive_task`` steps under ``durability``; SIGKILL
    the instant the ``outlive_task`` call for step ``at`` returns inside the entrypoint (under
    "async" its journal write maybe still in flight). Under "async", before the step after the
    first one, wait for a line on stdin (the parent holds the work's row meanwhile)."""
    from langgraph.func import entrypoint

    from outlive_langgraph import LangGraphBackend, outlive_task, run

    b = await outlive.open_backend(_url(db))
    assert isinstance(b, LangGraphBackend)
    _ctl, w = await first_attempt(b, clock=lambda: 1)

    section_of = {text: k for k, text in V1.items()}

    # Declares the same input (``text``) under the same step names as ``second``'s Worker.step.
    @outlive_task(step=lambda text: section_of[text])
    async def summarise(text: str) -> dict[str, Any]:
        return {"summary": text, "by": 1}

    @entrypoint(checkpointer=b.checkpointer)
    async def digest(report: dict[str, str]) -> None:
        for i, (k, text) in enumerate(report.items()):
            if i == 1 and durability == "async":
                await asyncio.to_thread(sys.stdin.readline)
            await summarise(text=text)
            say("done", k)
            if k == at:
                os.kill(os.getpid(), signal.SIGKILL)

    await run(digest, V1, worker=w, durability=durability)


async def second(db: str) -> None:
    """A new process: suspect #1, admit #2, finish from the records, report what it did."""
    b = await outlive.open_backend(_url(db))
    ctl = Controller(b, clock=lambda: 5)
    st = await ctl.state("q3")
    await b.execute("q3", Controller(b).stamp(L.MarkUnknown(attempt=1, at=5)))
    w = Worker(b, await ctl.admit("q3"), V1, clock=lambda: 6)
    await w.start()
    calls: list[str] = []
    for k, text in V1.items():
        def body(text: str, k: str = k) -> dict[str, Any]:
            calls.append(k)
            return {"summary": text, "by": 2}

        await w.step(k, body, text=text)
    cand = await w.candidate(await w.assemble({"revenue": w.result("s2")["summary"]}))
    acc = await ctl.assess("q3", cand.digest, Contract(name="form", version="1", assessor="t"),
                           lambda c, v: (True, "ok"))
    await w.finish()
    end = await ctl.state("q3")
    say(json.dumps({
        "journal_before": [e.step for e in st.journal],
        "calls": calls,
        "restored": sorted(k for k, s in w.steps.items() if s.restored),
        "accepted": acc.version,
        "stale": end.stale_writes_applied,
        "epoch": end.epoch,
    }))
    await b.close()


if __name__ == "__main__":
    mode, db = sys.argv[1], sys.argv[2]
    if mode == "first":
        asyncio.run(first(db, sys.argv[3]))
    elif mode == "program":
        asyncio.run(program(db, sys.argv[3]))
    elif mode == "program-async":
        asyncio.run(program(db, sys.argv[3], "async"))
    else:
        asyncio.run(second(db))
