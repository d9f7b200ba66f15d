"""Faults: a worker process killed with SIGKILL, a corrupt or truncated database file."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

import outlive
from outlive import Controller, Worker
from outlive_langgraph import step_thread_id
from outlive_langgraph.pgserver import PostgresServer

from ._q3 import V1, first_attempt

CHILD = str(Path(__file__).with_name("_child.py"))


def _second(db: Path | str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, CHILD, "second", str(db)], capture_output=True,
                         text=True, timeout=60, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("reported", ["s2", "s3"])
def test_kill_right_after_a_step_returns_loses_nothing_reported(
        tmp_path: Path, reported: str) -> None:
    """LangGraph writes the task result in the background; outlive's fenced write has
    committed before ``step`` returns, so a SIGKILL at that instant loses no reported step."""
    db = tmp_path / "lg.db"
    proc = subprocess.run([sys.executable, CHILD, "first", str(db), f"kill-after:{reported}"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    done = [ln.split()[1] for ln in proc.stdout.splitlines() if ln.startswith("done")]
    assert done[-1] == reported
    got = _second(db)
    assert got["journal_before"] == done, "every step reported done was in the journal"
    assert got["restored"] == done
    assert got["calls"] == [k for k in V1 if k not in done]
    assert got["accepted"] == "v1" and got["stale"] == 0 and got["epoch"] == 2


def test_kill_right_after_an_outlive_task_returns_in_an_entrypoint(tmp_path: Path) -> None:
    """The engine-orchestrated shape: LangGraph's own write of the task result is still in the
    background when the call returns; outlive's journal entry has already committed."""
    db = tmp_path / "lg.db"
    proc = subprocess.run([sys.executable, CHILD, "program", str(db), "s2"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert [ln.split()[1] for ln in proc.stdout.splitlines()] == ["s1", "s2"]
    conn = sqlite3.connect(db)
    lg_saved = conn.execute("SELECT count(*) FROM writes WHERE thread_id = ? AND "
                            "channel = '__return__'", ("q3",)).fetchone()[0]   # the user's thread
    conn.close()
    got = _second(db)
    assert got["journal_before"] == ["s1", "s2"], "outlive lost nothing that was reported done"
    assert got["restored"] == ["s1", "s2"] and got["calls"] == ["s3", "s4"]
    assert lg_saved <= 2  # LangGraph's own record may or may not have landed yet
    print(f"LangGraph had saved {lg_saved} of the 2 reported task results")


def test_kill_right_after_an_outlive_task_returns_in_an_entrypoint_on_postgres(
        pg_server: PostgresServer) -> None:
    """On ``langgraph+postgres`` the task hands LangGraph its envelope once the journal write is
    sent, and the call returns only after the commit: a SIGKILL the instant it returns loses
    nothing reported."""
    url = pg_server.create_database(f"k_{uuid.uuid4().hex[:8]}")
    proc = subprocess.run([sys.executable, CHILD, "program", url, "s2"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert [ln.split()[1] for ln in proc.stdout.splitlines()] == ["s1", "s2"]
    got = _second(url)
    assert got["journal_before"] == ["s1", "s2"], "outlive lost nothing that was reported done"
    assert got["restored"] == ["s1", "s2"] and got["calls"] == ["s3", "s4"]


def test_kill_mid_step_then_a_new_process_finishes(tmp_path: Path) -> None:
    db = tmp_path / "lg.db"
    proc = subprocess.Popen([sys.executable, CHILD, "first", str(db), "hold:s3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line.strip())
            if line.startswith("in s3"):
                break
        assert lines == ["done s1", "done s2", "in s3"], lines
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    # The LangGraph thread of attempt #1 has checkpoints; nothing of s3 reached the ledger.
    conn = sqlite3.connect(db)
    n = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = ?",
                     (step_thread_id("q3", 1),)).fetchone()[0]
    conn.close()
    assert n > 0
    got = _second(db)
    assert got["journal_before"] == ["s1", "s2"]
    assert got["restored"] == ["s1", "s2"] and got["calls"] == ["s3", "s4"]
    assert got["accepted"] == "v1" and got["stale"] == 0


async def _make_db(path: Path) -> None:
    b = await outlive.open_backend(f"langgraph+sqlite:///{path}")
    try:
        _ctl, w = await first_attempt(b, clock=lambda: 1)
        for k, text in V1.items():
            await w.step(k, lambda text: {"summary": text * 40}, text=text)
    finally:
        await b.close()


async def test_garbage_file_is_invalid_record(tmp_path: Path) -> None:
    db = tmp_path / "lg.db"
    db.write_bytes(b"this is not a database\x00" * 300)
    before = db.read_bytes()
    with pytest.raises(outlive.InvalidRecord):
        await outlive.open_backend(f"langgraph+sqlite:///{db}")
    assert db.read_bytes() == before


@pytest.mark.parametrize("keep", [0.5, 0.9])
async def test_truncated_file_is_a_typed_error_and_writes_nothing(
        tmp_path: Path, keep: float) -> None:
    db = tmp_path / "lg.db"
    await _make_db(db)
    assert not (tmp_path / "lg.db-wal").exists() or (tmp_path / "lg.db-wal").stat().st_size == 0
    data = db.read_bytes()
    cut = tmp_path / "cut.db"
    cut.write_bytes(data[: int(len(data) * keep) // 4096 * 4096])
    before = cut.read_bytes()
    errors: list[BaseException] = []
    try:
        b = await outlive.open_backend(f"langgraph+sqlite:///{cut}")
    except outlive.OutliveError as exc:
        errors.append(exc)
    else:
        try:
            ctl = Controller(b, clock=lambda: 9)
            try:
                await ctl.admit("q3")
            except outlive.OutliveError as exc:
                errors.append(exc)
            try:
                st = await b.load("q3")
                w = Worker(b, st.attempts[-1] if st else None, V1)  # type: ignore[arg-type]
                await w.start()
                await w.step("s9", lambda text: {"s": text}, text="x")
            except outlive.OutliveError as exc:
                errors.append(exc)
        finally:
            await b.close()
    print("truncated", keep, [type(e).__name__ + ": " + str(e)[:80] for e in errors])
    assert errors, "a truncated database must not look healthy"
    assert all(isinstance(e, (outlive.InvalidRecord, outlive.BackendUnavailable))
               for e in errors), errors
    if len(errors) == 1 and isinstance(errors[0], outlive.InvalidRecord):
        assert cut.read_bytes() == before


async def test_corrupt_ledger_row_is_invalid_record(tmp_path: Path) -> None:
    db = tmp_path / "lg.db"
    await _make_db(db)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE outlive_works SET state = '{\"@t\": \"WorkState\", \"v\": {' ")
    conn.commit()
    conn.close()
    b = await outlive.open_backend(f"langgraph+sqlite:///{db}")
    try:
        with pytest.raises(outlive.InvalidRecord):
            await b.load("q3")
        with pytest.raises(outlive.InvalidRecord):
            await Controller(b, clock=lambda: 9).admit("q3")
    finally:
        await b.close()
    conn = sqlite3.connect(db)
    row = conn.execute("SELECT seq, state FROM outlive_works").fetchone()
    conn.close()
    assert row[1] == '{"@t": "WorkState", "v": {', "the failed commands wrote nothing"
