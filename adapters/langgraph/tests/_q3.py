"""A tiny stand-in for the q3-report situation, shared by the adapter's own tests."""

from __future__ import annotations

from typing import Any

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
