"""A dev server never outlives the process that started it, however that process ends.

It runs in a session of its own (so a Ctrl-C meant for the tests does not reach it), which is why
a test process killed without its teardown - a ``timeout`` wrapper's SIGTERM, a SIGKILL - used to
leave it running: the orphans seen on the shared machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

_OWNER = """
import os, sys
from outlive_temporal import DevServer
srv = DevServer().start()
print(srv.proc.pid, flush=True)
sys.stdin.read()          # until the test kills this process
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose (its parent, the dead owner, was re-parented away)
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_dev_server_stops_when_its_owner_is_killed(sig: int) -> None:
    owner = subprocess.Popen([sys.executable, "-c", _OWNER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    try:
        assert owner.stdout is not None
        server = int(owner.stdout.readline())
        assert _alive(server)
        owner.send_signal(sig)
        owner.wait(30)
        deadline = time.monotonic() + 30      # a bound on waiting, not a speed assertion
        while _alive(server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(server), "the dev server outlived its owner"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(10)
