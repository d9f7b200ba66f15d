"""Start a real Restate server plus one deployment of an app, on free loopback ports; stop by PID.

Used by the pytest fixtures, the benchmark, ``outlive demo --engine restate`` and
``make sweep-restate``::

    python -m outlive_restate.server -- outlive sweep --backend {url}

The binary: ``$OUTLIVE_RESTATE_SERVER``, else ``restate-server`` on PATH, else the npm package
``@restatedev/restate-server`` installed under ``.engines/restate`` of this checkout or of the
working directory (``make engine-restate``). The npm package's ``.bin/restate-server`` is a Node
wrapper that starts the real server under another PID, so the platform binary is launched
directly and this process owns the server's PID. Each server gets its own base directory (a temp
dir unless given), so a restart with the same directory keeps every ledger. It is an
:class:`outlive._launch.Launcher`, like every server outlive starts.

The deployment serves the app named by ``app="module:attr"`` (default: outlive's own objects) and
is registered once, as a user registers any Restate app; restarting the deployment on the same
address needs no new registration.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import click
import httpx

from outlive._launch import (
    Launcher,
    LaunchError,
    free_port,
    launcher_main,
    port_open,
    stop_process,
    wait_until,
)

from ._dispatch import LEASE

#: The server's node name: its data lives in a directory of that name in the base dir.
_NODE = "outlive"

__all__ = ["BINARY_ENV", "RestateServer", "default_binary", "free_port", "main"]

#: Environment variable that overrides the restate-server binary.
BINARY_ENV = "OUTLIVE_RESTATE_SERVER"
_REL = ".engines/restate/node_modules/@restatedev/restate-server-linux-x64/bin/restate-server"


def default_binary() -> Path:
    """``$OUTLIVE_RESTATE_SERVER``, else ``restate-server`` on PATH, else a project-local npm
    install (searched upwards from the working directory and from this package)."""
    env = os.environ.get(BINARY_ENV)
    if env:
        return Path(env)
    on_path = shutil.which("restate-server")
    if on_path:
        return Path(on_path)
    for base in (Path.cwd(), *Path.cwd().parents, *Path(__file__).resolve().parents):
        cand = base / _REL
        if cand.exists():
            return cand
    return Path.cwd() / _REL


class RestateServer(Launcher):
    """One restate-server process and one deployment process serving one app."""

    name = "restate"

    def __init__(self, base_dir: str | os.PathLike[str] | None = None, *,
                 binary: str | os.PathLike[str] | None = None,
                 protocol: str | None = None, ready_timeout: float = 60.0,
                 app: str | None = None, pythonpath: tuple[str, ...] = (),
                 ledger: str | None = None, replicas: int = 1) -> None:
        self.binary = Path(binary) if binary is not None else default_binary()
        super().__init__(base_dir, ready_timeout=ready_timeout)
        self.protocol = protocol
        #: ``module:attr`` of the ASGI app the deployment serves (None: outlive's objects only).
        self.app = app
        #: The object keeping the ledgers, if not ``outlive_ledger`` (goes into :attr:`url`).
        self.ledger = ledger
        #: Directories put first on the deployment's PYTHONPATH (where ``app`` lives).
        self.pythonpath = tuple(pythonpath)
        if replicas < 1:
            raise LaunchError("a deployment has at least one replica")
        self._replica_count = replicas
        self._pick_ports()
        self.server: subprocess.Popen[bytes] | None = None
        self.deployment: subprocess.Popen[bytes] | None = None
        #: Every replica's process (the one :attr:`deployment` when there is one replica).
        self.replicas: list[subprocess.Popen[bytes]] = []
        self.balancer: subprocess.Popen[bytes] | None = None

    def _pick_ports(self) -> None:
        self.ingress_port = free_port()
        self.admin_port = free_port()
        self.fabric_port = free_port()
        self.deployment_port = free_port()
        #: With more than one replica, each serves the app on a port of its own behind a
        #: balancer on :attr:`deployment_port` (the registered address), per HTTP/2 stream.
        self.replica_ports = ([free_port() for _ in range(self._replica_count)]
                              if self._replica_count > 1 else [])

    @property
    def url(self) -> str:
        extra = f"&ledger={self.ledger}" if self.ledger else ""
        return f"restate://127.0.0.1:{self.ingress_port}?admin={self.admin_port}{extra}"

    @property
    def ingress(self) -> str:
        return f"http://127.0.0.1:{self.ingress_port}"

    @property
    def admin(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> RestateServer:
        """Start the server and the deployment, register it, wait for a real call.

        A port found free can be taken before the server binds it (another process's
        connection gets it as its own port): then the server exits at once, and it is started
        again, on new ports, in a fresh data directory (the first may have kept the old
        address)."""
        return self._on_free_ports(self._start_once, self._afresh)

    def _start_once(self) -> RestateServer:
        try:
            self.start_server()
            self.start_deployment()
            self.register()
            self.wait_callable()
        except BaseException:
            self.stop()
            raise
        return self

    def _afresh(self) -> None:
        """New ports, and no data directory (the first start may have kept the old address)."""
        shutil.rmtree(self.base_dir / _NODE, ignore_errors=True)
        self._pick_ports()

    def start_server(self) -> None:
        if not self.binary.exists():
            raise LaunchError(
                f"restate-server not found (looked at {self.binary}): install the npm package "
                f"@restatedev/restate-server (in a checkout: make engine-restate) and put its "
                f"platform binary on PATH, or set {BINARY_ENV}=/path/to/restate-server")
        env = dict(os.environ)
        env.update({
            "RESTATE_BIND_IP": "127.0.0.1",
            "RESTATE_BIND_PORT": str(self.fabric_port),
            "RESTATE_ADVERTISED_ADDRESS": f"http://127.0.0.1:{self.fabric_port}/",
            "RESTATE_INGRESS__BIND_ADDRESS": f"127.0.0.1:{self.ingress_port}",
            "RESTATE_ADMIN__BIND_ADDRESS": f"127.0.0.1:{self.admin_port}",
            "RESTATE_NODE_NAME": _NODE,
            "RESTATE_LOG_FORMAT": "compact",
            "RESTATE_LOG_FILTER": "warn",
            "RESTATE_DISABLE_TELEMETRY": "true",
            "RESTATE_SHUTDOWN_TIMEOUT": "2s",
        })
        self.server = self.spawn(
            [str(self.binary), "--base-dir", str(self.base_dir), "--no-logo",
             "--listen-mode", "tcp"], env=env, cwd=self.base_dir)
        self._wait(lambda: httpx.get(f"{self.admin}/health", timeout=1).status_code == 200,
                   "the admin API", self.server)

    def start_deployment(self) -> None:
        """Serve the app: one process on the registered address, or each replica on its own
        port behind the balancer (:mod:`outlive_restate._balancer`) on that address."""
        if not self.replica_ports:
            self.deployment = self._serve(self.deployment_port, "deployment.log")
            self.replicas = [self.deployment]
            return
        self.replicas = [self._serve(port, f"replica-{i}.log")
                         for i, port in enumerate(self.replica_ports)]
        self.deployment = self.replicas[0]
        self.balancer = self.spawn(
            [sys.executable, "-m", "outlive_restate._balancer", "--listen",
             f"127.0.0.1:{self.deployment_port}",
             *(f"--backend=127.0.0.1:{port}" for port in self.replica_ports)],
            log_name="balancer.log")
        self._wait(lambda: port_open(self.deployment_port), "the balancer", self.balancer)

    def _serve(self, port: int, log_name: str) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "outlive_restate._deployment",
               "--bind", f"127.0.0.1:{port}"]
        if self.protocol:
            cmd += ["--protocol", self.protocol]
        if self.app:
            cmd += ["--app", self.app]
        env = dict(os.environ)
        if self.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(
                [*self.pythonpath, *filter(None, [env.get("PYTHONPATH")])])
        proc = self.spawn(cmd, log_name=log_name, env=env)
        self._wait(lambda: port_open(port), "the deployment", proc)
        return proc

    def register(self) -> None:
        """Register the deployment once, as a user registers any app (never ``force``)."""
        body: dict[str, object] = {"uri": f"http://127.0.0.1:{self.deployment_port}",
                                   "force": False}
        if self.protocol == "request_response":
            body["use_http_11"] = True
        r = httpx.post(f"{self.admin}/deployments", json=body, timeout=30)
        if r.status_code not in (200, 201):
            raise LaunchError(f"registering the outlive deployment failed: {r.status_code} "
                              f"{r.text[:500]}")

    def wait_callable(self) -> None:
        """Healthy is not ready: wait until a real call succeeds (the lease object's status)."""
        def call() -> bool:
            r = httpx.post(f"{self.ingress}/{LEASE}/__outlive_probe__/status", content=b"",
                           timeout=5)
            return r.status_code == 200

        self._wait(call, "a first call", self.server)

    def _wait(self, probe: Callable[[], bool], what: str,
              proc: subprocess.Popen[bytes] | None) -> None:
        wait_until(probe, what=what, timeout=self.ready_timeout, proc=proc, log=self.log_tail)

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes] | None, *, hard: bool = False,
              timeout: float = 10) -> None:
        stop_process(proc, sig=signal.SIGKILL if hard else signal.SIGTERM, timeout=timeout)

    def stop_server(self, *, hard: bool = False) -> None:
        self._kill(self.server, hard=hard)

    def stop_deployment(self, *, hard: bool = True) -> None:
        """SIGKILL by default: the process holds no state, and once the SDK's native extension
        has served a call it no longer reacts to SIGTERM in time (observed: >10 s)."""
        for proc in self.replicas or ([self.deployment] if self.deployment else []):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)   # a paused replica cannot die of SIGTERM
            self._kill(proc, hard=hard)
        self._kill(self.balancer)

    def restart_server(self, *, hard: bool = True) -> None:
        """Kill the server (SIGKILL by default) and start it again on the same dir and ports."""
        self.stop_server(hard=hard)
        self.start_server()
        self.wait_callable()

    def restart_deployment(self, *, hard: bool = True) -> None:
        """Kill the deployment process and serve it again on the same address."""
        self.stop_deployment(hard=hard)
        self.start_deployment()

    def stop(self) -> None:
        """Stop both processes by their own PIDs (``cleanup`` also removes a temp base dir)."""
        self._kill(self.server)
        self.stop_deployment()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m outlive_restate.server [OPTIONS] [-- CMD ... {url} ... {handler_url} ...]``."""
    return launcher_main(
        lambda base_dir, ready_timeout, protocol, app: RestateServer(
            base_dir, ready_timeout=ready_timeout, protocol=protocol, app=app),
        prog="python -m outlive_restate.server",
        description="A Restate server and one deployment (outlive's objects, or your app), on "
                    "free loopback ports in their own directory, stopped by their PIDs on exit. "
                    "{handler_url} in the command is the restate+handler:// URL of the same "
                    "server.",
        options=[
            click.Option(["--protocol"], type=click.Choice(["bidi", "request_response"]),
                         default=None,
                         help="Serve the deployment bidirectionally over HTTP/2 (bidi, the "
                              "default) or request-response over HTTP/1.1."),
            click.Option(["--app"], default=None, metavar="MODULE:ATTR",
                         help="The app the deployment serves (default: outlive's objects only)."),
        ],
        placeholders=lambda server: {"{handler_url}": server.url.replace(
            "restate://", "restate+handler://", 1)},
        argv=argv)


if __name__ == "__main__":
    sys.exit(main())
