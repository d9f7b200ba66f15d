from __future__ import annotations

import importlib.util
from pathlib import Path


async def test_the_example_tells_the_article_story(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("q3_example", Path(__file__).parent / "q3_report.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = await mod.main(str(tmp_path))
    # #1: s1, s2, and the wasted s3; #2: s2, s3, s4 (s1 restored); #3 only resends the post
    assert {k: out[k] for k in ("calls", "posts", "figure")} == {"calls": 6, "posts": 1,
                                                                 "figure": "4.7"}
    assert out["attempts"] == [(1, 1, "v1", "unknown"), (2, 2, "v2", "unknown"),
                               (3, 3, "v2", "finished")]
