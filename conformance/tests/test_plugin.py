"""The pytest plugin as a backend author meets it, from a project of their own (no ini file)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def pytest_run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          capture_output=True, text=True, timeout=300, cwd=cwd)


def test_a_bad_backend_url_is_one_usage_error(tmp_path: Path) -> None:
    out = pytest_run(tmp_path, "--pyargs", "outlive_conformance", "--outlive-backend", "tinyy:///x")
    assert out.returncode == 4, out.stdout[-2000:] + out.stderr[-2000:]   # pytest's usage error
    assert "no backend for scheme 'tinyy'" in out.stderr and out.stderr.count("ERROR:") == 1
    assert len((out.stdout + out.stderr).splitlines()) < 10
    assert list(tmp_path.iterdir()) == []                                # nothing created


@pytest.mark.parametrize("url,needle", [
    ("sqlite:///x.db?colour=red", "--outlive-backend: sqlite:///x.db?colour=red: unknown option"),
    ("not a url", "--outlive-backend: not a backend URL: 'not a url'"),
])
def test_the_usage_error_says_what_is_wrong(pytestconfig: pytest.Config, url: str,
                                            needle: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from outlive_conformance import plugin

    monkeypatch.setattr(pytestconfig.option, "outlive_backend", url)
    with pytest.raises(pytest.UsageError) as raised:
        plugin.pytest_configure(pytestconfig)
    assert needle in str(raised.value)


def test_no_asyncio_loop_scope_warning_banner(tmp_path: Path) -> None:
    out = pytest_run(tmp_path, "--pyargs", "outlive_conformance", "--co", "-q",
                     "--outlive-backend", "memory://")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "tests collected" in out.stdout
    assert "PytestDeprecationWarning" not in out.stdout + out.stderr
    assert "asyncio_default_fixture_loop_scope" not in out.stdout + out.stderr


def test_a_loop_scope_the_caller_set_is_kept(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_default_fixture_loop_scope = module\n")
    (tmp_path / "test_scope.py").write_text(
        "def test_scope(pytestconfig):\n"
        "    assert pytestconfig.getini('asyncio_default_fixture_loop_scope') == 'module'\n")
    out = pytest_run(tmp_path, "-q")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
