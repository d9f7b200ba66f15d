"""Start a real Restate server plus one deployment of an app, on free loopback ports; stop by PID.

Used by the pytest fixtures, the benchmark and ``make sweep-restate``::

    python -m outlive_restate.server -- outlive sweep --backend {url}

The binary is ``.engines/restate/node_modules/@restatedev/restate-server-linux-x64/bin/
restate-server`` (installed by ``make engine-restate``), launched directly: the ``.bin`` wrapper
is a Node process that spawns the server under another PID (ENGINE-NOTES pitfall 7). Override it
with ``OUTLIVE_RESTATE_SERVER=/path/to/restate-server``. Each server gets its own base directory
(a temp dir unless given), so a restart with the same directory keeps every ledger.

The deployment serves the app named by ``app="module:attr"`` (default: outlive's own objects) and
is registered once, as a user registers any Restate app; restarting the deployment on the same
address needs no new registration.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

import httpx

from ._dispatch import LEASE

__all__ = ["BINARY_ENV", "RestateServer", "default_binary", "free_port", "main"]

#: Environment variable that overrides the restate-server binary.
BINARY_ENV = "OUTLIVE_RESTATE_SERVER"
_REL = ".engines/restate/node_modules/@restatedev/restate-server-linux-x64/bin/restate-server"


def free_port() -> int:
    """A free loopback TCP port (the tiny race with other binders is accepted)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def default_binary() -> Path:
    """``$OUTLIVE_RESTATE_SERVER``, else the project-local npm install (searched upwards)."""
    env = os.environ.get(BINARY_ENV)
    if env:
        return Path(env)
    for base in (Path.cwd(), *Path.cwd().parents, *Path(__file__).resolve().parents):
        cand = base / _REL
        if cand.exists():
            return cand
    return Path.cwd() / _REL


