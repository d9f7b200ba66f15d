"""LangGraph's approve/reject example and its port: the port's person answers from a second
OS process, after the first one exited at ``interrupt()``."""

from __future__ import annotations

import difflib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import outlive
from outlive.records import AttemptState, EffectState

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def _run(module: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path[1:]])}
    return subprocess.run([sys.executable, "-m", f"examples.langgraph_approval.{module}", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_example_runs_as_published(tmp_path: Path) -> None:
    done = _run("original", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Approved path taken." in done.stdout


async def test_the_port_is_answered_from_a_second_process(tmp_path: Path) -> None:
    url = f"langgraph+sqlite:///{tmp_path / 'approval.db'}"
    asked = _run("ported", tmp_path, url)
    assert asked.returncode == 0, asked.stderr[-2000:]
    assert "Do you approve the following output?" in asked.stdout
    async with await outlive.open_backend(url) as backend:
        st = await backend.load("approval-1")
        assert st is not None and st.attempts[0].state is AttemptState.WAITING
    answered = _run("ported", tmp_path, url, "approve")
    assert answered.returncode == 0, answered.stderr[-2000:]
    assert "Approved path taken." in answered.stdout
    assert "'decision': 'approved'" in answered.stdout
    again = _run("ported", tmp_path, url, "reject")
    assert again.returncode != 0 and "AttemptEnded" in again.stderr, "one wait, answered once"
    async with await outlive.open_backend(url) as backend:
        st = await backend.load("approval-1")
    assert st is not None
    assert [a.state for a in st.attempts] == [AttemptState.FINISHED]
    assert [acc.version for acc in st.acceptances] == ["v1"]
    assert [e.state for e in st.effects] == [EffectState.CONFIRMED]
    assert [(e.step, e.attempt) for e in st.journal] == [("generate_llm_output", 1),
                                                         ("assembly", 1)]
    feed = sqlite3.connect(tmp_path / "feed.db")
    assert feed.execute("SELECT count(*) FROM outlive_receiver_keys").fetchone() == (1,)
    feed.close()


def test_the_port_changes_at_most_30_lines_and_the_docs_show_its_diff() -> None:
    """Lines added or removed, as a diff counts them (issue 41's limit), and the diff the
    porting page shows is this one, hunk for hunk."""
    before = (HERE / "original.py").read_text().splitlines()
    after = (HERE / "ported.py").read_text().splitlines()
    changed = [d for d in difflib.unified_diff(before, after, lineterm="", n=0)
               if d[:1] in "+-" and not d.startswith(("+++", "---"))]
    assert len(changed) <= 30
    page = (ROOT / "docs" / "porting-langgraph.md").read_text()
    section = page[page.index("## The approve/reject `interrupt()` example"):]
    assert section.startswith(f"## The approve/reject `interrupt()` example, answered from "
                              f"another process: {len(changed)} lines changed")
    shown = section[section.index("```diff\n") + 8:section.index("\n```\n")]
    diff = [d for d in difflib.unified_diff(before, after, lineterm="")
            if not d.startswith(("+++", "---"))]
    assert shown.splitlines() == diff
