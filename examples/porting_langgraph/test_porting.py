"""Before and after, in the article's situation: the ordinary LangGraph workflow quotes the stale
figure and posts more than once; the same workflow on outlive does neither."""

from __future__ import annotations

from pathlib import Path

from . import after, before


async def test_before_quotes_the_stale_figure_and_posts_twice(tmp_path: Path) -> None:
    out = await before.seed_situation(str(tmp_path / "before.db"))
    assert out["newsletter_quotes"] == "4.1", "the late worker's state won the thread"
    assert len(out["posts"]) == 3
    assert out["posts"][0] == out["posts"][1], "the resumed poster posted the same text again"
    assert "4.1 million" in out["posts"][2], "the paused worker announced the stale figure"
    assert out["calls"] == 8


async def test_after_quotes_the_corrected_figure_and_posts_once(tmp_path: Path) -> None:
    """The library's supervisor runs the scene: each attempt an OS process invoking the graph;
    #1 really paused (SIGSTOP), #2 really killed after the feed applied its post."""
    out = await after.seed_situation(str(tmp_path))
    assert out["newsletter_quotes"] == "4.7"
    assert len(out["posts"]) == 1 and "4.7 million" in out["posts"][0]
    assert out["accepted_for"] == "v2"
    assert out["late_worker"] == "refused (StaleOwner)"
    assert out["calls"] == 6, "s1 restored by input key; #1's s3 call was the only waste"
    # silence is never failure: #1 (paused) and #2 (killed) are unknown, #3 settled the post
    assert out["attempts"] == [(1, "v1", "unknown"), (2, "v2", "unknown"), (3, "v2", "finished")]
