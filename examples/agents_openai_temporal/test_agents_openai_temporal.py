"""Temporal's OpenAI Agents SDK sample and its port, on a dev server: both answer; the port
journals the model calls and the tool activity and accepts the answer for the question's
version; the port changes at most 30 of the sample's lines."""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from pathlib import Path

import pytest
from agents import set_tracing_disabled

from outlive_temporal import DevServer

HERE = Path(__file__).resolve().parent


def changed_lines(before: Path, after: Path) -> int:
    """Lines added or removed (docstrings aside), as a diff counts them."""
    def code(p: Path) -> list[str]:
        text = p.read_text()
        return text[text.index('"""', 3) + 3:].splitlines()   # past the module docstring

    diff = difflib.unified_diff(code(before), code(after), lineterm="", n=0)
    return sum(1 for d in diff if d[:1] in "+-" and not d.startswith(("+++", "---")))


@pytest.fixture(scope="module")
def server() -> Iterator[DevServer]:
    set_tracing_disabled(True)   # offline: no trace export
    with DevServer() as srv:
        yield srv


async def test_the_sample_answers(server: DevServer) -> None:
    from . import before

    assert await before.main(server.address) == "Sunny with wind in Tokyo, 14-20C."


async def test_the_port_is_accepted_with_every_call_journaled(server: DevServer) -> None:
    from . import after

    answer, state = await after.main(server.address)
    assert answer == "Sunny with wind in Tokyo, 14-20C."
    assert [a.version for a in state.acceptances] == ["v1"]
    assert [e.step for e in state.journal] == ["model:0", "tool:1:0:get_weather", "model:1",
                                               "assembly"]


def test_the_port_changes_at_most_30_lines() -> None:
    assert changed_lines(HERE / "before.py", HERE / "after.py") <= 30
