"""The README's one-screen example runs as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

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
