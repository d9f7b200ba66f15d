"""The user's graph as a kind of work in ``outlive.Runtime``, inside the user's own service.

LangGraph has no supervisor of its own; before, takeover needed a separate outlive supervisor
process. A runtime hosted by the user's service now runs the attempts (invocations of the
user's graph on the user's thread), takes a silent one over after its lease, and leaves an
attempt that stopped at ``interrupt()`` waiting: neither finished nor suspected, answered from
any process with ``rejoin``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from langgraph.types import Command

import outlive
from outlive import Controller
from outlive.records import AttemptState
from outlive_langgraph import LangGraphBackend, attempt_config, graph_attempt, rejoin

from .test_resume import REPORT, node_graph

SERVICE = str(Path(__file__).resolve().parent / "_service.py")


def _service(url: str, run_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, SERVICE, url, str(run_dir)], capture_output=True,
                          text=True, timeout=120)


def test_a_service_killed_mid_graph_is_taken_over_when_it_starts_again(tmp_path: Path) -> None:
    url = f"langgraph+sqlite:///{tmp_path / 'lg.db'}"
    (tmp_path / "crash-1").write_text("")
    first = _service(url, tmp_path)
    assert first.returncode == -9, first.stderr[-2000:]   # SIGKILLed inside node s2
    again = _service(url, tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    out = json.loads(again.stdout.strip().splitlines()[-1])
    assert out == {"accepted": "v1", "attempts": ["unknown", "finished"]}
    calls = [tuple(json.loads(ln)) for ln in (tmp_path / "calls.log").read_text().splitlines()]
    assert calls == [(1, "s1"), (1, "s2"), (2, "s2"), (2, "s3")], "s1 restored by #2"


async def test_an_interrupted_graph_waits_in_the_runtime_and_is_answered_elsewhere(
        tmp_path: Path) -> None:
    url = f"langgraph+sqlite:///{tmp_path / 'lg.db'}"
    calls: list[str] = []
    async with await outlive.open_backend(url) as backend:
        assert isinstance(backend, LangGraphBackend)
        graph = node_graph(backend, calls)
        lease = outlive.Lease(heartbeat_interval=100, missed_beats=2)
        kind = outlive.Kind(
            name="review", contract=outlive.Contract(name="c", version="1", assessor="t"),
            attempt=graph_attempt(lambda ctx: graph, input=lambda ctx: {"text": "costs fell"},
                                  candidate=lambda out: {"posted": out["posted"]}),
            lease=lease)
        async with outlive.Runtime(backend, kinds=[kind]) as rt:
            handle = await rt.start(kind, "w", "v1", REPORT)
            for _ in range(400):
                if (await handle.state()).status == "waiting":
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(lease.timeout * 3 / 1000)   # three leases: waiting is not silence
            st = await backend.load("w")
            assert st is not None
            assert [a.state for a in st.attempts] == [AttemptState.WAITING], \
                "neither finished nor taken over"
            # A person answers (here the same process; test_rejoin does it from another one).
            worker = await rejoin(backend, "w")
            cfg: Any = {"configurable": {"thread_id": "w"}}
            out = await graph.ainvoke(Command(resume="ok"), attempt_config(worker, cfg))
            cand = await worker.candidate({"posted": out["posted"]})
            await Controller(backend).assess("w", cand.digest, kind.contract,
                                             lambda c, v: (True, "ok"))
            await worker.finish()
            done = await handle.result(timeout=30)
        assert done.acceptance.version == "v1"
        assert [a.state for a in done.attempts] == [AttemptState.FINISHED]
        assert calls == ["summarise", "review", "review", "post"]
