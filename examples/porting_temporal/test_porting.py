"""Before and after, in the article's situation, on a real Temporal dev server: the ordinary
workflow quotes the stale figure and posts more than once; the same work on outlive does neither."""

from __future__ import annotations

from collections.abc import Iterator

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
    out = await after.seed_situation(server.url)
    assert out["newsletter_quotes"] == "4.7"
    assert len(out["posts"]) == 1 and "4.7 million" in out["posts"][0]
    assert out["accepted_for"] == "v2"
    assert out["late_worker"] == "refused (StaleOwner)"
    assert out["calls"] == 6, "s1 restored by input key; #1's s3 call was the only waste"
