"""The tutorial's ``llm``, replaced by a deterministic stand-in so the sample runs offline.

The tutorial builds ``llm = ChatAnthropic(model=...)``; its nodes only call ``llm.invoke(prompt)``
and read ``.content``. This stand-in answers each prompt from a fixed table and counts the calls
(a model call is what a durable step must not repeat). Both ``original.py`` and ``ported.py``
import it, so the port's diff shows only what porting changes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: Where each call's prompt is logged (its first words), one line a call: tests count calls.
LOG = Path(os.environ["STAND_IN_LOG"]) if os.environ.get("STAND_IN_LOG") else None
#: Prompts that fail once each (comma-separated starts): a worker that dies mid-call.
FAIL_ONCE = {p for p in os.environ.get("STAND_IN_FAIL_ONCE", "").split(",") if p}


@dataclass(frozen=True)
class Message:
    content: str


class StandInModel:
    def invoke(self, prompt: str) -> Message:
        if LOG is not None:
            with LOG.open("a") as f:
                f.write(prompt.split(":")[0] + "\n")
        for start in list(FAIL_ONCE):
            if prompt.startswith(start):
                FAIL_ONCE.discard(start)
                raise RuntimeError("the worker died mid-call")
        if prompt.startswith("Write a short joke about "):
            topic = prompt.removeprefix("Write a short joke about ")
            return Message(f"The {topic} sat on the keyboard to keep an eye on the mouse.")
        if prompt.startswith("Make this joke funnier by adding wordplay: "):
            return Message(prompt.split(": ", 1)[1] + " It was purr-fectly placed.")
        if prompt.startswith("Add a surprising twist to this joke: "):
            return Message(prompt.split(": ", 1)[1] + " Then the mouse clicked back.")
        return Message(prompt)


llm = StandInModel()
