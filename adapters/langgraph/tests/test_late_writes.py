"""Paused vs crashed in the conformance scenario, read back from the LangGraph database.

In the seed's main run attempt #1 is paused in section 3 and wakes after #2 took over. Its s3
body then completes as the task of a LangGraph invocation (the one-task program's entrypoint).
LangGraph alone would save that task's writes on #1's thread (nothing in LangGraph knows #1 was
replaced); here LangGraph's rows for the task are written in the same transaction as outlive's
fenced journal entry, so the refusal takes both: the thread keeps no end of the late s3 run. A
crashed #1 never wakes, so LangGraph has nothing of s3 from it at all.
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
    invocations = _count(db, thread, "__end__")       # one per step program run that was saved
    assert _count(db, thread, "__return__") == 0      # the program runs no task of its own
    assert _values(db, thread, "__end__") == [None, None]   # s1, s2: the result is the journal's
    if silent == "paused":
        # #1's late s3 body returned, but LangGraph's rows for its task were refused with the
        # journal entry: nothing of the s3 run on the thread.
        assert invocations == 2
        assert [r[2] for r in got.late_writes_rejected] == ["StaleOwner"]
    else:
        # A crashed worker never resumes: its s3 invocation was cancelled mid-body.
        assert invocations == 2
        assert not got.late_writes_rejected
