"""The README's one-screen example runs as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import outlive
from outlive import MemoryReceiver, Receipt


async def test_readme_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (Path(__file__).parent.parent / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S)
    assert code is not None
    monkeypatch.chdir(tmp_path)
    ns: dict[str, Any] = {}
    exec(compile(code.group(1), "README.md", "exec"), ns)

    class Feed:
        def __init__(self) -> None:
            self.rx = MemoryReceiver()

        def post(self, key: str | None, payload: Any) -> Receipt:
            return self.rx.receive(key, payload, lambda p: f"P{len(self.rx.applied) + 1}")

    feed = Feed()
    report = {"s1": "Intro.", "s2": "Revenue was 4.7 million."}
    await ns["digest"](report, "v2", lambda **kw: next(iter(kw.values()))[:12], feed)
    assert len(feed.rx.applied) == 1
    assert (tmp_path / "outlive.db").exists()


async def test_readme_example_carries_on_after_a_crash_and_reruns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first attempt dies mid-way; the supervisor takes over at once (its task is gone) and
    the successor restores the journaled section. Running it again admits nothing new."""
    text = (Path(__file__).parent.parent / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S)
    assert code is not None
    monkeypatch.chdir(tmp_path)
    ns: dict[str, Any] = {}
    exec(compile(code.group(1), "README.md", "exec"), ns)
    rx = MemoryReceiver()
    calls: list[str] = []

    class Feed:
        def post(self, key: str | None, payload: Any) -> Receipt:
            return rx.receive(key, payload, lambda p: f"P{len(rx.applied) + 1}")

    def summarise(**kw: str) -> str:
        (text,) = kw.values()
        calls.append(text)
        if len(calls) == 2:
            raise RuntimeError("the process died here")
        return text[:12]

    report = {"s1": "Intro.", "s2": "Revenue was 4.7 million."}
    await ns["digest"](report, "v2", summarise, Feed())
    assert calls == ["Intro.", "Revenue was 4.7 million.", "Revenue was 4.7 million."]
    await ns["digest"](report, "v2", summarise, Feed())       # again: already done
    assert len(calls) == 3 and len(rx.applied) == 1
    async with await outlive.open_backend("sqlite:///outlive.db") as backend:
        st = await backend.load("digest/q3-report")
    assert st is not None
    assert [(a.number, a.state.value) for a in st.attempts] == [(1, "unknown"), (2, "finished")]
