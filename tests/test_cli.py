from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from outlive.cli import main


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "outlive.cli", *args], capture_output=True,
                          text=True, timeout=300)


def test_demo_prints_the_main_run(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    out = run("demo", "--db", str(db))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "model calls            6" in text and "posts                  1" in text
    assert "quotes 4.7 million" in text and "verdict                clean" in text
    assert "token 41 is older than 42" in text
    again = run("inspect", "digest/q3-report", "--backend", f"sqlite:///{db}")
    assert again.returncode == 0 and "#3  token 43" in again.stdout
    twice = run("demo", "--db", str(db))
    assert twice.returncode == 2 and "already holds" in twice.stderr


def test_run_with_switches_as_json() -> None:
    out = run("run", "q3-report", "--set", "pins=off", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["model_calls"] == 5 and data["newsletter_figure"] == "4.1"


@pytest.mark.parametrize("args,needle", [
    (["run", "q3-report", "--set", "fencing"], "SWITCH=VALUE"),
    (["run", "q3-report", "--set", "colour=red"], "unknown switch"),
    (["run", "q3-report", "--set", "fencing=maybe"], "fencing"),
    (["run", "/no/such/file.toml"], "cannot read"),
    (["run", "q3-report", "--backend", "nosuch://x"], "UnknownBackend"),
    (["inspect", "nope", "--backend", "memory://"], "no work"),
])
def test_bad_input_is_a_clear_error(args: list[str], needle: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    assert needle in capsys.readouterr().err


def test_sweep_on_memory_prints_the_necessity_table() -> None:
    out = run("sweep", "--backend", "memory://", "--quiet")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "864 runs" in out.stdout and "clean runs:" in out.stdout
    assert out.stdout.count("holds") >= 6 and "FAILS" not in out.stdout
