"""Attempts as OS processes: the subprocess dispatcher and the ``outlive worker`` entry point.

Each admitted attempt runs in its own ``outlive worker MODULE:FUNCTION …`` process, on a backend
every process can reach (``sqlite://``, ``postgresql://``, an engine — not ``memory://``). The
process renews its lease while it works; SIGKILL or SIGSTOP it and the supervisor takes over
after the lease (at once when the process is seen to exit). A replaced process that wakes up is
refused at its next write and says so in its own log.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import sys
from pathlib import Path
from typing import IO

from .backend import open_backend
from .errors import ConfigError, OutliveError
from .records import Contract
from .supervisor import Assignment, Dispatcher, Lease, WorkDefinition, resolve, run_attempt

__all__ = ["SubprocessDispatcher", "worker_argv", "worker_main"]

log = logging.getLogger("outlive.worker")

#: The environment variable that carries the secret part of the attempt's token to its process.
SECRET_ENV = "OUTLIVE_TOKEN_SECRET"

#: The contract a worker process is given: runners never judge, the supervisor does.
_UNJUDGED = Contract(name="judged-by-the-supervisor", version="-", assessor="-")


def worker_argv(assignment: Assignment) -> list[str]:
    """The ``outlive worker`` arguments that run ``assignment`` (after the program name)."""
    d = assignment.definition
    argv = [assignment.function, "--backend", assignment.backend_url,
            "--work", assignment.work_id, "--attempt", str(assignment.attempt),
            "--token", str(assignment.token), "--persist", d.persist,
            "--heartbeat", str(d.lease.heartbeat_interval)]
    if d.inputs_ref is not None:
        argv += ["--inputs", d.inputs_ref]
    for arg in d.args:
        argv += ["--arg", arg]
    return argv


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


class SubprocessDispatcher(Dispatcher):
    """One ``outlive worker`` OS process per attempt.

    ``stop_signal`` is what :meth:`stop` sends a replaced attempt (SIGTERM by default; None
    sends nothing, so a paused process that is woken shows its own refusals). ``log_dir`` gives
    each attempt its own log file ``<work>-<attempt>.log``; otherwise the processes inherit this
    process's output. ``env`` is added to this process's environment.

    ``warm=True`` keeps one spare process per attempt function already started (interpreter up,
    module imported, backend open) and waiting on its stdin; a dispatch hands the oldest spare
    the attempt and starts a replacement. ``warm=N`` keeps N spares: one per attempt that may be
    dispatched at about the same time (works supervised at once, takeovers in quick succession),
    since a spare started just before it is needed is still starting. Each process still runs
    exactly one attempt; takeover no longer pays for an interpreter's start-up.
    """

    def __init__(self, *, python: str = sys.executable, cwd: str | os.PathLike[str] | None = None,
                 env: dict[str, str] | None = None, log_dir: str | os.PathLike[str] | None = None,
                 stop_signal: signal.Signals | None = signal.SIGTERM, warm: bool | int = False) -> None:
        self.python = python
        self.cwd = os.fspath(cwd) if cwd is not None else os.getcwd()
        self.env = {**os.environ, **(env or {})}
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.stop_signal = stop_signal
        self.procs: dict[tuple[str, int], asyncio.subprocess.Process] = {}
        self._watchers: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Event()
        #: Spare processes kept per attempt function (0: none).
        self.spares = int(warm)
        self._spares: dict[tuple[str, str], list[tuple[asyncio.subprocess.Process, Path | None]]] = {}
        self._spare_no = 0

    def log_path(self, assignment: Assignment) -> Path | None:
        if self.log_dir is None:
            return None
        return self.log_dir / f"{_safe(assignment.work_id)}-{assignment.attempt}.log"

    def pid(self, assignment: Assignment) -> int | None:
        proc = self.procs.get((assignment.work_id, assignment.attempt))
        return proc.pid if proc is not None else None

    async def dispatch(self, assignment: Assignment) -> None:
        if assignment.backend_url.startswith("memory:"):
            raise ConfigError("memory:// lives in one process; attempts in other processes need a "
                              "shared backend (sqlite://, postgresql://, an engine)",
                              url=assignment.backend_url)
        d = assignment.definition
        if callable(d.attempt) and resolve(assignment.function) is not d.attempt:
            raise ConfigError(f"{assignment.function} does not import as the attempt function; "
                              "register a module-level function by name", ref=assignment.function)
        # Shielded: a supervisor cancelled mid-dispatch (Ctrl-C) still records the process it
        # started, so close() and stop() can find it.
        await asyncio.shield(self._dispatch(assignment))

    async def _dispatch(self, assignment: Assignment) -> None:
        key = (assignment.work_id, assignment.attempt)
        if key in self.procs:
            return
        path = self.log_path(assignment)
        proc = await self._adopt_spare(assignment, path) if self.spares else None
        if proc is None:
            # The token's secret goes by the environment, never the command line (``ps``).
            proc = await self._spawn(worker_argv(assignment), path, secret=assignment.secret)
        self.procs[key] = proc
        watcher = asyncio.create_task(self._watch(key, proc))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)
        if self.spares:
            await self._start_spares(assignment)

    async def _spawn(self, argv: list[str], path: Path | None,
                     stdin: int = asyncio.subprocess.DEVNULL,
                     secret: str | None = None) -> asyncio.subprocess.Process:
        out: IO[bytes] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            out = open(path, "ab")   # the child keeps its own descriptor; ours closes below
        try:
            return await asyncio.create_subprocess_exec(
                self.python, "-m", "outlive", "worker", *argv,
                cwd=self.cwd, env=self.env if secret is None else {**self.env, SECRET_ENV: secret},
                stdin=stdin,
                stdout=out, stderr=asyncio.subprocess.STDOUT if out is not None else None)
        finally:
            if out is not None:
                out.close()

    async def _start_spares(self, assignment: Assignment) -> None:
        """Top up the spares for this attempt function to ``spares`` live processes."""
        pool = self._spares.setdefault((assignment.function, assignment.backend_url), [])
        pool[:] = [(p, path) for p, path in pool if p.returncode is None]
        while len(pool) < self.spares:
            self._spare_no += 1
            path = (self.log_dir / f"spare-{os.getpid()}-{self._spare_no}.log"
                    if self.log_dir is not None else None)
            argv = [assignment.function, "--backend", assignment.backend_url, "--standby"]
            pool.append((await self._spawn(argv, path, stdin=asyncio.subprocess.PIPE), path))

    async def _adopt_spare(self, assignment: Assignment,
                           path: Path | None) -> asyncio.subprocess.Process | None:
        """Hand the attempt to the oldest live spare (the likeliest to be ready), if any."""
        pool = self._spares.get((assignment.function, assignment.backend_url), [])
        while pool:
            proc, spare_log = pool.pop(0)
            if proc.returncode is None and proc.stdin is not None:
                break
        else:
            return None
        if spare_log is not None and path is not None:
            spare_log.rename(path)     # the process keeps writing to the same file, renamed
        d = assignment.definition
        line = json.dumps({"work": assignment.work_id, "attempt": assignment.attempt,
                           "token": assignment.token, "secret": assignment.secret,
                           "persist": d.persist,
                           "heartbeat": d.lease.heartbeat_interval, "inputs": d.inputs_ref,
                           "arg": list(d.args)})
        try:
            proc.stdin.write(line.encode() + b"\n")
            await proc.stdin.drain()
            proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            return None
        return proc

    async def _watch(self, key: tuple[str, int], proc: asyncio.subprocess.Process) -> None:
        await proc.wait()
        self._changed.set()

    def gone(self, assignment: Assignment) -> bool:
        proc = self.procs.get((assignment.work_id, assignment.attempt))
        return proc is not None and proc.returncode is not None

    async def stop(self, assignment: Assignment) -> None:
        proc = self.procs.get((assignment.work_id, assignment.attempt))
        if proc is None or proc.returncode is not None or self.stop_signal is None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(self.stop_signal)

    async def wait(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)
        self._changed.clear()

    async def close(self) -> None:
        """Stop every process still running (SIGTERM, then SIGKILL after 5 s)."""
        spares = [p for pool in self._spares.values() for p, _path in pool]
        self._spares.clear()
        alive = [p for p in [*self.procs.values(), *spares] if p.returncode is None]
        for p in alive:
            with contextlib.suppress(ProcessLookupError):
                p.terminate()
        for p in alive:
            try:
                await asyncio.wait_for(p.wait(), 5)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                await p.wait()
        for w in list(self._watchers):
            with contextlib.suppress(BaseException):
                await w


async def run_worker(args: argparse.Namespace) -> int:
    """Run the attempt named by ``args``; SIGTERM cancels it (the supervisor replaced it)."""
    backend = await open_backend(args.backend)
    if args.standby:
        resolve(args.function)      # import the user's module now, not at takeover time
        log.info("spare for %s ready (pid %s)", args.function, os.getpid())
        line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        if not line.strip():
            await backend.close()
            return 0                # released unused
        for name, value in json.loads(line).items():
            setattr(args, name, value)
    if args.work is None or args.attempt is None or args.token is None:
        await backend.close()
        raise ConfigError("outlive worker needs --work, --attempt and --token (or --standby)")
    definition = WorkDefinition(
        work_id=args.work, attempt=args.function, contract=_UNJUDGED, inputs=args.inputs,
        persist=args.persist, lease=Lease(heartbeat_interval=args.heartbeat), args=tuple(args.arg))
    assignment = Assignment(backend_url=args.backend, work_id=args.work, attempt=args.attempt,
                            token=args.token, pinned_version=None, function=args.function,
                            definition=definition,
                            secret=getattr(args, "secret", None) or os.environ.get(SECRET_ENV) or None)
    tag = f"attempt #{args.attempt} of {args.work} (token {args.token}, pid {os.getpid()})"
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    assert task is not None
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    log.info("%s starts", tag)
    try:
        await run_attempt(backend, assignment)
    except asyncio.CancelledError:
        log.warning("%s stopped by SIGTERM: it was replaced", tag)
        return 143
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        await backend.close()
    log.info("%s ended", tag)
    return 0


def worker_main(argv: list[str] | None = None) -> int:
    """``outlive worker MODULE:FUNCTION --backend URL --work ID --attempt N --token T …``
    (the options are the CLI's: ``outlive worker --help``)."""
    from .cli import main

    return main(["worker", *(sys.argv[1:] if argv is None else argv)])


def run_worker_command(args: argparse.Namespace) -> int:
    # Like `python -m`, the working directory is importable: MODULE names the user's module.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return asyncio.run(run_worker(args))
    except OutliveError as exc:
        log.error("%s: %s", type(exc).__name__, exc.message)
        return 2

