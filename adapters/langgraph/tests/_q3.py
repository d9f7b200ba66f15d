"""A tiny stand-in for the q3-report situation, shared by the adapter's own tests."""

from __future__ import annotations

from typing import Any

from outlive import Backend, Controller, Worker

V1 = {"s1": "Intro: a steady quarter.", "s2": "Revenue was 4.1 million.",
      "s3": "Costs fell by 3 percent.", "s4": "Outlook: cautious."}
V2 = {**V1, "s2": "Revenue was 4.7 million."}


class Model:
    """Counts calls; a result names the attempt that computed it (the seed's stipulation)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []

    def summarise(self, attempt: int, name: str, text: str) -> dict[str, Any]:
        self.calls.append((attempt, name))
        return {"summary": text[:24], "by": attempt}


async def first_attempt(b: Backend, *, work: str = "q3", inputs: dict[str, str] = V1,
                        start: bool = True, **worker: Any) -> tuple[Controller, Worker]:
    """``work`` opened and published as ``v1`` = ``inputs`` at t0, attempt #1 admitted (and
    started): the controller and #1's Worker (``worker``: its ``persist``/``clock``)."""
    ctl = Controller(b, clock=lambda: 0)
    await ctl.open_work(work)
    await ctl.publish(work, "v1", inputs)
    w = Worker(b, await ctl.admit(work), inputs, **worker)
    if start:
        await w.start()
    return ctl, w
