"""The records every agent integration writes, framework-free (private).

A framework module (``langgraph``, ``pydantic_ai``, ``openai_agents``) turns its own model and
tool calls into these three calls, so the keys are the same whatever drives the loop:

- :func:`model_step`: a model call is a journaled step keyed by the conversation so far (the
  messages, the model's settings, the tool schemas it was offered). A successor restores every
  call whose conversation is unchanged and calls the model for the rest.
- :func:`read_tool_step`: a read-only tool is a step keyed by its arguments and by the parts of
  the pinned input version it may read (all of them unless the tool says which), so a corrected
  attachment reruns the tools that read it and nothing restores a stale read.
- :func:`effect_tool_call`: a tool marked as an effect is an operation-keyed effect: its key
  comes from the work, the pinned version and the call's arguments (never the attempt), the
  intent is written before the call, and a successor settles an open intent by resending the
  same key. The tool hands :func:`operation_key` to its receiver, which remembers it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar
from typing import Any

from outlive import External, Receipt, Worker
from outlive.errors import ConfigError
from outlive.hashing import content_hash

__all__ = [
    "EFFECT_MARK",
    "StepRunner",
    "effect",
    "effect_receipt",
    "effect_tool_call",
    "from_journal",
    "is_marked_effect",
    "jsonable",
    "model_step",
    "operation_key",
    "read_tool_step",
    "to_journal",
    "tool_operation_key",
]

#: Where :func:`effect` marks a function (an attribute) or a framework's tool (its metadata).
EFFECT_MARK = "__outlive_effect__"

_OPERATION: ContextVar[str | None] = ContextVar("outlive_agents_operation", default=None)


def effect(fn: Any) -> Any:
    """Mark a tool as a side effect: ``@effect`` over the function, or ``effect(tool)``.

    A marked tool is called as an operation-keyed effect (intent first, then the call, then the
    receiver's answer); an unmarked one is a read-only step. A framework's tool object keeps the
    mark in its ``metadata`` when it has one, the function in an attribute otherwise.
    """
    metadata = getattr(fn, "metadata", None)
    if isinstance(metadata, dict) or (metadata is None and hasattr(fn, "model_fields")):
        fn.metadata = {**(metadata or {}), EFFECT_MARK: True}
        return fn
    try:
        setattr(fn, EFFECT_MARK, True)
    except (AttributeError, TypeError) as exc:
        raise ConfigError(f"cannot mark {fn!r} as an effect; name it in effects=[...] "
                          "instead") from exc
    return fn


def is_marked_effect(obj: Any) -> bool:
    """Whether ``obj`` (a function, or a tool wrapping one) was marked with :func:`effect`."""
    if getattr(obj, EFFECT_MARK, False):
        return True
    metadata = getattr(obj, "metadata", None)
    if isinstance(metadata, dict) and metadata.get(EFFECT_MARK):
        return True
    # a framework's tool built over a marked function (LangChain's func/coroutine, pydantic-ai's
    # function, the OpenAI Agents SDK's on_invoke_tool)
    return any(getattr(getattr(obj, attr, None), EFFECT_MARK, False)
               for attr in ("func", "coroutine", "function"))


def operation_key() -> str:
    """The operation key of the effect tool call running now: hand it to the receiver.

    The receiver remembers it with the effect, so a successor's resend of the same call is
    answered "already seen" instead of being applied twice. In a Temporal activity that
    ``Attempt.effect`` started, the key is read from the activity's id. Outside an effect tool
    call this raises :class:`~outlive.errors.ConfigError`.
    """
    key = _OPERATION.get()
    if key is None:
        key = _activity_operation()
    if key is None:
        raise ConfigError("operation_key() is only set while an effect tool runs under outlive")
    return key


def _activity_operation() -> str | None:
    """In a Temporal activity an outlive effect started, its key (the activity id names it)."""
    try:
        from outlive_temporal import current_attempt
    except ImportError:
        return None
    try:
        step = current_attempt().step
    except Exception:   # not in an activity, or not one outlive started
        return None
    return step if step.startswith("tool:") else None


def jsonable(value: Any) -> Any:
    """``value`` with everything JSON cannot hold dropped (dict entries) or named (elsewhere).

    Model settings come from a framework's model object and may hold a client, a callback or an
    iterator; only what JSON holds is part of a key (types are named so two models differ).
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if isinstance(k, str) and _plain(v):
                out[k] = jsonable(v)
        return out
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value if _plain(v)]
    return type(value).__name__


#: How a float is journaled: the ledger hashes canonical values only, and a float has no single
#: canonical text; its repr round-trips exactly.
_FLOAT = "__outlive_float__"


