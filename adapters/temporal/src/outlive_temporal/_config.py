"""``temporal://HOST:PORT[/NAMESPACE]?...`` -> a validated configuration (unknown options refused)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from outlive.backend import url_options
from outlive.errors import ConfigError

__all__ = ["Config", "parse_url"]


@dataclass(frozen=True)
class Config:
    target: str
    namespace: str
    task_queue: str
    heartbeat_ms: int
    start_to_close_ms: int
    auto_heartbeat: bool
    can_after: int
    retry_s: float
    sandbox: bool
    eager: bool


def parse_url(url: str) -> Config:
    parts = urlsplit(url)
    if parts.scheme != "temporal":
        raise ConfigError(f"{url}: not a temporal:// URL", url=url)
    try:
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ConfigError(f"{url}: bad port ({exc})", url=url) from exc
    if not host or not port:
        raise ConfigError(f"{url}: expected temporal://HOST:PORT[/NAMESPACE]", url=url)
    ns = parts.path.strip("/") or "default"
    if "/" in ns:
        raise ConfigError(f"{url}: the path is one namespace name", url=url)
    q = url_options(url, ("task_queue", "heartbeat_ms", "start_to_close_ms", "auto_heartbeat",
                          "can_after", "retry_s", "sandbox", "eager"))
    try:
        return Config(
            target=f"{host}:{port}", namespace=ns,
            task_queue=q.get("task_queue", "outlive-ledger"),
            heartbeat_ms=int(q.get("heartbeat_ms", "10000")),
            start_to_close_ms=int(q.get("start_to_close_ms", "3600000")),
            auto_heartbeat=q.get("auto_heartbeat", "1") not in ("0", "false", "no"),
            can_after=int(q.get("can_after", "1000")),
            retry_s=float(q.get("retry_s", "30")),
            sandbox=q.get("sandbox", "0") not in ("0", "false", "no"),
            eager=q.get("eager", "0") not in ("0", "false", "no"),
        )
    except ValueError as exc:
        raise ConfigError(f"{url}: {exc}", url=url) from exc
