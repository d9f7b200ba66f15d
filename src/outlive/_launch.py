"""One shape for the servers outlive starts itself (Temporal dev server, Restate, PostgreSQL).

Tests, benchmarks, sweeps and ``outlive demo --engine`` need a real engine that belongs to them:
on free loopback ports, in a directory of its own, stopped by its own PID (never by name), with
its log kept for the error message when it does not come up. Every launcher is a
:class:`Launcher` and every launcher's ``python -m`` entry is :func:`launcher_main`, so all of them
answer ``--help`` the same way and run ``-- CMD ... {url} ...`` the same way.
"""

from __future__ import annotations

import abc
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from .errors import BackendUnavailable

__all__ = ["LAUNCHERS", "LaunchError", "Launcher", "free_port", "http_ok", "launcher_main",
           "guard", "port_open",
           "start_engine", "stop_process", "wait_until"]

#: engine -> (``"module:Launcher"``, the extra that installs it); imported only when asked for.
LAUNCHERS: dict[str, tuple[str, str]] = {
    "temporal": ("outlive_temporal.devserver:DevServer", "temporal-devserver"),
    "restate": ("outlive_restate.server:RestateServer", "restate"),
}


class LaunchError(BackendUnavailable):
    """A launcher could not find its binary or its server did not come up; the message says why."""


T = TypeVar("T")

