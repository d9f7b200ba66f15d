"""The engine-orchestrated shape: a LangGraph ``@entrypoint`` whose steps are outlive steps.

A LangGraph user writes ``@task`` functions and calls them from an ``@entrypoint``. Porting that
to outlive is a decorator swap and a different ``ainvoke``::

    @outlive_task                       # was: @task
    async def summarise(text: str) -> dict: ...

    @entrypoint(checkpointer=backend.checkpointer)
    async def digest(report: dict) -> str:
        parts = [await summarise(text=t) for t in report.values()]
        cand = await current_worker().candidate({"parts": parts})
        return cand.digest

    await run(digest, report, worker=worker)   # was: digest.ainvoke(report, config)

Each ``outlive_task`` call still runs as a LangGraph task with the real checkpointer, but it is
first looked up in outlive's journal by *input key* (LangGraph restores by position only), and its
result counts as saved only when outlive's fenced write has committed. The LangGraph durability
mode is the seed's "how often progress is saved" switch: ``"sync"`` journals every step,
``"exit"`` only at the end of the attempt (with the candidate).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Generic, ParamSpec, TypeVar, overload

from langchain_core.runnables import RunnableConfig
from langgraph.func import task
from langgraph.pregel import Pregel

from outlive import Worker
from outlive.errors import ConfigError, InvalidRecord
from outlive.worker import Persist

from ._context import INSIDE_TASK
from .backend import Durability, step_thread_id

__all__ = ["OutliveTask", "current_worker", "durability_for", "outlive_task", "persist_for", "run"]

P = ParamSpec("P")
T = TypeVar("T")

_PERSIST: dict[str, Persist] = {"sync": "step", "async": "step", "exit": "end"}


def persist_for(durability: Durability) -> Persist:
    """LangGraph durability -> outlive Worker persistence (the seed's progress switch)."""
    return _PERSIST[durability]


def durability_for(persist: Persist) -> Durability:
    return "sync" if persist == "step" else "exit"


@dataclass
class _Run:
    worker: Worker
    calls: dict[str, int] = field(default_factory=dict)


_RUN: ContextVar[_Run | None] = ContextVar("outlive_langgraph_run", default=None)


def current_worker() -> Worker:
    """The outlive Worker of the attempt this entrypoint invocation runs for."""
    r = _RUN.get()
    if r is None:
        raise ConfigError("no outlive attempt is running: start the entrypoint with "
                          "outlive_langgraph.run(program, input, worker=...)")
    return r.worker


class OutliveTask(Generic[P, T]):
    """An input-keyed, fenced step that runs as a LangGraph ``@task`` (no engine retries)."""

    def __init__(self, fn: Callable[P, Awaitable[T]] | Callable[P, T], *, name: str | None = None,
                 step: str | Callable[..., str] | None = None) -> None:
        self.fn = fn
        self.name: str = name or str(getattr(fn, "__name__", "step"))
        self.step = step
        self._sig = inspect.signature(fn)

        @functools.wraps(fn)
        async def _body(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            if inspect.isawaitable(out):
                out = await out
            return out

        self._task: Any = task(name=self.name)(_body)
        functools.update_wrapper(self, fn)

    def _step_name(self, r: _Run, inputs: dict[str, Any]) -> str:
        if callable(self.step):
            return str(self.step(**inputs))
        if isinstance(self.step, str):
            return self.step
        n = r.calls.get(self.name, 0)
        r.calls[self.name] = n + 1
        # A positional label only: restore also needs the input key to match, so a reordered
        # program redoes a step rather than reusing the wrong result.
        return self.name if n == 0 else f"{self.name}#{n}"

    async def __call__(self, *args: P.args, **kwargs: P.kwargs) -> T:
        r = _RUN.get()
        if r is None:
            raise ConfigError(f"{self.name}: outlive tasks run inside outlive_langgraph.run(...)")
        try:
            bound = self._sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidRecord(f"{self.name}: {exc}") from exc
        bound.apply_defaults()
        inputs = dict(bound.arguments)
        step = self._step_name(r, inputs)
        lg_task = self._task

        async def body(**kw: Any) -> Any:
            return await lg_task(**kw)

        token = INSIDE_TASK.set(True)
        try:
            result: T = await r.worker.step(step, body, **inputs)
        finally:
            INSIDE_TASK.reset(token)
        return result


class _Decorator:
    """``@outlive_task(step=...)``: typed so that an async function's result type is its value."""

    def __init__(self, name: str | None, step: str | Callable[..., str] | None) -> None:
        self.name = name
        self.step = step

    @overload
    def __call__(self, fn: Callable[P, Awaitable[T]], /) -> OutliveTask[P, T]: ...
    @overload
    def __call__(self, fn: Callable[P, T], /) -> OutliveTask[P, T]: ...

    def __call__(self, fn: Any, /) -> Any:
        return OutliveTask(fn, name=self.name, step=self.step)


@overload
def outlive_task(fn: Callable[P, Awaitable[T]], /) -> OutliveTask[P, T]: ...
@overload
def outlive_task(fn: Callable[P, T], /) -> OutliveTask[P, T]: ...
@overload
def outlive_task(*, name: str | None = None,
                 step: str | Callable[..., str] | None = None) -> _Decorator: ...


def outlive_task(fn: Any = None, /, *, name: str | None = None,
                 step: str | Callable[..., str] | None = None) -> Any:
    """Decorator replacing LangGraph's ``@task``: restore by input key, fence every write.

    ``step`` names the journal entry: a string, or a function of the inputs (for one function
    called once per section, ``step=lambda section, **_: section``). The declared arguments are
    the whole input key; a body that reads anything else makes reuse unsound.
    """
    if fn is not None:
        return OutliveTask(fn, name=name, step=step)
    return _Decorator(name, step)


async def run(program: Pregel[Any, Any, Any, Any], input: Any, *, worker: Worker,
              durability: Durability | None = None, thread_id: str | None = None) -> Any:
    """Invoke ``program`` for ``worker``'s attempt on the thread ``outlive:<work>:<attempt>``.

    ``durability`` defaults from ``worker.persist`` (``"step"`` -> ``"sync"``, ``"end"`` ->
    ``"exit"``); a mismatch is refused, since it would claim progress the journal does not hold.
    """
    d = durability or durability_for(worker.persist)
    if persist_for(d) != worker.persist:
        raise ConfigError(f"durability={d!r} saves progress {persist_for(d)!r} but the worker "
                          f"persists {worker.persist!r}; build the Worker with "
                          f"persist=persist_for({d!r})")
    config: RunnableConfig = {"configurable": {
        "thread_id": thread_id or step_thread_id(worker.work_id, worker.attempt.number)}}
    token = _RUN.set(_Run(worker=worker))
    try:
        return await program.ainvoke(input, config, durability=d)
    finally:
        _RUN.reset(token)