def to_journal(value: Any) -> Any:
    """``value`` (JSON-like) with each float as ``{"__outlive_float__": repr}``: what the ledger
    hashes and stores (usage figures, temperatures, scores)."""
    if isinstance(value, float):
        return {_FLOAT: repr(value)}
    if isinstance(value, dict):
        return {k: to_journal(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_journal(v) for v in value]
    return value


def from_journal(value: Any) -> Any:
    """The value :func:`to_journal` was given."""
    if isinstance(value, dict):
        if len(value) == 1 and _FLOAT in value:
            return float(value[_FLOAT])
        return {k: from_journal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_journal(v) for v in value]
    return value


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, Mapping):
        return all(isinstance(k, str) for k in value)
    return isinstance(value, (list, tuple))


#: How a framework runs a step: ``Worker.step`` by default; an engine's own (LangGraph's
#: ``node_step``, whose entry rides the node's save) where it has one.
StepRunner = Callable[..., Awaitable[Any]]


async def model_step(worker: Worker, name: str, *, conversation: Any, settings: Any,
                     tools: Any, call: Callable[[], Awaitable[Any]],
                     step: StepRunner | None = None) -> Any:
    """One model call as a journaled step keyed by the conversation so far.

    ``conversation``, ``settings`` and ``tools`` are JSON-like (what the journal hashes); they are
    declared external, since a conversation is built by the loop from the ticket, tool results
    and earlier answers rather than being a part of the input version itself.
    """
    async def body(**_: Any) -> Any:
        return to_journal(await call())

    return from_journal(await (step or worker.step)(
        name, body, conversation=External(to_journal(conversation)),
        model_settings=External(to_journal(settings)), tool_schemas=External(to_journal(tools))))


def _parts(worker: Worker, reads: Iterable[str] | None) -> dict[str, Any]:
    snapshot = worker.snapshot or {}
    if reads is None:
        return dict(snapshot)
    wanted = list(reads)
    missing = [r for r in wanted if r not in snapshot]
    if missing:
        raise ConfigError(f"a tool reads {missing}, which the pinned input version "
                          f"{worker.attempt.pinned_version} does not have (parts: {sorted(snapshot)})")
    return {r: snapshot[r] for r in wanted}


async def read_tool_step(worker: Worker, name: str, *, tool: str, args: Any,
                         reads: Iterable[str] | None, call: Callable[[], Awaitable[Any]],
                         step: StepRunner | None = None) -> Any:
    """A read-only tool call as a step: keyed by its arguments and the parts it may read."""
    async def body(**_: Any) -> Any:
        return to_journal(await call())

    return from_journal(await (step or worker.step)(name, body, tool_name=External(tool),
                                          tool_args=External(to_journal(args)),
                                          **_parts(worker, reads)))


def tool_operation_key(work_id: str, version: str | None, tool: str, args: Any) -> str:
    """``tool:<work>:<version>:<tool>:<hash of the arguments>``: the operation, not the attempt."""
    return f"tool:{work_id}:{version}:{tool}:{content_hash(to_journal(args))[:16]}"


def effect_receipt(output: Any, key: str | None) -> Receipt:
    """The receiver's answer from what an effect tool returned.

    A tool that talks to a receiver returns its :class:`~outlive.Receipt`; one that returns a
    string names the effect (a post id), and the receipt says the receiver did not report
    whether it had seen the key.
    """
    if isinstance(output, Receipt):
        return output
    if isinstance(output, str):
        return Receipt(effect_id=output, duplicate=False, key=key,
                       note="the tool returned no receipt: duplicates not reported")
    return Receipt(effect_id=json.dumps(jsonable(output), sort_keys=True), duplicate=False,
                   key=key, note="the tool returned no receipt: duplicates not reported")


async def effect_tool_call(worker: Worker, *, tool: str, args: Any,
                           call: Callable[[], Awaitable[Any]]) -> Receipt:
    """Intent, call, confirmation: the tool runs with :func:`operation_key` set.

    An intent confirmed by a predecessor is answered from the ledger without calling the tool;
    one left open is resent with the same key (the receiver answers "already seen").
    """
    op = tool_operation_key(worker.work_id, worker.attempt.pinned_version, tool, args)

    async def send(key: str | None, payload: Any) -> Receipt:
        token = _OPERATION.set(key)
        try:
            output = await call()
        finally:
            _OPERATION.reset(token)
        return effect_receipt(output, key)

    return await worker.effect(op, {"tool": tool, "args": to_journal(args)}, send)
