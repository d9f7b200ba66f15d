"""The one thing an engine adapter must provide, and how a URL picks it.

An adapter persists "apply this command to work W's ledger" atomically and durably with its
engine's own primitive; the pure ledger (:mod:`outlive.ledger`) decides. ``run_step`` is the hook
through which an engine runs a step as its own durable step (an activity, ``ctx.run_typed``, a
``@task``); embedded backends just call the function.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any, ClassVar
from urllib.parse import urlsplit

from .errors import ConfigError, MissingExtra, UnknownBackend
from .ledger import Command, Outcome
from .records import WorkState

__all__ = ["Backend", "StepCall", "open_backend", "register_backend", "KNOWN_EXTRAS"]

#: Schemes served by an optional distribution, with the line that installs it.
KNOWN_EXTRAS: dict[str, str] = {
    "temporal": "pip install outlive-temporal",
    "restate": "pip install outlive-restate",
    "langgraph+sqlite": "pip install outlive-langgraph",
    "langgraph+memory": "pip install outlive-langgraph",
    "langgraph+postgres": "pip install outlive-langgraph",
}


@dataclass(frozen=True, kw_only=True)
class StepCall:
    """What an engine needs to know to run one step as its own durable step."""

    work_id: str
    attempt: int
    token: int
    step: str
    input_key: str
    #: "step" when the result is journaled right after the body, "end" when it waits for the
    #: candidate: an engine with its own durability modes can match them.
    persist: str = "step"


class Backend(abc.ABC):
    """A durable home for ledgers. Subclasses: embedded (memory, SQLite) and engine adapters."""

    #: Feature names the conformance suite may check (by feature, never by engine).
    capabilities: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, url: str) -> None:
        self.url = url
        #: Set once ``start`` succeeded, so ``async with await open_backend(url)`` starts once.
        self.started = False

    async def start(self) -> None:
        """Connect. Raise :class:`~outlive.errors.BackendUnavailable` if the engine is down."""

    @abc.abstractmethod
    async def execute(self, work_id: str, command: Command) -> Outcome:
        """Apply ``command`` to ``work_id``'s ledger atomically; raise the ledger's rejection."""

    @abc.abstractmethod
    async def load(self, work_id: str) -> WorkState | None:
        """The work's current ledger state, or None if it was never opened."""

    async def works(self) -> list[str]:
        """Work ids this backend holds (for ``outlive inspect``); may be unsupported."""
        return []

    async def run_step(self, call: StepCall, fn: Callable[[], Awaitable[Any]]) -> Any:
        """Run one step's body. Engines override this to run it as their own durable step."""
        return await fn()

    async def run_and_record(self, call: StepCall, fn: Callable[[], Awaitable[Any]],
                             record: Callable[[Any], Command]) -> tuple[Any, Outcome]:
        """Run a step and journal its result with the fenced write ``record(result)``.

        The default is ``run_step`` then ``execute``. An engine that can do both inside one of
        its own invocations (the step's journal entry and the ledger command together) overrides
        this to save a round trip; the ledger's checks are the same either way.
        """
        result = await self.run_step(call, fn)
        return result, await self.execute(call.work_id, record(result))

    async def run_and_record_many(
            self, calls: list[StepCall], fns: list[Callable[[], Awaitable[Any]]],
            records: list[Callable[[Any], Command]]) -> list[Any]:
        """Run several steps in order, journaling each before the next starts.

        The default loops over :meth:`run_and_record`. An engine that can drive the whole
        sequence itself (a workflow running the activities back to back, journaling each result
        in its own state) overrides this to take the client out of the loop. If a step or its
        fenced write fails, the steps before it stay journaled and the error propagates.
        """
        results = []
        for call, fn, record in zip(calls, fns, records, strict=True):
            result, _ = await self.run_and_record(call, fn, record)
            results.append(result)
        return results

    async def close(self) -> None:
        """Release connections; never deletes data."""

    async def __aenter__(self) -> Backend:
        if not self.started:
            await self.start()
            self.started = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


_REGISTRY: dict[str, Callable[[str], Backend]] = {}


def register_backend(scheme: str, factory: Callable[[str], Backend]) -> None:
    """Register a scheme in-process (tests, experiments); packages use the entry-point group."""
    _REGISTRY[scheme] = factory


def _factory(scheme: str) -> Callable[[str], Backend]:
    if scheme in _REGISTRY:
        return _REGISTRY[scheme]
    if scheme == "memory":
        from ._memory import MemoryBackend

        return MemoryBackend
    if scheme == "sqlite":
        from ._sqlite import SqliteBackend

        return SqliteBackend
    for ep in metadata.entry_points(group="outlive.backends"):
        if ep.name == scheme:
            loaded = ep.load()
            return loaded  # type: ignore[no-any-return]
    if scheme in KNOWN_EXTRAS:
        raise MissingExtra(
            f"the {scheme}:// backend is not installed; install it with: {KNOWN_EXTRAS[scheme]}",
            install=KNOWN_EXTRAS[scheme], scheme=scheme,
        )
    known = sorted({"memory", "sqlite", *KNOWN_EXTRAS, *_REGISTRY})
    raise UnknownBackend(f"no backend for scheme {scheme!r}; known schemes: {', '.join(known)}",
                         scheme=scheme)


async def open_backend(url: str) -> Backend:
    """Resolve ``url`` to a backend through the ``outlive.backends`` entry points and start it.

    ``sqlite:///outlive.db`` (the default), ``memory://``, ``temporal://127.0.0.1:7233``,
    ``restate://127.0.0.1:8080?admin=9070``, ``langgraph+sqlite:///lg.db``.
    """
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(f"not a backend URL: {url!r} (expected e.g. sqlite:///outlive.db)", url=url)
    scheme = urlsplit(url).scheme.lower()
    backend = _factory(scheme)(url)
    await backend.start()
    backend.started = True
    return backend
