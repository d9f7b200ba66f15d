"""An owner served by a separate deployment process (``--import owner_app``), for the fault tests.

Each body call appends ``attempt:step`` to the file named in the argument, so the test can count
model calls across process deaths; a body waits while ``<file>.hold-<step>`` exists.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from outlive import Worker
from outlive_restate.owned import owner


@owner("faulty_summary")
async def faulty_summary(worker: Worker, arg: dict[str, Any]) -> dict[str, Any]:
    log = str(arg["log"])
    snap = worker.snapshot or {}

    async def model(**kw: str) -> dict[str, str]:
        (name, text), = kw.items()
        with open(log, "a") as f:
            f.write(f"{worker.attempt.number}:{name}\n")
        while os.path.exists(f"{log}.hold-{name}"):
            await asyncio.sleep(0.05)
        return {"summary": text[:12]}

    for name, text in snap.items():
        await worker.step(name, model, **{name: text})
    cand = await worker.candidate({"text": " / ".join(sorted(snap))})
    return {"digest": cand.digest}
