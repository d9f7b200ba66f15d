"""Launchers for tests and demos: a dev server URL, worker processes you can kill, a client you can kill.

``DevServer`` (re-exported here) yields a server on free loopback ports. :class:`WorkerProcess`
runs the *user's* workflows and activities (``module:WORKFLOWS`` / ``module:ACTIVITIES`` lists) on a
real Temporal worker in a separate process with the :class:`~outlive_temporal.OutlivePlugin`, so a
test can SIGKILL it, SIGSTOP it (a paused worker) and SIGCONT it. :func:`start_and_die` starts a
work from a separate client process and kills that process once the start is acknowledged.
Processes are stopped by their own PID, never by name.

Command line (what the launchers run)::

    python -m outlive_temporal.testing worker ADDRESS QUEUE MODULE [--store DIR]
    python -m outlive_temporal.testing start ADDRESS QUEUE WORKFLOW WORKFLOW_ID ARG_JSON [--store DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import timedelta
from types import TracebackType

from .devserver import DevServer

__all__ = ["DevServer", "WorkerProcess", "go_silent", "start_and_die"]


def go_silent() -> None:
    """Inside a step's activity: its worker plays paused from now on.

    The plugin's wrapper heartbeats for every running step, so an activity that merely waits is
    alive. A test that needs a silent step in the test's own process (where it cannot SIGSTOP
    itself) calls this: the wrapper stops beating for this activity, exactly as it would in a
    paused process, and Temporal's heartbeat timeout takes the attempt for silent.
    """
    from temporalio import activity

    from ._plugin import QUIET

    QUIET.add(activity.info().task_token)


class WorkerProcess:
    """A worker process for ``module``'s ``WORKFLOWS`` and ``ACTIVITIES`` on ``task_queue``."""

    def __init__(self, address: str, task_queue: str, module: str, *, store: str | None = None,
                 pythonpath: Sequence[str] = (), env: dict[str, str] | None = None,
                 log_path: str | None = None) -> None:
        self.args = [sys.executable, "-m", "outlive_temporal.testing", "worker", address,
                     task_queue, module] + (["--store", store] if store else [])
        self.env = dict(os.environ, **(env or {}))
        if pythonpath:
            self.env["PYTHONPATH"] = os.pathsep.join([*pythonpath, self.env.get("PYTHONPATH", "")])
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, ready_timeout: float = 60.0) -> WorkerProcess:
        return self.spawn().wait_ready(ready_timeout)

    def spawn(self) -> WorkerProcess:
        """Start the process without waiting (start several, then :meth:`wait_ready` each)."""
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.args, env=self.env, stdout=subprocess.PIPE, stderr=out)
        return self

    def wait_ready(self, ready_timeout: float = 60.0) -> WorkerProcess:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + ready_timeout
        line = b""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith(b"ready") or not line:
                break
        if not line.startswith(b"ready"):
            self.kill()
            raise RuntimeError(f"worker process did not start (see {self.log_path})")
        return self

    def kill(self) -> None:
        """SIGKILL: the process dies mid-whatever, as a crashed machine would."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=30)

    def pause(self) -> None:
        """SIGSTOP: alive but silent (no heartbeats, no polls)."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)

    def __enter__(self) -> WorkerProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def start_and_die(address: str, task_queue: str, workflow: str, workflow_id: str, arg: object, *,
                  store: str | None = None, pythonpath: Sequence[str] = (),
                  timeout: float = 60.0) -> None:
    """Start ``workflow(arg)`` from a separate client process, then SIGKILL that process."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([*pythonpath, env.get("PYTHONPATH", "")])
    args = [sys.executable, "-m", "outlive_temporal.testing", "start", address, task_queue,
            workflow, workflow_id, json.dumps(arg)] + (["--store", store] if store else [])
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith(b"started") or not line:
                break
        else:
            raise RuntimeError("the client process did not start the work")
        if not line.startswith(b"started"):
            raise RuntimeError("the client process did not start the work")
    finally:
        proc.kill()
        proc.wait(timeout=30)


async def _worker(address: str, queue: str, module: str, store: str | None) -> None:
    from temporalio.client import Client
    from temporalio.worker import Worker

    from ._plugin import OutlivePlugin
    from ._store import FileStore

    mod = importlib.import_module(module)
    plugin = OutlivePlugin(store=FileStore(store) if store else None)
    client = await Client.connect(address, plugins=[plugin])
    worker = Worker(client, task_queue=queue, workflows=list(mod.WORKFLOWS),
                    activities=list(mod.ACTIVITIES),
                    sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
                    graceful_shutdown_timeout=timedelta(seconds=0))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with worker:
        print("ready", flush=True)
        await stop.wait()


async def _start(address: str, queue: str, workflow: str, workflow_id: str, arg: str,
                 store: str | None) -> None:
    from temporalio.client import Client

    from ._plugin import OutlivePlugin
    from ._store import FileStore

    client = await Client.connect(
        address, plugins=[OutlivePlugin(store=FileStore(store) if store else None)])
    await client.start_workflow(workflow, json.loads(arg), id=workflow_id, task_queue=queue)
    print("started", flush=True)
    await asyncio.sleep(3600)  # wait to be killed


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m outlive_temporal.testing")
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker")
    w.add_argument("address")
    w.add_argument("queue")
    w.add_argument("module")
    w.add_argument("--store")
    s = sub.add_parser("start")
    for name in ("address", "queue", "workflow", "workflow_id", "arg"):
        s.add_argument(name)
    s.add_argument("--store")
    ns = parser.parse_args(argv)
    if ns.cmd == "worker":
        asyncio.run(_worker(ns.address, ns.queue, ns.module, ns.store))
    else:
        asyncio.run(_start(ns.address, ns.queue, ns.workflow, ns.workflow_id, ns.arg, ns.store))


if __name__ == "__main__":
    main()
