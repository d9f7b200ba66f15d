"""The supervisor itself as a real process: SIGKILLed between admit and dispatch, and after
dispatch. The epoch is never reused and a token never reaches two live workers."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import supervised_q3 as q3

import outlive

HERE = Path(__file__).resolve().parent


async def _supervisor(folder: Path, url: str, die: str) -> int:
    env = {**os.environ, "OUTLIVE_RUN_DIR": str(folder),
           "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path[1:]])}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import supervised_q3 as m; m.supervise_main()", url, die,
        env=env, stdin=asyncio.subprocess.DEVNULL)
    return await asyncio.wait_for(proc.wait(), 120)


@pytest.mark.parametrize("die", ["after-admit", "after-dispatch"])
async def test_a_killed_supervisor_never_reuses_an_epoch(die: str, tmp_path: Path) -> None:
    (tmp_path / "versions.json").write_text(json.dumps({"v1": q3.V1}))
    url = f"sqlite:///{tmp_path / 'outlive.db'}"
    assert await _supervisor(tmp_path, url, die) == -signal.SIGKILL
    assert await _supervisor(tmp_path, url, "never") == 0      # a new supervisor carries on
    async with await outlive.open_backend(url) as backend:
        st = await backend.load("digest/q3-report")
    assert st is not None
    tokens = [a.token for a in st.attempts]
    assert tokens == sorted(set(tokens)) and st.epoch == tokens[-1]   # never reused
    # a token never reaches two live workers: one worker process per token, by its own log
    started: dict[int, set[str]] = defaultdict(set)
    for log in (tmp_path / "logs").glob("*.log"):
        for m in re.finditer(r"\(token (\d+), pid (\d+)\) starts", log.read_text()):
            started[int(m.group(1))].add(m.group(2))
    assert all(len(pids) == 1 for pids in started.values()), started
    acc = st.latest_acceptance
    assert acc is not None and acc.version == "v1"
    if die == "after-admit":
        # #1 was admitted and never dispatched: it never ran, went silent, and #2 took over
        assert 1 not in started and st.attempts[0].state is outlive.AttemptState.UNKNOWN
        assert st.attempts[1].state is outlive.AttemptState.FINISHED
    else:
        # #1 was dispatched: its process outlived the supervisor, and the next one followed it
        assert set(started) == {1} and [a.state for a in st.attempts] == [
            outlive.AttemptState.FINISHED]
