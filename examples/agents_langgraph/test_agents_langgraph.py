"""LangGraph's prebuilt-agent sample and its port: both answer; the port journals each call and
is accepted for the published version; the port changes at most 30 of the sample's lines."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

HERE = Path(__file__).resolve().parent


def changed_lines(before: Path, after: Path) -> int:
    """Lines added or removed (docstrings aside), as a diff counts them."""
    def code(p: Path) -> list[str]:
        text = p.read_text()
        return text[text.index('"""', 3) + 3:].splitlines()   # past the module docstring

    diff = difflib.unified_diff(code(before), code(after), lineterm="", n=0)
    return sum(1 for d in diff if d[:1] in "+-" and not d.startswith(("+++", "---")))


async def test_the_sample_answers() -> None:
    from . import before

    out = await before.main()
    assert out["messages"][-1].content == "It's always sunny in sf!"


async def test_the_port_is_accepted_with_every_call_journaled(tmp_path: Path) -> None:
    from . import after

    done, state = await after.main(f"sqlite:///{tmp_path / 'w.db'}")
    assert done.acceptance.version == "v1"
    assert state.candidate(done.acceptance.digest).content == {"answer": "It's always sunny in sf!"}
    assert [e.step for e in state.journal] == ["model:0", "tool:1:call-1", "model:1", "assembly"]


def test_the_port_changes_at_most_30_lines() -> None:
    assert changed_lines(HERE / "before.py", HERE / "after.py") <= 30
