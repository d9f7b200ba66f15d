"""Paused vs crashed in the conformance scenario, read back from the LangGraph database.

In the seed's main run attempt #1 is paused in section 3 and wakes after #2 took over. Its s3
body then completes inside a LangGraph ``@task``. LangGraph alone would save that result on #1's
thread (nothing in LangGraph knows #1 was replaced); here LangGraph's row for the task is written
in the same transaction as outlive's fenced journal entry, so the refusal takes both: the thread
keeps no late s3 result (and the one-task program returns nothing, so its end holds none either).
A crashed #1 never wakes, so LangGraph has no s3 result from it at all.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

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


def _values(db: Path, thread: str, channel: str) -> list[Any]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT type, value FROM writes WHERE thread_id = ? AND channel = ?",
                            (thread, channel)).fetchall()
    finally:
        conn.close()
    serde = JsonPlusSerializer()
    return [serde.loads_typed((t, v)) for t, v in rows]


@pytest.mark.parametrize("silent", ["paused", "crashed"])
async def test_the_late_step_is_refused_with_langgraphs_own_write(tmp_path: Path,
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
        # #1's late s3 body returned, but LangGraph's row for its result was refused with the
        # journal entry: no s3 result on the thread; the invocation ended with nothing.
        assert (task_results, invocations) == (2, 3)
        assert _values(db, thread, "__end__") == [None, None, None]
        assert [r[2] for r in got.late_writes_rejected] == ["StaleOwner"]
    else:
        # A crashed worker never resumes: its s3 invocation was cancelled mid-body.
        assert (task_results, invocations) == (2, 2)
        assert not got.late_writes_rejected
