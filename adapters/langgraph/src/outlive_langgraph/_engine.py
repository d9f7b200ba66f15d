"""What lives inside the user's graph: ``outlive_task`` (Functional API), ``outlive_node`` (StateGraph).

A LangGraph user keeps their ``@entrypoint`` or ``StateGraph``, their checkpointer and their
thread. Porting is a decorator swap and an attempt's identity in the config::

    @outlive_task                       # was: @task
    async def summarise(section: str, text: str) -> dict: ...

    config = attempt_config(worker, {"configurable": {"thread_id": "q3-report"}})
    await digest.ainvoke(report, config)          # or astream, or run(digest, report, worker=...)

**Why every call is one LangGraph task, restored or not.** LangGraph names a task call by its
position (checkpoint, step, task name, the parent's call counter) and, on a resume
(``Command(resume=...)``, ``ainvoke(None)``, a resume at an earlier checkpoint), hands each position
the result saved for it. A step restored from outlive's journal that skipped its task call would
shift every later position by one, and the next step would be handed its predecessor's result.
So each ``outlive_task`` call makes exactly one task call; the task body asks outlive's journal
first (restore by input key, no model call) and returns an *envelope* naming the step and its
input key. A saved envelope handed back on resume is used only if it names this step and these
inputs; otherwise the step runs outside LangGraph's task (its position holds something else).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import replace
from typing import Any, Generic, ParamSpec, TypeVar, cast, overload

from langchain_core.runnables import RunnableConfig
from langgraph._internal._constants import CONFIG_KEY_CHECKPOINTER, CONFIG_KEY_DURABILITY
from langgraph.config import get_config
from langgraph.func import task
from langgraph.pregel import Pregel
from langgraph.types import Command

from outlive import Contract, Controller, External, Worker
from outlive import ledger as L
from outlive._clone import clone
from outlive.backend import Backend, StepCall
from outlive.controller import Assessor
from outlive.errors import AttemptClaimed, AttemptEnded, ConfigError, InvalidRecord, NotFound
from outlive.hashing import content_hash, input_key
from outlive.records import AttemptState, Candidate, InputVersion
from outlive.worker import Persist

from ._checkpoint import TaskWrites
from ._context import (
    IN_NODE,
    INSIDE_TASK,
    PENDING_TASK_WRITE,
    WORKER_KEY,
    Durability,
    PendingTaskWrite,
    first_of,
    running_task_write,
)

__all__ = [
    "OutliveTask",
    "astream",
    "attempt_config",
    "begin",
    "current_worker",
    "durability_for",
    "invoke_work",
    "node_step",
    "outlive_node",
    "outlive_task",
    "persist_for",
    "rejoin",
    "run",
]

P = ParamSpec("P")
T = TypeVar("T")

_WORKER_KEY = WORKER_KEY
_ENVELOPE = "__outlive_step__"

_PERSIST: dict[str, Persist] = {"sync": "step", "async": "step", "exit": "end"}

#: The worker of the attempt ``run`` is driving (tasks also find it through the config).
_RUN: ContextVar[Worker | None] = ContextVar("outlive_langgraph_run", default=None)
#: Set by an ``outlive_task`` call around scheduling its LangGraph task (whose body runs in a
#: copy of that context): the body puts the envelope it returns there, so the call can tell
#: its own body's envelope from one LangGraph restored by position.
_RETURNED: ContextVar[list[Any] | None] = ContextVar("outlive_langgraph_returned", default=None)


def persist_for(durability: Durability) -> Persist:
    """LangGraph durability -> outlive Worker persistence (the seed's progress switch)."""
    return _PERSIST[durability]


def durability_for(persist: Persist) -> Durability:
    return "sync" if persist == "step" else "exit"


def attempt_config(worker: Worker, config: RunnableConfig | None = None) -> RunnableConfig:
    """The user's config plus the attempt's identity; the thread stays the user's.

    Without a ``thread_id`` the work id is the thread: one work, one thread, every attempt an
    invocation on it. The attempt number and owner token ride along in ``configurable`` (and so
    in each checkpoint's metadata); the fenced checkpointer refuses writes whose token is stale.
    """
    base: dict[str, Any] = dict(config or {})
    conf = dict(base.get("configurable") or {})
    conf.setdefault("thread_id", worker.work_id)
    conf.update({"outlive_work": worker.work_id, "outlive_attempt": worker.attempt.number,
                 "outlive_token": worker.token, _WORKER_KEY: worker})
    if worker.attempt.pinned_version is not None:
        conf["outlive_version"] = worker.attempt.pinned_version
    base["configurable"] = conf
    return cast(RunnableConfig, base)


def current_worker() -> Worker:
    """The Worker of the attempt this graph invocation runs for."""
    worker = _RUN.get()
    if worker is not None:
        return worker
    try:
        found = get_config().get("configurable", {}).get(_WORKER_KEY)
    except RuntimeError:
        found = None
    if isinstance(found, Worker):
        return found
    raise ConfigError("no outlive attempt is running: invoke the graph with "
                      "attempt_config(worker, config) or outlive_langgraph.run(..., worker=...)")


def _plain_names(sig: inspect.Signature) -> tuple[str, ...] | None:
    """The parameter names when every one is positional-or-keyword without a default (the
    common step signature): then binding is a zip, not ``Signature.bind``."""
    params = tuple(sig.parameters.values())
    if all(p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty for p in params):
        return tuple(p.name for p in params)
    return None


def _inputs(sig: inspect.Signature, name: str, args: tuple[Any, ...],
            kwargs: dict[str, Any], names: tuple[str, ...] | None = None) -> dict[str, Any]:
    if names is not None and not kwargs and len(args) == len(names):
        return dict(zip(names, args, strict=True))
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise InvalidRecord(f"{name}: {exc}") from exc
    bound.apply_defaults()
    return dict(bound.arguments)


def off_loop(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as called on the event loop: a coroutine function as it is, a plain function in a
    worker thread (the context copied, as LangGraph runs a plain node), so a long synchronous
    body never blocks the loop that renews the attempt's lease."""
    if inspect.iscoroutinefunction(fn):
        return fn

    @functools.wraps(fn)
    async def in_thread(*args: Any, **kwargs: Any) -> Any:
        out = await asyncio.to_thread(fn, *args, **kwargs)
        return await out if inspect.isawaitable(out) else out

    return in_thread


def _journaled_envelope(worker: Worker, step: str, result: Any) -> dict[str, Any]:
    """The envelope of a step ``worker`` has just run or restored (its input key as recorded)."""
    return {_ENVELOPE: step, "key": worker.steps[step].input_key,
            "attempt": worker.attempt.number, "result": result}


def _envelope(call: StepCall, result: Any) -> dict[str, Any]:
    """What an ``outlive_task``'s LangGraph task returns: the step, its input key, its result."""
    return {_ENVELOPE: call.step, "key": call.input_key, "attempt": call.attempt, "result": result}


async def _inline(worker: Worker, step: str, fn: Callable[..., Any], inputs: dict[str, Any]) -> Any:
    """``worker.step`` with the body run right here (already inside the user's graph)."""
    token = INSIDE_TASK.set(True)
    try:
        return await worker.step(step, fn, **inputs)
    finally:
        INSIDE_TASK.reset(token)


async def _when_sent(worker: Worker, step: str, fn: Callable[..., Any], inputs: dict[str, Any],
                     pending: PendingTaskWrite) -> tuple[Any, asyncio.Task[Any] | None]:
    """Run the step in a task of its own and come back once its journal write (which carries
    the envelope as LangGraph's row for this task) is *sent*: ``(envelope, the step)``.

    The caller (``OutliveTask.__call__``) awaits the step, so the user's code gets the result
    only after the commit, and a refusal raises at its ``await``; LangGraph's bookkeeping of the
    returned task runs meanwhile. ``(result, None)``: the step ended first (restored, or
    written otherwise); a refusal or failure is raised, as the body's.
    """
    loop = asyncio.get_running_loop()
    pending.sent = loop.create_future()
    token = PENDING_TASK_WRITE.set(pending)
    try:
        running = loop.create_task(_inline(worker, step, fn, inputs))
    finally:
        PENDING_TASK_WRITE.reset(token)
    await first_of(pending.sent, running)
    if running.done():
        return running.result(), None
    # Retrieved if nobody awaits the call (the entrypoint's checkpoint still waits for it).
    running.add_done_callback(lambda t: t.cancelled() or t.exception())
    return pending.sent.result(), running


async def node_step(name: str, fn: Callable[..., Any], /, **inputs: Any) -> Any:
    """``Worker.step`` for a step inside a running node of the attempt's graph (a model call in
    a prebuilt agent's node, a tool call in a ``ToolNode``): the body runs right here, and its
    journal entry rides the node's own save instead of a commit of its own.

    On ``langgraph+sqlite`` under ``durability="sync"``, with the backend's saver, the entry
    commits in the transaction of the attempt's next fenced write - the node's ``put_writes``,
    or the superstep's checkpoint - so nothing the node returned is saved without it, and a
    refused entry (a replaced attempt, a bad input) is raised by that write before LangGraph
    starts the next superstep. Any other ledger command of the attempt (an effect's intent, a
    wait, the candidate) commits the entries first. Elsewhere (another saver, another
    durability, outside a graph, inside an ``outlive_task``) it is ``Worker.step``, run inline.
    The step returns before its entry commits: do not tell the world about its result except
    through outlive (an effect) or LangGraph (the node's update).
    """
    worker = current_worker()
    if INSIDE_TASK.get():
        return await _inline(worker, name, fn, inputs)
    try:
        config: RunnableConfig | None = get_config()
    except RuntimeError:
        config = None
    token = IN_NODE.set(config)
    try:
        return await _inline(worker, name, fn, inputs)
    finally:
        IN_NODE.reset(token)


class OutliveTask(Generic[P, T]):
    """An input-keyed, fenced step that runs as exactly one LangGraph ``@task`` call."""

    def __init__(self, fn: Callable[P, Awaitable[T]] | Callable[P, T], *, name: str | None = None,
                 step: str | Callable[..., str] | None = None,
                 external: Iterable[str] = ()) -> None:
        self.fn = fn
        #: What runs the step: a plain function in a thread (never on the lease's loop).
        self._run = off_loop(fn)
        self.name: str = name or str(getattr(fn, "__name__", "step"))
        self.step = step
        #: Arguments that are not parts of the input version (a label, a setting): declared, so
        #: the ledger accepts them; any other argument must be a part of the pinned version.
        self.external = frozenset(external)
        self._sig = inspect.signature(fn)
        self._names = _plain_names(self._sig)
        wrap = self._declared
        run_fn = self._run

        async def body(step: str, inputs: dict[str, Any]) -> dict[str, Any]:
            worker = current_worker()
            # The envelope this task returns is LangGraph's write of it: the backend commits it
            # with the step's journal entry (one transaction) when it can tell where it goes.
            # Progress saved at the end (``"exit"``) writes no entry per step: nothing to merge
            # or to wait for, so the step runs right here, not in a task of its own.
            merges = worker.persist == "step" and getattr(worker.backend, "merges_task_writes",
                                                          False)
            returned = _RETURNED.get()
            slot = running_task_write() if merges else None
            if slot is None:
                # Nothing to merge (the backend's ``run_and_record`` journals a step whose
                # pending write has no slot on its own, as it does with none): no pending write,
                # only an enclosing task's hidden from the steps run here.
                hidden = PENDING_TASK_WRITE.set(None) if PENDING_TASK_WRITE.get() is not None \
                    else None
                inside = INSIDE_TASK.set(True)    # ``_inline``, without its coroutine
                try:
                    result = await worker.step(step, run_fn, **wrap(inputs))
                finally:
                    INSIDE_TASK.reset(inside)
                    if hidden is not None:
                        PENDING_TASK_WRITE.reset(hidden)
                made = _journaled_envelope(worker, step, result)
                if returned is not None:
                    returned.append(made)
                return made
            pending = PendingTaskWrite(step=step, slot=slot, make=_envelope, value=[])
            if returned is not None and getattr(worker.backend, "returns_when_sent", False):
                got, running = await _when_sent(worker, step, run_fn, wrap(inputs), pending)
                if running is not None:
                    returned.extend((got, running))
                    return cast(dict[str, Any], got)
                result = got
            else:
                token = PENDING_TASK_WRITE.set(pending)
                try:
                    result = await _inline(worker, step, run_fn, wrap(inputs))
                finally:
                    PENDING_TASK_WRITE.reset(token)
            envelope: dict[str, Any] = (pending.value[0] if pending.value
                                        else _journaled_envelope(worker, step, result))
            if returned is not None:
                returned.append(envelope)
            return envelope

        body.__name__ = self.name
        # Found by name where the step is (``module.<fn's qualname>._task_body``), so LangGraph
        # builds the task's runnable once instead of on every call (~0.1 ms: it caches only
        # what it can look up by module and qualified name). A step defined inside a function
        # is not found, and is built per call, as LangGraph does for such a task.
        body.__module__ = getattr(fn, "__module__", body.__module__)
        body.__qualname__ = f"{getattr(fn, '__qualname__', self.name)}._task_body"
        self._task_body = body
        # No retry policy: a retried body would be a second model call the ledger never saw.
        self._task: Any = task(name=self.name)(body)  # type: ignore[arg-type]
        functools.update_wrapper(self, fn)

    def _declared(self, inputs: dict[str, Any]) -> dict[str, Any]:
        return {k: External(v) if k in self.external else v for k, v in inputs.items()}

    def step_name(self, inputs: Mapping[str, Any],
                  sources: Mapping[str, str] | None = None) -> str:
        """The journal's name for this call: from ``step=``, else the function and its inputs
        (``sources``: the inputs' content hashes, when the caller has them already)."""
        if callable(self.step):
            return str(self.step(**inputs))
        if isinstance(self.step, str):
            return self.step
        if sources is None:
            sources = {k: content_hash(v) for k, v in inputs.items()}
        elif type(sources) is not dict:
            sources = dict(sources)
        return f"{self.name}:{input_key(self.name, sources)[:12]}"

    async def __call__(self, *args: P.args, **kwargs: P.kwargs) -> T:
        worker = current_worker()
        inputs = _inputs(self._sig, self.name, args, kwargs, self._names)
        sources = {k: content_hash(v) for k, v in inputs.items()}   # each input hashed once
        step = self.step_name(inputs, sources)
        returned: list[Any] = []
        token = _RETURNED.set(returned)
        try:
            pending = self._task(step, inputs)
        finally:
            _RETURNED.reset(token)
        envelope = await pending
        result: T
        if returned and envelope is returned[0]:
            if len(returned) > 1:
                # The journal write was sent when the body returned. Under "async" it may stay
                # in flight while the next step runs, as LangGraph's own write of a task does;
                # whatever depends on it waits for it first (the saver's ``landed``).
                flights = _in_flight_allowed(worker)
                running = returned[1]
                if flights is not None and not running.done():
                    flights.fly(worker.work_id, worker.attempt.number, running)
                    worker.landed = functools.partial(flights.landed, worker.work_id,
                                                      worker.attempt.number)
                    result = clone(envelope["result"])   # the caller may change its copy
                    return result
                await running   # under "sync": its end, so the result is committed when returned
            result = worker.result(step)   # this call's body ran (or restored) the step just now
            return result
        key = input_key(step, sources)
        if isinstance(envelope, dict) and envelope.get(_ENVELOPE) == step \
                and envelope.get("key") == key:
            done = worker.steps.get(step)
            if done is not None and done.input_key == key:
                result = worker.result(step)   # the body ran (or restored) just now
                return result
            if worker.can_restore(step, **inputs):
                result = await _inline(worker, step, self._run, self._declared(inputs))
                return result
            if envelope.get("attempt") == worker.attempt.number:
                # This attempt's own result, saved by LangGraph before an interrupt or a failure
                # but not yet journaled (progress saved at the end): journal it, don't recompute.
                saved = envelope.get("result")
                result = await _inline(worker, step, lambda **_: saved, self._declared(inputs))
                return result
        # LangGraph handed this position another step's result, or one from an attempt the
        # journal never saw: run the step here, outside the task whose position is taken.
        result = await _inline(worker, step, self._run, self._declared(inputs))
        return result


def _in_flight_allowed(worker: Worker) -> TaskWrites | None:
    """The backend's saver, if this step's journal write may stay in flight when the call
    returns: the graph runs under ``durability="async"`` on that saver (which then holds the
    barrier every later write of the attempt passes); None: the call waits for the commit."""
    try:
        conf = get_config().get("configurable") or {}
    except RuntimeError:
        return None
    if conf.get(CONFIG_KEY_DURABILITY) != "async":
        return None
    saver = conf.get(CONFIG_KEY_CHECKPOINTER)
    if not isinstance(saver, TaskWrites) or saver is not getattr(worker.backend, "checkpointer",
                                                                None):
        return None
    return saver


class _Decorator:
    """``@outlive_task(step=...)``: typed so that an async function's result type is its value."""

    def __init__(self, name: str | None, step: str | Callable[..., str] | None,
                 external: Iterable[str] = ()) -> None:
        self.name = name
        self.step = step
        self.external = tuple(external)

    @overload
    def __call__(self, fn: Callable[P, Awaitable[T]], /) -> OutliveTask[P, T]: ...
    @overload
    def __call__(self, fn: Callable[P, T], /) -> OutliveTask[P, T]: ...

    def __call__(self, fn: Any, /) -> Any:
        return OutliveTask(fn, name=self.name, step=self.step, external=self.external)


@overload
def outlive_task(fn: Callable[P, Awaitable[T]], /) -> OutliveTask[P, T]: ...
@overload
def outlive_task(fn: Callable[P, T], /) -> OutliveTask[P, T]: ...
@overload
def outlive_task(*, name: str | None = None,
                 step: str | Callable[..., str] | None = None,
                 external: Iterable[str] = ()) -> _Decorator: ...


def outlive_task(fn: Any = None, /, *, name: str | None = None,
                 step: str | Callable[..., str] | None = None,
                 external: Iterable[str] = ()) -> Any:
    """Decorator replacing LangGraph's ``@task``: restore by input key, fence every write.

    The step is named from the function and its declared inputs (``summarise:<12 hex>``), so
    nothing positional enters the journal; ``step=`` (a string, or a function of the inputs such
    as ``lambda section, **_: section``) gives readable names. The declared arguments are the
    whole input key: a body that reads anything else makes reuse unsound. Each argument is a
    part of the attempt's input version (by name and hash, or by content) or named in
    ``external`` (a label such as the section name, a setting): the ledger refuses any other.
    """
    if fn is not None:
        return OutliveTask(fn, name=name, step=step, external=external)
    return _Decorator(name, step, external)


def outlive_node(fn: Any = None, /, *, name: str | None = None,
                 inputs: tuple[str, ...] | Callable[[Any], Mapping[str, Any]] | None = None,
                 external: Iterable[str] = ()) -> Any:
    """Decorator for a ``StateGraph`` node: the node is one step, restored by its input state.

    The step is named after the node (LangGraph's node name, else the function's); its declared
    inputs are the state's keys (``inputs=`` narrows them to the keys the node reads, or is a
    function of the state that returns the inputs by name), so a node whose inputs did not
    change is restored from the journal instead of rerun. Each input is a part of the attempt's
    input version (by name and hash, or by content: ``inputs=lambda s: {"s2": s["report"]["s2"]}``)
    or named in ``external`` (another node's output, a setting): the ledger refuses any other.
    The node's update is the step's result: it must be JSON-like (what the journal can hash and
    store).
    """
    if fn is None:
        return lambda f: outlive_node(f, name=name, inputs=inputs, external=external)
    wants_config = "config" in inspect.signature(fn).parameters
    outside = frozenset(external)
    call = off_loop(fn)   # a plain node runs in a thread, as LangGraph runs one

    async def node(state: Any, config: RunnableConfig) -> Any:
        worker = current_worker()
        step = name or str((config.get("metadata") or {}).get("langgraph_node")
                           or getattr(fn, "__name__", "node"))
        if callable(inputs):
            declared = dict(inputs(state))
        elif isinstance(state, Mapping):
            keys = inputs if inputs is not None else tuple(state)
            declared = {k: state[k] for k in keys if k in state}
        else:
            declared = {"state": state}
        declared = {k: External(v) if k in outside else v for k, v in declared.items()}

        def step_run() -> Coroutine[Any, Any, Any]:
            async def body(**_: Any) -> Any:
                return await (call(state, config) if wants_config else call(state))

            return _inline(worker, step, body, declared)

        defer = getattr(worker.backend, "defer_node_entry", None)
        if defer is not None:
            # The journal entry may ride in the superstep's checkpoint statement (see there).
            return await defer(config, step_run)
        return await step_run()

    # Not functools.wraps: LangGraph reads the signature through ``__wrapped__``, and this node
    # takes ``config`` even when the user's function does not.
    node.__name__ = node.__qualname__ = str(getattr(fn, "__name__", "node"))
    node.__doc__ = fn.__doc__
    return node


async def run(program: Pregel[Any, Any, Any, Any], input: Any, *, worker: Worker,
              config: RunnableConfig | None = None, durability: Durability | None = None,
              thread_id: str | None = None) -> Any:
    """``program.ainvoke`` for ``worker``'s attempt, on the user's thread (default: the work id).

    ``input`` is anything LangGraph takes: the input, ``None`` (continue after a failure) or
    ``Command(resume=...)``. ``durability`` defaults from ``worker.persist`` (``"step"`` ->
    ``"sync"``, ``"end"`` -> ``"exit"``); a mismatch is refused, since it would claim progress
    the journal does not hold.
    """
    d = _durability(worker, durability)
    cfg = _config(worker, config, thread_id)
    records = _records_waits(program, d)
    if not records:
        await _resuming(worker, input)
    token = _RUN.set(worker)
    try:
        out = await program.ainvoke(input, cfg, durability=d)
    finally:
        _RUN.reset(token)
    if not records:
        await _record_wait(program, worker, cfg)
    return out


async def astream(program: Pregel[Any, Any, Any, Any], input: Any, *, worker: Worker,
                  config: RunnableConfig | None = None, durability: Durability | None = None,
                  **kwargs: Any) -> AsyncIterator[Any]:
    """``program.astream`` for ``worker``'s attempt (``stream_mode`` and the rest pass through)."""
    d = _durability(worker, durability)
    cfg = _config(worker, config, None)
    records = _records_waits(program, d)
    if not records:
        await _resuming(worker, input)
    async for chunk in program.astream(input, cfg, durability=d, **kwargs):
        yield chunk
    if not records:
        await _record_wait(program, worker, cfg)


def _records_waits(program: Pregel[Any, Any, Any, Any], durability: Durability) -> bool:
    """Whether the graph's saver records the attempt's waits itself, as LangGraph saves them
    (every fenced saver does; under ``"exit"`` the answer is saved only at the end, so the wait
    is ended here, before the run)."""
    return durability != "exit" and bool(getattr(program.checkpointer, "records_waits", False))


async def begin(backend: Backend, work_id: str, version: str, parts: Mapping[str, Any], *,
                persist: Persist = "step") -> Worker:
    """Open ``work_id`` (if new), publish ``version`` and start its first attempt's Worker: for
    a graph your own code drives (a web request that starts a review) rather than a runtime.

    The attempt is admitted before anything runs; pass ``attempt_config(worker, config)`` to the
    graph. An attempt that waits on a person is carried on with :func:`rejoin`, from any process.
    """
    ctl = Controller(backend)
    if await backend.load(work_id) is None:
        await ctl.open_work(work_id)
    await ctl.publish(work_id, version, parts)
    worker = Worker(backend, await ctl.admit(work_id, pin=version), dict(parts), persist=persist)
    await worker.start()
    return worker


async def rejoin(backend: Backend, work_id: str, inputs: Mapping[str, Any] | None = None, *,
                 persist: Persist = "step", clock: Callable[[], int] | None = None) -> Worker:
    """The Worker of ``work_id``'s waiting attempt, in this process: a person's answer
    (``Command(resume=...)``) may come to any process, not only the one that ran the graph to
    its ``interrupt()``.

    The attempt's secret comes from where the graph's database kept it when the wait was
    recorded; the worker counts every step the attempt journaled as its own (its candidate
    names them all, not only those the resumed run touches). Rejoining ends the wait in the
    ledger, as a compare-and-set: of two processes answering one wait, the second is refused
    (:class:`~outlive.errors.AttemptClaimed`). From then on the attempt is ``running`` and
    its lease counts again: renew it (``worker.renewing``) around a resumed run longer than it.
    """
    st = await backend.load(work_id)
    if st is None:
        raise NotFound(f"work {work_id!r} is not open", work_id=work_id)
    att = st.current_attempt
    if att is None:
        raise NotFound(f"work {work_id!r} has no attempt to rejoin", work_id=work_id)
    if att.state is not AttemptState.WAITING:
        if att.state in (AttemptState.ADMITTED, AttemptState.RUNNING):
            raise AttemptClaimed(f"attempt #{att.number} of {work_id} is {att.state.value}, not "
                                 "waiting: its wait was answered already, or it never waited",
                                 attempt=att.number, work_id=work_id)
        raise AttemptEnded(f"attempt #{att.number} of {work_id} is {att.state.value}: nothing "
                           "to rejoin", attempt=att.number, work_id=work_id)
    kept = getattr(backend, "kept_secret", None)
    secret = await kept(work_id, att.number) if kept is not None else None
    if secret is None and att.key_hash is not None:
        raise NotFound(f"the secret of attempt #{att.number} of {work_id} was not kept: it "
                       "waited outside a graph checkpointed on this backend", work_id=work_id)
    worker = Worker(backend, replace(att, secret=secret), inputs, persist=persist,
                    **({"clock": clock} if clock is not None else {}))
    await worker.rejoin()
    out = await backend.execute(work_id, L.Resume(attempt=att.number, token=att.token,
                                                  at=worker.clock(), secret=secret))
    if out.kind != "resumed":
        raise AttemptClaimed(f"another process answered the wait of attempt #{att.number} of "
                             f"{work_id} first", attempt=att.number, work_id=work_id)
    return worker


def _accept(candidate: Candidate, version: InputVersion | None) -> tuple[bool, str]:
    return True, "accepted by the person who answered"


async def invoke_work(backend: Backend, graph: Pregel[Any, Any, Any, Any], input: Any,
                      config: RunnableConfig | None = None, *, work_id: str | None = None,
                      version: str = "v1", parts: Mapping[str, Any] | None = None,
                      contract: Contract | None = None, verdict: Assessor = _accept,
                      announce: Callable[[str | None, Any], Any] | None = None) -> Any:
    """The direct path (your own code drives the graph) in one call, from any process.

    A new input starts the work (:func:`begin`: opened, ``version`` of ``parts`` published,
    its first attempt admitted); a ``Command(resume=...)`` answers its waiting attempt
    (:func:`rejoin`: a second answer to one wait is refused). The graph runs with the attempt's
    identity on the thread of ``config`` (default: the work id, which is also the work's default
    name). Stopped at ``interrupt()``, the attempt is ``waiting`` and the output is returned.
    When the graph ends, its output is the attempt's candidate; with ``contract`` the candidate
    is judged (``verdict(candidate, version) -> (accepted, note)``, an assessor; default:
    accepted, the person's answer being the judgement), ``announce(key, output)`` is
    sent once as an effect keyed by the candidate (its receiver keeps the key), and the attempt
    finishes. Returns the graph's output.
    """
    conf = (config or {}).get("configurable") or {}
    work = work_id or str(conf.get("thread_id") or "")
    if not work:
        raise ConfigError("invoke_work needs the work's id: work_id=..., or a thread_id in the "
                          "config (the thread is the work)")
    if isinstance(input, Command) and input.resume is not None:
        worker = await rejoin(backend, work)
    else:
        worker = await begin(backend, work, version, dict(parts or {}))
    out = await graph.ainvoke(input, attempt_config(worker, config))
    if await worker.parked():
        return out   # waits on a person: whoever answers carries the attempt on
    # the graph's output, journaled as the assembly of the steps it ran (content is bound)
    candidate = await worker.candidate(await worker.assemble(out))
    if contract is not None:
        await Controller(backend).assess(work, candidate.digest, contract, verdict)
        if announce is not None:
            await worker.effect(f"announce:{work}:{candidate.digest}", out, announce)
    await worker.finish()
    return out


async def _resuming(worker: Worker, input: Any) -> None:
    """A ``Command(resume=...)`` ends the attempt's wait: ``running`` again, in the ledger."""
    if isinstance(input, Command) and input.resume is not None:
        st = await worker.backend.load(worker.work_id)
        me = st.attempt(worker.attempt.number) if st is not None else None
        if me is not None and me.state is AttemptState.WAITING:
            await worker.resume()


async def _record_wait(program: Pregel[Any, Any, Any, Any], worker: Worker,
                       config: RunnableConfig) -> None:
    """An invocation that stopped at ``interrupt()`` waits on a person: ``waiting``, not silence.

    The supervisor never suspects a waiting attempt; the wait ends with the next fenced write
    or the ``Command(resume=...)`` that answers it.
    """
    if program.checkpointer is None:
        return
    snapshot = await program.aget_state(config)
    if snapshot.interrupts:
        first = snapshot.interrupts[0].value
        await worker.wait(f"interrupt: {first if isinstance(first, str) else repr(first)}"[:200])


def _durability(worker: Worker, durability: Durability | None) -> Durability:
    d = durability or durability_for(worker.persist)
    if persist_for(d) != worker.persist:
        raise ConfigError(f"durability={d!r} saves progress {persist_for(d)!r} but the worker "
                          f"persists {worker.persist!r}; build the Worker with "
                          f"persist=persist_for({d!r})")
    return d


def _config(worker: Worker, config: RunnableConfig | None, thread_id: str | None) -> RunnableConfig:
    cfg = attempt_config(worker, config)
    if thread_id is not None:
        cfg["configurable"]["thread_id"] = thread_id
    return cfg


def __getattr__(name: str) -> Any:
    """``run_attempt`` lives in :mod:`._dispatch` (the supervisor's side); kept importable here."""
    if name == "run_attempt":
        from ._dispatch import run_attempt

        return run_attempt
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
