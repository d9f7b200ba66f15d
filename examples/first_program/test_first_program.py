"""The first program runs as written, is shown whole in the README, and carries on after a kill."""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import outlive

HERE = Path(__file__).parent
PROGRAM = HERE / "first_program.py"
README = HERE.parent.parent / "README.md"


def _run(cwd: Path, code: str | None = None) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-c", code] if code else [sys.executable, str(PROGRAM)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _posts(cwd: Path) -> int:
    with sqlite3.connect(cwd / "feed.db") as conn:
        return int(conn.execute("SELECT count(*) FROM posts").fetchone()[0])


def test_the_readme_shows_the_program_as_it_runs() -> None:
    program = PROGRAM.read_text()
    screen = re.search(r"# -- API in one screen: begin -+\n(.*?)# -- API in one screen: end",
                       program, re.S)
    assert screen is not None
    block = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert block is not None
    assert screen.group(1).strip() in block.group(1), "README's API screen drifted from the file"
    assert len(block.group(1).splitlines()) <= 50


def test_the_first_program_runs_and_runs_again_without_a_second_post(tmp_path: Path) -> None:
    first = _run(tmp_path)
    assert first.returncode == 0, first.stderr
    assert "accepted" in first.stdout and "for v1" in first.stdout
    assert "dependable now: True" in first.stdout
    again = _run(tmp_path)
    assert again.returncode == 0, again.stderr
    assert _posts(tmp_path) == 1


def test_killed_mid_way_it_carries_on_and_restores_what_was_done(tmp_path: Path) -> None:
    dying = ("import asyncio, os, first_program as fp\n"
             "calls = []\n"
             "real = fp.summarise\n"
             "def summarise(**kw):\n"
             "    calls.append(kw)\n"
             "    if len(calls) == 2:\n"
             "        os._exit(9)   # killed in the middle of the second section\n"
             "    return real(**kw)\n"
             "fp.summarise = summarise\n"
             "asyncio.run(fp.main())\n")
    killed = _run(tmp_path, dying)
    assert killed.returncode == 9
    carried = _run(tmp_path)
    assert carried.returncode == 0, carried.stderr
    assert _posts(tmp_path) == 1

    async def ledger() -> outlive.WorkState:
        async with await outlive.open_backend(f"sqlite:///{tmp_path / 'outlive.db'}") as b:
            st = await b.load("digest/q3-report")
            assert st is not None
            return st
    st = asyncio.run(ledger())
    assert [a.state.value for a in st.attempts] == ["unknown", "finished"]
    # The first section was journaled by the killed attempt and restored, not redone.
    assert [(e.step, e.attempt) for e in st.journal] == [("intro", 1), ("revenue", 2)]


def test_a_mistake_in_your_own_code_is_shown_and_named_in_the_final_error(tmp_path: Path) -> None:
    broken = ("import asyncio, first_program as fp\n"
              "def summarise():   # forgot the part's keyword\n"
              "    return 'x'\n"
              "fp.summarise = summarise\n"
              "asyncio.run(fp.main())\n")
    run = _run(tmp_path, broken)
    assert run.returncode != 0
    # printed once, as it happened, without any logging configured ...
    assert "TypeError" in run.stderr and "unexpected keyword argument 'intro'" in run.stderr
    # ... and named by the final error, after one attempt: a TypeError is not retried
    assert "WorkFailed" in run.stderr
    st_calls = run.stderr.count("raised TypeError")
    assert st_calls == 1
