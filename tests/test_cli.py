"""The command line as a user meets it: exit codes, --json/--out, read-only inspect, Ctrl-C, pipes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from outlive import __version__
from outlive.cli import _Commands, main


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "outlive", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd)


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


def test_demo_json_is_the_only_thing_on_stdout(tmp_path: Path) -> None:
    out = run("demo", "--json", "--out", str(tmp_path / "demo.json"))
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["model_calls"] == 6 and data["posts"] == 1 and data["clean"] is True
    assert data["newsletter"] == {"start": "t12", "figure": "4.7"}
    assert json.loads((tmp_path / "demo.json").read_text()) == data


def test_inspect_is_read_only_plain_json_with_human_times(tmp_path: Path) -> None:
    missing = run("inspect", "digest/q3-report", cwd=tmp_path)     # default sqlite:///outlive.db
    assert missing.returncode == 2 and "no database file" in missing.stderr
    assert list(tmp_path.iterdir()) == []                          # nothing was created
    db = tmp_path / "d.db"
    assert run("demo", "--db", str(db)).returncode == 0
    before = db.stat().st_mtime_ns
    out = run("inspect", "digest/q3-report", "--backend", f"sqlite:///{db}", "--json")
    assert out.returncode == 0, out.stderr
    assert "@t" not in out.stdout and '"@l"' not in out.stdout
    st = json.loads(out.stdout)
    assert st["attempts"][0]["admitted_at"] == "t0" and st["attempts"][2]["state"] == "finished"
    assert st["effects"][0]["state"] == "confirmed"
    assert db.stat().st_mtime_ns == before


def test_list_shows_each_work(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    assert run("demo", "--db", str(db)).returncode == 0
    out = run("list", "--backend", f"sqlite:///{db}", "--json")
    rows = json.loads(out.stdout)
    assert [r["work_id"] for r in rows] == ["digest/q3-report"]
    assert rows[0]["accepted"]["version"] == "v2" and rows[0]["epoch"] == 43


def test_version_and_backends() -> None:
    assert run("--version").stdout.splitlines()[0] == f"outlive {__version__}"
    rows = json.loads(run("backends", "--json").stdout)
    assert {"memory", "sqlite", "temporal", "restate", "langgraph+sqlite"} <= {r["scheme"] for r in rows}


def test_run_exits_nonzero_on_a_broken_verdict() -> None:
    clean = run("run", "q3-report", "--json")
    assert clean.returncode == 0, clean.stderr
    broken = run("run", "q3-report", "--set", "pins=off", "--json")
    assert broken.returncode == 1, broken.stderr
    data = json.loads(broken.stdout)
    assert data["model_calls"] == 5 and data["newsletter_figure"] == "4.1"


@pytest.mark.parametrize("args,needle", [
    (["run", "q3-report", "--set", "fencing"], "SWITCH=VALUE"),
    (["run", "q3-report", "--set", "colour=red"], "unknown switch"),
    (["run", "q3-report", "--set", "fencing=maybe"], "fencing takes on|off"),
    (["run", "/no/such/file.toml"], "cannot read"),
    (["run", "q3-report", "--backend", "nosuch://x"], "UnknownBackend"),
    (["run", "q3-report", "--backend", "memory://?durabilty=exit"], "unknown option 'durabilty'"),
    (["inspect", "nope", "--backend", "memory://"], "no work"),
    (["demo", "--engine", "cobol"], "'cobol' is not one of"),
    (["demo", "--engine", "temporal", "--db", "x.db"], "--db applies to"),
])
def test_bad_input_is_a_clear_error(args: list[str], needle: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    assert needle in capsys.readouterr().err


def test_a_command_from_a_missing_distribution_says_how_to_install_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(_Commands, "_plugins", lambda self: {})
    assert main(["sweep", "--backend", "memory://"]) == 2
    assert "pip install 'outlive[conformance]'" in capsys.readouterr().err


def test_every_option_has_help_and_lists_its_values() -> None:
    for command in ("demo", "inspect", "list", "backends", "run", "sweep"):
        text = run(command, "--help").stdout
        assert "Options:" in text, command
    assert "sqlite|temporal|restate|langgraph" in run("demo", "--help").stdout
    assert "rule=strict|accepted|finished" in run("run", "--help").stdout.replace("\n", " ").replace(
        "  ", "")


def test_sweep_on_memory_prints_the_necessity_table(tmp_path: Path) -> None:
    out = run("sweep", "--backend", "memory://", "--quiet", "--out", str(tmp_path / "s.json"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "864 runs" in out.stdout and "clean runs:" in out.stdout
    assert out.stdout.count("holds") >= 6 and "FAILS" not in out.stdout
    data = json.loads((tmp_path / "s.json").read_text())
    assert data["runs_finished"] == 864 and all(c["holds"] for c in data["claims"])


def test_ctrl_c_during_a_sweep_keeps_the_finished_runs(tmp_path: Path) -> None:
    db, out = tmp_path / "s.db", tmp_path / "partial.json"
    proc = subprocess.Popen([sys.executable, "-m", "outlive", "sweep", "--backend",
                             f"sqlite:///{db}", "--quiet", "--concurrency", "1", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # takes Ctrl-C even when pytest runs in the background (SIGINT ignored)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        finished = 0
        while finished < 3 and time.monotonic() < deadline:    # wait until runs are finishing
            time.sleep(0.2)
            if db.exists():
                try:
                    with sqlite3.connect(db, timeout=5) as conn:
                        finished = conn.execute("SELECT count(*) FROM outlive_works").fetchone()[0]
                except sqlite3.OperationalError:
                    pass
        assert finished >= 3, "the sweep never got going"
        proc.send_signal(signal.SIGINT)
        _stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted after" in stderr
    data = json.loads(out.read_text())
    assert data["interrupted"] is True and 0 < data["runs_finished"] < 864
    assert len(data["runs"]) == data["runs_finished"]


def test_a_closed_stdout_is_not_a_traceback() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "outlive", "run", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()                                   # like `| head` that already exited
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert "Traceback" not in err
