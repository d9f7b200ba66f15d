"""Worker processes of the user's fleet for the in-engine tests: ``n`` processes running
``temporal_engine_app`` on one fresh task queue, each killed by its own PID at the end."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from outlive_temporal.testing import WorkerProcess

HERE = str(Path(__file__).parent)


@contextmanager
def worker_fleet(address: str, prefix: str, n: int, directory: Path) \
        -> Iterator[tuple[str, list[WorkerProcess]]]:
    """``(queue, workers)``; the app writes its markers and the workers their logs in
    ``directory``."""
    queue = f"{prefix}-{uuid.uuid4().hex[:8]}"
    env = {"OUTLIVE_TEST_DIR": str(directory)}
    workers = [WorkerProcess(address, queue, "temporal_engine_app", pythonpath=[HERE], env=env,
                             log_path=str(directory / f"worker{i}.log"))
               for i in range(n)]
    try:
        for w in workers:
            w.spawn()
        for w in workers:
            w.wait_ready()
        yield queue, workers
    finally:
        for w in workers:
            w.kill()
