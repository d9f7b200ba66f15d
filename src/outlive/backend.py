"""The one thing an engine adapter must provide, and how a URL picks it.

An adapter persists "apply this command to work W's ledger" atomically and durably with its
engine's own primitive; the pure ledger (:mod:`outlive.ledger`) decides. ``run_step`` is the hook
through which an engine runs a step as its own durable step (an activity, ``ctx.run_typed``, a
``@task``); embedded backends just call the function.
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlsplit

from ._check import argument
from ._clone import quick_init
from .errors import ConfigError, MissingExtra, UnknownBackend
from .ledger import Command, Outcome
from .records import WorkState

__all__ = ["BACKENDS", "KNOWN_EXTRAS", "Backend", "StepCall", "can_list", "backend_factory", "install_hint",
           "make_backend", "open_backend", "register_backend", "schemes", "url_options"]

#: The lazy registry: scheme -> ``"module:Class"``, imported only when a URL asks for it (so the
#: core never imports an adapter, and backend.py never imports the embedded backends it lists).
#: A distribution not listed here registers through the ``outlive.backends`` entry-point group.
BACKENDS: dict[str, str] = {
    "memory": "outlive._memory:MemoryBackend",
    "sqlite": "outlive._sqlite:SqliteBackend",
    "postgresql": "outlive._postgres:PostgresBackend",
    "temporal": "outlive_temporal:TemporalBackend",
    "restate": "outlive_restate:RestateBackend",
    "restate+handler": "outlive_restate.testing:HandlerDrivenBackend",
    "langgraph+sqlite": "outlive_langgraph:LangGraphSqliteBackend",
    "langgraph+memory": "outlive_langgraph:LangGraphMemoryBackend",
    "langgraph+postgres": "outlive_langgraph.postgres:LangGraphPostgresBackend",
}

#: Schemes served by an optional piece, with the extra that installs it.
KNOWN_EXTRAS: dict[str, str] = {
    "postgresql": "postgres",
    "temporal": "temporal",
    "restate": "restate",
    "restate+handler": "restate",
    "langgraph+sqlite": "langgraph",
    "langgraph+memory": "langgraph",
    "langgraph+postgres": "langgraph-postgres",
}


def install_hint(extra: str) -> str:
    """The copy-pasteable line that installs an extra (quoted for every shell)."""
    return f"pip install 'outlive[{extra}]'"


@quick_init   # built once per step: the generated __init__ fills its __dict__ directly
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
        """Work ids this backend holds (for ``outlive list``). A backend that cannot list keeps
        this default; ``outlive list`` tells it from "none" by whether it was overridden."""
        return []

    #: True when :meth:`listen` delivers what other processes :meth:`notify` (PostgreSQL's
    #: ``LISTEN/NOTIFY``); a runtime on a backend without it looks for new works by a short poll.
    listens: ClassVar[bool] = False

    async def notify(self, message: str) -> None:
        """Tell the runtimes of other processes that something happened (a work started, a
        version published, a work ended). A no-op where the backend cannot carry it."""

    def listen(self) -> AsyncIterator[str]:
        """What :meth:`notify` sent, from any process, as it arrives (when :attr:`listens`)."""
        raise NotImplementedError(f"{type(self).__name__} cannot listen")

    async def hold_runner(self, runner: str) -> bool:
        """Hold ``runner`` (a runtime process's id) alive on this backend until :meth:`close` or
        the process's end, however it ends, so other processes can tell its death from its
        silence (:meth:`runner_gone`). False where the backend cannot: the lease decides."""
        return False

    async def release_runner(self, runner: str) -> None:
        """Stop holding ``runner`` (its runtime closed: its attempts run no more)."""

    async def runner_gone(self, runner: str) -> bool:
        """True only when the process that held ``runner`` is known to have ended: its attempts
        can write nothing more (a dead process holds no connection, no lock), so a successor
        need not wait out their lease. False when it is alive, paused, or cannot be told."""
        return False

    async def watch_runner(self, runner: str) -> bool:
        """Return True once ``runner`` is gone (see :meth:`runner_gone`); False at once where
        the backend cannot tell, so a runtime takes a dead runtime's attempts over as soon as it
        ends rather than at their lease."""
        return False

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


def valid_runner(runner: str) -> bool:
    """A runner id the backends can key a file or a lock by (the runtime's are uuid hex)."""
    return 0 < len(runner) <= 64 and all(c.isalnum() or c in "-_" for c in runner) \
        and runner.isascii()


def can_list(backend: Backend) -> bool:
    """Whether ``backend`` can list its works: the base class's empty list is not an answer."""
    return type(backend).works is not Backend.works


_REGISTRY: dict[str, Callable[[str], Backend]] = {}


def register_backend(scheme: str, factory: Callable[[str], Backend]) -> None:
    """Register a scheme in-process (tests, experiments); packages use the entry-point group."""
    _REGISTRY[scheme] = factory


def schemes() -> list[str]:
    """Every scheme this installation knows, installed or not."""
    eps = {ep.name for ep in metadata.entry_points(group="outlive.backends")}
    return sorted({*BACKENDS, *eps, *_REGISTRY})


def _missing(scheme: str, exc: ImportError | None = None) -> MissingExtra:
    extra = KNOWN_EXTRAS[scheme]
    line = install_hint(extra)
    why = f" ({exc})" if exc is not None and exc.name and not exc.name.startswith("outlive") else ""
    return MissingExtra(f"the {scheme}:// backend is not installed{why}; install it with: {line}",
                        install=line, scheme=scheme)


def backend_factory(scheme: str) -> Callable[[str], Backend]:
    """What builds a ``scheme://`` backend, its module imported now: ``UnknownBackend`` for a
    scheme nobody registered, ``MissingExtra`` (with the install line) when the module or one of
    the libraries it imports is missing."""
    if scheme in _REGISTRY:
        return _REGISTRY[scheme]
    # An adapter's own entry point is the authority on where its backend lives (the table below
    # is only the fallback that turns a missing adapter into an install hint); the core's own
    # schemes never depend on what is installed.
    target = None if scheme in KNOWN_EXTRAS else BACKENDS.get(scheme)
    if target is None:
        for ep in metadata.entry_points(group="outlive.backends"):
            if ep.name == scheme:
                target = ep.value
                break
    if target is None:
        target = BACKENDS.get(scheme)
    if target is None:
        if scheme in KNOWN_EXTRAS:
            raise _missing(scheme)
        raise UnknownBackend(
            f"no backend for scheme {scheme!r}; known schemes: {', '.join(schemes())}",
            scheme=scheme)
    module, _, name = target.partition(":")
    try:
        loaded = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        if scheme in KNOWN_EXTRAS:
            raise _missing(scheme, exc) from exc
        raise
    return loaded  # type: ignore[no-any-return]


def url_options(url: str, allowed: Iterable[str]) -> dict[str, str]:
    """The ``?name=value`` options of ``url``; any name outside ``allowed`` is a ConfigError.

    Every backend reads its options through this, so a misspelt option fails loudly instead of
    being ignored.
    """
    known = set(allowed)
    pairs = parse_qsl(urlsplit(url).query, keep_blank_values=True)
    options: dict[str, str] = {}
    for name, value in pairs:
        if name not in known:
            hint = f"allowed: {', '.join(sorted(known))}" if known else "it takes no options"
            raise ConfigError(f"{url}: unknown option {name!r} ({hint})", url=url, option=name)
        if name in options:
            raise ConfigError(f"{url}: option {name!r} given twice", url=url, option=name)
        options[name] = value
    return options


def make_backend(url: str) -> Backend:
    """The backend ``url`` names, not started: its scheme resolved, its module imported and its
    options checked, nothing connected or created. Bad URLs fail here with a ``ConfigError``."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(f"not a backend URL: {url!r} (expected e.g. sqlite:///outlive.db)", url=url)
    return backend_factory(urlsplit(url).scheme.lower())(url)


async def open_backend(url: str) -> Backend:
    """Resolve ``url`` to a backend through the lazy registry and start it.

    ``sqlite:///outlive.db`` (the default), ``memory://``, ``temporal://127.0.0.1:7233``,
    ``restate://127.0.0.1:8080?admin=9070``, ``langgraph+sqlite:///lg.db``.
    """
    argument(url, str, "url", "open_backend", "a backend URL string (sqlite:///outlive.db)")
    backend = make_backend(url)
    await backend.start()
    backend.started = True
    return backend
