"""``outlive explore``: the page and its two JSON endpoints on the standard library's HTTP server.

Loopback only by default. The page is a few bundled static files (no CDN, no build step), so it
works offline. Requests for a loopback-bound server must name a loopback host (a page on another
site cannot reach it through DNS rebinding), and runs are only accepted as JSON posts (a plain
cross-site form cannot send them). A backend can only be chosen from those given at start-up.
"""

from __future__ import annotations

import ipaddress
import json
import mimetypes
import sys
import threading
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

from ._service import ExploreError, Explorer

__all__ = ["ExplorerServer", "serve"]

_STATIC = ("index.html", "explore.js", "explore.css")
_MAX_BODY = 1_000_000


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class ExplorerServer(ThreadingHTTPServer):
    """The HTTP server; ``url`` is where the page is, ``explorer`` answers the runs."""

    daemon_threads = True

    def __init__(self, explorer: Explorer, host: str = "127.0.0.1", port: int = 0) -> None:
        self.explorer = explorer
        self.loopback_only = _is_loopback(host)
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else str(host)
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/"

    def start_in_thread(self) -> threading.Thread:
        """Serve in a daemon thread (tests and embedding); stop with ``shutdown()``."""
        t = threading.Thread(target=self.serve_forever, name="outlive-explore", daemon=True)
        t.start()
        return t


class _Handler(BaseHTTPRequestHandler):
    server: ExplorerServer
    server_version = "outlive-explore"

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Quiet: one line per failed request only."""
        if isinstance(code, int) and code >= 400:
            sys.stderr.write(f"explore: {self.command} {self.path} -> {code}\n")

    def log_message(self, format: str, *args: Any) -> None:
        """Nothing else: the page shows its own errors."""

    def _host_ok(self) -> bool:
        if not self.server.loopback_only:
            return True
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
        return _is_loopback(host)

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, data: Any) -> None:
        self._send(status, json.dumps(data, default=str).encode(), "application/json")

    def _error(self, status: int, kind: str, message: str) -> None:
        self._json(status, {"error": {"type": kind, "message": message}})

    def do_GET(self) -> None:
        if not self._host_ok():
            return self._error(HTTPStatus.FORBIDDEN, "Forbidden", "not a loopback host")
        path = self.path.split("?", 1)[0]
        if path == "/api/config":
            return self._json(HTTPStatus.OK, self.server.explorer.config())
        name = "index.html" if path in ("/", "/index.html") else path.removeprefix("/static/")
        if name not in _STATIC:
            return self._error(HTTPStatus.NOT_FOUND, "NotFound", f"no such page: {path}")
        body = (resources.files(__package__) / "static" / name).read_bytes()
        ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
        self._send(HTTPStatus.OK, body, f"{ctype}; charset=utf-8")

    def do_POST(self) -> None:
        if not self._host_ok():
            return self._error(HTTPStatus.FORBIDDEN, "Forbidden", "not a loopback host")
        if self.path != "/api/run":
            return self._error(HTTPStatus.NOT_FOUND, "NotFound", f"no such endpoint: {self.path}")
        if not (self.headers.get("Content-Type") or "").startswith("application/json"):
            return self._error(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "BadRequest",
                               "send the run as application/json")
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_BODY:
            return self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "BadRequest", "request too large")
        try:
            request = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(request, dict):
                raise ValueError("expected a JSON object")
        except ValueError as exc:
            return self._error(HTTPStatus.BAD_REQUEST, "BadRequest", f"not a JSON object: {exc}")
        try:
            answer = self.server.explorer.run(request)
        except ExploreError as exc:
            return self._error(HTTPStatus.UNPROCESSABLE_ENTITY, exc.kind, exc.message)
        except Exception as exc:     # a bug must still reach the page as a message
            return self._error(HTTPStatus.INTERNAL_SERVER_ERROR, type(exc).__name__, str(exc))
        self._json(HTTPStatus.OK, answer)


def serve(*, host: str = "127.0.0.1", port: int = 8765, backends: Sequence[str] = (),
          scenario_files: Sequence[str | Path] = (), timeout: float = 120.0,
          ready: Any = None) -> None:
    """Serve the explorer until interrupted. ``ready(url)`` is called once it listens."""
    explorer = Explorer.create(scenario_files, backends, timeout)
    with ExplorerServer(explorer, host, port) as httpd:
        if ready is not None:
            ready(httpd.url)
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass
