"""``langgraph+sqlite:///PATH``, ``langgraph+memory://``, ``langgraph+postgres://…`` -> a validated
configuration (unknown options refused).

Every scheme takes ``durability`` (LangGraph's: ``sync``, the default, ``async`` or ``exit``);
``langgraph+postgres`` also takes the core ``postgresql://`` ledger's options, which the core
validates itself (:func:`outlive._postgres.postgres_options`).
"""

from __future__ import annotations

from dataclasses import dataclass

from outlive.backend import url_options
from outlive.errors import ConfigError

from ._context import DURABILITIES, Durability

__all__ = ["Config", "parse_url"]


@dataclass(frozen=True)
class Config:
    durability: Durability


def parse_url(url: str, others: tuple[str, ...] = ()) -> Config:
    """The options every ``langgraph+`` scheme takes; any option but ``others`` (read and
    validated by the scheme's ledger store) is refused."""
    value = url_options(url, ("durability", *others)).get("durability", "sync")
    for known in DURABILITIES:
        if value == known:
            return Config(durability=known)
    raise ConfigError(f"{url}: durability must be one of {', '.join(DURABILITIES)}", url=url)
