"""The prompt-chaining tutorial and its port, each run as its own process.

The port's attempt #1 fails in its third model call (``polish_joke``); the runtime records the
error with the attempt and, after the retry policy's backoff, admits #2, which restores the
first two calls from the journal by their inputs and makes only the third.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import outlive
from outlive.records import AttemptState

ROOT = Path(__file__).resolve().parents[2]
FINAL = ("The cats sat on the keyboard to keep an eye on the mouse. It was purr-fectly placed. "
         "Then the mouse clicked back.")


def _run(module: str, tmp: Path, *args: str, fail: str = "") -> tuple[str, list[str]]:
    log = tmp / f"{module}.calls"
    env = {**os.environ, "STAND_IN_LOG": str(log), "STAND_IN_FAIL_ONCE": fail}
    done = subprocess.run([sys.executable, "-m", f"examples.langgraph_prompt_chaining.{module}",
                           *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, log.read_text().splitlines()


def test_the_tutorial_runs_as_published(tmp_path: Path) -> None:
    out, calls = _run("original", tmp_path)
    assert out.rstrip().endswith(FINAL)
    assert len(calls) == 3


async def test_the_port_retries_a_failed_call_without_repeating_the_others(tmp_path: Path) -> None:
    url = f"langgraph+sqlite:///{tmp_path / 'jokes.db'}"
    out, calls = _run("ported", tmp_path, url, fail="Add a surprising twist")
    assert out.rstrip().endswith(FINAL), "the same output as the tutorial's"
    assert calls == ["Write a short joke about cats", "Make this joke funnier by adding wordplay",
                     "Add a surprising twist to this joke", "Add a surprising twist to this joke"], \
        "#2 restored the first two calls; only the call #1 died in was made again"
    async with await outlive.open_backend(url) as backend:
        st = await backend.load("jokes/cats")
    assert st is not None and st.latest_acceptance is not None
    assert [a.state for a in st.attempts] == [AttemptState.FAILED, AttemptState.FINISHED]
    assert st.attempts[0].error is not None and "died mid-call" in st.attempts[0].error.message
    assert [(e.step, e.attempt) for e in st.journal] == [
        ("generate_joke", 1), ("improve_joke", 1), ("polish_joke", 2), ("assembly", 2)]
