"""The owner shape served by its own deployment process, killed mid-step: Restate retries the
attempt's invocation on the restarted process, the journaled steps are restored from Restate's
journal (not called again), and the ledger ends whole."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import outlive
from outlive import Controller
from outlive_restate import RestateBackend
from outlive_restate.server import RestateServer

pytestmark = pytest.mark.asyncio(loop_scope="session")

V1 = {"s1": "Intro: a steady quarter.", "s2": "Revenue was 4.1 million.",
      "s3": "Costs fell by 3 percent.", "s4": "Outlook: cautious."}


@pytest.fixture(scope="module")
def owner_server() -> Iterator[RestateServer]:
    """A server whose deployment imports ``owner_app`` (this directory on its PYTHONPATH)."""
    with RestateServer(imports=("owner_app",), pythonpath=(str(Path(__file__).parent),)) as srv:
        yield srv


@pytest.fixture(scope="module")
async def backend(owner_server: RestateServer) -> AsyncIterator[RestateBackend]:
    async with await outlive.open_backend(owner_server.url) as b:
        assert isinstance(b, RestateBackend)
        yield b


async def test_owner_deployment_killed_mid_step_resumes_from_restates_journal(
        owner_server: RestateServer, backend: RestateBackend, tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    hold = Path(f"{log}.hold-s3")
    hold.touch()
    w = f"owned-faults/{uuid.uuid4().hex[:8]}"
    ctl = Controller(backend, clock=lambda: 0)
    await ctl.open_work(w)
    await ctl.publish(w, "v1", V1)
    a = await ctl.admit(w)
    run = asyncio.ensure_future(backend.run_owner(w, "faulty_summary", a, {"log": str(log)},
                                                  snapshot=V1, at=1))
    for _ in range(600):
        if log.exists() and "1:s3" in log.read_text():
            break
        await asyncio.sleep(0.05)
    assert log.read_text().split() == ["1:s1", "1:s2", "1:s3"], log.read_text()
    st = await backend.load(w)
    assert st is not None and [e.step for e in st.journal] == ["s1", "s2"]

    await asyncio.to_thread(owner_server.restart_deployment, hard=True)   # SIGKILL mid-s3
    hold.unlink()
    out = await asyncio.wait_for(run, 120)
    # s1 and s2 were journaled by Restate: the retried invocation replays them, no new call;
    # s3 was in flight when the process died, so its body runs again (at least once, as on
    # every engine: no result was recorded); s4 once
    assert log.read_text().split() == ["1:s1", "1:s2", "1:s3", "1:s3", "1:s4"]
    st = await backend.load(w)
    assert st is not None
    assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1), ("s2", 1), ("s3", 1),
                                                        ("s4", 1)]
    assert [c.digest for c in st.candidates] == [out["digest"]]
    assert st.stale_writes_applied == 0 and st.epoch == a.token
