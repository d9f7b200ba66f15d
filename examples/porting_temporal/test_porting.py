"""Before and after, in the article's situation, on a real Temporal dev server: the ordinary
workflow quotes the stale figure and posts more than once; the same work on outlive does neither."""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from pathlib import Path

import pytest

from outlive_temporal.devserver import DevServer

from . import after, before


@pytest.fixture(scope="module")
def server() -> Iterator[DevServer]:
    with DevServer() as srv:
        yield srv


async def test_before_quotes_the_stale_figure_and_posts_three_times(server: DevServer) -> None:
    out = await before.seed_situation(server.address)
    assert out["newsletter_quotes"] == "4.1", "the late execution finished last and won"
    assert len(out["posts"]) == 3
    assert out["posts"][0] == out["posts"][1], "Temporal's retry posted the same text again"
    assert "4.1 million" in out["posts"][2], "the paused execution announced the stale figure"
    assert out["calls"] == 8


async def test_after_quotes_the_corrected_figure_and_posts_once(server: DevServer) -> None:
    out = await after.seed_situation(server.address)
    assert out["newsletter_quotes"] == "4.7"
    assert len(out["posts"]) == 1 and "4.7 million" in out["posts"][0]
    assert out["accepted_for"] == "v2"
    # Temporal timed the silent step out; the work itself marked #1 unknown and took over
    assert out["attempts"] == [(1, 1, "unknown"), (2, 2, "finished")]
    assert out["calls"] == 6, "s1 restored by input key; #1's s3 call was the only waste"


def _workflow_block(path: Path) -> list[str]:
    text = path.read_text().split("# --- workflow ---\n")
    assert len(text) == 3, f"{path.name} must mark its workflow block twice"
    return text[1].splitlines()


def test_the_port_keeps_the_users_workflow_within_30_changed_lines() -> None:
    here = Path(__file__).parent
    diff = [line for line in difflib.unified_diff(_workflow_block(here / "before.py"),
                                                  _workflow_block(here / "after.py"), lineterm="")
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    changed = max(sum(1 for d in diff if d.startswith("-")), sum(1 for d in diff if d.startswith("+")))
    assert changed < 30, "\n".join(diff)