class RestateServer:
    """One restate-server process and one deployment process serving one app."""

    def __init__(self, base_dir: str | os.PathLike[str] | None = None, *,
                 binary: str | os.PathLike[str] | None = None,
                 protocol: str | None = None, ready_timeout: float = 60.0,
                 app: str | None = None, pythonpath: tuple[str, ...] = (),
                 ledger: str | None = None) -> None:
        self.binary = Path(binary) if binary is not None else default_binary()
        self._own_dir = base_dir is None
        self.base_dir = Path(base_dir) if base_dir is not None else Path(
            tempfile.mkdtemp(prefix="outlive-restate-"))
        self.protocol = protocol
        #: ``module:attr`` of the ASGI app the deployment serves (None: outlive's objects only).
        self.app = app
        #: The object keeping the ledgers, if not ``outlive_ledger`` (goes into :attr:`url`).
        self.ledger = ledger
        #: Directories put first on the deployment's PYTHONPATH (where ``app`` lives).
        self.pythonpath = tuple(pythonpath)
        self.ready_timeout = ready_timeout
        self.ingress_port = free_port()
        self.admin_port = free_port()
        self.fabric_port = free_port()
        self.deployment_port = free_port()
        self.server: subprocess.Popen[bytes] | None = None
        self.deployment: subprocess.Popen[bytes] | None = None

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
    def start(self) -> str:
        """Start the server and the deployment, register it, wait for a real call; the URL."""
        try:
            self.start_server()
            self.start_deployment()
            self.register()
            self.wait_callable()
        except BaseException:
            self.stop()
            raise
        return self.url

    def start_server(self) -> None:
        if not self.binary.exists():
            raise RuntimeError(
                f"restate-server not found at {self.binary}: run `make engine-restate` (installs "
                f"@restatedev/restate-server into .engines/restate/) or set {BINARY_ENV}")
        env = dict(os.environ)
        env.update({
            "RESTATE_BIND_IP": "127.0.0.1",
            "RESTATE_BIND_PORT": str(self.fabric_port),
            "RESTATE_ADVERTISED_ADDRESS": f"http://127.0.0.1:{self.fabric_port}/",
            "RESTATE_INGRESS__BIND_ADDRESS": f"127.0.0.1:{self.ingress_port}",
            "RESTATE_ADMIN__BIND_ADDRESS": f"127.0.0.1:{self.admin_port}",
            "RESTATE_NODE_NAME": "outlive",
            "RESTATE_LOG_FORMAT": "compact",
            "RESTATE_LOG_FILTER": "warn",
            "RESTATE_DISABLE_TELEMETRY": "true",
            "RESTATE_SHUTDOWN_TIMEOUT": "2s",
        })
        self.base_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.base_dir / "server.log", "ab")
        self.server = subprocess.Popen(
            [str(self.binary), "--base-dir", str(self.base_dir), "--no-logo",
             "--listen-mode", "tcp"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            cwd=self.base_dir)
        log.close()
        self._wait(lambda: httpx.get(f"{self.admin}/health", timeout=1).status_code == 200,
                   "the admin API", self.server)

    def start_deployment(self) -> None:
        cmd = [sys.executable, "-m", "outlive_restate.deployment",
               "--bind", f"127.0.0.1:{self.deployment_port}"]
        if self.protocol:
            cmd += ["--protocol", self.protocol]
        if self.app:
            cmd += ["--app", self.app]
        env = dict(os.environ)
        if self.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(
                [*self.pythonpath, *filter(None, [env.get("PYTHONPATH")])])
        log = open(self.base_dir / "deployment.log", "ab")
        self.deployment = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=env)
        log.close()

        def listening() -> bool:
            import socket
            with socket.create_connection(("127.0.0.1", self.deployment_port), timeout=1):
                return True

        self._wait(listening, "the deployment", self.deployment)

    def register(self) -> None:
        """Register the deployment once, as a user registers any app (never ``force``)."""
        body: dict[str, object] = {"uri": f"http://127.0.0.1:{self.deployment_port}",
                                   "force": False}
        if self.protocol == "request_response":
            body["use_http_11"] = True
        r = httpx.post(f"{self.admin}/deployments", json=body, timeout=30)
        if r.status_code not in (200, 201):
            raise RuntimeError(f"registering the outlive deployment failed: {r.status_code} "
                               f"{r.text[:500]}")

    def wait_callable(self) -> None:
        """Healthy is not ready: wait until a real call succeeds (the lease object's status)."""
        def call() -> bool:
            r = httpx.post(f"{self.ingress}/{LEASE}/__outlive_probe__/status", content=b"",
                           timeout=5)
            return r.status_code == 200

        self._wait(call, "a first call", self.server)

    def _wait(self, probe: object, what: str, proc: subprocess.Popen[bytes] | None) -> None:
        deadline = time.monotonic() + self.ready_timeout
        last: object = None
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{what}: process exited with {proc.returncode}; "
                                   f"log tail:\n{self.log_tail()}")
            try:
                if probe():  # type: ignore[operator]
                    return
            except (httpx.HTTPError, OSError) as exc:
                last = exc
            time.sleep(0.05)
        raise RuntimeError(f"{what} not ready after {self.ready_timeout}s ({last!r}); "
                           f"log tail:\n{self.log_tail()}")

    def log_tail(self, n: int = 30) -> str:
        out = []
        for name in ("server.log", "deployment.log"):
            p = self.base_dir / name
            if p.exists():
                lines = p.read_text(errors="replace").splitlines()[-n:]
                out.append(f"--- {name}\n" + "\n".join(lines))
        return "\n".join(out)

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes] | None, *, hard: bool = False,
              timeout: float = 10) -> None:
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

    def stop_server(self, *, hard: bool = False) -> None:
        self._kill(self.server, hard=hard)

    def stop_deployment(self, *, hard: bool = True) -> None:
        """SIGKILL by default: the process holds no state, and once the SDK's native extension
        has served a call it no longer reacts to SIGTERM in time (observed: >10 s)."""
        self._kill(self.deployment, hard=hard)

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
        """Stop both processes by their own PIDs; remove the base dir if it was ours."""
        self._kill(self.server)
        self._kill(self.deployment, hard=True)
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> RestateServer:
        self.start()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m outlive_restate.server [--base-dir D] [-- CMD ... {url} ...]``.

    ``{handler_url}`` in CMD is the same server as ``restate+handler://`` (the conformance
    scenario with every attempt inside a handler, :mod:`outlive_restate.testing`).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(prog="python -m outlive_restate.server")
    p.add_argument("--base-dir", default=None)
    p.add_argument("--protocol", choices=["bidi", "request_response"], default=None)
    p.add_argument("--app", default=None, metavar="MODULE:ATTR",
                   help="the app the deployment serves (default: outlive's objects only)")
    args = p.parse_args(argv)
    srv = RestateServer(args.base_dir, protocol=args.protocol, app=args.app)
    t0 = time.monotonic()
    srv.start()
    print(f"restate ready at {srv.url} in {time.monotonic() - t0:.2f}s "
          f"(server pid {srv.server.pid if srv.server else '?'})", file=sys.stderr, flush=True)
    try:
        # SIGTERM stops the command (if any) and both processes, like Ctrl-C.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        if cmd:
            t1 = time.monotonic()
            handler_url = srv.url.replace("restate://", "restate+handler://", 1)
            child = subprocess.Popen([c.replace("{url}", srv.url)
                                      .replace("{handler_url}", handler_url) for c in cmd])
            try:
                rc = child.wait()
            finally:
                if child.poll() is None:
                    child.terminate()
                    try:
                        child.wait(10)
                    except subprocess.TimeoutExpired:
                        child.kill()
            print(f"command exited {rc} after {time.monotonic() - t1:.1f}s", file=sys.stderr)
            return rc
        print(srv.url, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0
    finally:
        srv.stop()


if __name__ == "__main__":
    sys.exit(main())
