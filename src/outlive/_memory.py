"""``memory://``: the ledger in a dict. For tests and the reference outcome of the conformance run."""

from __future__ import annotations

import asyncio
import time

from ._clone import clone
from .backend import Backend, url_options
from .ledger import Command, Outcome, apply, changed, check_work_id
from .records import WorkState


class MemoryBackend(Backend):
    """Atomic because one lock guards apply-then-store; durable only as long as the process."""

    capabilities = frozenset({"atomic-commands"})

    def __init__(self, url: str = "memory://") -> None:
        super().__init__(url)
        url_options(url, ())
        self._works: dict[str, WorkState] = {}
        self._lock = asyncio.Lock()

    async def execute(self, work_id: str, command: Command) -> Outcome:
        check_work_id(work_id)
        async with self._lock:
            state = self._works.get(work_id)
            new, outcome = apply(state, command, work_id=work_id, now=int(time.time() * 1000))
            if changed(state, new):
                self._works[work_id] = new
            return outcome

    async def load(self, work_id: str) -> WorkState | None:
        """A copy: nothing a caller does to it reaches the stored state."""
        check_work_id(work_id)
        state = self._works.get(work_id)
        return clone(state) if state is not None else None

    async def works(self) -> list[str]:
        return sorted(self._works)
