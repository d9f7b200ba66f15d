"""``memory://``: the ledger in a dict. For tests and the reference outcome of the conformance run."""

from __future__ import annotations

import time

from ._clone import clone
from .backend import Backend, url_options
from .ledger import Command, Outcome, apply, changed, check_work_id, checked
from .records import WorkState
from .sqlstore import CachedWork, advance


class MemoryBackend(Backend):
    """Atomic because apply-then-store never awaits; durable only as long as the process.

    Each work is kept as the SQL stores cache it (:class:`~outlive.sqlstore.CachedWork`): the
    journal apart, indexed by result id, and each command applied to a view holding only the
    journal entries it reads, so a step write costs the same at any journal length.
    """

    capabilities = frozenset({"atomic-commands"})

    def __init__(self, url: str = "memory://") -> None:
        super().__init__(url)
        url_options(url, ())
        self._cached: dict[str, CachedWork] = {}

    async def execute(self, work_id: str, command: Command) -> Outcome:
        # Read, apply and store with no await in between: no other command of this event loop
        # can run in the middle, so the write is atomic without a lock.
        check_work_id(work_id)
        prepared = checked(command)
        work = self._cached.get(work_id)
        view = work.view(prepared) if work is not None else None
        new, outcome = apply(view, prepared, work_id=work_id, now=int(time.time() * 1000))
        if changed(view, new):
            moved = advance(work, view, new)
            assert moved is not None, "the ledger only appends to the journal"
            self._cached[work_id] = moved
        return outcome

    def peek(self, work_id: str) -> WorkState | None:
        """The work without its journal, not copied: for checks that read only the attempts and
        the epoch (an owner check); never change it."""
        work = self._cached.get(work_id)
        return work.state if work is not None else None

    async def load(self, work_id: str) -> WorkState | None:
        """A copy: nothing a caller does to it reaches the stored state."""
        check_work_id(work_id)
        work = self._cached.get(work_id)
        return clone(work.whole()) if work is not None else None

    async def works(self) -> list[str]:
        return sorted(self._cached)
