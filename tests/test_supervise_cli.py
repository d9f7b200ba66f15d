"""``outlive supervise``: a live status from the ledger; Ctrl-C stops it, the next run carries on."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import supervised_q3 as q3

import outlive

HERE = Path(__file__).resolve().parent


def _ctrl_c_enabled() -> None:
    """The child takes Ctrl-C even when pytest itself was started in the background, where the
    shell sets SIGINT to ignored and every child would inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def test_ctrl_c_stops_supervise_and_the_next_run_carries_on(tmp_path: Path) -> None:
    (tmp_path / "versions.json").write_text(json.dumps({"v1": q3.V1}))
    # attempt #1 pauses itself after journaling s2: the first run is interrupted while it waits
    (tmp_path / "crash.json").write_text(json.dumps(
        {"attempt": 1, "point": "after-journal:s2", "signal": "STOP"}))
    url = f"sqlite:///{tmp_path / 'outlive.db'}"
    env = {**os.environ, "OUTLIVE_RUN_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path[1:]])}
    argv = [sys.executable, "-m", "outlive", "supervise", "supervised_q3:cli_definition",
            "--backend", url, "--publish", "v1", "--log-dir", str(tmp_path / "logs")]
    first = await asyncio.create_subprocess_exec(
        *argv, env=env, cwd=tmp_path, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, preexec_fn=_ctrl_c_enabled)
    for _ in range(1200):
        if (tmp_path / "hit-1").exists():
            break
        await asyncio.sleep(0.05)
    assert (tmp_path / "hit-1").exists()
    first.send_signal(signal.SIGINT)                       # Ctrl-C
    out1 = (await asyncio.wait_for(first.communicate(), 60))[0].decode()
    assert first.returncode == 130, out1
    assert "run the same command again to carry on" in out1
    assert "#1 token 1 pinned v1: running" in out1          # the live status showed the attempt
    second = await asyncio.create_subprocess_exec(
        *argv, env=env, cwd=tmp_path, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT)
    out2 = (await asyncio.wait_for(second.communicate(), 120))[0].decode()
    assert second.returncode == 0, out2
    assert "accepted for v1" in out2
    async with await outlive.open_backend(url) as backend:
        st = await backend.load("digest/q3-report")
    assert st is not None
    assert [a.token for a in st.attempts] == list(range(1, len(st.attempts) + 1))
    assert len(st.attempts) >= 2 and st.attempts[-1].state is outlive.AttemptState.FINISHED
    assert q3.announced(st)
    # s1 and s2 were journaled by #1 before the interruption and restored, not recomputed
    calls = (tmp_path / "calls.log").read_text().split()
    assert calls.count("s1") == 1 and calls.count("s2") == 1
