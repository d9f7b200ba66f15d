"""A person answers an ``interrupt()`` from any process: the attempt carries on there.

Before, the attempt's secret lived only in the memory of the process that ran the graph to its
``interrupt()``, and the candidate knew only the steps that process's ``Worker`` ran: a
``Command(resume=...)`` from another process (the usual shape of a human-in-the-loop app: a web
request answers hours later) could not write. And the direct ``graph.ainvoke(x,
attempt_config(...))`` path never recorded ``waiting`` at all, only ``run``/``astream`` did.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command

import outlive
from outlive.errors import AttemptClaimed, AttemptEnded
from outlive.records import AttemptState, EffectState
from outlive_langgraph import LangGraphBackend, attempt_config, rejoin
from outlive_langgraph.testing import PostgresServer

from . import _hitl
from .test_resume import _worker, node_graph

HITL = str(Path(__file__).resolve().parent / "_hitl.py")


def _proc(*args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, HITL, *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


async def _two_processes(url: str, run_dir: Path) -> None:
    a = _proc("ask", url, str(run_dir))
    assert a == {"interrupted": True, "state": "waiting",
                 "waiting_for": "interrupt: {'summary': 'REVENUE WAS 4.7 MILLION'}"}
    b = _proc("answer", url, str(run_dir), "yes")
    assert b["posted"] == "REVENUE WAS 4.7 MILLION (yes)"
    assert b["parts"] == ["summarise", "review", "post"], \
        "the candidate names the step process A ran, not only process B's"
    assert b["accepted"] == "v1"
    assert (run_dir / "calls.log").read_text().split() == ["summarise", "post"], \
        "the model call of process A is not made again"
    async with await outlive.open_backend(url) as backend:
        st = await backend.load(_hitl.WORK)
    assert st is not None
    assert [(a.number, a.state) for a in st.attempts] == [(1, AttemptState.FINISHED)]
    assert [acc.version for acc in st.acceptances] == ["v1"]
    assert [e.state for e in st.effects] == [EffectState.CONFIRMED], "one announcement"
    assert [(e.step, e.attempt) for e in st.journal] == [
        ("summarise", 1), ("review", 1), ("post", 1)]
    feed = sqlite3.connect(run_dir / "feed.db")
    assert feed.execute("SELECT text FROM posts").fetchall() == [
        ("REVENUE WAS 4.7 MILLION (yes)",)]
    feed.close()


async def test_a_person_answers_from_another_process_on_sqlite(tmp_path: Path) -> None:
    await _two_processes(f"langgraph+sqlite:///{tmp_path / 'lg.db'}", tmp_path)


async def test_a_person_answers_from_another_process_on_postgres(
        tmp_path: Path, pg_server: PostgresServer) -> None:
    await _two_processes(pg_server.create_database(f"h_{uuid.uuid4().hex[:8]}"), tmp_path)


async def test_the_direct_ainvoke_path_records_waiting_and_resuming(
        backend: outlive.Backend) -> None:
    """``graph.ainvoke(x, attempt_config(worker, config))``, as the docs show it, without
    ``outlive_langgraph.run``: the saver records the wait and its end as LangGraph saves them."""
    assert isinstance(backend, LangGraphBackend)
    calls: list[str] = []
    graph = node_graph(backend, calls)
    w = await _worker(backend)
    cfg = attempt_config(w, {"configurable": {"thread_id": "report-9"}})
    first = await graph.ainvoke({"text": "costs fell"}, cfg)
    assert "__interrupt__" in first
    st = await backend.load("w")
    assert st is not None and st.attempts[0].state is AttemptState.WAITING
    assert st.attempts[0].waiting_for == "interrupt: {'summary': 'COSTS FELL'}"
    out = await graph.ainvoke(Command(resume="ok"), cfg)
    assert out["posted"] == "COSTS FELL (ok)"
    st = await backend.load("w")
    assert st is not None and st.attempts[0].state is AttemptState.RUNNING, "resumed"


async def test_one_wait_is_answered_once(backend: outlive.Backend) -> None:
    """Two answers to one wait (a double click, two replicas): the second rejoin is refused,
    and an attempt that is not waiting cannot be rejoined."""
    assert isinstance(backend, LangGraphBackend)
    graph = node_graph(backend, [])
    w = await _worker(backend)
    cfg = {"configurable": {"thread_id": "report-10"}}
    await graph.ainvoke({"text": "costs fell"}, attempt_config(w, cfg))  # type: ignore[arg-type]
    again = await rejoin(backend, "w")
    assert again.attempt.secret == w.attempt.secret and again.steps.keys() == {"summarise"}
    with pytest.raises(AttemptClaimed):
        await rejoin(backend, "w")
    out = await graph.ainvoke(Command(resume="ok"), attempt_config(again, cfg))  # type: ignore[arg-type]
    assert out["posted"] == "COSTS FELL (ok)"
    await again.finish()
    with pytest.raises(AttemptEnded):
        await rejoin(backend, "w")
