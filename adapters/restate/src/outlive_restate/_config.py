"""``restate://HOST:INGRESS_PORT?admin=ADMIN_PORT&ledger=OBJECT&retry_for=SECONDS`` -> config.

``ledger`` names the Virtual Object that keeps the works' ledgers (``outlive_ledger`` unless the
owner shape keeps them on the user's own object). ``admin`` is optional: only listing works uses
the admin API (a read-only introspection query); nothing in outlive registers or kills anything.
Unknown options are rejected, so a typo does not silently fall back to a default.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from outlive.errors import ConfigError

from ._ledger import LEDGER

__all__ = ["RestateConfig", "parse_url"]

_OPTIONS = frozenset({"admin", "ledger", "retry_for"})


@dataclass(frozen=True, kw_only=True)
class RestateConfig:
    #: The ingress base URL, ``http://HOST:PORT``.
    ingress: str
    #: The admin base URL, or None when not given.
    admin: str | None
    #: The Virtual Object that keeps the ledgers.
    ledger: str = LEDGER
    #: How long a command keeps retrying (same idempotency key) while Restate is unreachable.
    retry_for: float = 30.0


def parse_url(url: str) -> RestateConfig:
    """``restate://127.0.0.1:8080?admin=9070`` -> :class:`RestateConfig`."""
    parts = urlsplit(url)
    if parts.scheme != "restate" or not parts.hostname:
        raise ConfigError(f"{url}: expected restate://HOST:INGRESS_PORT?admin=ADMIN_PORT", url=url)
    host = parts.hostname
    try:
        port = parts.port or 8080
        q = {k: v[-1] for k, v in parse_qs(parts.query, strict_parsing=bool(parts.query)).items()}
    except ValueError as exc:
        raise ConfigError(f"{url}: {exc}", url=url) from exc
    unknown = sorted(set(q) - _OPTIONS)
    if unknown:
        raise ConfigError(f"{url}: unknown option(s) {unknown}; known: {sorted(_OPTIONS)}", url=url)
    admin: str | None = None
    if "admin" in q:
        a = q["admin"]
        if "://" in a:
            admin = a.rstrip("/")
        elif a.isdigit():
            admin = f"http://{host}:{int(a)}"
        else:
            raise ConfigError(f"{url}: admin is a port or a base URL", url=url)
    try:
        retry_for = float(q.get("retry_for", "30"))
    except ValueError as exc:
        raise ConfigError(f"{url}: retry_for is a number of seconds", url=url) from exc
    ledger = q.get("ledger", LEDGER)
    if not ledger:
        raise ConfigError(f"{url}: ledger names a Virtual Object", url=url)
    return RestateConfig(ingress=f"http://{host}:{port}", admin=admin, ledger=ledger,
                         retry_for=retry_for)
