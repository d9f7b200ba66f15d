"""Paused vs crashed in the conformance scenario, read back from the LangGraph database.

In the seed's main run attempt #1 is paused in section 3 and wakes after #2 took over. Its s3
body then completes as a LangGraph ``@task``: LangGraph saves that result on #1's thread (nothing in
LangGraph knows #1 was replaced). Only outlive's fenced journal write is refused. A crashed #1
never wakes, so LangGraph has no s3 result from it at all.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import outlive
from outlive_conformance.harness import run_scenario
from outlive_conformance.scenario import q3_report
from outlive_langgraph import step_thread_id


def _count(db: Path, thread: str, channel: str) -> int:
    conn = sqlite3.connect(db)
    try:
        row = conn.execute("SELECT count(*) FROM writes WHERE thread_id = ? AND channel = ?",
                           (thread, channel)).fetchone()
        return int(row[0])
    finally:
        conn.close()


@pytest.mark.parametrize("silent", ["paused", "crashed"])
async def test_langgraph_keeps_the_late_step_outlive_refuses_it(tmp_path: Path,
                                                                 silent: str) -> None:
    db = tmp_path / "lg.db"
    sc = q3_report()
    b = await outlive.open_backend(f"langgraph+sqlite:///{db}")
    try:
        got = await run_scenario(b, sc, sc.defaults.set(silent=silent), work_id="q3")
        st = await b.load("q3")
    finally:
        await b.close()
    assert st is not None and got.clean
    assert got.stale_writes_applied == 0
    mine = [e.step for e in st.journal if e.attempt == 1]
    assert mine == ["s1", "s2"], "outlive's journal holds #1's s1 and s2 only"
    thread = step_thread_id("q3", 1)
    task_results = _count(db, thread, "__return__")   # one per @task body that returned
    invocations = _count(db, thread, "__end__")       # one per entrypoint run that finished
    if silent == "paused":
        # LangGraph saved #1's late s3 result and finished that invocation: it let it through.
        assert (task_results, invocations) == (3, 3)
        assert [r[2] for r in got.late_writes_rejected] == ["StaleOwner"]
    else:
        # A crashed worker never resumes: its s3 invocation was cancelled mid-body.
        assert (task_results, invocations) == (2, 2)
        assert not got.late_writes_rejected
