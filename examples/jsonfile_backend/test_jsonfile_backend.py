"""A backend author's view: the plugin runs against a third-party backend from outside this repo.

The suites are started in a fresh directory with an empty pytest configuration, so nothing of this
repository's settings (``asyncio_mode``, markers, paths) helps them along.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def test_the_suites_run_against_a_third_party_backend_from_anywhere(tmp_path: Path) -> None:
    project = tmp_path / "someone-elses-project"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    store = tmp_path / "ledgers"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "outlive_conformance",
         "--outlive-backend", f"jsonfile://{store}", "-q", "-rs", "-p", "no:cacheprovider"],
        cwd=project, capture_output=True, text=True, timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    last = [ln for ln in proc.stdout.splitlines() if re.match(r"^\d+ passed", ln)][-1]
    assert "failed" not in last and "error" not in last, last
    passed = int(re.search(r"(\d+) passed", last).group(1))  # type: ignore[union-attr]
    assert passed >= 50, last       # the golden runs, the 24 protected runs, witnesses, contract
    assert "skipped" not in last, last   # it declares every feature the suites ask for
    assert len(list(store.glob("*.json"))) >= passed // 2   # the runs really went through it
