"""Installed as a new user would, outside this checkout's venv.

Fresh venvs (uv, reusing its download cache; versions from constraints.txt, as CI's): the core
alone from the checkout gives a working `outlive demo` with no test runner; `make dist` wheels
give every adapter through its extra, without the optional pieces of other extras.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _uv() -> str:
    here = Path(sys.executable).parent / "uv"
    found = str(here) if here.exists() else shutil.which("uv")
    if found is None:
        pytest.fail("uv is not installed (make install puts it in the venv)")
    return found


def _sh(*cmd: str | Path, cwd: Path | None = None, timeout: float = 600) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                         cwd=cwd, env=env)
    assert out.returncode == 0, f"{cmd}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def _venv(path: Path) -> Path:
    _sh(_uv(), "venv", "-q", "--python", sys.executable, path)
    return path / "bin"


def _install(bin_dir: Path, *requirements: str, find_links: Path | None = None) -> None:
    extra = ["--find-links", str(find_links)] if find_links else []
    _sh(_uv(), "pip", "install", "-q", "--python", bin_dir / "python",
        "-c", ROOT / "constraints.txt", "--build-constraint", ROOT / "constraints.txt",
        *extra, *requirements, cwd=ROOT)


def _imports(bin_dir: Path, module: str) -> bool:
    out = subprocess.run([bin_dir / "python", "-c", f"import {module}"], capture_output=True,
                         timeout=120, cwd="/")
    return out.returncode == 0


def test_the_core_alone_runs_the_demo_without_a_test_runner(tmp_path: Path) -> None:
    bin_dir = _venv(tmp_path / "core")
    _install(bin_dir, str(ROOT))                                 # pip install ./
    demo = subprocess.run([bin_dir / "outlive", "demo", "--db", tmp_path / "d.db"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr
    assert "verdict                clean" in demo.stdout
    assert not _imports(bin_dir, "pytest") and not _imports(bin_dir, "outlive_conformance")
    hint = subprocess.run([bin_dir / "outlive", "sweep"], capture_output=True, text=True,
                          timeout=120)
    assert hint.returncode == 2 and "pip install 'outlive[conformance]'" in hint.stderr
    missing = subprocess.run([bin_dir / "outlive", "run", "--help"], capture_output=True,
                             text=True, timeout=120)
    assert missing.returncode == 2
    extra = subprocess.run([bin_dir / "outlive", "inspect", "w", "--backend", "temporal://x:1"],
                           capture_output=True, text=True, timeout=120)
    assert extra.returncode == 2 and "pip install 'outlive[temporal]'" in extra.stderr
    rows = {r["scheme"]: r for r in json.loads(_sh(bin_dir / "outlive", "backends", "--json"))}
    assert rows["postgresql"]["installed"] is False, rows["postgresql"]      # no psycopg here
    assert rows["postgresql"]["install"] == "pip install 'outlive[postgres]'"
    assert rows["sqlite"]["installed"] is True


def test_make_dist_wheels_install_each_adapter_through_its_extra(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dev_venv = tmp_path / "no-dev-venv"
    _sh("make", "-C", ROOT, "--no-print-directory", "dist", f"DIST={dist}", f"VENV={dev_venv}")
    assert not dev_venv.exists(), "make dist built the dev venv"
    wheels = sorted(p.name.split("-")[0] for p in dist.glob("*.whl"))
    assert wheels == ["outlive", "outlive_agents", "outlive_conformance", "outlive_langgraph",
                      "outlive_restate", "outlive_temporal"]
    shipped = [n for p in dist.glob("*.whl") for n in zipfile.ZipFile(p).namelist()]
    assert "LICENSE" in {Path(n).name for n in shipped if "outlive-0.1.0" in n}
    assert not [n for n in shipped if n.endswith("/bench.py") and "conformance" not in n], \
        "the adapters' benchmarks are not shipped"
    bin_dir = _venv(tmp_path / "all")
    _install(bin_dir, "outlive[temporal,restate,langgraph,postgres]", find_links=dist)
    for module in ("outlive_temporal", "outlive_restate", "outlive_langgraph", "psycopg"):
        assert _imports(bin_dir, module), module
    # optional pieces stay out unless their own extra is asked for
    assert not (bin_dir / "temporal").exists()                   # the dev-server binary
    assert not _imports(bin_dir, "langgraph.checkpoint.postgres")
    assert not _imports(bin_dir, "pytest")
    no_server = subprocess.run([bin_dir / "outlive", "demo", "--engine", "temporal"],
                               capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert no_server.returncode == 2, no_server.stderr
    assert "pip install 'outlive[temporal-devserver]'" in no_server.stderr
    rows = json.loads(_sh(bin_dir / "outlive", "backends", "--json"))
    installed = {r["scheme"] for r in rows if r["installed"]}
    assert {"temporal", "restate", "langgraph+sqlite", "sqlite"} <= installed
    demo = subprocess.run([bin_dir / "outlive", "demo", "--engine", "langgraph", "--json",
                           "--db", tmp_path / "lg.db"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert json.loads(demo.stdout)["clean"]
