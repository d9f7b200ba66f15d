"""A third-party outlive backend in one file: each work's ledger is a JSON file in a directory.

It is the worked example of docs/backend-authors.md: the backend only persists "apply this command
to work W's ledger" atomically and durably; the core's pure ledger decides everything else.
Registered by the entry point ``outlive.backends: jsonfile`` in this folder's pyproject.toml, so
``open_backend("jsonfile:///some/dir")`` finds it once the distribution is installed.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
from pathlib import Path
from urllib.parse import urlsplit

from outlive import Backend, codec
from outlive.errors import ConfigError
from outlive.ledger import Command, OpenWork, Outcome, apply
from outlive.records import WorkState

__all__ = ["JsonFileBackend"]


class JsonFileBackend(Backend):
    """One file per work; a lock file makes read-apply-replace atomic across processes."""

    capabilities = frozenset({"atomic-commands", "durable", "multi-process"})

    def __init__(self, url: str) -> None:
        super().__init__(url)
        parts = urlsplit(url)
        if parts.query or not parts.path:
            raise ConfigError(f"jsonfile:// takes a directory and no options: {url!r}", url=url)
        self.root = Path(parts.path)
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, work_id: str) -> Path:
        return self.root / (hashlib.sha256(work_id.encode()).hexdigest()[:32] + ".json")

    def _read(self, work_id: str) -> WorkState | None:
        path = self._path(work_id)
        return codec.loads(path.read_bytes()) if path.exists() else None

    def _apply(self, work_id: str, command: Command) -> Outcome:
        with open(self.root / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)           # one writer across processes
            state = self._read(work_id)
            new, outcome = apply(state, command, work_id=work_id)   # may raise: nothing written
            if new is not state or isinstance(command, OpenWork):
                tmp = self._path(work_id).with_suffix(".tmp")
                with open(tmp, "w", encoding="utf-8") as f:
                    f.write(codec.dumps(new))
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self._path(work_id))   # the commit point: all or nothing
            return outcome

    async def execute(self, work_id: str, command: Command) -> Outcome:
        async with self._lock:
            return await asyncio.to_thread(self._apply, work_id, command)

    async def load(self, work_id: str) -> WorkState | None:
        return await asyncio.to_thread(self._read, work_id)
