"""All 864 combinations on both embedded backends: the seed's necessity claims, run by run."""

from __future__ import annotations

from pathlib import Path

import pytest

import outlive
from outlive_conformance.scenario import q3_report
from outlive_conformance.sweep import check_claims, sweep


@pytest.mark.sweep
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_sweep_reproduces_the_seeds_claims(kind: str, tmp_path: Path) -> None:
    url = "memory://" if kind == "memory" else f"sqlite:///{tmp_path / 's.db'}"
    backend = await outlive.open_backend(url)
    try:
        result = await sweep(backend, q3_report(), concurrency=4)
    finally:
        await backend.close()
    assert len(result.runs) == 864
    assert all(r.finished for r in result.runs.values())
    failed = [f"{c.name}: {c.detail}" for c in check_claims(result) if not c.holds]
    assert not failed, failed
    if kind == "sqlite":
        ref = await sweep(await outlive.open_backend("memory://"), q3_report(), concurrency=8)
        differ = [k for k in result.runs if result.runs[k].comparable() != ref.runs[k].comparable()]
        assert not differ, differ[:3]
