"""A replicated deployment: the user's app served by two processes behind one address, balanced
per HTTP/2 stream as an L7 load balancer does (``RestateServer(replicas=2)``).

Pausing the process that runs an attempt (SIGSTOP) pauses everything it was doing, its lease
renewals included; the lease checks are other invocations, on the other replica, and they
replace the paused attempt there. No client is involved after the start.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from restate_support import HERE, SECTIONS, calls, finished, held, opened, until

from outlive.records import AttemptState
from outlive_restate import RestateBackend
from outlive_restate.server import RestateServer

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture(scope="module")
def server() -> Iterator[RestateServer]:
    with RestateServer(app="restate_app:app", pythonpath=(str(HERE),), replicas=2) as srv:
        yield srv


def _pids(log: Path) -> dict[str, int]:
    """``attempt:step`` -> the process that ran its model call (the last one to)."""
    path = Path(f"{log}.pids")
    lines = path.read_text().split() if path.exists() else []
    return {line.rpartition(":")[0]: int(line.rpartition(":")[2]) for line in lines}


async def test_a_paused_replica_is_replaced_through_the_other(
        server: RestateServer, backend: RestateBackend, tmp_path: Path) -> None:
    """#1 runs s2 on one replica, renewing its lease, until that process is paused. The lease's
    checks run on the other replica: they find #1 silent, cancel it, mark it unknown and send
    #2, which the balancer gives to the live replica; #2 restores s1 (its held write left
    with #1's first renewal) and finishes."""
    work = f"replicas/{uuid.uuid4().hex[:8]}"
    log, hold = held(tmp_path)
    await opened(backend, work)
    await backend.start_work(work, service="reports", handler="summarise",
                             arg={"sections": SECTIONS, "log": str(log)},
                             lease=timedelta(milliseconds=1500))
    try:
        await until("#1 to be inside s2", lambda: "1:s2" in calls(log))

        async def renewed() -> bool:    # s1's held write went with a renewal's beat
            st = await backend.load(work)
            return st is not None and len(st.journal) == 1

        await until("#1's s1 to reach the ledger", renewed)
        paused = _pids(log)["1:s2"]
        (proc,) = [p for p in server.replicas if p.pid == paused]
        proc.send_signal(signal.SIGSTOP)
        try:
            st = await until("#2 to finish", lambda: finished(backend, work), timeout=60)
        finally:
            proc.send_signal(signal.SIGCONT)
    finally:
        hold.unlink()
    assert [(a.number, a.state) for a in st.attempts] == [
        (1, AttemptState.UNKNOWN), (2, AttemptState.FINISHED)]
    assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1), ("s2", 2)]
    assert "2:s1" not in calls(log)                      # restored by input key
    assert _pids(log)["2:s2"] != paused                  # the other replica ran #2
    assert len({p.pid for p in server.replicas}) == 2
