"""What the storage tests build on: the smallest work that has a journal."""

from __future__ import annotations

import outlive
from outlive import Controller, Worker


async def one_step_work(b: outlive.Backend) -> tuple[outlive.Attempt, Worker]:
    """Work ``w``: version ``v1`` = ``{"s1": "x"}`` published, one attempt admitted and started
    (worker clock 1), and its step ``s1`` journaled with result ``{"r": "x"}``."""
    ctl = Controller(b, clock=lambda: 0)
    await ctl.open_work("w")
    await ctl.publish("w", "v1", {"s1": "x"})
    att = await ctl.admit("w")
    w = Worker(b, att, {"s1": "x"}, clock=lambda: 1)
    await w.start()
    await w.step("s1", lambda s1: {"r": s1}, s1="x")
    return att, w