def free_port(host: str = "127.0.0.1") -> int:
    """A currently free TCP port on ``host`` (loopback by default)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


#: How many times a launcher starts its server on new ports when a port it picked free was taken
#: before the server bound it (``free_port`` lets the port go: another process's connection
#: can get it as its own port first).
PORT_TRIES = 3


def port_taken(exc: BaseException | str) -> bool:
    """Whether a server's start failed on a port taken meanwhile (the error, or what the server
    logged during that start, says so)."""
    text = str(exc).lower()
    return "address already in use" in text or "address in use" in text


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """Whether a GET of ``url`` answers 200 (a readiness probe for servers with an HTTP API)."""
    import urllib.request

    with urllib.request.urlopen(url, timeout=timeout) as response:
        return int(response.status) == 200


def wait_until(probe: Callable[[], bool], *, what: str, timeout: float,
               proc: subprocess.Popen[bytes] | None = None,
               log: Callable[[], str] = lambda: "", interval: float = 0.05) -> None:
    """Poll ``probe`` until it returns True; LaunchError if ``proc`` exits or time runs out.

    A probe may raise OSError (or anything the caller's client raises for "not yet"): it counts
    as not ready, and the last such error is in the message.
    """
    deadline = time.monotonic() + timeout
    last: object = "no answer yet"
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise LaunchError(f"{what}: the process exited with {proc.returncode} before it was "
                              f"ready\n{log()}")
        try:
            if probe():
                return
        except Exception as exc:
            last = exc
        time.sleep(interval)
    raise LaunchError(f"{what} not ready after {timeout:.0f} s ({last})\n{log()}")


def stop_process(proc: subprocess.Popen[bytes] | None, *, sig: int = signal.SIGTERM,
                 timeout: float = 10.0) -> None:
    """Signal ``proc`` by its own PID and wait; SIGKILL if it outlives ``timeout``."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)


#: The watchdog's program: read ``pid start-time`` lines until EOF (the owner's end of the pipe
#: closed: it exited, however it exited), then stop each process still running that started at
#: the time it was registered with (a reused PID is left alone): SIGTERM, SIGKILL after 10 s.
_WATCHDOG = """
import os, signal, sys, time
def started(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]
procs = [line.split() for line in sys.stdin.buffer.read().decode().splitlines() if line]
mine = [int(pid) for pid, start in procs if started(int(pid)) == start]
for pid in mine:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
end = time.monotonic() + 10
while mine and time.monotonic() < end:
    time.sleep(0.1)
    mine = [pid for pid in mine if started(pid) is not None]
for pid in mine:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
"""
_GUARD: dict[int, int] = {}          # owner pid -> the write end of its watchdog's pipe
_GUARD_LOCK = threading.Lock()


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


def guard(proc: subprocess.Popen[bytes]) -> None:
    """Stop ``proc`` when this process dies, however it dies (Linux; elsewhere nothing).

    A server started by a test process killed without its teardown (a ``timeout`` wrapper's
    SIGTERM, a SIGKILL) outlived it. One watchdog process per owner holds the read end of a pipe
    whose only write end the owner keeps; each guarded process is registered on it. When the
    owner exits the pipe closes, and the watchdog stops every registered process that still runs
    (checked by its start time, so a reused PID is never signalled). Nothing polls meanwhile.
    """
    start = _start_time(proc.pid)
    if start is None:
        return
    with _GUARD_LOCK:
        fd = _GUARD.get(os.getpid())
        if fd is None:
            read, fd = os.pipe()     # non-inheritable: no other child holds the write end
            try:
                subprocess.Popen([sys.executable, "-c", _WATCHDOG], stdin=read,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True)
            finally:
                os.close(read)
            _GUARD[os.getpid()] = fd
        os.write(fd, f"{proc.pid} {start}\n".encode())


class Launcher(abc.ABC):
    """A server this process owns: ``with Launcher() as server: use(server.url)``.

    ``base_dir`` keeps the server's data and logs; without one the launcher makes a temp dir and
    removes it on :meth:`cleanup` (a restart with the same ``base_dir`` keeps the data).
    """

    #: Shown by ``--help`` and in error messages.
    name: str = "server"

    def __init__(self, base_dir: str | os.PathLike[str] | None = None, *,
                 ready_timeout: float = 60.0) -> None:
        self.own_dir = base_dir is None
        self.base_dir = Path(base_dir) if base_dir is not None else Path(
            tempfile.mkdtemp(prefix=f"outlive-{self.name}-"))
        self.ready_timeout = ready_timeout
        #: Started once: its address is known to others, so a restart keeps its ports.
        self._served = False

    def _on_free_ports(self, start: Callable[[], T], repick: Callable[[], None]) -> T:
        """``start()`` (which stops what it started if it fails); when it failed on a port taken
        since it was picked free, ``repick()`` and start again, up to :data:`PORT_TRIES` times -
        at the first start only: a restarted server keeps the address its clients were given."""
        for tries in range(1, PORT_TRIES + 1):
            logged = self._log_sizes()
            try:
                out = start()
            except Exception as exc:
                # the whole of this start's log, not the error's tail: a Go server's panic puts
                # the bind error above a stack trace longer than the tail
                if self._served or tries == PORT_TRIES \
                        or not (port_taken(exc) or port_taken(self._logged_since(logged))):
                    raise
                repick()
                continue
            self._served = True
            return out
        raise AssertionError("unreachable")   # pragma: no cover

    @property
    @abc.abstractmethod
    def url(self) -> str:
        """The outlive backend URL that reaches this server."""

    @abc.abstractmethod
    def start(self) -> Self:
        """Start the server and return once it answers a real request."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop the server by its own PID; keep ``base_dir``."""

    def spawn(self, cmd: Sequence[str], *, log_name: str = "server.log",
              env: dict[str, str] | None = None, **popen: Any) -> subprocess.Popen[bytes]:
        """Start one process of this server, its output appended to ``base_dir/log_name``; it
        is stopped if this process dies without stopping it (:func:`guard`)."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        with open(self.base_dir / log_name, "ab") as log:
            proc = subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, **popen)
        guard(proc)
        return proc

    def _log_sizes(self) -> dict[Path, int]:
        """How much each log in ``base_dir`` holds now (see :meth:`_logged_since`)."""
        return {p: p.stat().st_size for p in self.base_dir.glob("*.log")}

    def _logged_since(self, sizes: dict[Path, int]) -> str:
        """What the logs in ``base_dir`` gained since ``sizes`` (:meth:`_log_sizes`)."""
        out = []
        for path in sorted(self.base_dir.glob("*.log")):
            with open(path, "rb") as f:
                f.seek(sizes.get(path, 0))
                out.append(f.read().decode(errors="replace"))
        return "\n".join(out)

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of every log in ``base_dir`` (for error messages)."""
        out = []
        for path in sorted(self.base_dir.glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {path}\n" + "\n".join(tail))
        return "\n".join(out)

    def cleanup(self) -> None:
        """Stop, and remove ``base_dir`` if this launcher made it."""
        self.stop()
        if self.own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.cleanup()


def start_engine(engine: str, base_dir: str | os.PathLike[str] | None = None) -> Launcher:
    """The launcher of ``engine`` (not started: use it as a context manager)."""
    import importlib

    from .backend import install_hint
    from .errors import ConfigError, MissingExtra

    if engine not in LAUNCHERS:
        raise ConfigError(f"no launcher for {engine!r}; launchers: {', '.join(sorted(LAUNCHERS))}")
    target, extra = LAUNCHERS[engine]
    module, _, name = target.partition(":")
    try:
        factory = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        hint = install_hint(extra)
        raise MissingExtra(f"starting a {engine} server needs {exc.name or module}; install it "
                           f"with: {hint}", install=hint) from exc
    server: Launcher = factory(base_dir=base_dir)
    return server


def launcher_main(factory: Callable[..., Launcher], *, prog: str, description: str,
                  options: Sequence[Any] = (), argv: Sequence[str] | None = None,
                  placeholders: Callable[[Any], dict[str, str]] | None = None) -> int:
    """The command line of every launcher: ``python -m MODULE [OPTIONS] [-- CMD ... {url} ...]``.

    Without a command, print the URL and serve until Ctrl-C or SIGTERM. With one, run it with
    ``{url}`` (and any of ``placeholders(server)``) filled in, then stop the server and exit with
    the command's status; SIGTERM or Ctrl-C stops the command and the server alike. ``options``
    are extra ``click.Option`` objects; their values are passed to ``factory``.
    """
    import click

    def run(base_dir: str | None, ready_timeout: float, command: tuple[str, ...],
            **extra: Any) -> int:
        server = factory(base_dir=base_dir, ready_timeout=ready_timeout, **extra)
        t0 = time.monotonic()
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        with server:
            click.echo(f"{server.name} ready at {server.url} in {time.monotonic() - t0:.2f} s "
                       f"(data in {server.base_dir})", err=True)
            if command:
                fill = {"{url}": server.url, **(placeholders(server) if placeholders else {})}

                def filled(part: str) -> str:
                    for key, value in fill.items():
                        part = part.replace(key, value)
                    return part

                child = subprocess.Popen([filled(part) for part in command])
                try:
                    return child.wait()
                finally:
                    stop_process(child, sig=signal.SIGTERM, timeout=10)
            click.echo(server.url)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                return 0

    params = [
        click.Option(["--dir", "base_dir"], type=click.Path(file_okay=False), default=None,
                     help="Keep the server's data and logs here (default: a temp dir, removed "
                          "on exit)."),
        click.Option(["--ready-timeout"], type=float, default=60.0, show_default=True,
                     help="Seconds to wait for the server to answer before giving up."),
        *options,
        click.Argument(["command"], nargs=-1, type=click.UNPROCESSED),
    ]
    cmd = click.Command(
        prog, params=params, callback=run, help=description
        + "\n\nWith a command after --, run it with {url} replaced by the server's backend URL, "
          "then stop the server; without one, print the URL and serve until Ctrl-C.",
        context_settings={"help_option_names": ["-h", "--help"]})
    try:
        rc = cmd.main(args=list(sys.argv[1:] if argv is None else argv), prog_name=prog,
                      standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except BackendUnavailable as exc:
        click.echo(f"{prog}: {exc.message}", err=True)
        return 2
    except KeyboardInterrupt:
        return 130
    return int(rc or 0)
