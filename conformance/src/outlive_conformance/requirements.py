"""What a backend can do, named by feature, and how the suites skip what it cannot.

Modelled on SQLAlchemy's ``testing/requirements.py``: a test says which feature it needs
(``@requires("durable")``); the backend says which it has through ``Backend.capabilities``; a
backend author who must narrow that further overrides the ``outlive_requirements`` fixture.
A test the backend cannot run is *skipped with the reason*, never counted as passed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

__all__ = ["FEATURES", "Requirements", "requires"]

#: Every feature a suite may ask for, with what it means for a backend that declares it.
FEATURES: dict[str, str] = {
    "atomic-commands": "each ledger command is applied whole or not at all, one at a time per work",
    "durable": "a new client on the same URL sees every committed record",
    "multi-process": "several processes may write one work's ledger through the same URL",
    "engine-steps": "a step's body runs as the engine's own durable step",
}

_F = TypeVar("_F", bound=Callable[..., Any])


def requires(*features: str) -> Callable[[_F], _F]:
    """Mark a test as needing ``features``; unknown names fail at import, not silently."""
    unknown = [f for f in features if f not in FEATURES]
    if unknown:
        raise ValueError(f"unknown feature(s) {unknown}; known: {sorted(FEATURES)}")
    mark = pytest.mark.outlive_requires(*features)

    def decorate(fn: _F) -> _F:
        return mark(fn)  # type: ignore[no-any-return]

    return decorate


@dataclass(frozen=True)
class Requirements:
    """The features one backend has; ``missing`` says which of a test's needs it lacks."""

    features: frozenset[str]

    @classmethod
    def of(cls, capabilities: Iterable[str]) -> Requirements:
        return cls(frozenset(capabilities) & frozenset(FEATURES))

    def without(self, *features: str) -> Requirements:
        """For an author whose backend declares a capability it cannot keep in some setting."""
        return Requirements(self.features - set(features))

    def missing(self, needs: Iterable[str]) -> list[str]:
        return [f for f in needs if f not in self.features]
