"""One launcher shape: every server outlive starts answers --help, and `outlive demo --engine`
starts its engine on free loopback ports, runs the article's main run there and stops it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from urllib.parse import urlsplit

import pytest

from outlive._launch import LaunchError, free_port, port_open, wait_until

LAUNCHERS = ["outlive_temporal.devserver", "outlive_restate.server", "outlive._pgserver",
             "outlive_langgraph.pgserver"]


@pytest.mark.parametrize("module", LAUNCHERS)
def test_every_launcher_answers_help_without_starting_anything(module: str) -> None:
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"Usage: python -m {module}")
    for flag in ("--dir", "--ready-timeout", "{url}"):
        assert flag in out.stdout, flag
    assert "ready at" not in out.stderr and time.monotonic() - t0 < 30


def test_a_launcher_that_dies_is_reported_with_its_log() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    with pytest.raises(LaunchError) as info:
        wait_until(lambda: False, what="the test server", timeout=30, proc=proc,
                   log=lambda: "last words")
    assert "exited with 3" in info.value.message and "last words" in info.value.message


def test_free_port_is_free_on_loopback() -> None:
    port = free_port()
    assert 0 < port < 65536 and not port_open(port)


@pytest.mark.parametrize("engine", ["temporal", "restate", "langgraph"])
def test_demo_runs_the_main_run_on_an_engine_it_starts_itself(engine: str) -> None:
    out = subprocess.run([sys.executable, "-m", "outlive", "demo", "--engine", engine, "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert data["clean"] and data["model_calls"] == 6 and data["posts"] == 1
    assert data["newsletter"]["figure"] == "4.7" and data["accepted"]["version"] == "v2"
    url = urlsplit(data["url"])
    if engine == "langgraph":
        assert url.scheme == "langgraph+sqlite"
    else:
        assert url.scheme == engine and url.hostname == "127.0.0.1"
        assert url.port is not None and not port_open(url.port)     # stopped on exit


_OWNER = """
import sys
from outlive._launch import Launcher

class Sleeper(Launcher):
    url = "none://"
    def start(self):
        self.proc = self.spawn(["sleep", "600"])
        return self
    def stop(self):
        pass

s = Sleeper().start()
print(s.proc.pid, flush=True)
sys.stdin.read()          # until the test kills this process
"""


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_a_launched_server_stops_when_its_owner_is_killed(sig: str) -> None:
    """A server runs on after its owner dies without its teardown (a ``timeout`` wrapper's
    SIGTERM, a SIGKILL) no more: the owner's watchdog stops it."""
    import signal

    owner = subprocess.Popen([sys.executable, "-c", _OWNER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    try:
        assert owner.stdout is not None
        server = int(owner.stdout.readline())
        assert _running(server)
        owner.send_signal(getattr(signal, sig))
        owner.wait(30)
        deadline = time.monotonic() + 30      # a bound on waiting, not a speed assertion
        while _running(server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(server), "the server outlived its owner"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(10)
